"""The Python API, in torch.profiler's shape:

    import profiler
    with profiler.profile(instance="trn2.48xlarge",
                          schedule=profiler.schedule(wait=1, warmup=1, active=2),
                          on_trace_ready=profiler.save_to("step.nsprof")) as prof:
        for batch in data:
            train_step(batch)
            prof.step()

`schedule` returns an action per step like torch's (NONE, WARMUP, RECORD, RECORD_AND_SAVE); at
the end of each active window `on_trace_ready(prof)` is called with `prof.profile` set.
"""
from __future__ import annotations

import warnings
from enum import Enum
from typing import Callable

from device_model import instance as make_instance

from .model.fileformat import save
from .model.profile import Profile


class ProfilerAction(Enum):
    NONE = 0
    WARMUP = 1
    RECORD = 2
    RECORD_AND_SAVE = 3


def schedule(*, wait: int, warmup: int, active: int, repeat: int = 0,
             skip_first: int = 0) -> Callable[[int], ProfilerAction]:
    """Step number (0-based) -> action, with torch.profiler.schedule's semantics."""
    if wait < 0 or warmup < 0 or active <= 0 or repeat < 0 or skip_first < 0:
        raise ValueError("schedule needs wait, warmup, repeat, skip_first >= 0 and active > 0")
    cycle = wait + warmup + active

    def action(step: int) -> ProfilerAction:
        if step < skip_first:
            return ProfilerAction.NONE
        step -= skip_first
        if repeat and step // cycle >= repeat:
            return ProfilerAction.NONE
        pos = step % cycle
        if pos < wait:
            return ProfilerAction.NONE
        if pos < wait + warmup:
            return ProfilerAction.WARMUP
        return ProfilerAction.RECORD_AND_SAVE if pos == cycle - 1 else ProfilerAction.RECORD
    return action


def _always(step: int) -> ProfilerAction:
    return ProfilerAction.RECORD


def _action(value) -> ProfilerAction:
    """A schedule's answer as our action: torch.profiler.schedule's own enum is taken by name,
    so a script keeps its `schedule=torch.profiler.schedule(...)`."""
    if isinstance(value, ProfilerAction):
        return value
    try:
        return ProfilerAction[getattr(value, "name", value)]
    except (KeyError, TypeError):
        raise ValueError(f"schedule returned {value!r}, not a ProfilerAction") from None


def save_to(path: str) -> Callable[["profile"], None]:
    """An `on_trace_ready` handler writing each window's profile (`{n}` numbers windows,
    `{rank}` the process's rank in its process group, 0 without one: each DDP worker its file)."""
    def handler(prof: "profile") -> None:
        rank = (prof.profile.meta.get("rank", 0) if prof.profile is not None else 0)
        target = path.replace("{n}", str(prof.windows)).replace("{rank}", str(rank))
        save(prof.profile, target)
    return handler


def _process_group() -> tuple[int, int]:
    """(world size, rank) of the process group the script made; (1, 0) without one."""
    try:
        import torch.distributed as dist
        if dist.is_available() and dist.is_initialized():
            return dist.get_world_size(), dist.get_rank()
    except Exception:          # a group half torn down: none to speak of
        pass
    return 1, 0


