"""How far to trust one figure of an estimate: the error of the published rows of the same kind.

A kind is the chip generation and the figure (time to first token on Trainium1, training
throughput on Trainium2, ...). `neuron-sim estimate` states, for each figure it prints, the
median and worst |error| of the validation rows of that kind (calibration and held-out alike),
or that no published row of that kind exists: one overall median would hide that long-prompt
prefill on Trainium1 is off by up to two thirds while decode is within a few percent. For the
same reason the time to first token is two figures, by the prompt's length: short prompts are
within a few percent, long ones are where the published tables disagree with the model (and
with each other, docs/fidelity.md), and one figure for both would mislead either user.
The figures are recorded (`RECORDED_KINDS`) so that an estimate does not simulate the table;
tests/test_validation.py checks that they are current.
"""
from __future__ import annotations

from dataclasses import dataclass
from statistics import median

from ..catalog.specs import get_instance
from .estimate_model import DEFAULT_PROMPT
from .presets import PRESETS
from .spec import split_spec

# the figure each validation metric is, as the estimate's text prints it
FIGURES = {"tpot_s": "time per output token",
           "sequences_per_s": "training throughput", "latency_s": "encoder latency"}
DECODER_PASS = "decoder pass latency"
MICRO_FIGURES = {"allreduce": "all-reduce time", "matmul": "matmul time"}
# the data type of those published rows (nccom-test run with -d fp32, M1's BF16 kernel): the
# same workload in another type is a figure none of them checks
PUBLISHED_DTYPES = {"allreduce": "fp32", "matmul": "bf16"}
MODE_FIGURES = {"train": ("sequences_per_s",), "prefill": ("ttft_s",),
                "decode": ("ttft_s", "tpot_s"), "infer": ("latency_s",)}
# The prompt length (tokens per sequence) that splits the time to first token in two. The
# published prompts fall at 128-256 tokens and at 1024-10000, none between, so any split from
# 257 to 1023 groups the rows alike; 512 is between. Short prompts, where the weight reads and
# the request's fixed costs are a large share of the time, meet the model within a few percent;
# long ones, whose time grows with the prompt, are where the published tables disagree.
PROMPT_SPLIT = 512


@dataclass(frozen=True, slots=True)
class KindError:
    rows: int
    median: float       # |error|, ratio
    worst: float
    calibrated: int = 0     # of the rows, those a constant was fitted on (they land close)


def generation(instance_type: str) -> str:
    """The chip an instance type carries, as the catalog names it ("trainium1")."""
    return get_instance(instance_type).device.name


def ttft_figure(prompt_tokens: int) -> str:
    """The time to first token of a prompt of this many tokens, as a kind's figure."""
    return f"TTFT, prompt {'up to' if prompt_tokens <= PROMPT_SPLIT else 'over'} {PROMPT_SPLIT}"


def figure(metric: str, workload: str) -> str:
    """What a metric of a workload is, for grouping: microbenchmarks by their workload, the
    time to first token by its prompt's length."""
    name, options = split_spec(workload)
    if metric == "time_s":
        dtype = options.get("dtype", PUBLISHED_DTYPES.get(name, "")).lower()
        if name in PUBLISHED_DTYPES and dtype != PUBLISHED_DTYPES[name]:
            return f"{MICRO_FIGURES[name]}, {dtype}"
        return MICRO_FIGURES.get(name, f"{name} time")
    if metric == "ttft_s":
        return ttft_figure(int(options.get("in", DEFAULT_PROMPT)))
    return FIGURES.get(metric, metric)


def kinds(results) -> dict[tuple[str, str], KindError]:
    """(generation, figure) -> the |error| of the validation results of that kind."""
    errors: dict[tuple[str, str], list[float]] = {}
    fitted: dict[tuple[str, str], int] = {}
    for r in results:
        key = (generation(r.row.instance), figure(r.row.metric, r.row.spec))
        errors.setdefault(key, []).append(abs(r.error))
        fitted[key] = fitted.get(key, 0) + (r.row.role == "calibration")
    return {key: KindError(len(e), median(e), max(e), fitted[key])
            for key, e in sorted(errors.items())}


# kinds() of the validation table with the default constants
RECORDED_KINDS: dict[tuple[str, str], KindError] = {
    ("trainium1", "TTFT, prompt over 512"): KindError(20, 0.32241, 0.65235, 1),
    ("trainium1", "TTFT, prompt up to 512"): KindError(15, 0.04070, 0.18997, 1),
    ("trainium1", "all-reduce time"): KindError(16, 0.06092, 0.17075, 9),
    ("trainium1", "encoder latency"): KindError(24, 0.03815, 0.14102, 1),
    ("trainium1", "matmul time"): KindError(1, 0.00709, 0.00709, 1),
    ("trainium1", "time per output token"): KindError(36, 0.03807, 0.15196, 1),
    ("trainium1", "training throughput"): KindError(15, 0.09423, 0.26016, 3),
    ("trainium2", "TTFT, prompt over 512"): KindError(2, 0.02260, 0.04354, 1),
    ("trainium2", "time per output token"): KindError(2, 0.13451, 0.25538, 1),
}


def figures_of(result: dict) -> list[str]:
    """The figures an estimate result reports: a model's by its mode, a microbenchmark's (and
    the mlp block's, which is no published model) by its workload. A figure the result lacks
    (the time per output token of a decode of one token) is not stated."""
    if "model" not in result:
        return [figure("time_s", result["workload"])]
    # the prompt's length as it runs: a 500-token prompt padded to a 4096 bucket is a 4096 one
    prompt = result.get("padded_input_tokens", result.get("input_tokens", 0))
    return [_ttft_figure(result, prompt) if m == "ttft_s" else
            _latency_figure(result) if m == "latency_s" else FIGURES[m]
            for m in MODE_FIGURES.get(result.get("mode", ""), ()) if m in result]


def _ttft_figure(result: dict, prompt: int) -> str:
    """An encoder's prompt pass is no decoder's time to first token: its kind is none."""
    cfg = PRESETS.get(result["model"]["name"])
    return ttft_figure(prompt) if cfg is None or cfg.causal else "encoder prompt pass"


def _latency_figure(result: dict) -> str:
    """An encoder's forward pass is what the encoder tables publish; a decoder's one pass over
    a sequence (`mode=infer`) is no kind they hold."""
    cfg = PRESETS.get(result["model"]["name"])
    return FIGURES["latency_s"] if cfg is None or not cfg.causal else DECODER_PASS


def trust_lines(result: dict, side: str = "") -> list[str]:
    """Under a heading, one line per figure: how far the published rows of its kind were from
    the model, or that none was published. `side` ("A", "B") names the run of a comparison."""
    chip = generation(result["instance"])
    lines = [f"  {side + ', ' if side else ''}by figure, against AWS's published "
             f"{chip.capitalize()} rows of its kind:"]
    for name in figures_of(result):
        kind = RECORDED_KINDS.get((chip, name))
        if kind is None:
            lines.append(f"    {name:<23} none published: not checked")
        else:
            rows = "1 row" if kind.rows == 1 else f"{kind.rows} rows"
            if kind.calibrated:     # a row a constant was fitted on lands close by design
                rows += f", {kind.calibrated} calibration"
            lines.append(f"    {name:<23} {error_percent(kind.median)} median, "
                         f"{error_percent(kind.worst)} worst ({rows})")
    return lines


def error_percent(ratio: float) -> str:
    """A |error| as a percentage: one decimal under 10 % (0.2 % read as "0%"), whole above."""
    percent = ratio * 100
    return f"{percent:4.1f}%" if percent < 9.95 else f"{percent:4.0f}%"
