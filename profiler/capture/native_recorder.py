"""The native recorder: aten calls seen by a C++ RecordFunction callback (profiler/capture/native/recorder.cpp).

Python only sets the context the callback stamps on each call (module id, phase, step: three
int64 slots shared with the library) and, at each step's end, collects the new records and the
new signatures. A signature is the operator plus its arguments' shapes, dtypes and small integer
lists, interned in C++, so a training loop's repeated calls cost one lookup each.
"""
from __future__ import annotations

import ctypes
import functools
import math
import time

import numpy as np

from .aten_map import (ADAPTIVE_POOLS, BINARY, COLLECTIVES, COMPARISONS, COPIES, KERNELS,
                       NLL_FORWARDS, REDUCE, UNARY, VIEWS, WHOLE_OPS, AtenCall, call_extra,
                       reduce_result)
from .aten_names import as_real
from .native.build import NativeUnavailable, load
from .recording import COLUMNS, Recording, RecorderBase

RECORD = np.dtype([("t0", "<i8"), ("t1", "<i8"), ("seq", "<i8"), ("node_seq", "<i8"), ("out_numel", "<i8"),
                   ("sig", "<i4"), ("module", "<i4"), ("step", "<i4"), ("phase", "<i4"), ("tid", "<i4"),
                   ("depth", "<i4")])
MAPPED, SKIP, KERNEL = 1, 2, 5
BACKENDS = ("CPU", "CUDA")           # backend kernels that run instead of a composite one
COLLECT_EVERY = 256                  # steps between moves of records out of the library
# Tags of recorder.cpp's signature encoding.
T_NONE, T_TENSOR, T_TENSORS, T_INTS, T_INT, T_DOUBLE, T_BOOL, T_OTHER, T_OPT_TENSORS = range(9)
# c10::ScalarType numbering (c10/core/ScalarType.h)
FLOAT_TYPES = {5: "torch.float16", 6: "torch.float32", 7: "torch.float64", 15: "torch.bfloat16",
               23: "torch.float8_e5m2", 24: "torch.float8_e4m3fn", 25: "torch.float8_e5m2fnuz",
               26: "torch.float8_e4m3fnuz"}
COMPLEX_TYPES = {8: "torch.complex32", 9: "torch.complex64", 10: "torch.complex128"}
SCALAR_TYPES = {0: "torch.uint8", 1: "torch.int8", 2: "torch.int16", 3: "torch.int32",
                4: "torch.int64", 11: "torch.bool", **FLOAT_TYPES, **COMPLEX_TYPES}
FLOATING = frozenset(FLOAT_TYPES) | frozenset(COMPLEX_TYPES)
MASKS = frozenset((0, 11))           # uint8 and bool index tensors select by mask


@functools.lru_cache(maxsize=1)
def operator_kinds() -> str:
    """The table the callback classifies operators by. Operators the mapper knows are kept whole
    (their callees are not recorded), except CompositeImplicitAutograd ones outside WHOLE_OPS
    with no CPU or CUDA kernel of their own (silu_backward has both, and runs its CPU kernel):
    those only forward (`contiguous` of a contiguous tensor copies nothing), so the callback
    looks at what they call instead. The kernels add_call has a branch of its own for (KERNEL)
    are decided per overload: kept whole when the overload called is not a
    CompositeImplicitAutograd one (upsample's `.vec`, whose output size may be only scale
    factors, is looked through to the overload it calls). So are the reductions whose default
    overload is a CompositeImplicitAutograd one (var, std, var_mean: their `.correction` kernel is
    kept whole). Metadata-only operators are skipped with their callees."""
    import torch
    has_kernel = torch._C._dispatch_has_kernel_for_dispatch_key
    attention = {n.partition("::")[2].partition(".")[0] for n in torch._C._dispatch_get_all_op_names()
                 if "scaled_dot_product" in n or "flash_attention" in n}
    skip = VIEWS | {"resize_", "resize_as_", "_resize_output_", "record_stream"}
    known = set(UNARY) | set(BINARY) | REDUCE | COPIES
    mapped = {n for n in known - skip if not _composite(has_kernel, f"aten::{n}")} | WHOLE_OPS | attention
    lines = [f"aten::{n}\t{MAPPED}\n" for n in sorted(mapped)]
    lines += [f"aten::{n}\t{KERNEL}\n" for n in sorted((KERNELS | REDUCE) - mapped - skip)]
    lines += [f"{ns}::{n}\t{MAPPED}\n" for n in sorted(COLLECTIVES) for ns in ("aten", "c10d", "_c10d_functional")]
    lines += [f"aten::{n}\t{SKIP}\n" for n in sorted(skip)]
    lines += [f"profiler::{n}\t{SKIP}\n" for n in ("_record_function_enter", "_record_function_enter_new",
                                                  "_record_function_exit")]   # record_function's markers
    return "".join(lines)


