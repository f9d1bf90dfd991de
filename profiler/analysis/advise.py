"""`neuron-profile advise`: ranked findings, each with evidence and a fix.

Each rule estimates the share of step time at stake (`impact`, 0..1) of the step it measures:
the device's (the chip model's step) or, for data loading, the host's (the script's wall-clock
step). The two differ by orders of magnitude in a script capture, so findings are ranked by the
time at stake per step in seconds (`seconds`), the share times the mean step it is a share of.
Thresholds are plain constants below so they can be read and argued with.
"""
from __future__ import annotations

import textwrap
from dataclasses import asdict, dataclass, replace

import numpy as np
import orjson

from device_model.catalog.specs import get_instance
from device_model.engine.isa import COMPUTE_ENGINES
from device_model.errors import SpecError

from ..console import count
from ..model.profile import BUSY_ENGINES, PHASES, Profile
from .ranks import rank_views
from .render import human_count, human_time
from .repeats import Repeats, repeats
from .summary import intersection_length, scope_mask, summarize, union_length

SMALL_DMA_BYTES = 64 * 1024       # below ~512 B per partition x 128 partitions, DMA efficiency drops
DMA_BOUND_SHARE = 0.5
TENSOR_UNDERUSED = 0.5
EXPOSED_CC_SHARE = 0.05
RANK_WAIT_SHARE = 0.05            # of the step spent inside collectives waiting for other ranks
IDLE_SHARE = 0.10
LAUNCH_GAP_S = 10e-6              # a gap this long is host-scale (a launch); shorter: latencies
DATA_WAIT_SHARE = 0.10
LARGE_MATMUL_FLOPS = 2 * 1024 ** 3
FP8_TIME_SHARE = 0.2
PE_PARTITIONS = 128               # TensorE tile rows: a matmul fed fewer leaves partitions idle
ROW_MULTIPLE = 8


@dataclass(frozen=True, slots=True)
class Finding:
    rule: str
    title: str
    impact: float                 # share of the `basis` step's time at stake, 0..1
    evidence: tuple[str, ...]
    fix: str
    basis: str = "device"         # whose step `impact` is a share of: "device" or "host"
    seconds: float = 0.0          # time at stake per step (what findings are ranked by)


