"""One simulated Neuron runtime: runs an app's workload on the chip model in paced real time and
publishes cumulative counters to its counter file.

Simulated time follows wall time times `speed`. The Run of one execution is computed once; the job
then repeats it through `segments.job_segments` (model load, data-loading gaps, checkpoints,
request arrivals), meeting the faults its `FaultInjector` draws.
"""
from __future__ import annotations

import math
import os
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from ..core import instance
from .counters import NQ, Q_ENGINE, Q_HBM_R, Q_HBM_W, Q_THROTTLED, Counters, ExecutionProfile
from .faults import ECC_FAULTS, EXEC_EFFECTS, FaultInjector, FaultSpec
from .power import PowerModel
from .apps import DMA_BUFFER_PER_CORE, MODEL_CODE_PER_INSTR, build_app_program
from .layout import DEVICE_MEMORY, ECC_KINDS, HOST_MEMORY, PHASES, PUBLISH_INTERVAL_S
from .segments import Segment, hung_segment, job_segments
from .shm import CounterWriter, LoadedModel, Subgraph

RING = 1024                      # latencies kept for the collector's percentiles
EXEC_TIMEOUT_S = 10.0            # assumption: NEURON_RT_EXEC_TIMEOUT, overridable by that variable
MAX_CATCH_UP_S = 600.0           # simulated seconds one tick may cover (after a stall)
# wall seconds a tick may spend catching up before it publishes: a tick of --speed 50000 walks
# thousands of executions, and a runtime that publishes less often than a collector's
# staleness limit (2 s) reads as stopped or hung; the rest waits for the next tick
MAX_TICK_WALL_S = 0.5
POWER_SMOOTHING_S = 1.0          # power readings average over about this long


@dataclass(frozen=True, slots=True)
class RuntimeConfig:
    instance: str
    workload: str
    cores: tuple[int, ...]
    tag: str
    lnc: int | None = None
    seed: int = 0
    speed: float = 1.0
    faults: tuple[FaultSpec, ...] = ()
    app_index: int = 0
    root: Path | None = None
    interval: float = PUBLISH_INTERVAL_S
    exec_timeout_s: float = EXEC_TIMEOUT_S
    extra_header: dict = field(default_factory=dict)


