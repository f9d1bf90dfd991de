"""The chip model against AWS's published measurements: one declarative table of every published
row the project ships (shared/reference/calibration.md), simulated and compared.

`role` says how a row is used: "calibration" rows set (and check) the few global constants
named in `CALIBRATED`; "held-out" rows were not looked at while tuning and show how the model
does on figures of the same kinds. error = simulated / published - 1 (so +10% means the model
reports a 10% larger figure: a longer time, or more sequences per second).
"""
from __future__ import annotations

import statistics
import textwrap
from dataclasses import dataclass, fields

from ..catalog.costs import DEFAULT_COSTS, CostParams
from ..core import Instance, instance
from . import Placement, estimate

CALIBRATION, HELD_OUT = "calibration", "held-out"
_NCCOM = "nccom-test guide, SDK 2.10"
_TRN1_TRAIN = "trn1 training performance"
_TRN1_INFER = "trn1 inference performance, SDK 2.18"


@dataclass(frozen=True, slots=True)
class Row:
    id: str
    figure: str             # what the published number is
    spec: str               # neuron-sim workload spec
    instance: str
    placement: Placement
    metric: str             # key of the estimate result
    published: float        # base units (seconds, sequences/s)
    source: str             # aws-neuron-sdk document
    role: str = CALIBRATION
    bound: float = 0.20     # |error| this row must stay within (tests/test_validation.py)
    lnc: int | None = None

    @property
    def hardware(self) -> str:
        nodes = self.placement.nodes
        where = f"{nodes} x {self.instance}" if nodes > 1 else self.instance
        par = [f"{k.upper()}{getattr(self.placement, k)}" for k in ("tp", "pp", "dp")
               if getattr(self.placement, k)]
        extra = [f"LNC={self.lnc}"] if self.lnc else []
        if self.placement.cores:
            extra.append(f"{self.placement.cores} core" + ("s" if self.placement.cores > 1 else ""))
        return " ".join([where, *par, *extra])


def _c1(size: str, seconds: float, bound: float = 0.15) -> Row:
    return Row("C1", f"all-reduce 2 ranks on one chip, {size}", f"allreduce:bytes={size},ranks=2",
               "trn1.2xlarge", Placement(), "time_s", seconds, _NCCOM, bound=bound)


def _c3(size: str, seconds: float) -> Row:
    return Row("C3", f"all-reduce 64 ranks over 2 instances, {size}",
               f"allreduce:bytes={size},ranks=64", "trn1.32xlarge", Placement(nodes=2), "time_s",
               seconds, _NCCOM + ", multi-instance example")


_I1 = "llama2-70b:mode=decode,batch=1,in=128,out=128"
_I2 = "llama2-70b:mode=decode,batch=1,in=2048,out=2048"
_J2 = ("llama3.1-405b:mode=decode,batch=1,in=10000,out=1785,bucket=10240,tkg_bucket=12800,"
       "sp=1")
_TP32 = Placement(tp=32)

ROWS: tuple[Row, ...] = (
    Row("M1", "matmul [4096,8192]@[8192,8192] BF16, one NC-v2", "matmul:m=4096,k=8192,n=8192",
        "trn1.2xlarge", Placement(), "time_s", 6.97e-3, "NKI matmul tutorial, SDK 2.20",
        bound=0.15),
    _c1("1K", 58e-6), _c1("256K", 58e-6), _c1("1M", 68e-6), _c1("16M", 332e-6),
    _c1("64M", 1214e-6), _c1("1G", 18.93e-3),
    _c3("8", 520e-6), _c3("1K", 840e-6), _c3("1G", 41.806e-3),
    Row("T9", "BERT-large phase 1 pre-training, seq 128", "bert-large:seq=128,mbs=16,gbs=16384",
        "trn1.32xlarge", Placement(dp=32), "sequences_per_s", 3826.6,
        _TRN1_TRAIN + ", SDK 2.28", bound=0.15),
    Row("T1", "Llama-3.1-8B pre-training, seq 8192", "llama3.1-8b:seq=8192,mbs=1,gbs=1024,"
        "ckpt=selective", "trn1.32xlarge", Placement(nodes=32, tp=32, pp=1, dp=32),
        "sequences_per_s", 47.95, _TRN1_TRAIN + ", SDK 2.24"),
    Row("T4", "Llama-2-7B pre-training, seq 4096", "llama2-7b:seq=4096,mbs=1,gbs=1024",
        "trn1.32xlarge", Placement(nodes=16, tp=8, pp=1, dp=64), "sequences_per_s", 95.14,
        _TRN1_TRAIN + ", SDK 2.21"),
    Row("I1", "Llama-2-70B decode 128/128, time per output token", _I1, "trn1.32xlarge", _TP32,
        "tpot_s", 25.18e-3, _TRN1_INFER, bound=0.15),
    Row("I1", "Llama-2-70B 128 in, time to first token", _I1, "trn1.32xlarge", _TP32, "ttft_s",
        53.9e-3, _TRN1_INFER),
    Row("I2", "Llama-2-70B 2048 in, time to first token", _I2, "trn1.32xlarge", _TP32, "ttft_s",
        691.0e-3, _TRN1_INFER),
    Row("I2", "Llama-2-70B decode 2048/2048, time per output token", _I2, "trn1.32xlarge",
        _TP32, "tpot_s", 26.85e-3, _TRN1_INFER, role=HELD_OUT, bound=0.25),
    Row("I10", "bert-large-uncased inference, seq 128, batch 1",
        "bert-large:mode=infer,batch=1,seq=128", "trn1.2xlarge", Placement(cores=1),
        "latency_s", 2.67e-3, "trn1 encoder inference, SDK 2.27"),
    Row("J2", "Llama-3.1-405B 10000 in, time to first token", _J2, "trn2.48xlarge",
        Placement(tp=64), "ttft_s", 2.442, "NxD Inference 405B tutorial (2024-12)", lnc=2),
    Row("J2", "Llama-3.1-405B decode, time per output token", _J2, "trn2.48xlarge",
        Placement(tp=64), "tpot_s", 37.93e-3, "NxD Inference 405B tutorial (2024-12)", lnc=2),
)