def _composite(has_kernel, name: str) -> bool:
    """Whether an operator only forwards to others: it has a CompositeImplicitAutograd kernel
    and no backend kernel of its own. One with both (silu_backward, mish_backward: a CPU kernel
    too) runs its own kernel on that backend, which calls nothing: the mapper's are kept whole
    (MAPPED), others left to the callback, which looks at the backend of each call."""
    try:
        if not has_kernel(name, "CompositeImplicitAutograd"):
            return False
        return not any(has_kernel(name, key) for key in BACKENDS)
    except RuntimeError:                 # not an operator of this torch build
        return False


def decode_args(key: np.ndarray, pos: int, n_args: int) -> list:
    """Arguments of one signature: ("T", dtype, shape), ("L", dtype, count, numel), ("I",
    [(dtype, shape) or None, ...]) for index()'s optional tensors, tuples of ints (bool lists
    as 0/1), numbers, or None."""
    args = []
    for _ in range(n_args):
        tag = int(key[pos])
        if tag == T_TENSOR:
            ndim = int(key[pos + 2])
            args.append(("T", int(key[pos + 1]), tuple(int(d) for d in key[pos + 3:pos + 3 + ndim])))
            pos += 3 + ndim
        elif tag == T_TENSORS:
            args.append(("L", int(key[pos + 1]), int(key[pos + 2]), int(key[pos + 3])))
            pos += 4
        elif tag == T_OPT_TENSORS:
            entries, pos = [], pos + 2
            for _ in range(int(key[pos - 1])):
                if int(key[pos]) < 0:                   # None: a `:` of the indexing
                    entries.append(None)
                    pos += 1
                else:
                    ndim = int(key[pos + 1])
                    shape = tuple(int(d) for d in key[pos + 2:pos + 2 + ndim])
                    entries.append((int(key[pos]), shape))
                    pos += 2 + ndim
            args.append(("I", entries))
        elif tag == T_INTS:
            n = int(key[pos + 1])
            args.append(tuple(int(v) for v in key[pos + 2:pos + 2 + n]))
            pos += 2 + n
        elif tag in (T_INT, T_BOOL):
            args.append(int(key[pos + 1]))
            pos += 2
        elif tag == T_DOUBLE:                           # the double's bits, as an int64
            args.append(float(key[pos + 1:pos + 2].astype(np.int64).view(np.float64)[0]))
            pos += 2
        else:
            args.append(None)
            pos += 1
    return args


def call_of(label: str, args: list, out_numel: int) -> AtenCall:
    """The AtenCall a signature stands for, with the same reading of arguments as the Python
    recorder's (shapes of tensors in order, a list's total size, the first floating dtype else
    the first tensor's). The result's dtype, which the callback does not see, is read from the
    operator: a comparison's mask, the dtype `_to_copy` is asked for."""
    namespace, _, name = label.rpartition("::")     # a range of no namespace: `detach_`
    if name in VIEWS:
        return AtenCall(name, namespace, (), "", 0)
    shapes, dtypes, extra = [], [], ()
    for a in args:
        if isinstance(a, tuple) and a and a[0] == "T":
            shapes.append(a[2])
            dtypes.append(a[1])
        elif isinstance(a, tuple) and a and a[0] == "L":
            if a[2]:
                shapes.append((a[3],))
                dtypes.append(a[1])
        elif isinstance(a, tuple) and a and a[0] == "I":
            defined = [e for e in a[1] if e is not None]
            if defined:
                shapes.append((sum(_numel(shape) for _, shape in defined),))
                dtypes.append(defined[0][0])
        elif isinstance(a, tuple) and a and isinstance(a[0], int) and not extra:
            extra = (a[0],)
    code = next((d for d in dtypes if d in FLOATING), dtypes[0] if dtypes else 6)
    dtype = SCALAR_TYPES.get(code, "torch.float32")
    out_dtype = ""
    if name in COMPARISONS:
        out_dtype = "torch.bool"
    elif name == "_to_copy" and len(args) > 1 and isinstance(args[1], int):
        out_dtype = SCALAR_TYPES.get(args[1], "")
    if out_numel < 0:
        out_numel = output_size(name, args)
    return as_real(AtenCall(name, namespace, tuple(shapes), dtype, out_numel,
                            call_extra(name, args) or extra,
                            "" if out_dtype == dtype else out_dtype))