class Runtime:
    def __init__(self, cfg: RuntimeConfig, *, pid: int | None = None, wall_clock=time.time,
                 rng: np.random.Generator | None = None) -> None:
        self.cfg = cfg
        self.wall_clock = wall_clock
        self.rng = rng if rng is not None else np.random.default_rng([cfg.seed, cfg.app_index])
        inst = instance(cfg.instance, cfg.lnc)
        self.inst = inst
        dev = inst.device
        self.app = build_app_program(cfg.workload, inst, len(cfg.cores))
        self.overhead_s = inst.costs.exec_overhead_s
        per_device = dev.logical_cores(inst.lnc)
        self._check_fits(self.app.device_memory, dev.hbm_bytes / per_device)    # before scheduling
        self.profile, self.exec_walls, instructions = self._step_profile()
        abs_devices = [c // per_device for c in cfg.cores]
        self.devices = tuple(sorted(set(abs_devices)))
        core_dev = np.array([self.devices.index(d) for d in abs_devices], dtype=np.int64)
        memory = dict(self.app.device_memory)
        memory["model_code"] += MODEL_CODE_PER_INSTR * instructions
        self._check_fits(memory, dev.hbm_bytes / per_device)
        models = (self._model(memory, abs_devices),)
        header = {"tag": cfg.tag, "workload": cfg.workload, "instance_type": inst.spec.name,
                  "started_at": wall_clock(), "cores": list(cfg.cores), "lnc": inst.lnc,
                  "core_devices": abs_devices, "devices": list(self.devices), "ring": RING,
                  "models": [m.to_dict() for m in models], "speed": cfg.speed, "kind": self.app.kind,
                  **cfg.extra_header}
        self.writer = CounterWriter(cfg.root, header, pid=pid)
        self.record = self.writer.record
        self.counters = Counters(self.record, inst.lnc, core_dev)
        self.record["device_memory"] = np.array([memory[k] for k in DEVICE_MEMORY])[None, :]
        self.host_memory = {"application_memory": 0, "constants": 0,
                            "dma_buffers": DMA_BUFFER_PER_CORE * len(cfg.cores), "tensors": self.app.host_tensors}
        self.power = PowerModel(dev)
        self.phys_per_dev = np.bincount(core_dev, minlength=len(self.devices)).astype(float) * inst.lnc
        idle = self.power.device_power(self.phys_per_dev / dev.physical_cores * dev.idle_watts,
                                       self.phys_per_dev / dev.physical_cores)
        self.record["dev_temperature_c"] = self.power.steady_temperature(idle)
        self.record["dev_power_w"] = self.phys_per_dev / dev.physical_cores * dev.idle_watts
        self.faults = FaultInjector(cfg.faults, np.random.default_rng([cfg.seed, cfg.app_index, 1]), self.devices)
        state_bytes = memory["constants"] + (memory["tensors"] if self.app.kind == "train" else 0)
        self._segments = job_segments(self.app.kind, self.profile, self.overhead_s, self.rng,
                                      memory["constants"], state_bytes)
        self._inserted: deque[Segment] = deque()
        self._pending: deque[tuple[str, str]] = deque()
        self._cut = False
        self._unsampled = 0             # executions completed whose latencies are not drawn yet
        self.seg = next(self._segments)
        self.seg_start = 0.0
        self.sim = 0.0
        self.phase = "starting"
        self._proc = None
        self._rss_at = -math.inf
        self.publish()

    # ---------------------------------------------------------------- set-up helpers
    def _step_profile(self) -> tuple[ExecutionProfile, np.ndarray, int]:
        """One step's profile (each distinct execution scheduled once), the device latency of
        each execution in a step, and the instructions of the distinct executions."""
        per_stack = self._busy_per_stack()
        profiles, walls, instructions = [], [], 0
        for _, program, count in self.app.executions:
            run = self.inst.run(program, busy_cores_per_stack=per_stack)
            instructions += len(run.timeline)
            prof = ExecutionProfile.from_run(run)
            profiles.append((prof, count))
            if len(walls) < RING:           # latencies are sampled from the first RING only
                walls += [prof.wall] * min(count, RING - len(walls))
        if len(profiles) == 1 and profiles[0][1] == 1:
            return profiles[0][0], np.array(walls), instructions
        return ExecutionProfile.concat(profiles, gap=self.overhead_s), np.array(walls), instructions

    def _busy_per_stack(self) -> int:
        dev, lnc = self.inst.device, self.inst.lnc
        phys = np.concatenate([np.arange(c * lnc, c * lnc + lnc) for c in self.cfg.cores])
        per_stack = np.bincount(phys // dev.cores_per_stack)
        return int(max(1, per_stack.max()))

    def _check_fits(self, memory: dict[str, int], capacity: float) -> None:
        from ..errors import SpecError
        need = sum(memory.values())
        if need > capacity:
            raise SpecError(f"app {self.cfg.tag!r}: workload {self.cfg.workload!r} needs {need / 2**30:.1f} GiB "
                            f"per NeuronCore; allowed: at most {capacity / 2**30:.1f} GiB")

    def _model(self, memory: dict[str, int], abs_devices: list[int]) -> LoadedModel:
        uuid = self.rng.bytes(16).hex()
        device_part = {k: memory[k] for k in ("constants", "model_code", "runtime_memory", "tensors")}
        host = {"application_memory": 0, "constants": 0, "dma_buffers": DMA_BUFFER_PER_CORE, "tensors": 0}
        subs = tuple(Subgraph(f"sg_{i:02d}", core, dev, host, device_part)
                     for i, (core, dev) in enumerate(zip(self.cfg.cores, abs_devices)))
        return LoadedModel(self.app.name, uuid, 10001 + self.cfg.app_index, subs)

    # ---------------------------------------------------------------- simulated time
    def _next_segment(self) -> Segment:
        return self._inserted.popleft() if self._inserted else next(self._segments)

    def advance(self, target: float, budget_s: float | None = None,
                clock: Callable[[], float] = time.monotonic) -> None:
        """Account everything that happened up to simulated time `target`, or, given a
        `budget_s` of wall seconds, up to the end of the execution it runs out in."""
        give_up = None if budget_s is None else clock() + budget_s
        # after a stall (the process paused) at most MAX_CATCH_UP_S, or ten ticks' worth at a
        # speed whose every tick covers more: a fixed cap had held --speed 1e6 to ~6,000x
        cap = max(MAX_CATCH_UP_S, 10 * self.cfg.speed * self.cfg.interval)
        target = min(target, self.sim + cap)
        if target <= self.sim:
            return
        start, acc = self.sim, np.zeros(NQ)
        t = self.sim
        while True:
            seg = self.seg
            end = self.seg_start + seg.duration
            upto = min(target, end)
            a, b = t - self.seg_start, upto - self.seg_start
            acc += seg.cumulative(b) - seg.cumulative(a)
            for ev in self.faults.due(t, upto):      # segment by segment: faults meet later executions
                self._fault(ev.kind, ev.device, ev.count)
            done = seg.completions(b) - seg.completions(a)
            if done:
                per_step = self.app.executions_per_step if seg.status == "completed" else 1
                self._complete(seg, done * per_step)
            if self._cut:               # an execution hung: the rest of this batch never runs
                self._cut = False
                end = upto
            t = upto
            if upto < end:
                self.phase = seg.phase_at(b)
                break
            self.seg_start = end
            self.seg = self._next_segment()
            self.phase = self.seg.phase
            if give_up is not None and clock() > give_up:
                break
        self._sample_latencies()
        self.counters.add_activity(acc)
        self._power(acc, t - start)
        self.sim = t

    def _complete(self, seg: Segment, n: int) -> None:
        wall = seg.profile.wall if seg.profile is not None else 0.0
        if seg.status != "completed":
            self.counters.add_executions(seg.status, n, "transient")
            self.counters.add_latencies(np.full(min(n, RING), wall), np.full(min(n, RING), wall), n)
            return
        for ev in self.faults.per_execution(n):
            self._fault(ev.kind, ev.device, ev.count)
        failed = 0
        while self._pending and failed < n:
            status, error = self._pending.popleft()
            if status == "timed_out":
                self._inserted.append(hung_segment(self.cfg.exec_timeout_s))
                self._cut = True
            else:
                self.counters.add_executions(status, 1, error)
            failed += 1
        if n > failed:
            self.counters.add_executions("completed", n - failed)
        # their latencies are drawn once per advance, not per batch: a fast simulation's tick
        # spans thousands of batches, and the ring keeps only RING values anyway
        self._unsampled += n

    def _sample_latencies(self) -> None:
        """The latencies of the executions completed since the last call: RING of them at
        most, standing in equal shares for all of them in the histograms."""
        n, self._unsampled = self._unsampled, 0
        if n <= 0:
            return
        k = min(n, RING)
        device = np.resize(self.exec_walls, k) * self.rng.lognormal(0.0, 0.03, k)
        total = device + self.overhead_s
        if self.app.kind == "serve":      # queueing behind other requests
            total = total + self.rng.exponential(0.2 * self.profile.wall, k)
        self.counters.add_latencies(total, device, n)

    def _fault(self, kind: str, device: int | None, count: int) -> None:
        if kind in ECC_FAULTS and device is not None and device in self.devices:
            self.counters.add_ecc(self.devices.index(device), ECC_KINDS.index(kind), count)
        if kind in EXEC_EFFECTS:
            self._pending.extend([EXEC_EFFECTS[kind]] * count)   # parse_fault bounds it

    def _power(self, acc: np.ndarray, dt: float) -> None:
        if dt <= 0:
            return
        r, phys = self.record, self.phys_per_dev
        engine_s = np.outer(phys, acc[Q_ENGINE])
        hbm = phys * (acc[Q_HBM_R] + acc[Q_HBM_W])
        energy = self.power.energy(dt, engine_s, hbm, phys)
        r["dev_energy_j"] += energy
        alpha = 1.0 - math.exp(-dt / POWER_SMOOTHING_S)
        r["dev_power_w"] += (energy / dt - r["dev_power_w"]) * alpha
        share = phys / self.inst.device.physical_cores
        r["dev_temperature_c"] = self.power.step_temperature(
            r["dev_temperature_c"], self.power.device_power(r["dev_power_w"], share), dt)
        dIdt = min(1.0, acc[Q_THROTTLED] / dt)
        r["dev_throttle"] = np.maximum(dIdt, self.power.thermal_throttle(r["dev_temperature_c"]))

    # ---------------------------------------------------------------- publishing
    def publish(self) -> None:
        r = self.record
        now = self.wall_clock()
        if now - self._rss_at >= 1.0:
            self.host_memory["application_memory"] = self._rss()
            self._rss_at = now
        r["wall_time"] = now
        r["sim_time"] = self.sim
        r["phase"] = PHASES.index(self.phase) if self.phase in PHASES else 0
        r["host_memory"] = [self.host_memory[k] for k in HOST_MEMORY]
        self.writer.publish()

    def _rss(self) -> int:
        try:
            import psutil
            if self._proc is None:
                self._proc = psutil.Process(os.getpid())
            return int(self._proc.memory_info().rss)
        except Exception:       # host memory is best effort; counters must keep flowing
            return 0

    def close(self) -> None:
        self.phase = "stopping"
        self.publish()
        self.writer.close(remove=True)
