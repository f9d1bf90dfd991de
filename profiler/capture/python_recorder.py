"""The Python recorder: a TorchDispatchMode that sees every aten call reaching the dispatcher's
Python key, for machines where the native recorder cannot be built. It costs ~20 µs per call, and
it keeps each call's arguments and result until the step ends (then only their shapes), which can
make autograd copy gradients it would otherwise steal."""
from __future__ import annotations

import time

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .aten_map import VIEWS, AtenCall, conv_extra
from .recording import COLUMNS, UNMATCHED_NODE, RecorderBase, Recording

_current_node = torch._C._current_autograd_node
_seq_nr = torch._C._autograd._get_sequence_nr
_now = time.perf_counter_ns


class Recorder(TorchDispatchMode, RecorderBase):
    """The Python recorder: every aten call that reaches the Python dispatch key."""
    kind = "python"

    def __init__(self, steps: tuple[int, int | None] | None = None) -> None:
        TorchDispatchMode.__init__(self)
        RecorderBase.__init__(self, steps)
        self._calls: list[tuple] = []
        self._append = self._calls.append

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        t0 = _now()
        out = func(*args, **(kwargs or {}))
        t1 = _now()
        node = _current_node()
        self._append((func, t0, t1, args, out, self.phase, self.module, self.step,
                      _seq_nr() - 1, min(node._sequence_nr(), UNMATCHED_NODE) if node is not None else -1))
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

    def compact(self) -> None:
        """Replace the tensors kept by the hot path with interned signatures, so a long run
        holds no more than one step's tensors."""
        calls, self._calls = self._calls, []
        self._append = self._calls.append
        if not calls:
            return
        rec = self.recording
        rows = [(rec.intern(to_call(func, args, out)), t0, t1, phase, module, step, seq, node_seq, 0)
                for func, t0, t1, args, out, phase, module, step, seq, node_seq in calls
                if func.namespace != "profiler" and self.keeps(step)]   # not record_function's markers
        if not rows:
            return
        cols = list(zip(*rows))
        rec.chunks.append({c: np.asarray(cols[i], dtype=t) for i, (c, t) in enumerate(COLUMNS.items())})


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
    if name in ("convolution", "convolution_backward") and len(args) > 5:
        extra = conv_extra(name, args)
    return AtenCall(name, namespace, shapes, dtype, _numel(out), extra)