def _numel(shape) -> int:
    return int(np.prod(shape, dtype=np.int64)) if shape else 1


def output_size(name: str, args: list) -> int:
    """Elements of a call's result, from its arguments (outputs are not boxed for the recorder:
    that would cost every call ~0.15 µs). Elementwise results take their inputs' broadcast shape;
    operators whose result is shaped by other arguments are worked out one by one."""
    tensors = [a[2] for a in args if isinstance(a, tuple) and a and a[0] == "T"]
    lists = [a for a in args if isinstance(a, tuple) and a and a[0] == "L"]
    ints = [a for a in args if isinstance(a, tuple) and (not a or isinstance(a[0], int))]
    if name in ("cat", "stack", "_cat") and lists:
        return lists[0][3]
    if name == "_foreach_norm" and lists:            # one norm per tensor
        return lists[0][2]
    if "_foreach_" in name and lists:                # a list's elements, not its scalar operand's
        # (also _amp_foreach_non_finite_check_and_unscale_'s, which returns nothing)
        return lists[0][3]
    if name in ("zeros", "ones", "full", "empty", "rand", "randn", "randint") and ints:
        return _numel(ints[0])
    if name == "arange":
        return _arange_numel(args)
    if name == "index" and tensors:
        entries = next((a[1] for a in args if isinstance(a, tuple) and a and a[0] == "I"), [])
        return _index_numel(tensors[0], entries)
    if name == "repeat" and tensors and ints:
        return _numel(tensors[0]) * _numel(ints[0])
    if name == "constant_pad_nd" and tensors and ints:
        shape, pad = list(tensors[0]), ints[0]
        for i in range(0, len(pad) - 1, 2):          # pairs from the last dimension backwards
            d = len(shape) - 1 - i // 2
            if d >= 0:
                shape[d] += pad[i] + pad[i + 1]
        return _numel(shape)
    if name in ("index_select", "gather") and len(tensors) >= 2:
        if name == "gather":
            return _numel(tensors[1])
        dim = args[1] if isinstance(args[1], int) else 0
        shape = list(tensors[0])
        if shape:
            shape[dim % len(shape)] = _numel(tensors[1])
        return _numel(shape)
    if tensors and (name in REDUCE or name in ("topk",) or name in ADAPTIVE_POOLS
                    or name in NLL_FORWARDS):
        size = _reduced_size(name, args, tensors)
        if size is not None:
            return size
    if name == "embedding_dense_backward" and tensors and len(args) > 2 and isinstance(args[2], int):
        return args[2] * (tensors[0][-1] if tensors[0] else 1)
    if not tensors:
        return 0
    try:
        return _numel(np.broadcast_shapes(*tensors))
    except ValueError:                               # not elementwise: the largest argument
        return max(_numel(t) for t in tensors)