class profile:
    """Records a PyTorch run while active and simulates the recorded steps on `instance`."""

    def __init__(self, *, instance: str = "trn2.48xlarge", lnc: int | None = None,
                 schedule: Callable[[int], ProfilerAction] | None = None,
                 on_trace_ready: Callable[["profile"], None] | None = None,
                 auto_cast: str = "matmult", detail_steps: int = 0, recorder: str | None = None,
                 activities=None, record_shapes: bool = True, profile_memory: bool = False,
                 with_stack: bool = False, with_flops: bool = True, with_modules: bool = True,
                 experimental_config=None, execution_trace_observer=None, acc_events: bool = False,
                 use_cuda: bool | None = None, custom_trace_id_callback=None,
                 post_processing_timeout_s: float | None = None) -> None:
        """From `activities` on, torch.profiler's, taken so that its call sites run unchanged:
        the device is the chip model (activities, use_cuda), shapes, FLOPs and modules are
        always kept, memory, stacks and execution traces are not recorded."""
        self.inst = make_instance(instance, lnc)
        self.schedule = schedule or _always
        self.on_trace_ready = on_trace_ready
        self.auto_cast = auto_cast
        self.detail_steps = detail_steps
        self.recorder = recorder            # "native", "python" or "auto"; None: $NEURONSCOPE_RECORDER
        self.step_num = 0
        self.windows = 0
        self.profile: Profile | None = None
        self._recorder = None
        self._active: set[int] = set()
        self._warned_compile = False
        self._trace_metadata: dict = {}
        # torch's acc_events: events() and key_averages() hold every window so far, not the
        # last one's alone
        self.acc_events = acc_events
        self._windows: list[Profile] = []

    def __enter__(self) -> "profile":
        from .capture.recorders import start_recorder
        self._recorder = start_recorder(self.recorder)
        self._recorder.explicit_steps = True      # steps come from prof.step()
        self._note_action()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        recording = self._recorder.stop()
        self._recorder = None                     # stopped: a prof.step() after is an error
        # a window open at the end is delivered, empty or not, as torch.profiler does: a block
        # that ran nothing still gets its (empty) trace and its on_trace_ready call
        if self._active:
            self._emit(recording)

    def start(self) -> None:
        """torch's non-`with` form: `prof.start()` ... `prof.stop()`."""
        self.__enter__()

    def stop(self) -> None:
        if self._recorder is not None:
            self.__exit__(None, None, None)

    def add_metadata(self, key: str, value: str) -> None:
        """A user key and string value for the traces' top level, as torch's."""
        self._trace_metadata[str(key)] = str(value)

    def add_metadata_json(self, key: str, value: str) -> None:
        """A user key and a JSON value (given as text) for the traces' top level."""
        import json
        self._trace_metadata[str(key)] = json.loads(value)

    def _note_action(self) -> None:
        if _action(self.schedule(self.step_num)) in (ProfilerAction.RECORD,
                                                     ProfilerAction.RECORD_AND_SAVE):
            self._active.add(self._recorder.step)

    def step(self) -> None:
        """Marks the end of a step (ProfilerStep#N), like torch.profiler's prof.step()."""
        if self._recorder is None:
            raise RuntimeError("prof.step() outside `with profiler.profile(...) as prof:`: "
                               "nothing is recording")
        action = _action(self.schedule(self.step_num))
        self._recorder.explicit_step()
        self.step_num += 1
        if action is ProfilerAction.RECORD_AND_SAVE:
            self._emit(self._recorder.flush())
        self._note_action()

    def _emit(self, recording) -> None:
        from .capture.recording import compiled_graph_count, compiled_note
        from .capture.to_profile import recording_to_profile
        # graphs compiled before the window run inside it too: the process's count, as a capture's
        recording.compiled_graphs = compiled_graph_count()
        if recording.compiled_graphs and not self._warned_compile:
            warnings.warn(compiled_note(recording.compiled_graphs), stacklevel=3)
            self._warned_compile = True
        # under DDP/torchrun the c10d calls run over the process group: costed over its ranks
        # (without a group every collective was dropped), and the trace names the rank
        from device_model.workloads.micro import place_ranks
        world, rank = _process_group()
        nodes = -(-world // self.inst.logical_cores)      # more workers than one node's cores
        group = place_ranks(self.inst, world, nodes) if world > 1 else None
        meta = {"world_size": world, "rank": rank} if world > 1 else {}
        if self._trace_metadata:
            meta["trace_metadata"] = dict(self._trace_metadata)
        self.profile = recording_to_profile(recording, self.inst, auto_cast=self.auto_cast,
                                            detail_steps=self.detail_steps, steps=set(self._active),
                                            command="profiler.profile", tail=False,  # prof.step()'s
                                            group=group, meta=meta,
                                            step_base=0)           # torch's step_num: from 0
        self.windows += 1
        self._windows = [*self._windows, self.profile] if self.acc_events else [self.profile]
        self._active.clear()
        if self.on_trace_ready is not None:
            self.on_trace_ready(self)

    def export_chrome_trace(self, path: str, use_python_export: bool = False) -> None:
        """The last window's trace (`.json`, or gzip'ed `.json.gz`); torch's
        `tensorboard_trace_handler` calls this. `use_python_export` is torch's and changes
        nothing here."""
        from .export.chrome import write_chrome
        if self.profile is None:
            raise RuntimeError("no profile yet: no active step has finished")
        write_chrome(self.profile, path)

    def events(self):
        """The last window's measured host calls (operator calls and annotations) in start
        order, each with torch's FunctionEvent names (`name`, `key`, `cpu_time_total`,
        `device_time_total`, `time_range`, `thread`, `count`); with `acc_events`, every
        window's, window after window."""
        from .analysis.key_averages import call_events
        return [e for window in (self._windows or [None]) for e in call_events(window)]

    def export_stacks(self, path: str, metric: str = "self_cpu_time_total") -> None:
        """torch's flame-graph stacks file: written empty, as no stacks are recorded."""
        from .export.traceio import write_atomic
        write_atomic(path, b"")

    def save(self, path: str) -> None:
        if self.profile is None:
            raise RuntimeError("no profile yet: no active step has finished")
        save(self.profile, path)

    def key_averages(self, group_by_input_shape: bool = False, group_by_stack_n: int = 0,
                     group_by_overload_name: bool = False, *, limit: int | None = None):
        """Operators of the last window (with `acc_events`, of every window so far, summed),
        highest self device time first, one row per operator
        and phase (and input shape with `group_by_input_shape`); each row answers torch's
        FunctionEventAvg names (`key`, `count`, `self_cpu_time_total`, `device_time_total`, ...)
        and `.table(sort_by=..., row_limit=...)` prints them like torch.profiler's. No stacks
        are recorded and names carry no overload, so the other two groupings change nothing."""
        from .analysis.key_averages import key_averages, merge_key_averages
        if len(self._windows) <= 1:
            return key_averages(self.profile, group_by_input_shape, limit)
        return merge_key_averages([key_averages(w, group_by_input_shape)
                                   for w in self._windows], limit)
