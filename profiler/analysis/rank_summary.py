"""Summaries of several captured ranks added up (what `diff` compares).

Per-rank summaries are `summary.summarize` of each rank's view. The aggregate adds every rank's
extensive figures (times, bytes, FLOPs, counts), so `total_time` is NeuronCore-seconds over the
captured ranks; each `*_percent` is the time-weighted mean over ranks (the same formula over the
added figures); `step_count` stays the steps per rank, so per-step figures are per step of the
whole captured job. A single-rank profile aggregates to its own summary.
"""
from __future__ import annotations

from ..model.profile import Profile
from .ranks import rank_views
from .summary import OpStat, summarize, top_operators

_SAME = ("instance", "device", "lnc", "nc_idx", "nd_idx", "peak_flops_bandwidth_ratio",
         "step_count",
         "forward_only_step_count", "profile_step_count")
_MEAN = ("step_time_mean",)


def _weighted(key: str, parts: list[dict], total: float) -> float:
    if total <= 0:
        return 0.0
    return sum(p[key] * p["total_time"] for p in parts) / total


def aggregate(parts: list[dict]) -> dict:
    """Per-rank summaries added up (see the module docstring)."""
    if len(parts) == 1:
        return dict(parts[0])
    total = sum(p["total_time"] for p in parts)
    out: dict = {}
    for key, first in parts[0].items():
        if any(p[key] is None for p in parts):     # unavailable on a rank: unavailable added up
            out[key] = None
        elif key in _SAME or not isinstance(first, (int, float)):
            out[key] = first
        elif key in _MEAN:
            out[key] = sum(p[key] for p in parts) / len(parts)
        elif key.endswith("_percent"):
            out[key] = _weighted(key, parts, total)
        else:
            out[key] = sum(p[key] for p in parts)
    moved = out["hbm_read_bytes"] + out["hbm_write_bytes"]
    if out["transpose_flops"] is not None:
        out["mm_arithmetic_intensity"] = (out["hardware_flops"] - out["transpose_flops"]) / max(moved, 1.0)
    count = out["dma_transfer_count"]
    if count is not None:
        out["dma_transfer_average_bytes"] = out["dma_transfer_total_bytes"] / count if count else 0.0
    out["ranks"] = len(parts)
    return out


def summarize_ranks(profile: Profile) -> dict:
    return aggregate([summarize(v) for v in rank_views(profile)])


def top_operators_ranks(profile: Profile, limit: int | None = 20, by: str = "name") -> list[OpStat]:
    """Operators added up over the ranks by name (or kind) and phase; the bound engine is the one
    of the rank where the operator took the most self time."""
    merged: dict[tuple[str, str], OpStat] = {}
    for view in rank_views(profile):
        for s in top_operators(view, None, by):
            key = (s.name, s.phase)
            m = merged.get(key)
            if m is None:
                merged[key] = s
                continue
            merged[key] = OpStat(s.name, m.kind, m.count + s.count, m.self_time + s.self_time,
                                 m.total_time + s.total_time, m.flops + s.flops,
                                 m.hbm_bytes + s.hbm_bytes,
                                 m.bound if m.self_time >= s.self_time else s.bound, 0.0, s.phase)
    whole = max(sum(s.self_time for s in merged.values()), 1e-15)
    stats = [OpStat(s.name, s.kind, s.count, s.self_time, s.total_time, s.flops, s.hbm_bytes, s.bound,
                    s.self_time / whole, s.phase) for s in merged.values()]
    stats.sort(key=lambda s: (-s.self_time, s.name, s.phase))
    return stats[:limit] if limit else stats
