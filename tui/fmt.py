"""Human units, only at the edge: everything inside the TUI is in base units."""
from __future__ import annotations

_BYTE_UNITS = ("B", "KB", "MB", "GB", "TB", "PB")


def count_text(count: int, noun: str) -> str:
    """``1 core``, ``16 cores``."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def pid_text(pid: int | None) -> str:
    """``pid 4242``, or ``pid unknown`` where the source does not know the process."""
    return f"pid {pid}" if pid else "pid unknown"


def human_bytes(value: float | None) -> str:
    """Bytes as neuron-top prints them: binary steps, one decimal, e.g. ``17.5GB``, ``256.0KB``."""
    if value is None:
        return "N/A"
    size = float(value)
    if abs(size) < 1024:
        return f"{int(size)}B"
    for unit in _BYTE_UNITS[1:]:
        size /= 1024.0
        # compared as printed: 1048575 B is 1023.999 KB, which one decimal rounds to "1024.0KB"
        if abs(round(size, 1)) < 1024 or unit == _BYTE_UNITS[-1]:
            return f"{size:.1f}{unit}"
    raise AssertionError("unreachable")


def human_rate(bytes_per_second: float | None) -> str:
    """Bandwidth in decimal units (GB/s), the way HBM bandwidth is quoted."""
    if bytes_per_second is None:
        return "N/A"
    value = float(bytes_per_second)
    for unit in ("B/s", "KB/s", "MB/s", "GB/s"):
        if abs(value) < 1000:
            return f"{value:.1f}{unit}"
        value /= 1000.0
    return f"{value:.2f}TB/s"


def percent(ratio: float | None, digits: int = 2) -> str:
    if ratio is None:
        return "N/A"
    return f"{ratio * 100:.{digits}f}%"


def tflops(flops_per_second: float | None) -> str:
    if flops_per_second is None:
        return "N/A"
    return f"{flops_per_second / 1e12:.2f}TF"


def per_second(count: float | None) -> str:
    if count is None:
        return "N/A"
    if count >= 1000:
        return f"{count / 1000:.1f}k/s"
    return f"{count:.1f}/s"


def core_ranges(cores: tuple[int, ...] | list[int]) -> str:
    """Compact sorted core list: ``0-3,8,10-11``."""
    if not cores:
        return "-"
    ordered = sorted(set(cores))
    parts: list[str] = []
    start = prev = ordered[0]
    for core in ordered[1:]:
        if core == prev + 1:
            prev = core
            continue
        parts.append(f"{start}-{prev}" if prev > start else str(start))
        start = prev = core
    parts.append(f"{start}-{prev}" if prev > start else str(start))
    return ",".join(parts)


def fit(text: str, width: int) -> str:
    """Cut or pad ``text`` to exactly ``width`` cells (ellipsis when cut)."""
    if width <= 0:
        return ""
    if len(text) > width:
        return text[: width - 1] + "…" if width > 1 else text[:1]
    return text.ljust(width)


def wrap_words(text: str, width: int, max_lines: int = 2) -> list[str]:
    """Wrap ``text`` at word boundaries into at most ``max_lines`` lines of ``width`` cells; the
    last line ends in an ellipsis when text is left over. Words longer than a line are cut."""
    if width <= 0:
        return []
    words, lines, line = text.split(), [], ""
    for word in words:
        candidate = f"{line} {word}" if line else word
        if len(candidate) <= width:
            line = candidate
            continue
        if line:
            lines.append(line)
        line = word if len(word) <= width else fit(word, width)
    if line:
        lines.append(line)
    if len(lines) > max_lines:
        last = lines[max_lines - 1]
        lines = lines[:max_lines - 1] + [last[: width - 1] + "…" if len(last) >= width else last + "…"]
    return lines or [""]
