"""The small public API: an instance, a program, a run, a timeline and its metrics.

    >>> from device_model import instance, Program
    >>> inst = instance("trn2.48xlarge", lnc=2)
    >>> prog = Program(); prog.matmul(4096, 4096, 4096, "bf16")
    >>> run = inst.run(prog)
    >>> run.metrics()["mfu"]
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from .catalog.dtypes import get_dtype
from .engine.collectives import CollectiveCost, collective_cost
from .catalog.costs import DEFAULT_COSTS, CostParams
from .engine.isa import COMPUTE_ENGINES, L_CC, OP, Q_CC
from .lowering.attention import lower_attention
from .lowering.matmul import lower_matmul
from .lowering.vector import (lower_activation, lower_binary, lower_cast, lower_dma, lower_embedding,
                           lower_im2col, lower_norm, lower_reduce, lower_softmax, lower_transpose)
from .program import Op, Program
from .engine.schedule import Scheduler
from .catalog.specs import DeviceSpec, InstanceSpec, check_lnc, get_instance
from .limits import check_program
from .lowering.stages import INPUTS, CoreContext, Dep, LoweredOp, Stage
from .engine.timeline import Timeline


def op_collective_cost(op: Op, device: DeviceSpec, costs: CostParams, lnc: int) -> CollectiveCost:
    """The cost of a collective op as the run charges it (the profiler's collective table reads
    the same figure)."""
    return collective_cost(op.get("coll"), op.get("bytes"), op.get("group"), device, costs,
                           lnc=lnc, dtype_bytes=get_dtype(op.get("dtype")).bytes)


def lower_collective(op: Op, ctx: CoreContext) -> list[Stage]:
    cost = op_collective_cost(op, ctx.device, ctx.costs, ctx.shard)
    steps = max(1, cost.steps)
    dur = np.full(steps, cost.seconds / steps)
    # the timeline is one physical core's: it moves its 1/shard of the rank's bytes (the other
    # cores of the logical core move the rest), which Run.metrics scales back to the rank
    moved = np.full(steps, cost.bytes_moved / ctx.shard / steps)
    share = collective_dma_share(2 * cost.bytes_moved / ctx.shard, cost.seconds, ctx)
    return [Stage(L_CC, OP[op.get("coll").upper()], dur, (Dep(INPUTS),),
                  ctx.costs.semaphore_latency_s, queue=Q_CC, hbm_r=moved, hbm_w=moved,
                  dma_share=share)]


def collective_dma_share(hbm_bytes: float, seconds: float, ctx: CoreContext) -> float:
    """Share of one physical core's DMA rate a collective's traffic takes while it runs (C4: the
    CC-cores drive the same DMA engines and HBM as compute). `hbm_bytes` is one physical
    core's part of the rank's traffic (each byte read from and written to HBM: the 2 x
    bytes_moved / shard the timeline counts), at the collective's average rate."""
    if seconds <= 0.0 or ctx.dma_bw <= 0.0:
        return 0.0
    return hbm_bytes / seconds / ctx.dma_bw


LOWERING = {
    "matmul": lower_matmul, "activation": lower_activation, "binary": lower_binary,
    "cast": lower_cast, "reduce": lower_reduce, "softmax": lower_softmax, "layernorm": lower_norm,
    "rmsnorm": lower_norm, "transpose": lower_transpose, "embedding": lower_embedding,
    "im2col": lower_im2col, "dma": lower_dma, "collective": lower_collective,
    "attention": lower_attention,
}


@dataclass(slots=True)
class Lowerer:
    """Lowers ops for one core context; identical ops (same kind and parameters) are lowered once."""
    ctx: CoreContext
    cache: dict = field(default_factory=dict)

    def __call__(self, index: int, op: Op) -> LoweredOp:
        stages = self.cache.get(op.key)
        if stages is None:
            stages = LOWERING[op.kind](op, self.ctx)
            share = op.get("model_share", 1.0)
            if share != 1.0:      # padding or replicated work: the chip's FLOPs, not the model's
                stages = [replace(s, flops=s.flops * share, adj_flops=s.adj_flops * share)
                          for s in stages]
            self.cache[op.key] = stages
        return LoweredOp(index, op.name, op.kind, op.phase, op.deps or (), stages)


@dataclass(frozen=True, slots=True)
class Run:
    """One execution of a program on one logical core (timeline of its first physical core)."""
    timeline: Timeline
    device: DeviceSpec
    lnc: int
    costs: CostParams

    @property
    def latency(self) -> float:
        """Execution latency as the runtime sees it: device time plus launch overhead."""
        return self.timeline.wall + self.costs.exec_overhead_s

    def metrics(self) -> dict:
        """Neuron-profiler-style metrics (P1) for this run; ratios 0..1."""
        tl, dev = self.timeline, self.device
        t = max(tl.wall, 1e-15)
        peak = 2.0 * dev.pe_rows * dev.pe_cols * dev.tensor_hz      # BF16 ops/s, one core
        active = tl.engine_active()
        active["dma"] = tl.dma_ring_active()    # collectives move their data on DMA rings too
        hbm = (tl.total("hbm_r") + tl.total("hbm_w")) * self.lnc
        return {
            "time_s": tl.wall,
            "latency_s": self.latency,
            "mfu": tl.total("adj_flops") / (peak * t),
            "hfu": tl.total("adj_hw_flops") / (peak * t),
            "mbu": hbm / t / dev.hbm_bw_per_stack,
            "model_flops": tl.total("flops") * self.lnc,
            "hardware_flops": tl.total("hw_flops") * self.lnc,
            "hbm_read_bytes": tl.total("hbm_r") * self.lnc,
            "hbm_write_bytes": tl.total("hbm_w") * self.lnc,
            "engine_active": {e: min(1.0, active[e] / t) for e in (*COMPUTE_ENGINES, "dma")},
            "collective_active": min(1.0, active["collective"] / t),
            "instructions": len(tl),
        }


@dataclass(frozen=True, slots=True)
class Instance:
    spec: InstanceSpec
    lnc: int
    costs: CostParams = DEFAULT_COSTS

    @property
    def device(self) -> DeviceSpec:
        return self.spec.device

    @property
    def logical_cores(self) -> int:
        return self.spec.logical_cores(self.lnc)

    def context(self, busy_cores_per_stack: int | None = None) -> CoreContext:
        """A physical core's view: its DMA rate is capped by its share of one HBM stack."""
        dev = self.device
        sharers = busy_cores_per_stack or (dev.cores_per_stack if self.lnc > 1 else 1)
        bw = min(dev.dma_bw_per_core, dev.hbm_bw_per_stack / max(1, sharers))
        return CoreContext(dev, self.costs, shard=self.lnc, dma_bw=bw)

    def run(self, program: Program, *, busy_cores_per_stack: int | None = None,
            t0: float = 0.0) -> Run:
        check_program(program.ops)  # refuse up front what would exhaust the machine (limits.py)
        lower = Lowerer(self.context(busy_cores_per_stack))
        lowered = [lower(i, op) for i, op in enumerate(program.ops)]
        sched = Scheduler(self.costs, t0=t0)
        sched.run(lowered)
        return Run(Timeline.from_scheduler(sched, program.ops), self.device, self.lnc, self.costs)


def instance(name: str, lnc: int | None = None, *, costs: CostParams = DEFAULT_COSTS,
             spec: InstanceSpec | None = None) -> Instance:
    spec = spec or get_instance(name)
    lnc = spec.device.default_lnc if lnc is None else lnc
    check_lnc(spec, lnc)
    return Instance(spec, lnc, costs)
