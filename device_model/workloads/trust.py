"""How far to trust one figure of an estimate: the error of the published rows of the same kind.

A kind is the chip generation and the figure (time to first token on Trainium1, training
throughput on Trainium2, ...). `neuron-sim estimate` states, for each figure it prints, the
median and worst |error| of the validation rows of that kind (calibration and held-out alike),
or that no published row of that kind exists: one overall median would hide that long-prompt
prefill on Trainium1 is off by up to two thirds while decode is within a few percent.
The figures are recorded (`RECORDED_KINDS`) so that an estimate does not simulate the table;
tests/test_validation.py checks that they are current.
"""
from __future__ import annotations

from dataclasses import dataclass
from statistics import median

from ..catalog.specs import get_instance

# the figure each validation metric is, as the estimate's text prints it
FIGURES = {"ttft_s": "time to first token", "tpot_s": "time per output token",
           "sequences_per_s": "training throughput", "latency_s": "encoder latency"}
MICRO_FIGURES = {"allreduce": "all-reduce time", "matmul": "matmul time"}
MODE_FIGURES = {"train": ("sequences_per_s",), "prefill": ("ttft_s",),
                "decode": ("ttft_s", "tpot_s"), "infer": ("latency_s",)}


@dataclass(frozen=True, slots=True)
class KindError:
    rows: int
    median: float       # |error|, ratio
    worst: float


def generation(instance_type: str) -> str:
    """The chip an instance type carries, as the catalog names it ("trainium1")."""
    return get_instance(instance_type).device.name


def figure(metric: str, workload: str) -> str:
    """What a metric of a workload is, for grouping: microbenchmarks by their workload."""
    if metric == "time_s":
        name = workload.split(":", 1)[0]
        return MICRO_FIGURES.get(name, f"{name} time")
    return FIGURES.get(metric, metric)


def kinds(results) -> dict[tuple[str, str], KindError]:
    """(generation, figure) -> the |error| of the validation results of that kind."""
    errors: dict[tuple[str, str], list[float]] = {}
    for r in results:
        key = (generation(r.row.instance), figure(r.row.metric, r.row.spec))
        errors.setdefault(key, []).append(abs(r.error))
    return {key: KindError(len(e), median(e), max(e)) for key, e in sorted(errors.items())}


# kinds() of the validation table with the default constants
RECORDED_KINDS: dict[tuple[str, str], KindError] = {
    ("trainium1", "all-reduce time"): KindError(16, 0.0708, 0.1708),
    ("trainium1", "encoder latency"): KindError(25, 0.0386, 0.1410),
    ("trainium1", "matmul time"): KindError(1, 0.0071, 0.0071),
    ("trainium1", "time per output token"): KindError(37, 0.0384, 0.1520),
    ("trainium1", "time to first token"): KindError(36, 0.1954, 0.6524),
    ("trainium1", "training throughput"): KindError(15, 0.0942, 0.2602),
    ("trainium2", "time per output token"): KindError(2, 0.1392, 0.2591),
    ("trainium2", "time to first token"): KindError(2, 0.0017, 0.0023),
}


def figures_of(result: dict) -> list[str]:
    """The figures an estimate result reports: a model's by its mode, a microbenchmark's (and
    the mlp block's, which is no published model) by its workload."""
    if "model" not in result:
        return [figure("time_s", result.get("workload", ""))]
    return [FIGURES[m] for m in MODE_FIGURES.get(result.get("mode", ""), ())]


def trust_lines(result: dict) -> list[str]:
    """Under a heading, one line per figure: how far the published rows of its kind were from
    the model, or that none was published."""
    chip = generation(result["instance"])
    lines = [f"  by figure, against AWS's published {chip.capitalize()} rows of its kind:"]
    for name in figures_of(result):
        kind = RECORDED_KINDS.get((chip, name))
        if kind is None:
            lines.append(f"    {name:<22} none published: not checked")
        else:
            rows = "1 row" if kind.rows == 1 else f"{kind.rows} rows"
            lines.append(f"    {name:<22} {kind.median * 100:3.0f}% median, "
                         f"{kind.worst * 100:3.0f}% worst error ({rows})")
    return lines
