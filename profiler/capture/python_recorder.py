"""The Python recorder: a TorchDispatchMode that sees every aten call reaching the dispatcher's
Python key, for machines where the native recorder cannot be built. It costs ~20 µs per call, and
it keeps each call's arguments and result until the step ends (then only their shapes), which can
make autograd copy gradients it would otherwise steal."""
from __future__ import annotations

import functools
import sys
import time

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .aten_map import EMBEDDING_BAG_BACKWARDS, EMBEDDING_BAGS, REDUCE, VIEWS, AtenCall, call_extra
from .aten_names import as_real
from .recording import COLUMNS, UNMATCHED_NODE, RecorderBase, Recording

_current_node = torch._C._current_autograd_node
_seq_nr = torch._C._autograd._get_sequence_nr
_now = time.perf_counter_ns


@functools.lru_cache(maxsize=1)
def _kept_whole() -> frozenset[str]:
    """Operators the native recorder keeps whole (MAPPED or KERNEL in its table)."""
    from .native_recorder import KERNEL, MAPPED, operator_kinds
    return frozenset(line.split("\t")[0] for line in operator_kinds().splitlines()
                     if line.endswith((f"\t{MAPPED}", f"\t{KERNEL}")))


@functools.lru_cache(maxsize=None)
def _looked_through(func) -> bool:
    """An operator whose only kernel forwards to others (CompositeImplicitAutograd, no CPU or
    CUDA kernel) that the mapper does not keep whole, as the native recorder decides them.
    Outside inference_mode the dispatcher decomposes it before the mode sees it; under
    inference_mode it arrives whole (`cross_entropy_loss`), so its callees are recorded."""
    from .native_recorder import _composite
    packet = f"{func.namespace}::{func.overloadpacket.__name__}"
    if packet in _kept_whole() or func.overloadpacket.__name__ in VIEWS:
        return False
    return _composite(torch._C._dispatch_has_kernel_for_dispatch_key, func.name())


class Recorder(TorchDispatchMode, RecorderBase):
    """The Python recorder: every aten call that reaches the Python dispatch key."""
    kind = "python"

    def __init__(self, steps: tuple[int, int | None] | None = None, note=None) -> None:
        """`note`: told, in one line, when torch.compile cannot compile under this recorder."""
        TorchDispatchMode.__init__(self)
        RecorderBase.__init__(self, steps)
        self._calls: list[tuple] = []
        self._append = self._calls.append
        self._note = note
        self._compile = None               # torch.compile, while wrapped to say so

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if _looked_through(func):   # inference_mode lets a composite reach the mode undecomposed
            with self:
                out = func.decompose(*args, **(kwargs or {}))
            if out is not NotImplemented:
                return out
        t0 = _now()
        out = func(*args, **(kwargs or {}))
        t1 = _now()
        node = _current_node()
        self._append((func, t0, t1, args, kwargs, out, self.phase, self.module, self.step,
                      _seq_nr() - 1, min(node._sequence_nr(), UNMATCHED_NODE) if node is not None else -1))
        return out

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        """torch.compile compiles under this mode, which is off while Dynamo and Inductor work
        and on while the compiled code runs (torch 2.9 on; older ones run eager under any
        dispatch mode, see _say_compile_runs_eager)."""
        return True

    def start(self) -> "Recorder":
        self.hooks.install()
        if not hasattr(TorchDispatchMode, "ignore_compile_internals"):
            self._say_compile_runs_eager()
        self.__enter__()
        return self

    def stop(self) -> Recording:
        self.__exit__(None, None, None)
        if self._compile is not None:      # unwrapped in the reverse order of wrapping
            torch.compile = self._compile
            self._compile = None
        self.hooks.remove()
        self.compact()
        return self.recording

    def _say_compile_runs_eager(self) -> None:
        """Before torch 2.9 Dynamo compiles nothing while a dispatch mode is on: the script's
        torch.compile is wrapped to say so once, when the script first calls it."""
        original = self._compile = torch.compile
        note = self._note or (lambda m: print(f"profiler: {m}", file=sys.stderr))

        def compile_eagerly(*args, **kwargs):
            if torch.compile is compile_eagerly:
                torch.compile = original
                note(f"torch.compile runs eager under the Python recorder on torch "
                     f"{torch.__version__} (2.9 compiles); the profile shows the eager operators")
            return original(*args, **kwargs)
        torch.compile = compile_eagerly

    def compact(self) -> None:
        """Replace the tensors kept by the hot path with interned signatures, so a long run
        holds no more than one step's tensors."""
        calls, self._calls = self._calls, []
        self._append = self._calls.append
        if not calls:
            return
        rec = self.recording
        rows = []
        for func, t0, t1, args, kwargs, out, phase, module, step, seq, node_seq in calls:
            if func.namespace == "profiler" or not self.keeps(step):   # record_function's markers
                continue
            call, readable = _safe_call(func, args, out, kwargs)
            rec.unreadable_calls += not readable
            rows.append((rec.intern(call), t0, t1, phase, module, step, seq, node_seq, 0))
        if not rows:
            return
        cols = list(zip(*rows))
        rec.chunks.append({c: np.asarray(cols[i], dtype=t) for i, (c, t) in enumerate(COLUMNS.items())})


