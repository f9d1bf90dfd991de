"""Workloads the chip model can run, by name: `REGISTRY[name]` with its option schema."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ..catalog.specs import INSTANCES, ULTRASERVER_OF
from ..core import Instance
from ..errors import SpecError, unknown_name
from . import micro
from .mlp import MLP_PARAMS, estimate_mlp
from .estimate_model import MODEL_PARAMS, Execution, StepPlan, build_model_step, estimate_model
from .presets import PRESETS
from .spec import Param, bind, split_spec
from .steps import (MLP_STEP_HELP, MLP_STEP_PARAMS, Capture, CaptureStep, collective_step,
                    from_step_plan, matmul_step, mlp_step)


@dataclass(frozen=True, slots=True)
class Placement:
    """How a job is spread: logical cores (None: all of `nodes` instances; microbenchmarks: 1),
    instances, and parallelism degrees (None: derived from the others)."""
    cores: int | None = None
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
    build: Callable[[Instance, dict[str, Any], Placement], StepPlan] | None = None
    capture: Capture | None = None          # how the profiler captures a step of it


REGISTRY: dict[str, Workload] = {}


def register(workload: Workload) -> Workload:
    REGISTRY[workload.name] = workload
    return workload


def _micro_placement(name: str, pl: Placement, *, cores: bool, nodes: bool) -> Placement:
    """A microbenchmark's placement: its own options place it, so parallel degrees (and
    `--cores`/`--nodes` where they mean nothing to it) are refused, not ignored."""
    flags = (("--tp", pl.tp, False), ("--pp", pl.pp, False), ("--dp", pl.dp, False),
             ("--cores", pl.cores, cores), ("--nodes", pl.nodes if pl.nodes != 1 else None, nodes))
    given = [flag for flag, value, allowed in flags if value is not None and not allowed]
    if given:
        where = "ranks= places its ranks" if not cores else "it runs on --cores logical cores"
        raise SpecError(f"{name} takes no {'/'.join(given)}: {where}")
    return pl


register(Workload("matmul", micro.MATMUL_PARAMS,
                  lambda inst, o, pl: micro.estimate_matmul(
                      inst, o, _micro_placement("matmul", pl, cores=True, nodes=False).cores or 1),
                  "one [m,k] @ [k,n] matmul on a logical core",
                  capture=Capture(micro.MATMUL_PARAMS, matmul_step, "one [m,k] @ [k,n] matmul",
                                  single_rank=True)))
for _spec_name, _kind in micro.COLLECTIVE_KINDS.items():
    register(Workload(_spec_name, micro.COLLECTIVE_PARAMS,
                      lambda inst, o, pl, _k=_kind, _n=_spec_name: micro.estimate_collective(
                          inst, _k, o, _micro_placement(_n, pl, cores=False, nodes=True).nodes),
                      f"one {_kind.replace('_', '-')} over ranks placed on the instance",
                      capture=Capture(micro.COLLECTIVE_PARAMS, collective_step(_kind),
                                      f"one {_kind.replace('_', '-')}", single_rank=True)))

# the captured MLP is a training step with explicit TP/PP/DP collectives, with options of its own
register(Workload("mlp", MLP_PARAMS, estimate_mlp,
                  "blocks of fc1, GELU, fc2: mode=train|infer, data parallel over --cores",
                  capture=Capture(MLP_STEP_PARAMS, mlp_step, MLP_STEP_HELP)))
for _name, _cfg in PRESETS.items():
    _modes = "train|infer|prefill" if _cfg.family == "bert" else "train|prefill|decode|infer"
    _help = f"{_cfg.family} model, {_cfg.params() / 1e9:.3g}B parameters: mode={_modes}"
    _build = (lambda inst, o, pl, _c=_cfg, _n=_name: build_model_step(_n, _c, inst, o, pl))
    register(Workload(
        _name, MODEL_PARAMS,
        lambda inst, o, pl, _c=_cfg: estimate_model(_c, inst, o, pl),
        _help, _build,
        capture=Capture(MODEL_PARAMS, lambda inst, o, pl, _b=_build: from_step_plan(_b(inst, o, pl)), _help)))


def resolve(spec: str) -> tuple[Workload, dict[str, Any]]:
    name, raw = split_spec(spec)
    workload = REGISTRY.get(name)
    if workload is None:
        raise unknown_name("workload", name, sorted(REGISTRY))
    return workload, bind(name, raw, workload.params)


def estimate(spec: str, inst: Instance, placement: Placement = Placement()) -> dict:
    workload, opts = resolve(spec)
    result = workload.estimate(inst, opts, placement)
    whole = ULTRASERVER_OF.get(inst.spec.name)
    if whole and result.get("nodes", placement.nodes) > 1:
        servers = INSTANCES[whole].nodes
        result["warnings"] = [*result.get("warnings", ()), (
            f"{inst.spec.name} servers are joined here by EFA, as separate instances; the "
            f"{servers} of one UltraServer share NeuronLink: -i {whole} models them as one")]
    return {"workload": spec, "instance": inst.spec.name, "lnc": inst.lnc, **result,
            "mbu_ceiling": inst.device.mbu_ceiling(inst.lnc)}


def build_step(spec: str, inst: Instance, placement: Placement = Placement()) -> StepPlan:
    """The programs of one step (per pipeline stage, one representative rank) and how many
    executions, sequences and tokens a step is. SpecError for workloads without programs."""
    workload, opts = resolve(spec)
    if workload.build is None:
        raise SpecError(f"workload {workload.name!r} has no step programs; models do: "
                        f"{', '.join(PRESETS)}")
    return workload.build(inst, opts, placement)


__all__ = ["REGISTRY", "Capture", "CaptureStep", "Execution", "Placement", "StepPlan", "Workload",
           "build_step", "estimate", "register", "resolve"]
