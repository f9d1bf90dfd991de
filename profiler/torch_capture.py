"""Recording a real PyTorch run: aten operators (TorchDispatchMode), module paths (global module
hooks), forward/backward (the autograd node running), optimizer steps, DataLoader waits.

The hot path stores one tuple per aten call; names, shapes and the chip mapping are worked out
after the run (`Recording.to_profile`). Backward ops get the module of the forward op whose
autograd node they run, through the node's sequence number.
"""
from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from device_model.core import Instance
from device_model.program import Program

from .aten_map import VIEWS, AtenCall, add_call
from .builder import OpInfo, ProfileBuilder
from .model import Profile

FORWARD, BACKWARD, OPTIMIZER = 0, 1, 2
PHASE_NAMES = ("forward", "backward", "optimizer")
_current_node = torch._C._current_autograd_node
_seq_nr = torch._C._autograd._get_sequence_nr
_now = time.perf_counter_ns


@dataclass(slots=True)
class Recording:
    """Raw records of one capture; times are perf_counter_ns."""
    t0: int = field(default_factory=_now)
    # (func, t0, t1, args, out, phase, module, step, seq, node_seq); after Recorder.compact():
    # (func, t0, t1, AtenCall, phase, module, step, seq, node_seq)
    calls: list = field(default_factory=list)
    spans: list = field(default_factory=list)      # (name, cat, tid, t0, t1, step)
    boundaries: list = field(default_factory=list) # perf_counter_ns at the end of each step


class _Hooks:
    """Global module and optimizer hooks feeding the recorder's module stack and phase."""

    def __init__(self, rec: "Recorder") -> None:
        self.rec = rec
        self.handles = []
        self.names: dict[int, str] = {}

    def install(self) -> None:
        mod = torch.nn.modules.module
        from torch.optim import optimizer as opt
        self.handles = [mod.register_module_forward_pre_hook(self._pre),
                        mod.register_module_forward_hook(self._post),
                        opt.register_optimizer_step_pre_hook(self._opt_pre),
                        opt.register_optimizer_step_post_hook(self._opt_post)]
        self._patch_dataloader()

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles = []
        self._unpatch_dataloader()

    def _name(self, module) -> str:
        name = self.names.get(id(module))
        if name is None:
            root = type(module).__name__
            for sub_name, sub in module.named_modules():
                self.names.setdefault(id(sub), f"{root}.{sub_name}" if sub_name else root)
            name = self.names[id(module)]
        return name

    def _pre(self, module, args) -> None:
        rec = self.rec
        rec.module_stack.append((self._name(module), _now()))
        rec.module = rec.module_stack[-1][0]

    def _post(self, module, args, output) -> None:
        rec = self.rec
        if rec.module_stack:
            name, t0 = rec.module_stack.pop()
            rec.recording.spans.append((name, "python_function", threading.get_ident(), t0, _now(), rec.step))
        rec.module = rec.module_stack[-1][0] if rec.module_stack else ""

    def _opt_pre(self, optimizer, args, kwargs) -> None:
        self.rec.phase = OPTIMIZER
        self.rec.opt_t0 = _now()

    def _opt_post(self, optimizer, args, kwargs) -> None:
        rec = self.rec
        rec.recording.spans.append((f"Optimizer.step#{type(optimizer).__name__}.step", "user_annotation",
                                    threading.get_ident(), rec.opt_t0, _now(), rec.step))
        rec.phase = FORWARD
        if not rec.explicit_steps:
            rec.end_step()

    def _patch_dataloader(self) -> None:
        try:
            from torch.utils.data import dataloader
        except ImportError:          # pragma: no cover - part of torch
            return
        cls = dataloader._BaseDataLoaderIter
        original = cls.__next__
        rec = self.rec

        def timed_next(it):
            t0 = _now()
            try:
                return original(it)
            finally:
                rec.recording.spans.append(("DataLoader.__next__", "data_loading", threading.get_ident(),
                                            t0, _now(), rec.step))
        timed_next.__wrapped_original__ = original
        cls.__next__ = timed_next
        self._dl = (cls, original)

    def _unpatch_dataloader(self) -> None:
        if getattr(self, "_dl", None):
            cls, original = self._dl
            cls.__next__ = original
            self._dl = None