def _safe_call(func, args, out, kwargs) -> tuple[AtenCall, bool]:
    """to_call, which runs at a step's end inside the script's own code and so must not raise
    there: a call whose arguments cannot be read is kept as its name alone (no shapes), and
    said to be (False), so that the profile counts what it could not cost."""
    try:
        return to_call(func, args, out, kwargs), True
    except Exception:                                   # noqa: BLE001 (never into the script)
        try:
            name, namespace, _ = _func_info(func)
        except Exception:                               # noqa: BLE001
            name, namespace = str(func), "aten"
        return AtenCall(name, namespace, (), "torch.float32", 0), False


def _tensor_numel(t) -> int:
    try:
        return int(t.numel())
    except Exception:                                   # noqa: BLE001 (a subclass that cannot say)
        return 0


def _shape(t) -> tuple[int, ...]:
    """A tensor's shape; one that has none (a nested tensor, whose components differ in shape:
    `.shape` raises) as one dimension of its element count, as the native recorder writes it."""
    if not getattr(t, "is_nested", False):
        try:
            return tuple(int(d) for d in t.shape)
        except Exception:                               # noqa: BLE001
            pass
    return (_tensor_numel(t),)


def _shapes(args) -> tuple[tuple[tuple[int, ...], ...], str, tuple]:
    """Shapes of the tensor arguments in order (a list of tensors as its total size), the first
    floating one's dtype (else the first tensor's), and the first int list."""
    shapes, dtypes, extra = [], [], ()
    for a in args:
        if isinstance(a, torch.Tensor):
            shapes.append(_shape(a))
            dtypes.append(a.dtype)
        elif isinstance(a, (list, tuple)) and any(isinstance(t, torch.Tensor) for t in a):
            tensors = [t for t in a if isinstance(t, torch.Tensor)]     # index()'s hold None too
            shapes.append((sum(_tensor_numel(t) for t in tensors),))
            dtypes.append(tensors[0].dtype)
        elif isinstance(a, (list, tuple)) and a and isinstance(a[0], int) and not extra:
            extra = (int(a[0]),)
    dtype = next((d for d in dtypes if d.is_floating_point or d.is_complex),
                 dtypes[0] if dtypes else torch.float32)
    return tuple(shapes), str(dtype), extra


def _out_dtype(out, dtype: str) -> str:
    """The result's dtype when it is not the arguments' ("" when it is)."""
    first = out
    if isinstance(out, (list, tuple)):
        first = next((o for o in out if isinstance(o, torch.Tensor)), None)
    if not isinstance(first, torch.Tensor):
        return ""
    return str(first.dtype) if str(first.dtype) != dtype else ""


def _numel(out) -> int:
    if isinstance(out, torch.Tensor):
        return _tensor_numel(out)
    if isinstance(out, (list, tuple)):
        return sum(_tensor_numel(o) for o in out if isinstance(o, torch.Tensor))
    return 0


_FUNC_INFO: dict = {}
# Operators whose arguments call_extra reads in full schema order, as the native recorder sees
# them: keyword-only ones (var's keepdim) and defaults (amax's dim=[]) put in place.
FULL_ARGS = REDUCE | EMBEDDING_BAGS | EMBEDDING_BAG_BACKWARDS | frozenset(("topk",))


def _func_info(func) -> tuple[str, str, bool]:
    info = _FUNC_INFO.get(func)
    if info is None:
        name = func.overloadpacket.__name__
        info = _FUNC_INFO[func] = (name, getattr(func, "namespace", "aten"), name in VIEWS)
    return info


def schema_args(func, args, kwargs) -> list:
    """A call's arguments in its schema's order, keyword ones and defaults included (None for
    an argument with no default that was not passed)."""
    full, kwargs = list(args), kwargs or {}
    for param in func._schema.arguments[len(full):]:
        if param.name in kwargs:
            full.append(kwargs[param.name])
        else:
            full.append(param.default_value if param.has_default_value() else None)
    return full


def to_call(func, args, out, kwargs=None) -> AtenCall:
    name, namespace, is_view = _func_info(func)
    if is_view:                     # metadata-only: no device cost, shapes not needed
        return AtenCall(name, namespace, (), "", 0)
    shapes, dtype, extra = _shapes(args)
    read = schema_args(func, args, kwargs) if name in FULL_ARGS else args
    extra = call_extra(name, read) or extra
    return as_real(AtenCall(name, namespace, shapes, dtype, _numel(out), extra,
                            _out_dtype(out, dtype)))
