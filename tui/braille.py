"""Braille area graphs: 2 samples across and 4 levels up per character cell (as btop/nvitop).

Pure functions of a series, vectorised with numpy so a full-width graph costs tens of µs.
"""
from __future__ import annotations

import numpy as np

# Dot bits filled from the bottom of a braille cell: left column 7,3,2,1 and right column 8,6,5,4.
_LEFT = np.array([0x00, 0x40, 0x44, 0x46, 0x47], dtype=np.int32)
_RIGHT = np.array([0x00, 0x80, 0xA0, 0xB0, 0xB8], dtype=np.int32)
_GLYPHS = np.array([chr(0x2800 + code) for code in range(256)])


def braille_rows(values: np.ndarray, width: int, height: int = 1, top: float = 1.0) -> list[str]:
    """Render the newest ``2 * width`` samples of ``values`` as ``height`` lines of braille.

    Args:
        values: samples, oldest first; NaN means "no reading" and draws nothing.
        width: character cells per line.
        height: lines; the graph has ``4 * height`` levels.
        top: the value drawn as a full column (values are clipped to 0..top).

    Returns:
        ``height`` strings of exactly ``width`` characters, top line first.
    """
    if width <= 0 or height <= 0:
        return [""] * max(height, 0)
    samples = np.full(2 * width, np.nan)
    recent = np.asarray(values, dtype=float)[-2 * width:]
    if recent.size:
        samples[-recent.size:] = recent
    scale = 4 * height / top if top > 0 else 0.0
    levels = np.rint(np.clip(np.nan_to_num(samples, nan=0.0), 0.0, top) * scale).astype(np.int32)
    # A sample with any non-zero value shows at least one dot, so small activity stays visible.
    levels[(levels == 0) & (np.nan_to_num(samples, nan=0.0) > 0)] = 1
    rows: list[str] = []
    for row in range(height - 1, -1, -1):
        dots = np.clip(levels - 4 * row, 0, 4)
        codes = _LEFT[dots[0::2]] | _RIGHT[dots[1::2]]
        rows.append("".join(_GLYPHS[codes]))
    return rows


def bar(ratio: float, width: int) -> str:
    """A horizontal bar of ``width`` cells with eighth-block resolution, padded with spaces."""
    if width <= 0:
        return ""
    eighths = int(round(min(max(ratio, 0.0), 1.0) * width * 8))
    full, part = divmod(eighths, 8)
    text = "█" * full + (" ▏▎▍▌▋▊▉"[part] if part else "")
    return text.ljust(width)