def _intervals(profile: Profile, engines: tuple[str, ...],
               rows: tuple[int, int] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Intervals of the instructions on `engines` (of the ops in `rows` [first, stop) only)."""
    ins = profile.table("instructions")
    lane_engine = np.array(profile.meta["lane_engines"])
    sel = np.isin(lane_engine[ins["lane"]], engines) if ins["lane"].size else np.zeros(0, bool)
    if rows is not None:
        sel &= (ins["op"] >= rows[0]) & (ins["op"] < rows[1])
    return ins["start"][sel], ins["end"][sel]


def _repeats(profile: Profile) -> Repeats:
    return repeats(profile, scope_mask(profile)[1])


def _collective_exposure(p: Profile) -> tuple[float, float]:
    """(collective time, of it with no compute engine busy), repeated segments counted as their
    first run again (the file holds their instructions once)."""
    def within(rows: tuple[int, int] | None) -> np.ndarray:
        cc = _intervals(p, ("collective",), rows)
        cc_time = union_length(*cc)
        hidden = intersection_length(cc, _intervals(p, COMPUTE_ENGINES, rows))
        return np.array([cc_time, cc_time - hidden])
    cc_time, exposed = _repeats(p).counted(within)
    return float(cc_time), float(exposed)


def _collective_spans(p: Profile) -> tuple[np.ndarray, np.ndarray]:
    """[start, end] of the summarised steps' collectives as the collectives table holds them. In
    a torchrun capture a rank's collective spans its wait for the last rank to join, which its
    collective-lane instructions (the transfer, after the wait) leave out."""
    cc = p.table("collectives")
    if not cc["op"].size:
        return np.zeros(0), np.zeros(0)
    sel = np.isin(p.table("ops")["step"][cc["op"]], scope_mask(p)[0])
    return cc["start"][sel], cc["end"][sel]


def _collective_idle(p: Profile) -> float:
    """Time inside the summarised steps' collectives with nothing of this rank running: in a
    profile whose ranks were aligned at their collectives (`collective_wait_s`), its wait for
    the others. A single simulated rank's collectives are all transfer, so this is ~0 there."""
    spans = _collective_spans(p)
    if not spans[0].size:
        return 0.0
    ins = p.table("instructions")
    if not ins["start"].size:       # operator-level steps: a collective's wait is self time
        return _collective_idle_of_ops(p)   # that no engine was busy for
    rep = _repeats(p)               # a repeated micro-batch's ops stand for its instructions
    running = (np.r_[ins["start"], rep.spans[0]], np.r_[ins["end"], rep.spans[1]])
    return max(0.0, union_length(*spans) - intersection_length(spans, running))


def _collective_idle_of_ops(p: Profile) -> float:
    ops, cc = p.table("ops"), p.table("collectives")
    rows = np.unique(cc["op"][np.isin(ops["step"][cc["op"]], scope_mask(p)[0])])
    busy = sum(ops[f"busy_{e}"][rows] for e in BUSY_ENGINES)
    return float(np.maximum(ops["self_time"][rows] - busy, 0.0).sum())


def rule_dma_small(p: Profile, s: dict) -> Finding | None:
    avg = s["dma_transfer_average_bytes"]
    if avg is None:             # no instructions kept: the transfers' sizes are unknown
        return None
    share = s["dma_active_time_percent"] / 100
    if share < DMA_BOUND_SHARE or not s["dma_transfer_count"] or avg >= SMALL_DMA_BYTES:
        return None
    return Finding("dma-small-transfers", "DMA-bound with small transfers", share * (1 - avg / SMALL_DMA_BYTES),
                   (f"DMA queues busy {share:.0%} of the time", f"{count(s['dma_transfer_count'], 'transfer')}, "
                    f"average {human_count(avg, 'B')} (efficient from ~{human_count(SMALL_DMA_BYTES, 'B')})"),
                   "fuse small tensors into larger transfers (bigger tiles, fewer copies/concats), keep "
                   "intermediates in SBUF, and batch small elementwise ops")


def rule_tensor_underused(p: Profile, s: dict) -> Finding | None:
    te = s["tensor_engine_active_time_percent"] / 100
    if s["model_flops"] <= 0 or te >= TENSOR_UNDERUSED:
        return None
    return Finding("tensor-underused", "TensorE under-used", (1 - te) * 0.5,
                   (f"TensorE active {te:.0%} of the time, MFU {s['mfu_estimated_percent']:.1f}%",
                    f"DMA active {s['dma_active_time_percent']:.0f}%, VectorE "
                    f"{s['vector_engine_active_time_percent']:.0f}%, ScalarE {s['scalar_engine_active_time_percent']:.0f}%"),
                   "raise the work per matmul (larger batch or sequence per core, fewer tensor-parallel "
                   "shards) and fuse the elementwise/normalisation ops around matmuls")


def rule_exposed_collectives(p: Profile, s: dict) -> Finding | None:
    """The collectives' transfers with no compute beside them. A rank's wait for the other ranks
    is left to `rule_collective_wait`: overlapping the transfer does not shorten it."""
    total = max(s["total_time"], 1e-15)
    cc_time, exposed = _collective_exposure(p)
    if cc_time <= 0:
        return None
    if exposed / total < EXPOSED_CC_SHARE:
        return None
    steps = max(1, int(s.get("step_count", 1)))      # the figures are over every summarised step
    return Finding("exposed-collectives", "Collectives not overlapped with compute", exposed / total,
                   (f"collectives run {human_time(cc_time / steps)} per step, "
                    f"{human_time(exposed / steps)} ({exposed / total:.0%} of the step) with no "
                    "compute engine busy",
                    f"{count(s['cc_op_count'], 'collective op')} over {count(steps, 'step')}"),
                   "overlap gradient all-reduce with the backward pass (bucket gradients and launch each "
                   "bucket as soon as it is ready), or shard optimizer state (reduce-scatter + all-gather)")


def rule_collective_wait(p: Profile, s: dict) -> Finding | None:
    """A rank of a multi-rank capture idle inside its collectives until the last rank joins:
    the ranks reach them at different times, which no change on the waiting rank fixes."""
    if not p.meta.get("collective_wait_s"):
        return None
    total = max(s["total_time"], 1e-15)
    wait = _collective_idle(p)
    if wait / total < RANK_WAIT_SHARE:
        return None
    steps = max(1, int(s.get("step_count", 1)))      # the figures are over every summarised step
    return Finding("collective-wait", "Waiting for other ranks at collectives", wait / total,
                   (f"{human_time(wait / steps)} per step ({wait / total:.0%} of the step) inside "
                    "collectives with nothing else running, waiting for the last rank to join",
                    f"{count(s['cc_op_count'], 'collective op')} over {count(steps, 'step')}; "
                    f"all ranks together waited {human_time(float(p.meta['collective_wait_s']))} "
                    "over the capture"),
                   "the ranks reach their collectives at different times: find the straggler "
                   "(the rank that waits least) and even out the work before each collective "
                   "(the same batch and sequence lengths on every rank, balanced data loading and "
                   "host work, no work only one rank does, such as logging or checkpointing)")


def rule_bubbles(p: Profile, s: dict) -> Finding | None:
    total = max(s["total_time"], 1e-15)
    # a rank waiting inside a collective for the other ranks is not idle for want of work
    # (rule_collective_wait reports it); the summary counts engine activity only
    idle = max(0.0, 1 - s["total_active_time_percent"] / 100 - _collective_idle(p) / total)
    if idle < IDLE_SHARE:
        return None
    gaps = _idle_gaps(p)
    largest = float(gaps.max(initial=0.0))
    short = float(gaps[gaps < LAUNCH_GAP_S].sum()) / max(float(gaps.sum()), 1e-15)
    pp = int(p.meta.get("placement", {}).get("pp", 1))
    sendrecv = (p.strings.index("send_recv") if "send_recv" in p.strings else -1)
    has_pp = pp > 1 or bool(np.any(p.table("collectives")["kind_s"] == sendrecv))
    evidence = (f"device idle {idle:.0%} of the profiled step time ({human_time(idle * total)})",
                f"largest idle gap {human_time(largest)}" + (f", pp={pp}" if pp > 1 else ""))
    if has_pp:
        title = "Pipeline bubbles"
        fix = ("use more micro-batches per step (bubble ~ (pp-1)/(micro-batches+pp-1)) or an "
               "interleaved schedule")
    elif short >= 0.5:       # many short waits, not a few long ones: no launch keeps it idle
        title = "Device idle inside steps, in short waits"
        evidence += (f"{short:.0%} of the idle time in gaps under "
                     f"{human_time(LAUNCH_GAP_S)}: latencies between dependent instructions",)
        fix = ("the engines wait on the fixed latencies of small dependent instructions (DMA "
               "issue, semaphores), not on the host: larger operators (a bigger batch, small "
               "ops fused) amortise them")
    else:
        title = "Device idle inside steps"
        fix = ("find what the device waits for (host launches, dependencies) and keep more work "
               "queued")
    return Finding("pipeline-bubbles" if has_pp else "device-idle", title, idle, evidence, fix)


def _idle_gaps(p: Profile) -> np.ndarray:
    """The stretches inside the summarised steps, from each one's device start to its end, with
    no instruction (nor repeated micro-batch, nor collective) running. The time between steps is
    the host's (the launch of the next step, the script's Python), not the device idling inside
    a step; a collective's span includes a wait for other ranks, which is not idling either."""
    steps = p.table("steps")
    in_scope = np.isin(steps["step"], scope_mask(p)[0])
    order = np.argsort(steps["start"][in_scope], kind="stable")
    s, e = steps["start"][in_scope][order], steps["end"][in_scope][order]
    if s.size == 0:
        return np.zeros(0)
    ins = p.table("instructions")
    spans = _repeats(p).spans      # a repeated micro-batch's ops stand for its instructions
    cc = _collective_spans(p)
    begin, finish = np.r_[ins["start"], spans[0], cc[0]], np.r_[ins["end"], spans[1], cc[1]]
    o = np.argsort(begin, kind="stable")
    b = begin[o]
    reach = np.r_[-np.inf, np.maximum.accumulate(finish[o])]    # reach[i]: latest end before b[i]
    k = np.searchsorted(s, b, side="right") - 1                   # the step each interval starts in
    inside = (k >= 0) & (b < e[np.maximum(k, 0)])
    before = b[inside] - np.maximum(s[k[inside]], reach[:-1][inside])   # idle up to each start
    after = e - np.maximum(s, reach[np.searchsorted(b, e, side="left")])  # idle up to step end
    gaps = np.r_[before, after]
    return gaps[gaps > 0]


def rule_data_loading(p: Profile, s: dict) -> Finding | None:
    host = p.table("host")
    cat = np.array(p.strings)[host["cat_s"]] if host["cat_s"].size else np.array([], dtype=str)
    steps = p.table("steps")
    host_time = float(np.sum(steps["host_end"] - steps["host_start"]))
    if host_time <= 0:
        return None
    sel = cat == "data_loading"
    wait = float(np.sum(host["end"][sel] - host["start"][sel]))
    gaps = np.maximum(steps["host_start"][1:] - steps["host_end"][:-1], 0).sum() if steps["step"].size > 1 else 0.0
    share = (wait + float(gaps)) / host_time
    if share < DATA_WAIT_SHARE:
        return None
    return Finding("host-data-loading", "Host data-loading gaps", share,
                   (f"{count(int(sel.sum()), 'DataLoader wait')} take {human_time(wait)} of {human_time(host_time)} "
                    f"host step time ({share:.0%})",),
                   "load data in the background: DataLoader(num_workers>0, pin_memory=True, "
                   "prefetch_factor>=2, persistent_workers=True), or pre-tokenize the dataset",
                   basis="host", seconds=share * host_time / steps["step"].size)


def rule_batch_multiple(p: Profile, s: dict) -> Finding | None:
    """Forward matmuls whose rows M (what TensorE is fed: a linear's tokens, a convolution's
    N x H x W im2col rows, attention's sequence) are fewer than the PE array's partitions and not
    a multiple of 8. Backward matmuls are left out: a weight gradient's rows are the layer's
    feature count, not a batch size, and the input gradients repeat the forward's rows."""
    ops = p.table("ops")
    _, mask = scope_mask(p)
    kinds = np.array(p.strings)[ops["kind_s"]] if ops["kind_s"].size else np.array([], dtype=str)
    mm = mask & (kinds == "matmul") & (ops["phase"] != PHASES.index("backward"))
    rows = ops["mm_m"]
    bad_sel = mm & (rows > 0) & (rows < PE_PARTITIONS) & (rows % ROW_MULTIPLE != 0)
    if not bad_sel.any():
        return None
    total = float(ops["self_time"][mm].sum())
    times = ops["self_time"][bad_sel]
    bad_time = float(times.sum())
    # at stake: the idle share of the PE array's partitions while these matmuls run
    idle = float(np.sum(times * (1 - rows[bad_sel] / PE_PARTITIONS)))
    bad = sorted(set(rows[bad_sel].tolist()))
    step_time = max(s["total_time"], 1e-15)
    return Finding("batch-multiple-of-8", "Matmul rows (batch x tokens) not a multiple of 8",
                   min(idle / step_time, 1.0),
                   (f"forward matmuls fed {bad[:5]} rows (under the PE array's {PE_PARTITIONS} "
                    f"partitions, not a multiple of {ROW_MULTIPLE}) take {human_time(bad_time)} "
                    f"of {human_time(total)} forward matmul time",),
                   "choose or pad batch x sequence (the rows a matmul gets: tokens for a linear, "
                   f"N x H x W for a convolution) to a multiple of {ROW_MULTIPLE}, better "
                   f"{PE_PARTITIONS} or more, so TensorE tiles are full")


def rule_fp8(p: Profile, s: dict) -> Finding | None:
    try:
        dev = get_instance(p.meta["instance"]).device
    except SpecError:
        return None
    if dev.fp8_speedup <= 1:
        return None
    ops = p.table("ops")
    _, mask = scope_mask(p)
    strings = np.array(p.strings)
    kinds = strings[ops["kind_s"]] if ops["kind_s"].size else np.array([], dtype=str)
    dtypes = strings[ops["dtype_s"]] if ops["dtype_s"].size else np.array([], dtype=str)
    big = mask & (kinds == "matmul") & (ops["flops"] >= LARGE_MATMUL_FLOPS) & ~np.char.startswith(
        dtypes.astype(str), "float8") & (dtypes != "fp8")
    t = float(ops["busy_tensor"][big].sum())
    share = t / max(s["total_time"], 1e-15)
    if share < FP8_TIME_SHARE:
        return None
    saved = share * (1 - 1 / dev.fp8_speedup)
    return Finding("fp8-unused", "FP8 unused on large matmuls", saved,
                   (f"{count(int(big.sum()), 'matmul')} of >= {human_count(LARGE_MATMUL_FLOPS)}FLOP run in "
                    f"{', '.join(sorted(set(dtypes[big].tolist())))} for {share:.0%} of the step",
                    f"{dev.name} runs FP8 matmuls {dev.fp8_speedup:g}x faster than BF16"),
                   "run these matmuls in FP8 (per-tensor scaled weights and activations), keeping "
                   "accumulation and the optimizer in higher precision; compare with `neuron-profile diff`")


RULES = (rule_dma_small, rule_tensor_underused, rule_exposed_collectives, rule_collective_wait,
         rule_bubbles, rule_data_loading, rule_batch_multiple, rule_fp8)


def advise(profile: Profile) -> list[Finding]:
    """With several captured ranks, each rule's finding on the rank where it weighs most."""
    views = rank_views(profile)
    if len(views) > 1:
        return _worst_per_rule([v for v in views if v.rows("steps")])
    if not profile.rows("steps"):
        return []           # nothing ran on the device: no rule has anything to weigh
    summary = summarize(profile)
    found = [f for rule in RULES if (f := rule(profile, summary)) is not None]
    return _ranked(_timed(f, summary) for f in found)


def _worst_per_rule(views: list[Profile]) -> list[Finding]:
    worst: dict[str, Finding] = {}
    for view in views:
        for f in advise(view):
            if f.rule not in worst or f.seconds > worst[f.rule].seconds:
                worst[f.rule] = replace(f, evidence=(f"on {view.meta['rank_label']}",) + f.evidence)
    if "collective-wait" in worst:
        worst["collective-wait"] = _with_straggler(worst["collective-wait"], views)
    return _ranked(worst.values())


def _with_straggler(f: Finding, views: list[Profile]) -> Finding:
    """The finding naming the rank that waits least at collectives: the others wait for it, so
    it is where the extra work is."""
    waits = [_collective_idle(v) / max(1, scope_mask(v)[0].size) for v in views]
    least = int(np.argmin(waits))
    return replace(f, evidence=f.evidence + (
        f"{views[least].meta['rank_label']} waits least ({human_time(waits[least])} per step): "
        "the likeliest straggler",))


def _timed(f: Finding, summary: dict) -> Finding:
    """A device finding with its time at stake per step: its share of the mean device step (a
    host finding computes its own, from the host steps)."""
    if f.basis != "device":
        return f
    return replace(f, seconds=min(f.impact, 1.0) * summary["step_time_mean"])


def _ranked(findings) -> list[Finding]:
    """Most time at stake per step first: one measure for device and host findings, whose shares
    are of steps of very different lengths."""
    return sorted(findings, key=lambda f: (-f.seconds, -f.impact, f.rule))


NO_STEPS = ("no steps in this profile: nothing ran on the device, so there is nothing to advise "
            "(a script must call optimizer.step() or prof.step() inside the captured window)")


def findings_text(findings: list[Finding], steps: int | None = None) -> str:
    """`steps`: the profile's step count (0 says so instead of 'no findings')."""
    if steps == 0:
        return NO_STEPS + "\n"
    if not findings:
        return "no findings: nothing in this profile crosses a rule's threshold\n"
    lines = []
    for i, f in enumerate(findings, 1):
        lines += _wrapped(f"{i}. {f.title} [{f.rule}] (about {human_time(f.seconds)} per step at "
                          f"stake, {min(f.impact, 1):.0%} of the {f.basis} step)", "   ")
        for e in f.evidence:
            lines += _wrapped(f"   evidence: {e}", " " * 13)
        lines += _wrapped(f"   fix: {f.fix}", " " * 8)
    return "\n".join(lines) + "\n"


def _wrapped(text: str, indent: str, width: int = 80) -> list[str]:
    """Prose wrapped to an 80-column terminal, continuation lines under the first word."""
    return textwrap.wrap(text, width, subsequent_indent=indent, break_long_words=False,
                         break_on_hyphens=False) or [text]


def findings_json(findings: list[Finding], steps: int | None = None) -> bytes:
    doc: dict = {"findings": [asdict(f) for f in findings]}
    if steps is not None:
        doc["steps"] = steps
        if steps == 0:
            doc["note"] = NO_STEPS
    return orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n"


__all__ = ["Finding", "advise", "findings_text", "findings_json", "PHASES"]