# Constants tuned on published rows (device_model/catalog/costs.py), and the row that set each.
CALIBRATED: tuple[tuple[str, str, str], ...] = (
    ("exec_overhead_s", "C1", "per-execution launch floor: C1's 58 us latency at 1 KiB"),
    ("cc_launch_s", "C1", "per-collective fixed cost: the rest of C1's floor"),
    ("cc_dma_fraction", "C1", "collective DMA rate per rank, on and off chip: C1's 1 GiB bus bandwidth"),
    ("cc_ring_slots", "C3", "flat-ring chunks in flight per EFA hop: C3's 8 B latency"),
    ("pe_efficiency_v2", "M1", "TensorE sustained issue rate on NC-v2: M1's 85.24% HFU"),
    ("cc_allreduce_fp32_fraction", "I2", "BF16 all-reduces gather FP32 partial sums: I2's TTFT"),
)


@dataclass(frozen=True, slots=True)
class Result:
    row: Row
    simulated: float

    @property
    def error(self) -> float:
        return self.simulated / self.row.published - 1.0


def _instance(row: Row, costs: CostParams, specs: dict | None) -> Instance:
    spec = (specs or {}).get(row.instance)
    return instance(row.instance, row.lnc, costs=costs, spec=spec)


def simulate(row: Row, costs: CostParams = DEFAULT_COSTS, specs: dict | None = None) -> Result:
    r = estimate(row.spec, _instance(row, costs, specs), row.placement)
    return Result(row, float(r[row.metric]))


def run_all(costs: CostParams = DEFAULT_COSTS, specs: dict | None = None,
            rows: tuple[Row, ...] = ROWS) -> list[Result]:
    return [simulate(row, costs, specs) for row in rows]


def summary(results: list[Result], role: str = CALIBRATION) -> dict:
    errs = [abs(r.error) for r in results if r.row.role == role]
    if not errs:
        return {"rows": 0, "median_abs_error": None, "worst_abs_error": None}
    return {"rows": len(errs), "median_abs_error": statistics.median(errs),
            "worst_abs_error": max(errs)}


def constants(costs: CostParams = DEFAULT_COSTS) -> list[dict]:
    known = {f.name for f in fields(CostParams)}
    return [{"name": name, "value": getattr(costs, name), "row": row, "what": what}
            for name, row, what in CALIBRATED if name in known]


def report(results: list[Result], costs: CostParams = DEFAULT_COSTS) -> dict:
    return {
        "rows": [{"id": r.row.id, "figure": r.row.figure, "workload": r.row.spec,
                  "hardware": r.row.hardware, "instance": r.row.instance, "lnc": r.row.lnc,
                  "source": r.row.source, "role": r.row.role, "metric": r.row.metric,
                  "published": r.row.published, "simulated": r.simulated, "error": r.error,
                  "bound": r.row.bound} for r in results],
        "calibration": summary(results, CALIBRATION),
        "held_out": summary(results, HELD_OUT),
        "constants": constants(costs),
    }


def _value(metric: str, v: float) -> str:
    if metric.endswith("per_s"):
        return f"{v:,.2f}/s"
    if v >= 1:
        return f"{v:.3f} s"
    if v >= 1e-3:
        return f"{v * 1e3:.2f} ms"
    return f"{v * 1e6:.1f} us"


def format_report(rep: dict, width: int = 80) -> str:
    """The table for a terminal: per row its numbers on one line, then what was measured, the
    hardware, the workload spec and the source wrapped beneath."""
    def wrap(text: str, indent: str = "     ") -> list[str]:
        return textwrap.wrap(text, width, initial_indent=indent, subsequent_indent=indent + "  ",
                             break_on_hyphens=False)
    lines = [f"{'id':<4} {'published':>12} {'simulated':>12} {'error':>7}  role"]
    for r in rep["rows"]:
        lines.append(f"{r['id']:<4} {_value(r['metric'], r['published']):>12} "
                     f"{_value(r['metric'], r['simulated']):>12} {r['error'] * 100:+6.1f}%  "
                     f"{r['role']}")
        lines += wrap(f"{r['figure']}: {r['hardware']}; {r['workload']}; {r['source']}")
    for key, label in (("calibration", "calibration rows"), ("held_out", "held-out rows")):
        s = rep[key]
        if s["rows"]:
            lines.append(f"{label}: {s['rows']}, median |error| {s['median_abs_error'] * 100:.1f}%, "
                         f"worst {s['worst_abs_error'] * 100:.1f}%")
    lines.append("calibrated constants (overridable in an override file's [costs] table):")
    for c in rep["constants"]:
        lines += wrap(f"{c['name']} = {c['value']:.4g}, set by {c['row']}: {c['what']}", "  ")
    return "\n".join(lines)


# Median |error| over every row with the default constants, recorded so that `estimate` can
# state it without simulating the table (tests/test_validation.py checks it is current).
RECORDED_MEDIAN = 0.0645

_MEDIAN_CACHE: dict[CostParams, float] = {}


def validation_median(costs: CostParams = DEFAULT_COSTS) -> float:
    """Median |error| over every published row (calibration and held-out), cached per costs."""
    if costs not in _MEDIAN_CACHE:
        _MEDIAN_CACHE[costs] = statistics.median(abs(r.error) for r in run_all(costs))
    return _MEDIAN_CACHE[costs]