def _reduced_size(name: str, args: list, tensors: list) -> int | None:
    """Elements of what a reduction, topk (values and indices), an adaptive pooling (a max one's
    indices too) or nll_loss (the loss, and total_weight) returns; None: worked out as any
    call's are."""
    x = tensors[0]
    if name in REDUCE:
        return None if len(tensors) > 1 else reduce_result(name, x, args)   # max.other: elementwise
    extra = call_extra(name, args)
    if not extra:
        return None
    if name == "topk":
        k, dim = extra
        return 2 * k * (_numel(x) // max(1, x[dim])) if x else 2 * k
    if name in ADAPTIVE_POOLS:
        size = extra[0]
        return _numel(x[:len(x) - len(size)]) * _numel(size) * (2 if "max" in name else 1)
    return 2 if extra[0] else _numel(tensors[1]) + 1 if len(tensors) > 1 else 2


def _arange_numel(args: list) -> int:
    """arange(end, ...), .start(start, end, ...), .start_step(start, end, step, ...) and the out=
    forms, told apart by their argument counts."""
    count = {5: 1, 2: 1, 6: 2, 7: 3, 4: 3}.get(len(args), 0)
    nums = args[:count]
    if not count or not all(isinstance(v, (int, float)) for v in nums):
        return 0
    start, end, step = ((0, nums[0], 1) if count == 1 else (nums[0], nums[1], 1) if count == 2
                        else tuple(nums))
    return max(0, math.ceil((end - start) / step)) if step else 0


def _index_numel(shape: tuple[int, ...], entries: list) -> int:
    """x[i0, :, i2]: the index tensors' broadcast shape stands for the dims they index, the
    other dims are kept. A mask (bool or uint8) indexes as many dims as it has, and selects at
    most all of their elements (how many are true is not known from the arguments)."""
    index_shapes, kept, dim = [], 1, 0
    for e in entries:
        if e is None:
            kept *= shape[dim] if dim < len(shape) else 1
            dim += 1
        elif e[0] in MASKS:
            index_shapes.append((_numel(e[1]),))
            dim += max(1, len(e[1]))
        else:
            index_shapes.append(e[1])
            dim += 1
    if not index_shapes:
        return _numel(shape)
    try:
        selected = _numel(np.broadcast_shapes(*index_shapes))
    except ValueError:
        selected = max(_numel(s) for s in index_shapes)
    return selected * kept * _numel(shape[dim:])


class NativeRecorder(RecorderBase):
    kind = "native"

    def __init__(self, boxed_outputs: bool = False, steps: tuple[int, int | None] | None = None,
                 note=None) -> None:
        """`boxed_outputs`: have torch box every call's results so their sizes are measured, not
        worked out from the arguments (slower; for checking output_size). `note`: told, in one
        line, when the library is built first."""
        super().__init__(steps)
        self.active = False
        self._compile_spans: list[list] = []    # [start, end or None] of torch.compile's work
        self.boxed_outputs = boxed_outputs
        self.lib = load(note)
        if self.lib.ns_record_size() != RECORD.itemsize:
            raise NativeUnavailable("the native recorder's record layout does not match")
        self._ctx = np.ctypeslib.as_array(self.lib.ns_context(), shape=(4,))
        self._raw: list[tuple[str, list]] = []           # decoded signatures, global order
        self._thread_sigs: dict[int, list[int]] = {}     # thread -> local signature id -> raw index
        self._sig_of: dict[tuple[int, int], int] = {}    # (raw, out_numel) -> Recording signature

    def start(self) -> "NativeRecorder":
        self.hooks.install()
        if self.keeps(self.step):
            try:
                self._record(True)
            except NativeUnavailable:
                self.hooks.remove()
                raise
        return self

    def stop(self) -> Recording:
        self._record(False)
        self.hooks.remove()
        self.lib.ns_release()
        return self.recording

    def _record(self, on: bool) -> None:
        """Switch the callback on (at the window's first step) or off (after its last)."""
        if on and not self.active:
            if self.lib.ns_start(operator_kinds().encode(), int(self.boxed_outputs)) != 0:
                raise NativeUnavailable("the native recorder is already recording in this process")
            self._ctx[:3] = (self.module, self.phase, self.step)
            self.active = True
        elif not on and self.active:
            self._take(stop=True)
            self.active = False

    def set_module(self, module: int) -> None:
        self.module = module
        self._ctx[0] = module

    def set_phase(self, phase: int) -> None:
        self.phase = phase
        self._ctx[1] = phase

    def reopen_step(self) -> bool:
        reopened = super().reopen_step()
        self._ctx[2] = self.step
        return reopened

    def end_step(self) -> None:
        super().end_step()
        self._ctx[2] = self.step
        if self.keeps(self.step) != self.active:
            self._record(not self.active)

    def pause_for_compile(self, starts: bool) -> None:
        """The callback stays on (switching it off and on again starts the library afresh):
        the compilations' spans are noted, and the calls that began in them dropped when the
        records are decoded."""
        was = self.compiling
        super().pause_for_compile(starts)
        if not was and self.compiling:
            self._compile_spans.append([time.perf_counter_ns(), None])   # the records' clock
        elif was and not self.compiling and self._compile_spans:
            self._compile_spans[-1][1] = time.perf_counter_ns()

    def compact(self) -> None:
        """Records hold no tensors, so they stay in the library until the stop or a flush; only
        every COLLECT_EVERY steps are they moved over, to bound the library's buffers."""
        if self.active and self.step % COLLECT_EVERY == 0:
            self._take(stop=False)

    def flush(self) -> Recording:
        if self.active:
            self._take(stop=False)
        return self.recording

    def _take(self, stop: bool) -> None:
        """Copy what the library gathered into the Recording as a raw batch; decoding waits
        until the columns are first used, after the run."""
        n = self.lib.ns_collect(1 if stop else 0)
        size = self.lib.ns_sig_size()
        if n == 0 and size == 0:
            return
        records = np.frombuffer(ctypes.string_at(self.lib.ns_records(), n * RECORD.itemsize), dtype=RECORD)
        sigs = np.frombuffer(ctypes.string_at(self.lib.ns_sigs(), size * 8), dtype="<i8")
        self.recording.pending.append((records, sigs, self.lib.ns_names()))
        self.recording.decoder = self._decode

    def _decode(self, recording: Recording, batch) -> None:
        records, sigs, names = batch
        self._add_signatures(sigs, names.decode().split("\n"))
        records = records[~self._in_compile(records["t0"])]
        n = len(records)
        if n == 0:
            return
        raw_sig = np.empty(n, dtype=np.int64)
        for tid in np.unique(records["tid"]).tolist():
            rows = records["tid"] == tid
            raw_sig[rows] = np.asarray(self._thread_sigs[tid], dtype=np.int64)[records["sig"][rows]]
        # (signature, output size + 1) pairs as one int64: signatures stay far below 2**22 and an
        # output below 2**41 elements; anything larger is clipped, which only merges signatures.
        # An output size of -1 means "not recorded".
        pair = (raw_sig << 41) | np.clip(records["out_numel"] + 1, 0, (1 << 41) - 1)
        pairs, inverse = np.unique(pair, return_inverse=True)
        sig_ids = np.array([self._signature(p >> 41, (p & ((1 << 41) - 1)) - 1) for p in pairs.tolist()],
                           dtype=np.int32)
        order = np.argsort(records["t0"], kind="stable")
        chunk = {"sig": sig_ids[inverse.reshape(-1)], **{c: records[c] for c in COLUMNS if c != "sig"}}
        recording.chunks.append({c: chunk[c][order].astype(t) for c, t in COLUMNS.items()})

    def _in_compile(self, t0: np.ndarray) -> np.ndarray:
        """Which calls began while torch.compile was compiling (its own work, not the model's)."""
        if not self._compile_spans:
            return np.zeros(len(t0), bool)
        spans = np.array([(s, np.iinfo(np.int64).max if e is None else e)
                          for s, e in self._compile_spans], dtype=np.int64)
        at = np.searchsorted(spans[:, 0], t0, side="right") - 1
        return (at >= 0) & (t0 <= spans[np.maximum(at, 0), 1])

    def _add_signatures(self, blob: np.ndarray, names: list[str]) -> None:
        pos, size = 0, len(blob)
        while pos < size:
            tid, length = int(blob[pos]), int(blob[pos + 1])
            key = blob[pos + 2:pos + 2 + length]
            self._thread_sigs.setdefault(tid, []).append(len(self._raw))
            self._raw.append((names[int(key[0])], decode_args(key, 2, int(key[1]))))
            pos += 2 + length

    def _signature(self, raw: int, out_numel: int) -> int:
        sig = self._sig_of.get((raw, out_numel))
        if sig is None:
            label, args = self._raw[raw]
            sig = self._sig_of[(raw, out_numel)] = self.recording.intern(call_of(label, args, out_numel))
        return sig