class Recorder(TorchDispatchMode):
    """Records every aten call made while active."""

    def __init__(self) -> None:
        super().__init__()
        self.recording = Recording()
        self._append = self.recording.calls.append
        self.module = ""
        self.module_stack: list[tuple[str, int]] = []
        self.phase = FORWARD
        self.step = 1
        self.explicit_steps = False
        self.opt_t0 = 0
        self.hooks = _Hooks(self)
        self._compacted = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        t0 = _now()
        out = func(*args, **(kwargs or {}))
        t1 = _now()
        node = _current_node()
        self._append((func, t0, t1, args, out, self.phase, self.module, self.step,
                      _seq_nr(), node._sequence_nr() if node is not None else -1))
        return out

    def start(self) -> "Recorder":
        self.hooks.install()
        self.__enter__()
        return self

    def stop(self) -> Recording:
        self.__exit__(None, None, None)
        self.hooks.remove()
        self.compact()
        return self.recording

    def end_step(self) -> None:
        self.recording.boundaries.append(_now())
        self.step += 1
        self.compact()

    def compact(self) -> None:
        """Replace the tensors kept by the hot path with their shapes, so a long run holds no
        more than one step's tensors."""
        calls = self.recording.calls
        for i in range(self._compacted, len(calls)):
            func, t0, t1, args, out, *rest = calls[i]
            calls[i] = (func, t0, t1, to_call(func, args, out), *rest)
        self._compacted = len(calls)

    def explicit_step(self) -> None:
        self.explicit_steps = True
        self.end_step()


# --- after the run: records -> calls -> programs -> profile ---------------------------------

def _shapes(args) -> tuple[tuple[tuple[int, ...], ...], str, tuple]:
    shapes, dtype, extra = [], "", ()
    for a in args:
        if isinstance(a, torch.Tensor):
            shapes.append(tuple(a.shape))
            if not dtype and a.is_floating_point():
                dtype = str(a.dtype)
        elif isinstance(a, (list, tuple)) and a and isinstance(a[0], torch.Tensor):
            shapes.append((sum(t.numel() for t in a),))
            if not dtype and a[0].is_floating_point():
                dtype = str(a[0].dtype)
        elif isinstance(a, (list, tuple)) and a and isinstance(a[0], int) and not extra:
            extra = (int(a[0]),)
    return tuple(shapes), dtype or "torch.float32", extra


def _numel(out) -> int:
    if isinstance(out, torch.Tensor):
        return out.numel()
    if isinstance(out, (list, tuple)):
        return sum(o.numel() for o in out if isinstance(o, torch.Tensor))
    return 0


_FUNC_INFO: dict = {}


def _func_info(func) -> tuple[str, str, bool]:
    info = _FUNC_INFO.get(func)
    if info is None:
        name = func.overloadpacket.__name__
        info = _FUNC_INFO[func] = (name, getattr(func, "namespace", "aten"), name in VIEWS)
    return info


def to_call(func, args, out) -> AtenCall:
    name, namespace, is_view = _func_info(func)
    if is_view:                     # metadata-only: no device cost, shapes not needed
        return AtenCall(name, namespace, (), "", 0)
    shapes, dtype, extra = _shapes(args)
    packet = func.overloadpacket
    if packet.__name__ in ("convolution", "convolution_backward") and len(args) > 4:
        stride = args[3] if packet.__name__ == "convolution" else args[4]
        padding = args[4] if packet.__name__ == "convolution" else args[5]
        extra = (int(stride[0]) if stride else 1, int(padding[0]) if padding else 0)
    return AtenCall(name, namespace, shapes, dtype, _numel(out), extra)


