"""Run a program on the chip model and reduce it to what a step estimate adds up: critical-path
time split into compute, DMA and collectives, engine busy time, FLOPs and HBM bytes.

Costs are additive (`+`) and scale (`*`), so one simulated layer stands for all identical ones.
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace

import numpy as np

from ..core import Instance
from ..engine.isa import COMPUTE_ENGINES, E_CC, E_DMA, ENGINES
from ..program import Program

_N_ENGINES = len(ENGINES)
_COMPUTE = [ENGINES.index(e) for e in COMPUTE_ENGINES]


@dataclass(frozen=True, slots=True)
class Cost:
    """Seconds, FLOPs and bytes of one logical core. `compute + dma + collective == time`."""
    time: float = 0.0
    compute: float = 0.0          # critical-path time in ops bound by a compute engine
    dma: float = 0.0              # ... in ops bound by their DMA transfers
    collective: float = 0.0       # ... waiting on collectives
    tensor: float = 0.0           # busy seconds per engine
    vector: float = 0.0
    scalar: float = 0.0
    gpsimd: float = 0.0
    dma_active: float = 0.0
    collective_active: float = 0.0
    model_flops: float = 0.0      # BF16-normalised model FLOPs, recompute excluded (P1 MFU)
    hardware_flops: float = 0.0   # BF16-normalised hardware FLOPs incl. recompute, transposes
    raw_flops: float = 0.0        # model FLOPs as executed (not normalised), recompute excluded
    hbm_bytes: float = 0.0
    instructions: float = 0.0

    def __add__(self, other: "Cost") -> "Cost":
        return Cost(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(Cost)))

    def __mul__(self, k: float) -> "Cost":
        return Cost(*(getattr(self, f.name) * k for f in fields(Cost)))

    __rmul__ = __mul__

    def split_as(self, split: "Split") -> "Cost":
        """This cost with its time divided into compute, DMA and collectives as `split` is."""
        total = split.compute + split.dma + split.collective
        if total <= 0:
            return replace(self, compute=self.time, dma=0.0, collective=0.0)
        k = self.time / total
        return replace(self, compute=split.compute * k, dma=split.dma * k,
                       collective=split.collective * k)

    def engine_seconds(self) -> dict[str, float]:
        return {"tensor": self.tensor, "vector": self.vector, "scalar": self.scalar,
                "gpsimd": self.gpsimd, "dma": self.dma_active}


ZERO = Cost()


@dataclass(frozen=True, slots=True)
class Split:
    """Critical-path seconds of some ops of a program, by what bound them."""
    compute: float = 0.0
    dma: float = 0.0
    collective: float = 0.0


def measure(inst: Instance, program: Program, busy_cores_per_stack: int | None = None) -> Cost:
    """Simulate `program` once on one logical core and attribute its critical path."""
    return _measure(inst, program, busy_cores_per_stack, "")[0]


def measure_part(inst: Instance, program: Program, prefix: str) -> tuple[Cost, Split]:
    """`measure`, and how the critical path of the ops named `prefix`... splits (one run)."""
    return _measure(inst, program, None, prefix)


def _measure(inst: Instance, program: Program, busy_cores_per_stack: int | None,
             prefix: str) -> tuple[Cost, Split]:
    if not program.ops:
        return ZERO, Split()
    run = inst.run(program, busy_cores_per_stack=busy_cores_per_stack)
    tl, m = run.timeline, run.metrics()
    wall = tl.wall
    n_ops = len(tl.op_names)
    ends = tl.op_end - tl.t0
    reach = np.maximum.accumulate(np.concatenate([[0.0], ends[:-1]]))
    increment = np.maximum(0.0, ends - reach)
    if increment.sum() > 0:
        increment *= wall / increment.sum()
    cols = tl.columns
    busy = np.bincount(cols["op"].astype(np.int64) * _N_ENGINES + tl.engine_of_rows(),
                       weights=cols["end"] - cols["start"], minlength=n_ops * _N_ENGINES)
    busy = busy.reshape(n_ops, _N_ENGINES)
    is_coll = np.array([k == "collective" for k in tl.op_kinds]) | (busy[:, E_CC] > 0)
    is_dma = ~is_coll & (busy[:, E_DMA] > busy[:, _COMPUTE].max(axis=1))
    per_op = tl.per_op()
    counted = np.array([not n.startswith("recompute.") for n in tl.op_names])
    lnc = inst.lnc
    active = m["engine_active"]
    kinds = (~is_coll & ~is_dma, is_dma, is_coll)
    whole = [float(increment[k].sum()) for k in kinds]
    mine = np.array([n.startswith(prefix) for n in tl.op_names]) if prefix else None
    part = Split(*(float(increment[k & mine].sum()) for k in kinds)) if prefix else Split(*whole)
    return Cost(
        time=wall,
        compute=whole[0], dma=whole[1], collective=whole[2],
        tensor=active["tensor"] * wall, vector=active["vector"] * wall,
        scalar=active["scalar"] * wall, gpsimd=active["gpsimd"] * wall,
        dma_active=active["dma"] * wall, collective_active=m["collective_active"] * wall,
        model_flops=float(per_op["adj_flops"][counted].sum()) * lnc,
        hardware_flops=float(per_op["adj_hw_flops"].sum()) * lnc,
        raw_flops=float(per_op["flops"][counted].sum()) * lnc,
        hbm_bytes=(m["hbm_read_bytes"] + m["hbm_write_bytes"]),
        instructions=float(m["instructions"]),
    ), part
