"""Workloads the chip model can run, by name: `REGISTRY[name]` with its option schema."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ..core import Instance
from ..errors import SpecError
from . import micro
from .spec import Param, bind, split_spec


@dataclass(frozen=True, slots=True)
class Placement:
    """How a job is spread: logical cores per replica, instances, parallelism degrees."""
    cores: int = 1
    nodes: int = 1
    tp: int | None = None
    pp: int | None = None
    dp: int | None = None


@dataclass(frozen=True, slots=True)
class Workload:
    name: str
    params: tuple[Param, ...]
    estimate: Callable[[Instance, dict[str, Any], Placement], dict]
    help: str


REGISTRY: dict[str, Workload] = {}


def register(workload: Workload) -> Workload:
    REGISTRY[workload.name] = workload
    return workload


register(Workload("matmul", micro.MATMUL_PARAMS,
                  lambda inst, o, pl: micro.estimate_matmul(inst, o, pl.cores),
                  "one [m,k] @ [k,n] matmul on a logical core"))
for _spec_name, _kind in micro.COLLECTIVE_KINDS.items():
    register(Workload(_spec_name, micro.COLLECTIVE_PARAMS,
                      lambda inst, o, pl, _k=_kind: micro.estimate_collective(inst, _k, o),
                      f"one {_kind.replace('_', '-')} over ranks placed on the instance"))


def resolve(spec: str) -> tuple[Workload, dict[str, Any]]:
    name, raw = split_spec(spec)
    workload = REGISTRY.get(name)
    if workload is None:
        raise SpecError(f"unknown workload {name!r}; allowed: {', '.join(sorted(REGISTRY))}")
    return workload, bind(name, raw, workload.params)


def estimate(spec: str, inst: Instance, placement: Placement = Placement()) -> dict:
    workload, opts = resolve(spec)
    result = workload.estimate(inst, opts, placement)
    return {"workload": spec, "instance": inst.spec.name, "lnc": inst.lnc, **result}