def _step_programs(recording: Recording, auto_cast: str, group):
    """Per step: Program, OpInfo per chip op, host row of each call (filled later)."""
    seq_module: dict[int, str] = {}
    programs: dict[int, tuple[Program, list]] = {}
    for i, (func, t0, t1, call, phase, module, step, seq, node_seq) in enumerate(recording.calls):
        if node_seq >= 0:
            phase_name = "backward"
            module = seq_module.get(node_seq, module)
        else:
            phase_name = PHASE_NAMES[phase]
            if phase == FORWARD:
                seq_module.setdefault(seq - 1, module)
        prog, infos = programs.setdefault(step, (Program(), []))
        prog.phase = phase_name
        added = add_call(prog, call, auto_cast, group)
        shape_text = "x".join(",".join(map(str, s)) for s in call.shapes[:2])
        infos.extend([(i, module, shape_text, call.dtype.removeprefix("torch."))] * added)
    return programs


def _program_key(prog: Program) -> tuple:
    return tuple((op.key, op.phase, op.name, op.deps) for op in prog.ops)


def recording_to_profile(recording: Recording, inst: Instance, *, auto_cast: str = "matmult",
                         detail_steps: int = 4, steps: set[int] | None = None, command: str = "",
                         group=None, meta: dict | None = None) -> Profile:
    """Simulate each recorded step on `inst` and assemble the profile, keeping the measured CPU
    timeline as the host process. `steps` limits the steps kept (the API's schedule)."""
    builder = ProfileBuilder(inst, "pytorch", command=command, auto_cast=auto_cast,
                             host_pid=os.getpid(), host_name=f"Host: {command or 'python'} (measured CPU)",
                             **(meta or {}))
    t0 = recording.t0
    tids: dict[int, int] = {}

    def tid_of(ident: int) -> int:
        return tids.setdefault(ident, len(tids) + 1)

    programs = _step_programs(recording, auto_cast, group)
    # steps with device work (a trailing `loss.item()` after the last optimizer step is no step)
    wanted = sorted(s for s, (prog, _) in programs.items() if prog.ops and (steps is None or s in steps))
    detailed = set(wanted if detail_steps <= 0 else wanted[-detail_steps:])
    host_rows: dict[int, int] = {}
    main_tid = tid_of(threading.get_ident())
    for i, (func, c0, c1, _call, _phase, _module, step, *_seq) in enumerate(recording.calls):
        if step in wanted:
            host_rows[i] = builder.add_host(f"{getattr(func, 'namespace', 'aten')}::{func.overloadpacket.__name__}",
                                            "cpu_op", main_tid, (c0 - t0) / 1e9, (c1 - t0) / 1e9, step=step)
    for name, cat, ident, s0, s1, step in recording.spans:
        if step in wanted:
            builder.add_host(name, cat, tid_of(ident), (s0 - t0) / 1e9, (s1 - t0) / 1e9, step=step)
    bounds = _step_bounds(recording, programs)
    cache: dict[tuple, object] = {}
    t_dev = 0.0
    for step in wanted:
        prog, infos = programs[step]
        h_start, h_end = bounds[step]
        builder.add_host(f"ProfilerStep#{step}", "user_annotation", main_tid, (h_start - t0) / 1e9,
                         (h_end - t0) / 1e9, step=step)
        key = _program_key(prog)
        run = cache.get(key)
        if run is None:
            run = cache[key] = inst.run(prog)
        info = [OpInfo(m, sh, dt, host_rows.get(i, -1)) for i, m, sh, dt in infos]
        t_dev += inst.costs.exec_overhead_s
        builder.add_step(step, prog, run, detailed=step in detailed, host_start=(h_start - t0) / 1e9,
                         host_end=(h_end - t0) / 1e9, info=info, shift=t_dev)
        t_dev += run.timeline.wall
    return builder.build()


def _step_bounds(recording: Recording, programs) -> dict[int, tuple[int, int]]:
    """Host interval of each step: from the previous boundary (or the capture start) to its own
    boundary (or the last call)."""
    edges = [recording.t0, *recording.boundaries]
    last = max((c[2] for c in recording.calls), default=recording.t0)
    out = {}
    for step in programs:
        start = edges[step - 1] if step - 1 < len(edges) else last
        end = edges[step] if step < len(edges) else last
        out[step] = (start, max(end, start))
    return out
