"""Recording a real PyTorch run: aten operators, module paths, forward/backward, optimizer steps,
DataLoader waits (the hooks that see modules, steps and waits are in hooks.py).

Two recorders fill the same columnar Recording. The native one (native_recorder.py) hooks the
dispatcher's RecordFunction from C++ and costs about 1.6 µs per operator; the Python one
(python_recorder.py) is a TorchDispatchMode, slower but needing no compiler. `start_recorder()`
(recorders.py) picks the native one when it can be built. Either way the hot path keeps ids and
numbers only; names, shapes and the chip mapping are worked out after the run (to_profile.py).
torch is imported only where hooks are installed: the capture's own process turns recordings into
a profile without it (importing torch there cost about 1.6 s per capture, after the script ended).
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field

import numpy as np

from .aten_map import AtenCall
from .hooks import Hooks
from .phases import BACKWARD, FORWARD, OPTIMIZER, OTHER, PHASE_NAMES

__all__ = ["BACKWARD", "COLUMNS", "FORWARD", "OPTIMIZER", "OTHER", "PHASE_NAMES", "UNMATCHED_NODE",
           "RecorderBase", "Recording", "compiled_graph_count", "compiled_note"]
UNMATCHED_NODE = 1 << 62      # node_seq of backward nodes made by no forward call (AccumulateGrad)
COLUMNS = {"sig": np.int32, "t0": np.int64, "t1": np.int64, "phase": np.int8, "module": np.int32,
           "step": np.int32, "seq": np.int64, "node_seq": np.int64, "tid": np.int32}
_now = time.perf_counter_ns


@dataclass(slots=True)
class Recording:
    """Raw records of one capture; times are perf_counter_ns (CLOCK_MONOTONIC).

    One row per operator call (COLUMNS): `sig` indexes `sigs`/`labels`, `module` indexes
    `modules`, `seq` is the autograd sequence number a forward call's node gets, `node_seq` the
    number of the backward node a call runs under (or -1)."""
    t0: int = field(default_factory=_now)
    _sigs: list = field(default_factory=list)       # AtenCall by signature id
    _labels: list = field(default_factory=list)     # "aten::mm" by signature id
    modules: list = field(default_factory=lambda: [""])
    chunks: list = field(default_factory=list)      # dicts of COLUMNS arrays, in time order
    spans: list = field(default_factory=list)       # (name, cat, tid, t0, t1, step)
    boundaries: list = field(default_factory=list)  # perf_counter_ns at the end of each step
    recorder: str = "python"
    # raw batches a recorder hands over without decoding them during the run, and the function
    # that turns one into a chunk (called on first use of the columns)
    pending: list = field(default_factory=list)
    decoder: object = None
    _sig_ids: dict = field(default_factory=dict)
    # graphs torch.compile compiled while recording: their Inductor kernels are not recorded
    compiled_graphs: int = 0
    # calls whose arguments the Python recorder could not read: kept by name, their work uncounted
    unreadable_calls: int = 0

    def intern(self, call: AtenCall) -> int:
        sig = self._sig_ids.get(call)
        if sig is None:
            sig = self._sig_ids[call] = len(self._sigs)
            self._sigs.append(call)
            self._labels.append(call.label)
        return sig

    def _resolve(self) -> None:
        if self.pending:
            batches, self.pending = self.pending, []
            for batch in batches:
                self.decoder(self, batch)

    @property
    def sigs(self) -> list[AtenCall]:
        self._resolve()
        return self._sigs

    @property
    def labels(self) -> list[str]:
        self._resolve()
        return self._labels

    def table(self) -> dict[str, np.ndarray]:
        """All calls as one set of columns (chunks are merged once)."""
        self._resolve()
        if len(self.chunks) != 1:
            merged = {c: np.concatenate([ch[c] for ch in self.chunks]).astype(t, copy=False) if self.chunks
                      else np.zeros(0, t) for c, t in COLUMNS.items()}
            self.chunks = [merged]
        return self.chunks[0]

    def __len__(self) -> int:
        return len(self.table()["sig"])

    def steps(self) -> set[int]:
        return set(np.unique(self.table()["step"]).tolist())


def compiled_graph_count() -> int:
    """How many graphs torch.compile (Dynamo) compiled in this process so far: its
    `counters["stats"]["unique_graphs"]`, 0 when Dynamo was never imported or keeps no count.
    Reads what is there; imports nothing (a script that never compiles pays nothing)."""
    utils = sys.modules.get("torch._dynamo.utils")
    try:
        return int(utils.counters["stats"]["unique_graphs"]) if utils is not None else 0
    except Exception:           # another torch's layout: no count rather than a failed capture
        return 0


def unreadable_note(calls: int) -> str:
    """The profile's line for calls whose arguments could not be read (a tensor subclass whose
    shape raises): they are named, and their work is missing."""
    return (f"{calls} operator call{'s' if calls != 1 else ''} had arguments the recorder could "
            "not read: kept by name, with no shapes, so their work is missing from the profile")


def compiled_note(graphs: int) -> str:
    """The line a capture prints, and the profile keeps, when torch.compile ran."""
    return (f"torch.compile ran {graphs} graph{'s' if graphs != 1 else ''}: Inductor's fused kernels "
            "are not recorded, only the operators it calls out to (matmuls); their elementwise "
            "work is missing from the profile")


class RecorderBase:
    """Context (module, phase, step) and step bookkeeping shared by both recorders. `steps`
    (first, last or None) limits what is kept to a window of steps, counted from 1."""
    kind = "base"

    def __init__(self, steps: tuple[int, int | None] | None = None) -> None:
        self.first_step, self.last_step = steps or (1, None)
        self.recording = Recording(recorder=self.kind)
        self.module = 0
        self.module_stack: list[tuple[int, int]] = []
        self.phase = FORWARD
        self.step = 1
        self.explicit_steps = False
        self.opt_t0 = 0
        self.compiling = 0        # torch.compile compilations under way (they may nest)
        self.hooks = Hooks(self)

    def keeps(self, step: int) -> bool:
        return self.first_step <= step and (self.last_step is None or step <= self.last_step)

    def pause_for_compile(self, starts: bool) -> None:
        """A torch.compile compilation starts or ends: what runs in between is the compiler's
        work, not recorded (a recorder that sees none of it, as the Python recorder's dispatch
        mode, has nothing more to do)."""
        self.compiling = max(0, self.compiling + (1 if starts else -1))

    def set_module(self, module: int) -> None:
        self.module = module

    def set_phase(self, phase: int) -> None:
        self.phase = phase

    def end_step(self) -> None:
        self.recording.boundaries.append(_now())
        self.step += 1
        self.compact()

    def reopen_step(self) -> bool:
        """Go back into the step just ended (another optimizer of the same iteration), to be
        ended again by end_step. Refused (False) at an edge of the window of kept steps, where
        the recorder was switched on or off by that end: the work then stays in the new step."""
        if not self.recording.boundaries or self.keeps(self.step - 1) != self.keeps(self.step):
            return False
        self.recording.boundaries.pop()
        self.step -= 1
        return True

    def explicit_step(self) -> None:
        self.explicit_steps = True
        self.end_step()

    def compact(self) -> None:          # move what the hot path kept into the Recording's columns
        raise NotImplementedError

    def flush(self) -> Recording:
        """The recording so far, with every call made until now in its columns."""
        self.compact()
        return self.recording
