"""Summary metrics with Neuron Explorer's names and formulas (neuron-tools.md §4.4), and the
top-operators table.

The summary covers the executions captured at instruction level (as AWS's summary covers the
profiled execution), a step's repeated micro-batches counted each time they ran although the file
holds their instructions once (`repeats`); the operator table covers the same steps, and so do
`step_count` and `step_time_mean` (`summarized_steps` names them, `profile_step_count` counts
every step of the profile). Internally
ratios are 0..1; the `*_percent` names are percentages because that is what the names say.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from device_model.errors import SpecError
from device_model.catalog.specs import get_instance
from device_model.engine.isa import E_DMA, E_GPSIMD, E_SCALAR, E_SYNC, E_TENSOR, E_VECTOR, ENGINES, LANES

from ..model.profile import BUSY_ENGINES, PHASES, Profile
from .repeats import Repeats, repeats

# each engine's row name in AWS's profiler (that of its first lane); DMA is shown with its HBM traffic
ENGINE_LABEL = {**{ENGINES[engine]: row for _, engine, row in reversed(LANES)}, ENGINES[E_DMA]: "DMA/HBM"}
# the engines of the summary's per-engine metrics, in Neuron Explorer's order (neuron-tools.md §4.4)
SUMMARY_ENGINES = tuple(ENGINES[i] for i in (E_TENSOR, E_VECTOR, E_SCALAR, E_SYNC, E_GPSIMD))


def union_length(start: np.ndarray, end: np.ndarray) -> float:
    if start.size == 0:
        return 0.0
    order = np.argsort(start, kind="stable")
    s, e = start[order], end[order]
    reach = np.maximum.accumulate(e)
    new = np.r_[True, s[1:] > reach[:-1]]
    block = np.cumsum(new) - 1
    block_end = np.zeros(block[-1] + 1)
    np.maximum.at(block_end, block, e)
    return float(np.sum(block_end - s[new]))


def intersection_length(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]
                        ) -> float:
    """Length of (union of intervals a) intersected with (union of b): |a| + |b| - |a or b|;
    each is (starts, ends)."""
    both = (np.r_[a[0], b[0]], np.r_[a[1], b[1]])
    return union_length(*a) + union_length(*b) - union_length(*both)


def scope_mask(profile: Profile) -> tuple[np.ndarray, np.ndarray]:
    """(detailed steps, op-row mask) the summary covers: instruction-level steps, else all."""
    steps = profile.table("steps")
    detailed = steps["detailed"].astype(bool)
    if not detailed.any():
        detailed = np.ones_like(detailed)
    chosen = steps["step"][detailed]
    return chosen, np.isin(profile.table("ops")["step"], chosen)


def _lane_engine(profile: Profile) -> np.ndarray:
    return np.array(profile.meta["lane_engines"])


def summarize(profile: Profile) -> dict:
    meta = profile.meta
    lnc = int(meta.get("lnc", 1))
    steps = profile.table("steps")
    chosen, op_mask = scope_mask(profile)
    step_sel = np.isin(steps["step"], chosen)
    total_time = float(np.sum(steps["end"][step_sel] - steps["start"][step_sel]))
    t = max(total_time, 1e-15)
    ins = profile.table("instructions")
    ops = profile.table("ops")
    engines = _lane_engine(profile)[ins["lane"]] if ins["lane"].size else np.array([], dtype=str)
    dur = ins["end"] - ins["start"]
    opcodes = np.array(meta["opcodes"])[ins["opcode"]] if ins["opcode"].size else np.array([], dtype=str)
    has_ins = ins["start"].size > 0
    rep = repeats(profile, op_mask)     # micro-batches held once at instruction level
    ones = np.ones(ins["start"].size)

    def total(q: str) -> float:
        if has_ins:
            return rep.weighted(ins, q) * lnc
        return float(ops[q][op_mask].sum()) * lnc if q in ops else 0.0

    def merged(sel: np.ndarray | None = None) -> float:
        return merged_length(ins, rep, sel)

    model_flops, hw_flops = total("flops"), total("hw_flops")
    transpose = total("transpose_flops") if has_ins else 0.0
    adj = total("adj_flops") / lnc
    adj_hw = total("adj_hw_flops") / lnc
    hbm_r, hbm_w = total("hbm_r"), total("hbm_w")
    peak = float(meta["tensor_peak_flops_bf16"])
    core = _core_of(meta)
    semaphores, limited = _events_in_steps(profile, steps, step_sel, rep)
    out: dict[str, float | int | str] = {
        "instance": meta["instance"], "device": meta["device"], "lnc": lnc,
        "nc_idx": core, "nd_idx": core // _cores_per_device(meta, lnc),
        "total_time": total_time,
        "neuroncore_cycle_count": int(round(total_time * meta["clocks_hz"]["base"])),
        "model_flops": model_flops, "hardware_flops": hw_flops, "transpose_flops": transpose,
        "adjusted_hardware_flops": adj_hw * lnc,
        "mm_arithmetic_intensity": (hw_flops - transpose) / max(hbm_r + hbm_w, 1.0),
        "peak_flops_bandwidth_ratio": peak / meta["hbm_bw_per_stack"],
        # AWS's counts: every trace event (instructions, DMA transfers, semaphore updates), and
        # the event notifications among them (the semaphore updates)
        "trace_count": int(round(rep.weighted(ins, ones))) + semaphores,
        "event_count": semaphores,
        "mfu_estimated_percent": 100.0 * adj / (peak * t),
        "hfu_estimated_percent": 100.0 * adj_hw / (peak * t),
        "mbu_estimated_percent": 100.0 * (hbm_r + hbm_w) / t / meta["hbm_bw_per_stack"],
        "hbm_read_bytes": hbm_r, "hbm_write_bytes": hbm_w,
        "sbuf_read_bytes": total("sbuf_r"), "sbuf_write_bytes": total("sbuf_w"),
        "psum_read_bytes": total("psum_r"), "psum_write_bytes": total("psum_w"),
    }
    out.update(_dma_metrics(profile, ins, engines, rep, t, lnc))
    for e in SUMMARY_ENGINES:
        sel = engines == e
        active = merged(sel)
        out[f"{e}_engine_instruction_time"] = rep.weighted(ins, dur, sel)
        out[f"{e}_engine_active_time"] = active
        out[f"{e}_engine_active_time_percent"] = 100.0 * min(1.0, active / t)
        out[f"{e}_engine_instruction_count"] = int(round(rep.weighted(ins, ones, sel)))
    out["matmul_instruction_count"] = int(round(rep.weighted(ins, ones, opcodes == "MATMUL")))
    act = np.char.startswith(opcodes.astype(str), "ACTIVATE") if opcodes.size else np.zeros(0, bool)
    out["activate_instruction_time"] = rep.weighted(ins, dur, act)
    out["activate_instruction_count"] = int(round(rep.weighted(ins, ones, act)))
    out.update(_cc_metrics(profile, chosen, t))
    busy = merged() if has_ins else float(ops["self_time"][op_mask].sum())
    # the operators' span is inside the steps' time; summed in another order it can come out
    # an ulp above it
    out["total_exec_time"] = min(_device_span(ops, op_mask, steps["step"][step_sel]), t)
    out["total_active_time"] = busy
    out["total_active_time_percent"] = 100.0 * min(1.0, busy / t)
    out["average_utilization_limit_percent"] = 100.0 * (1 - min(1.0, limited / t))
    out.update(_step_metrics(profile, chosen, total_time))
    out["figures_from"] = "instructions" if has_ins else "operators"
    if not has_ins:
        out.update(operator_level_figures(ops, op_mask, t, lnc))
    # byte, FLOP and instruction counts are whole numbers (int64 in AWS's schema); one past
    # int64 (a damaged or hand-made profile) stays a float, which JSON writers take
    return {k: int(round(v)) if isinstance(v, float) and _is_count(k) and abs(v) < 2.0 ** 63
            else v for k, v in out.items()}


# figures only instructions give (per-instruction counts, SBUF/PSUM traffic, DMA queues,
# transposes, SyncE, throttling): unavailable (None) when no summarised step kept instructions
INSTRUCTION_ONLY_KEYS = (
    "transpose_flops", "adjusted_hardware_flops", "hfu_estimated_percent", "mm_arithmetic_intensity",
    "trace_count", "event_count", "sbuf_read_bytes", "sbuf_write_bytes", "psum_read_bytes",
    "psum_write_bytes", "dma_transfer_count", "dma_transfer_average_bytes", "input_queue_bytes",
    "output_queue_bytes", "weight_queue_bytes", "matmul_instruction_count",
    "activate_instruction_time", "activate_instruction_count", "average_utilization_limit_percent",
    *(f"{e}_engine_instruction_count" for e in SUMMARY_ENGINES),
    *(f"sync_engine_{k}" for k in ("instruction_time", "active_time", "active_time_percent")))


def operator_level_figures(ops: dict, op_mask: np.ndarray, t: float, lnc: int) -> dict:
    """The engine figures of steps kept at operator level only (no instructions in scope), from
    each operator's busy seconds per engine, and None for what only instructions tell.

    An engine's instruction time is exactly the sum of its busy seconds; its active time is that
    sum with each operator's share capped at the operator's span (lanes of one engine may overlap
    inside an operator), and the device's active time each operator's busy seconds over all
    engines capped at its self time: estimates within a few per cent of the instruction-level
    figures of the same steps. SyncE keeps no busy column, hence no figures."""
    span = (ops["end"] - ops["start"])[op_mask]
    own = ops["self_time"][op_mask]
    busy = {e: ops[f"busy_{e}"][op_mask] for e in BUSY_ENGINES}
    out: dict = dict.fromkeys(INSTRUCTION_ONLY_KEYS)
    for e in SUMMARY_ENGINES:
        if e not in busy:
            continue
        active = float(np.minimum(busy[e], span).sum())
        out[f"{e}_engine_instruction_time"] = float(busy[e].sum())
        out[f"{e}_engine_active_time"] = active
        out[f"{e}_engine_active_time_percent"] = 100.0 * min(1.0, active / t)
    dma_active = float(np.minimum(busy["dma"], span).sum())
    moved = float((ops["hbm_r"][op_mask] + ops["hbm_w"][op_mask]).sum()) * lnc    # per logical core
    out.update({"dma_active_time": dma_active, "dma_active_time_percent": 100.0 * min(1.0, dma_active / t),
                "dma_transfer_total_bytes": moved})
    any_engine = np.minimum(np.sum(list(busy.values()), axis=0), own) if own.size else own
    out["total_active_time"] = float(any_engine.sum())
    out["total_active_time_percent"] = 100.0 * min(1.0, out["total_active_time"] / t)
    return out


def _core_of(meta: dict) -> int:
    """The NeuronCore the profile (or this rank's view of it) ran on, on its instance."""
    if "core" in meta:
        return int(meta["core"])
    ranks = meta.get("ranks") or [{}]
    return int(ranks[0].get("core", 0))


def _cores_per_device(meta: dict, lnc: int) -> int:
    try:
        return max(1, get_instance(str(meta["instance"])).device.logical_cores(lnc))
    except (SpecError, KeyError):       # an instance this catalog does not know
        return 1


def _is_count(key: str) -> bool:
    return key.endswith(("_bytes", "_flops", "_count")) and "average" not in key


def _events_in_steps(profile: Profile, steps: dict, step_sel: np.ndarray,
                     rep: Repeats) -> tuple[int, float]:
    """Semaphore updates, and seconds of throttling (each throttle's duration times the share
    it took away), inside the summarised steps. The file holds a repeated segment's (a
    micro-batch's) once, with its instructions: they count as many times as it ran."""
    sems, thr = profile.table("semaphores")["time"], profile.table("throttles")
    lost = thr["duration"] * (1 - thr["ratio"])
    ops = profile.table("ops")

    def inside(windows: list[tuple[float, float]]) -> np.ndarray:    # [count, seconds]
        in_sem = np.zeros(sems.size, dtype=bool)
        in_thr = np.zeros(thr["start"].size, dtype=bool)
        for start, end in windows:
            in_sem |= (sems >= start) & (sems <= end)
            in_thr |= (thr["start"] >= start) & (thr["start"] <= end)
        return np.array([int(in_sem.sum()), float(lost[in_thr].sum())])

    def measure(segment: tuple[int, int] | None) -> np.ndarray:
        if segment is None:
            return inside(list(zip(steps["start"][step_sel], steps["end"][step_sel])))
        first, stop = segment
        return inside([(ops["start"][first], float(ops["end"][first:stop].max()))])
    count, seconds = rep.counted(measure)
    return int(round(count)), float(seconds)


def _device_span(ops: dict, op_mask: np.ndarray, chosen: np.ndarray) -> float:
    """AWS's total_exec_time: from the first operator's start to the last one's end on the
    device, per summarised step, added up (the launch before it is not in it)."""
    total = 0.0
    for step in chosen:
        sel = op_mask & (ops["step"] == step)
        if sel.any():
            total += float(ops["end"][sel].max() - ops["start"][sel].min())
    return total


def _step_metrics(profile: Profile, chosen: np.ndarray, total_time: float) -> dict:
    """The summarised steps: how many, their mean device time (total_time over them), which they
    are, how many of them ran no backward and no optimizer (an evaluation, an inference step),
    and how many steps the whole profile has."""
    count = int(chosen.size)
    ops = profile.table("ops")
    trained = np.isin(ops["phase"], (PHASES.index("backward"), PHASES.index("optimizer")))
    forward_only = np.setdiff1d(chosen, ops["step"][trained])
    return {"step_count": count, "step_time_mean": total_time / count if count else 0.0,
            "summarized_steps": step_ranges(chosen), "forward_only_step_count": int(forward_only.size),
            "profile_step_count": int(profile.table("steps")["step"].size)}


def step_ranges(steps) -> str:
    """Step numbers as ranges: `2-5`, `1,3,5-8`; `-` for none."""
    nums = sorted({int(s) for s in steps})
    if not nums:
        return "-"
    parts, first = [], nums[0]
    for prev, cur in zip(nums, nums[1:] + [None]):
        if cur is None or cur != prev + 1:
            parts.append(str(first) if first == prev else f"{first}-{prev}")
            first = cur
    return ",".join(parts)


def merged_length(ins: dict[str, np.ndarray], rep: Repeats, sel: np.ndarray | None = None) -> float:
    """Length of the union of the selected instructions' intervals, each repeated segment
    adding what its first run adds (it is that run again, later)."""
    def length(rows: tuple[int, int] | None) -> float:
        inside = np.ones(ins["start"].size, dtype=bool) if sel is None else sel
        if rows is not None:
            inside = inside & (ins["op"] >= rows[0]) & (ins["op"] < rows[1])
        return union_length(ins["start"][inside], ins["end"][inside])
    return rep.counted(length)


def _dma_metrics(profile, ins, engines, rep: Repeats, t: float, lnc: int) -> dict:
    meta = profile.meta
    sel = engines == "dma"
    w = rep.weight[sel] if rep.runs else np.ones(int(sel.sum()))
    nbytes = (ins["hbm_r"][sel].astype(np.float64) + ins["hbm_w"][sel]) * lnc * w
    active = merged_length(ins, rep, sel)
    queues = meta["queues"]
    q = ins["queue"][sel].astype(np.int64)
    by_queue = np.bincount(np.minimum(q, len(queues)), weights=nbytes, minlength=len(queues) + 1)
    count = int(round(float(w.sum())))

    def queue_bytes(name: str) -> float:
        """Bytes of the named queue; 0 where the header names no such queue (another
        recorder's queue set)."""
        return float(by_queue[queues.index(name)]) if name in queues else 0.0

    return {
        "dma_active_time": active, "dma_active_time_percent": 100.0 * min(1.0, active / t),
        "dma_transfer_count": count, "dma_transfer_total_bytes": float(nbytes.sum()),
        "dma_transfer_average_bytes": float(nbytes.sum() / count) if count else 0.0,
        "input_queue_bytes": queue_bytes("input"),
        "output_queue_bytes": queue_bytes("output"),
        "weight_queue_bytes": queue_bytes("weight"),
    }


def _cc_metrics(profile: Profile, chosen: np.ndarray, t: float) -> dict:
    cc = profile.table("collectives")
    ops = profile.table("ops")
    sel = np.isin(ops["step"][cc["op"]], chosen) if cc["op"].size else np.zeros(0, bool)
    start, end = cc["start"][sel], cc["end"][sel]
    active = union_length(start, end)
    return {"cc_op_time": float(np.sum(end - start)), "cc_op_active_time": active,
            "cc_op_active_time_percent": 100.0 * min(1.0, active / t), "cc_op_count": int(sel.sum())}


@dataclass(frozen=True, slots=True)
class OpStat:
    name: str
    kind: str
    count: int
    self_time: float
    total_time: float
    flops: int               # whole numbers, as the summary's counts (AWS's int64 fields)
    hbm_bytes: int
    bound: str
    self_share: float
    phase: str = ""          # forward, backward, optimizer, other; "" when phases are mixed


def _whole(count: float) -> int | float:
    """A FLOP or byte count as the integer it is (the table sums float64 columns); one past int64
    (a damaged or hand-made profile) stays a float, as in `summarize`."""
    return int(round(count)) if abs(count) < 2.0 ** 63 else float(count)


def op_bound(busy: np.ndarray) -> np.ndarray:
    """Per row of per-engine busy seconds: the engine label that limits the op."""
    labels = np.array([ENGINE_LABEL[e] for e in BUSY_ENGINES])
    return labels[np.argmax(busy, axis=1)] if busy.size else np.array([], dtype=str)


@dataclass(frozen=True, slots=True)
class OpGroups:
    """The operator rows a table covers (`mask`), grouped: `keys` sorted, `inv` the group of each
    covered row; a key is name (or kind) index, then shape index when grouped by shape, then
    phase."""
    mask: np.ndarray
    keys: np.ndarray
    inv: np.ndarray
    shape: np.ndarray       # each group's shape string index (0 when not grouped by shape)


def op_groups(profile: Profile, by: str = "name", shapes: bool = False) -> OpGroups:
    """Groups of the summarised steps' operator rows: one per name (or kind) and phase, and per
    input shape when `shapes` (torch's `group_by_input_shape`)."""
    ops = profile.table("ops")
    _, mask = scope_mask(profile)
    key_col = (ops["name_s"] if by == "name" else ops["kind_s"])[mask].astype(np.int64)
    shape_col = ops["shape_s"][mask].astype(np.int64) if shapes else np.zeros_like(key_col)
    phases = np.minimum(ops["phase"][mask].astype(np.int64), len(PHASES) - 1)
    n_strings = max(len(profile.strings), 1)
    keys = (key_col * n_strings + shape_col) * len(PHASES) + phases
    uniq, inv = np.unique(keys, return_inverse=True)
    return OpGroups(mask, uniq, inv.reshape(-1), (uniq // len(PHASES)) % n_strings)


def top_operators(profile: Profile, limit: int | None = 20, by: str = "name",
                  groups: OpGroups | None = None) -> list[OpStat]:
    """Operators by self time over the summarised steps, one row per name (or kind) and phase, so
    a forward operator and its backward (the same aten op under autograd) are told apart; in
    `groups`' order, before sorting, when they are given (`op_groups`)."""
    ops = profile.table("ops")
    g = groups or op_groups(profile, by)
    mask, uniq, inv = g.mask, g.keys, g.inv
    if uniq.size == 0:
        return []
    n_strings = max(len(profile.strings), 1)
    lnc = int(profile.meta.get("lnc", 1))

    def sums(col: np.ndarray) -> np.ndarray:
        return np.bincount(inv, weights=col[mask], minlength=uniq.size)

    self_t = sums(ops["self_time"])
    busy = np.stack([sums(ops[f"busy_{e}"]) for e in BUSY_ENGINES], axis=1)
    kinds = np.zeros(uniq.size, dtype=np.int64)
    kinds[inv] = ops["kind_s"][mask]
    bound = op_bound(busy)
    counts = np.bincount(inv, minlength=uniq.size)
    whole = max(float(self_t.sum()), 1e-15)
    stats = [OpStat(profile.strings[int(u) // len(PHASES) // n_strings],
                    profile.strings[int(kinds[i])],
                    int(counts[i]), float(self_t[i]), float(t),
                    _whole(f * lnc), _whole(b * lnc), str(bound[i]), float(self_t[i] / whole),
                    PHASES[int(u) % len(PHASES)])
             for i, (u, t, f, b) in enumerate(zip(uniq, sums(ops["end"] - ops["start"]),
                                                  sums(ops["flops"]), sums(ops["hbm_r"] + ops["hbm_w"])))]
    if groups is not None:
        return stats
    stats.sort(key=lambda s: (-s.self_time, s.name, s.phase))
    return stats[:limit] if limit else stats
