"""From a Recording to a Profile: each step's calls become a chip-model Program, simulated on the
chosen instance, with the measured CPU timeline kept as the host process.

Training loops repeat themselves, so a step is keyed by its calls' signatures, phases and modules:
a step seen before reuses the earlier step's Program and simulation and only gets its own times.
"""
from __future__ import annotations

import bisect
import os
import threading

import numpy as np

from device_model.core import Instance
from device_model.program import Program

from .aten_map import add_call
from ..model.builder import OpInfo, ProfileBuilder
from ..model.profile import Profile
from .recording import BACKWARD, FORWARD, OTHER, PHASE_NAMES, UNMATCHED_NODE, Recording


def resolve_phases(recording: Recording, cols: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Per call: phase code (backward for calls under an autograd node, other for calls outside
    any forward pass, see _outside_forward) and module id, where a backward call gets the module
    of the forward call whose autograd node it runs."""
    phase = cols["phase"].astype(np.int8)
    module = cols["module"].copy()
    backward = cols["node_seq"] >= 0
    phase[backward] = BACKWARD
    rows, forward_rows = _backward_to_forward(recording, cols, backward)
    module[rows] = cols["module"][forward_rows]
    phase[_outside_forward(recording, cols, phase, forward_rows)] = OTHER
    return phase, module


def _backward_to_forward(recording: Recording, cols: dict[str, np.ndarray],
                         backward: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Backward calls and the forward calls whose autograd nodes they run, by sequence number."""
    fwd = np.flatnonzero((~backward) & (cols["phase"] == FORWARD) & (cols["seq"] >= 0))
    matchable = backward & (cols["node_seq"] < UNMATCHED_NODE)
    if not len(fwd) or not matchable.any():
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    seq = cols["seq"][fwd]
    order = np.argsort(seq, kind="stable")
    seq_sorted, fwd_sorted = seq[order], fwd[order]
    wanted = cols["node_seq"][matchable]
    if recording.recorder == "native":      # seq read before the call: last call at or below
        pos = np.searchsorted(seq_sorted, wanted, side="right") - 1
    else:                                    # seq of the node the call made: first call at it
        pos = np.searchsorted(seq_sorted, wanted, side="left")
        exact = pos < len(seq_sorted)
        exact[exact] = seq_sorted[pos[exact]] == wanted[exact]
        pos = np.where(exact, pos, np.searchsorted(seq_sorted, wanted, side="right") - 1)
    found = pos >= 0
    return np.flatnonzero(matchable)[found], fwd_sorted[pos[found]]


def _outside_forward(recording: Recording, cols: dict[str, np.ndarray], phase: np.ndarray,
                     graph_rows: np.ndarray) -> np.ndarray:
    """Forward-phase calls no forward pass made (parameter init and input creation before the
    first forward, the next batch's, gradient clipping between backward and optimizer): those
    made since their step began, or since the last backward call, with no sign of a forward
    pass in between. A forward pass shows as a module's forward starting, or as a call whose
    autograd node a backward ran (functional code). A recording with neither keeps its
    calls' phases: nothing tells its forward passes apart."""
    signs = np.array([s[3] for s in recording.spans if s[1] == "python_function"], dtype=np.int64)
    signs = np.sort(np.concatenate([signs, cols["t0"][graph_rows]]))
    candidates = phase == FORWARD
    if not len(signs) or not candidates.any():
        return np.zeros(len(phase), dtype=bool)
    t0 = cols["t0"]
    edges = np.array([recording.t0, *recording.boundaries], dtype=np.int64)
    began = edges[np.clip(cols["step"].astype(np.int64) - 1, 0, len(edges) - 1)]
    backward_ends = np.sort(cols["t1"][phase == BACKWARD])
    began = np.maximum(began, _last_at_or_before(backward_ends, t0))
    return candidates & (_last_at_or_before(signs, t0) < began)


def _last_at_or_before(times: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Per t, the latest of the sorted `times` not after it (the minimum int64 if none)."""
    at = np.searchsorted(times, t, side="right") - 1
    return np.where(at >= 0, times[np.maximum(at, 0)] if len(times) else 0, np.iinfo(np.int64).min)


def _shape_text(shapes) -> str:
    return "x".join(",".join(map(str, s)) for s in shapes)


class _StepPrograms:
    """Programs per step, built once per distinct step."""

    def __init__(self, recording: Recording, auto_cast: str, group) -> None:
        self.rec = recording
        self.auto_cast = auto_cast
        self.group = group
        self.by_key: dict[bytes, tuple[Program, list[tuple[int, str, str, str]]]] = {}
        self.runs: dict[bytes, object] = {}

    def program(self, sig: np.ndarray, phase: np.ndarray, module: np.ndarray):
        """(key, Program, per chip op: (call position in the step, module, shape, dtype))."""
        key = sig.astype(np.int64).tobytes() + phase.tobytes() + module.astype(np.int64).tobytes()
        entry = self.by_key.get(key)
        if entry is None:
            prog, infos = Program(), []
            modules, sigs = self.rec.modules, self.rec.sigs
            for pos, (s, ph, m) in enumerate(zip(sig.tolist(), phase.tolist(), module.tolist())):
                call = sigs[s]
                prog.phase = PHASE_NAMES[ph]
                added = add_call(prog, call, self.auto_cast, self.group)
                infos.extend([(pos, modules[m], _shape_text(call.shapes), call.dtype.removeprefix("torch."))]
                             * added)
            entry = self.by_key[key] = (prog, infos)
        return key, entry[0], entry[1]

    def run(self, key: bytes, prog: Program, inst: Instance):
        run = self.runs.get(key)
        if run is None:
            run = self.runs[key] = inst.run(prog)
        return run


def recording_to_profile(recording: Recording, inst: Instance, *, auto_cast: str = "matmult",
                         detail_steps: int = 4, steps: set[int] | None = None, command: str = "",
                         group=None, meta: dict | None = None, progress=None, host_pid: int | None = None,
                         main_thread: int | None = None, tail: bool = True,
                         step_base: int = 1, stopped: bool = False) -> Profile:
    """Simulate each recorded step on `inst` and assemble the profile, keeping the measured CPU
    timeline as the host process. `steps` limits the steps kept (the API's schedule);
    `progress(done, total)` is told of each step placed. `host_pid`/`main_thread`: the process
    and thread that recorded (default this one). `tail`: work after the last step's end with no
    forward pass is that step's tail (see _tail_of); False keeps it a step of its own (the API,
    whose steps are the script's own prof.step() calls). `step_base`: the number the
    first step is given, in its `ProfilerStep#N` and the profile's tables (1, as `--steps`
    counts; torch.profiler's API counts from 0, as its `step_num`). `stopped`: the script did not
    run to its end (a stop signal, an error): its last step, left unfinished, is kept but not
    summarised."""
    builder = ProfileBuilder(inst, "pytorch", command=command, auto_cast=auto_cast, recorder=recording.recorder,
                             host_pid=os.getpid() if host_pid is None else host_pid,
                             host_name=f"Host: {command or 'python'} (measured CPU)", **(meta or {}))
    add_recording(builder, recording, inst, auto_cast=auto_cast, detail_steps=detail_steps, steps=steps,
                  group=group, progress=progress, main_thread=main_thread, tail=tail,
                  step_base=step_base, stopped=stopped)
    return builder.build()


def _note_counted(builder: ProfileBuilder, key: str, count: int, combine, note) -> None:
    """`meta[key]`, this recording's `count` combined with the ranks' before it, and its line
    (`note(count)`) in `meta["notes"]`, in place of the line an earlier rank wrote."""
    count = combine(int(builder.meta.get(key, 0)), int(count))
    if not count:
        return
    previous = note(builder.meta[key]) if key in builder.meta else None
    builder.meta[key] = count
    builder.meta["notes"] = [*(n for n in builder.meta.get("notes", []) if n != previous),
                             note(count)]


def _note_compiled(builder: ProfileBuilder, graphs: int) -> None:
    """torch.compile ran: `meta["compiled_graphs"]` (the most any rank compiled) and a line in
    `meta["notes"]` saying that Inductor's fused kernels are missing from the profile."""
    from .recording import compiled_note
    _note_counted(builder, "compiled_graphs", graphs, max, compiled_note)


def _cut_short_note(steps: int) -> str:
    which = "a step" if steps == 1 else f"{steps} steps (one a rank)"
    return (f"the script stopped during {which}: kept in the timeline, left out of the summary "
            "and its per-step figures")


def _note_unreadable(builder: ProfileBuilder, calls: int) -> None:
    """Calls whose arguments the recorder could not read: `meta["unreadable_calls"]` (over every
    rank) and a line in `meta["notes"]`."""
    from .recording import unreadable_note
    _note_counted(builder, "unreadable_calls", calls, int.__add__, unreadable_note)


def add_recording(builder: ProfileBuilder, recording: Recording, inst: Instance, *, auto_cast: str = "matmult",
                  detail_steps: int = 4, steps: set[int] | None = None, group=None, t0: int | None = None,
                  main_thread: int | None = None, progress=None, tail: bool = True,
                  step_base: int = 1, stopped: bool = False) -> None:
    """Add one recording's steps and host events to `builder` (to its current rank). `t0`: the
    perf_counter_ns host times count from (default the recording's start; ranks recorded by
    other processes share one). `main_thread`: ident of the thread that recorded (default this
    one; a recording made by another process names its own). `tail`, `step_base`, `stopped`:
    see recording_to_profile."""
    t0 = recording.t0 if t0 is None else t0
    step_offset = step_base - 1      # the recorder counts steps from 1
    _note_compiled(builder, getattr(recording, "compiled_graphs", 0))
    _note_unreadable(builder, getattr(recording, "unreadable_calls", 0))
    tids: dict[object, int] = {}

    def tid_of(ident) -> int:
        return tids.setdefault(ident, len(tids) + 1)

    main_tid = tid_of(threading.get_ident() if main_thread is None else main_thread)
    cols = recording.table()
    phase, module = resolve_phases(recording, cols)
    step_col = cols["step"]
    merged = _tail_of(recording, step_col, phase) if tail else None
    if merged is not None:           # the last step's calls become the previous step's tail
        last, into = merged
        step_col = np.where(step_col == last, into, step_col).astype(step_col.dtype, copy=False)
    span_step = {} if merged is None else {merged[0]: merged[1]}
    order = np.argsort(step_col, kind="stable")
    step_ids, starts = np.unique(step_col[order], return_index=True)
    bounds = np.append(starts, len(order))
    builder_programs = _StepPrograms(recording, auto_cast, group)
    per_step = {}
    for k, step in enumerate(step_ids.tolist()):
        idx = order[bounds[k]:bounds[k + 1]]
        key, prog, infos = builder_programs.program(cols["sig"][idx], phase[idx], module[idx])
        per_step[step] = (idx, key, prog, infos)
    # steps with device work (a step of only a `.item()` is no step)
    wanted = sorted(s for s, (_, _, prog, _) in per_step.items() if prog.ops and (steps is None or s in steps))
    summarised = wanted
    if stopped and len(wanted) > 1 and wanted[-1] > len(recording.boundaries) \
            and merged is None:
        # the step under way when the script stopped never ended: it stays in the timeline, and
        # the summary (the detailed steps) leaves it out, as it would skew every per-step figure
        summarised = wanted[:-1]
        _note_counted(builder, "cut_short_steps", 1, int.__add__, _cut_short_note)
    detailed = set(summarised if detail_steps <= 0 else summarised[-detail_steps:])
    labels = recording.labels
    host_rows: dict[int, int] = {}
    sig, c0, c1, tid = cols["sig"].tolist(), cols["t0"], cols["t1"], cols["tid"].tolist()
    start_s, end_s = ((c0 - t0) / 1e9).tolist(), ((c1 - t0) / 1e9).tolist()
    for step in wanted:
        for i in per_step[step][0].tolist():
            host_rows[i] = builder.add_host(labels[sig[i]], "cpu_op", main_tid if tid[i] == 0 else tid_of(("t", tid[i])),
                                            start_s[i], end_s[i], step=step + step_offset)
    for name, cat, ident, s0, s1, step in recording.spans:
        step = span_step.get(step, step)
        if step in wanted:
            builder.add_host(name, cat, tid_of(ident), (s0 - t0) / 1e9, (s1 - t0) / 1e9,
                             step=step + step_offset)
    main_ident = threading.get_ident() if main_thread is None else main_thread
    own_spans = [(span_step.get(step, step), s0, s1) for _, _, ident, s0, s1, step
                 in recording.spans if ident == main_ident]
    bounds_ns = _step_bounds(recording, per_step, None if merged is None else merged[1],
                             [(step, s1) for step, _, s1 in own_spans])
    bounds_ns = _nested_in_spans(bounds_ns, [(s0, s1) for _, s0, s1 in own_spans])
    t_dev = 0.0
    for done, step in enumerate(wanted):
        if progress:
            progress(done, len(wanted))
        idx, key, prog, infos = per_step[step]
        h_start, h_end = bounds_ns[step]
        number = step + step_offset
        builder.add_host(f"ProfilerStep#{number}", "user_annotation", main_tid,
                         (h_start - t0) / 1e9, (h_end - t0) / 1e9, step=number)
        run = builder_programs.run(key, prog, inst)
        info = [OpInfo(m, sh, dt, host_rows.get(int(idx[pos]), -1)) for pos, m, sh, dt in infos]
        # Host and device on one axis: the step's device run starts after the previous one and
        # late enough that no operator starts before the host call that launched it has returned
        # (flows point forward; the device step lies under the host step that issued it).
        launched = np.array([end_s[int(idx[pos])] for pos, *_ in infos], dtype=np.float64)
        op_start = np.asarray(run.timeline.op_start, dtype=np.float64)[: launched.size]
        earliest = float(np.max(launched[: op_start.size] - op_start)) if op_start.size else 0.0
        t_dev = max(t_dev + inst.costs.exec_overhead_s, earliest)
        builder.add_step(number, prog, run, detailed=step in detailed, host_start=(h_start - t0) / 1e9,
                         host_end=(h_end - t0) / 1e9, info=info, shift=t_dev)
        t_dev += run.timeline.wall
    if progress:
        progress(len(wanted), len(wanted))


def _tail_of(recording: Recording, step_col: np.ndarray, phase: np.ndarray) -> tuple[int, int] | None:
    """(last step, the step before it) when the work after the last step's end is that step's
    tail rather than a step: every call of it outside any forward pass (phase `other`: no
    module's forward began and no autograd graph was built since the step ended), as a
    GradScaler's update, an average of the weights or a last `loss.item()` after the last
    optimizer step are. Work with a forward pass (an evaluation) stays a step of its own."""
    last = len(recording.boundaries) + 1
    if last < 2 or not len(step_col):
        return None
    in_last = step_col == last
    if not in_last.any() or not (step_col == last - 1).any() or (phase[in_last] != OTHER).any():
        return None
    return last, last - 1


def _nested_in_spans(bounds: dict[int, tuple[int, int]],
                     spans: list[tuple[int, int]]) -> dict[int, tuple[int, int]]:
    """Steps clipped to nest with the recording thread's spans (which nest among themselves, as
    any one thread's calls do): a step that a span (a label around the whole loop) begins in
    starts where the span begins; one a span ends in ends where the span ends. Readers drop or
    misdraw slices of one thread that overlap without nesting; the calls clipped off (start-up
    before the loop, work after it) are then in no step's span, as they are in no iteration."""
    out = dict(bounds)
    order = sorted(out, key=lambda step: out[step][0])
    starts = [out[step][0] for step in order]
    for s0, s1 in spans:
        # only the step that holds the span's start and the one that holds its end can cross it
        for at in {bisect.bisect_right(starts, s0) - 1, bisect.bisect_right(starts, s1) - 1}:
            if at < 0:
                continue
            step = order[at]
            a, b = out[step]
            if a < s0 < b < s1:
                out[step] = (s0, b)
            elif s0 < a < s1 < b:
                out[step] = (a, s1)
    return out


def _step_bounds(recording: Recording, per_step, tail_of: int | None = None,
                 spans: list[tuple[int, int]] = ()) -> dict[int, tuple[int, int]]:
    """Host interval of each step: from the previous boundary (or the capture start) to its own
    boundary (or the last call); a step that took the work after it as its tail (`tail_of`) ends
    at the last call. `spans`: (step, end) of the recording thread's spans. A step ends no
    earlier than a span begun in it that ends before the next step would: a label around an
    iteration, whose step ends inside optimizer.step(), then nests in its ProfilerStep as it
    does in torch's traces (a label around several steps: see _nested_in_spans)."""
    t1 = recording.table()["t1"]
    last = int(t1.max()) if len(t1) else recording.t0
    edges = [recording.t0, *recording.boundaries, max([last, *(e for _, e in spans)])]
    moved = list(edges)
    for step, end in spans:
        if 1 <= step < len(edges) - 1 and edges[step] < end <= edges[step + 1]:
            moved[step] = max(moved[step], end)
    out = {}
    for step in per_step:
        start = moved[step - 1] if step - 1 < len(moved) else last
        if step == tail_of or step >= len(moved) - 1:
            end = max([last, *(e for s, e in spans if s == step)])
        else:
            end = moved[step]
        out[step] = (start, max(end, start))
    return out
