"""Human output of model estimates, and `--vs` what-if comparisons (two runs side by side)."""
from __future__ import annotations

import argparse
import math
import re
from typing import Any, Callable

from ..catalog.specs import DEFAULT_INSTANCE, INSTANCES
from ..errors import SpecError, did_you_mean
from ..runtime.layout import ENGINES
from .estimate_model import DEFAULT_MODE, options_left_for
from .presets import PRESETS
from .spec import split_spec

GiB = 1 << 30
BREAKDOWN = ("compute_s", "dma_s", "collective_exposed_s", "bubble_s", "optimizer_s", "overhead_s",
             "collective_hidden_s")
_BREAKDOWN_LABELS = {k.removesuffix("_s").replace("_", " ") for k in BREAKDOWN}
# the rows of _PER_STEP's figures (below): no ratio between steps of different kinds
_PER_STEP_LABELS = _BREAKDOWN_LABELS | {"step time", "tokens/s", "sequences/s"}
_PLACEMENT_KEYS = {"instance": str, "nodes": int, "lnc": int, "tp": int, "pp": int, "dp": int,
                   "cores": int}


_VS_MAX = {"nodes": 4096, "lnc": 8}   # as the command line's own limits
# what a placement key left empty (`--vs tp=`) gives B: the command line's default
_PLACEMENT_UNSET = {"instance": DEFAULT_INSTANCE, "nodes": 1, "lnc": None, "tp": None,
                    "pp": None, "dp": None, "cores": None}


def apply_vs(args: argparse.Namespace, text: str) -> argparse.Namespace:
    """A copy of the CLI arguments with `KEY=VALUE[,...]` applied: placement keys replace
    options, any other key replaces (or adds) a workload option."""
    new = argparse.Namespace(**vars(args))
    name, opts = split_spec(args.workload)
    given = dict(opts)              # A's own, as it wrote them
    # `KEY=` with no value leaves A's option out of B (B takes its default)
    pieces = [p.strip() for p in text.split(",") if p.strip()]
    empty = [p for p in pieces if p.endswith("=") and p.count("=") == 1 and len(p) > 1]
    unset = [p[:-1].strip() for p in empty]
    _, changes = split_spec("vs:" + ",".join(p for p in pieces if p not in empty))
    if not changes and not unset:
        raise SpecError(f"--vs {text!r}: expected KEY=VALUE[,...]")
    for key in unset:
        if key in _PLACEMENT_UNSET:       # B takes the command line's default: --vs tp=
            setattr(new, key, _PLACEMENT_UNSET[key])
            if key == "instance":
                new.lnc = None
            continue
        if key not in opts:
            raise SpecError(f"--vs {key}=: A's workload gives no {key!r} to leave out")
        del opts[key]
    new.vs_note = ""
    for key, value in changes.items():
        if key in _PLACEMENT_KEYS:
            if _PLACEMENT_KEYS[key] is int:
                if not (value.isascii() and value.isdigit()) or not 1 <= int(value) <= _VS_MAX.get(key, 1 << 20):
                    raise SpecError(f"--vs {key}={value!r}: expected a positive integer, at most "
                                    f"{_VS_MAX.get(key, 1 << 20):,}")
                value = int(value)
            setattr(new, key, value)
            if key == "instance" and "lnc" not in changes:
                new.lnc = None            # the other device's default
        else:
            hint = did_you_mean(key, _PLACEMENT_KEYS)   # tpp=4: a placement key mistyped
            if hint:
                raise SpecError(f"--vs: unknown key {key!r}; {hint}--vs takes the placement keys "
                                f"({', '.join(_PLACEMENT_KEYS)}) and the workload's options")
            opts[key] = value
    if ("mode" in changes or "mode" in unset) and name in PRESETS:
        # A's options of its own mode that B's does not take (a decode's `out` beside its
        # prompt's pass): B runs without them, and the comparison says so; `--vs mode=` is a
        # change to the default mode
        mode = changes.get("mode") or DEFAULT_MODE
        kept, dropped = options_left_for(mode, {k: v for k, v in opts.items()
                                                if k not in changes})
        opts = {k: v for k, v in opts.items() if k in kept or k in changes}
        if dropped:
            new.vs_note = (f"{', '.join(f'{k}={given[k]}' for k in dropped)} left out: "
                           f"mode={mode} takes no {' or '.join(dropped)}")
    new.workload = name + (":" + ",".join(f"{k}={v}" for k, v in opts.items()) if opts else "")
    new.vs = None
    return new


def _pct(x: float) -> str:
    return f"{x * 100:.1f}%"


def _per_s(places: int) -> Callable[[float], str]:
    """A rate with `places` decimals, and where it is under one, with the decimals that keep
    three significant digits: a 405B request's 0.0017 sequences/s is not "0.00"."""
    def fmt(v: float) -> str:
        if abs(v) >= 1000:       # a thousand tokens/s: its tenths are noise ("1,381,055.8")
            return f"{v:,.0f}"
        if v == 0 or abs(v) >= 1 or not math.isfinite(v):
            return f"{v:,.{places}f}"
        return f"{v:.{min(max(places, 2 - math.floor(math.log10(abs(v)))), 12)}f}"
    return fmt


def time_text(s: float) -> str:
    if s >= 365.25 * 86400:         # a huge global batch's step: "36308156287.567 s" before
        return f"{s / (365.25 * 86400):,.1f} years"
    if s >= 2 * 86400:
        return f"{s / 86400:,.1f} days"
    if s >= 2 * 3600:
        return f"{s / 3600:.1f} h"
    if s >= 1:
        return f"{s:.3f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.2f} ms"
    return f"{s * 1e6:.1f} us"


def _parallel(r: dict) -> str:
    p = r["parallel"]
    links = ", ".join(f"{k.upper()} {p[k.lower() + '_link']}" for k in ("TP", "PP", "DP")
                      if p.get(k.lower() + "_link"))
    # inference splits only the prompt's sequence: a decode step has one token
    sp = "SP" if r["mode"] == "train" else "SP in the prompt"
    extra = [x for x, on in ((sp, p.get("sp")), ("ZeRO-1", p.get("zero1"))) if on]
    if p.get("ckpt") and p["ckpt"] != "none":
        extra.append(f"{p['ckpt']} checkpointing")
    if p.get("attention") == "unfused":
        extra.append("unfused attention" + (" (fused softmax)" if p.get("softmax") == "fused"
                                            else ""))
    if p.get("cc_tiles", 1) > 1:
        extra.append(f"prompt collectives pipelined in {p['cc_tiles']} tiles")
    if p.get("dp_overlap") is False:
        extra.append("gradients reduced after the backward")
    if "microbatches" in p:
        n = p["microbatches"]
        extra.append(f"{n:,} micro-batch{'es' if n != 1 else ''}")
    ranks = f"{p['ranks']} rank" + ("s" if p["ranks"] != 1 else "")
    return (f"TP{p['tp']} PP{p['pp']} DP{p['dp']} ({ranks}{'; ' + links if links else ''})"
            + ("; " + ", ".join(extra) if extra else ""))


Row = tuple[str, Callable[[dict], Any], Callable[[Any], str]]


def _mean_differs(r: dict) -> bool:
    """Whether a decode's mean time per output token prints apart from its median's."""
    return "tpot_s" in r and time_text(r.get("tpot_mean_s", r["tpot_s"])) != time_text(r["tpot_s"])


def _rows(r: dict, *others: dict) -> list[Row]:
    """The report's rows for `r`, and for the results set beside it (`others`) in a comparison."""
    rows: list[Row] = [("parallel", _parallel, str)]
    if any(x.get("padded_input_tokens", 0) > x.get("input_tokens", 0) for x in (r, *others)):
        # the bucket the prompt (or sequence) pads to: its time, not the prompt's own length
        rows += [("compiled length", lambda r: r["padded_input_tokens"],
                  lambda v: f"{v:,} tokens")]
    if r["mode"] in ("train", "infer"):
        rows += [("latency", lambda r: r["latency_s"], time_text)] if "latency_s" in r else []
        # a training step's global batch: a placement changed under --vs changes it (mbs x dp
        # by default), and a step time read without it compares unequal work
        rows += [("sequences/step", lambda r: r["gbs"], lambda v: f"{v:,}")] \
            if all("gbs" in x for x in (r, *others)) else []
        rows += [("step time", lambda r: r["step_time_s"], time_text),
                 ("sequences/s", lambda r: r["sequences_per_s"], _per_s(2)),
                 ("samples/s", lambda r: r["samples_per_s"], _per_s(0)),
                 ("tokens/s", lambda r: r["tokens_per_s"], _per_s(0))]
    else:
        rows += [("TTFT", lambda r: r["ttft_s"], time_text)]
        if "tpot_s" in r:
            # the median token's time (what latency tables quote); the mean where buckets part them
            if not any(_mean_differs(x) for x in (r, *others)):
                rows += [("time/output token", lambda r: r["tpot_s"], time_text)]
            else:
                rows += [("time/output token", lambda r: r["tpot_s"], lambda v: time_text(v) + " p50"),
                         ("  mean", lambda r: r["tpot_mean_s"], time_text)]
            # a request's whole time, its prefill included: beside the decode rate below, which
            # leaves the prefill out (a long prompt's TTFT can be most of a request)
            rows += [("e2e latency", lambda r: r["e2e_latency_s"], time_text),
                     ("sequences/s", lambda r: r["sequences_per_s"], _per_s(2))]
            rows += [("tokens/s (decode)", lambda r: r["tokens_per_s"], _per_s(1))]
        else:
            # one pass over the prompt: a decode of one token is a request that ends with it
            rows += [("e2e latency", lambda r: r["e2e_latency_s"], time_text)] \
                if "e2e_latency_s" in r else []
            # a decode's tokens/s counts the tokens it generates, a prompt's those it reads
            rows += [("sequences/s", lambda r: r["sequences_per_s"], _per_s(2)),
                     ("tokens/s (decode)" if r["mode"] == "decode" else "tokens/s",
                      lambda r: r["tokens_per_s"], _per_s(1))]
    rows += [(k.upper(), lambda r, k=k: r[k], _pct) for k in ("mfu", "hfu", "mbu")]
    if any(x.get("mbu_ceiling", 1.0) < 1.0 for x in (r, *others)):
        # MBU is of one HBM stack, as neuron-profile has it: the most this core can reach
        rows += [("MBU ceiling", lambda r: r.get("mbu_ceiling", 1.0), _pct)]
    rows += [(f"{e} active", lambda r, e=e: r["engine_active"][e], _pct) for e in ENGINES]
    # a pipeline's bubble and an optimizer step are training's: inference shows neither
    training = any(x.get("mode") == "train" for x in (r, *others))
    rows += [(k.removesuffix("_s").replace("_", " "), lambda r, k=k: r["breakdown"][k], time_text)
             for k in BREAKDOWN if training or k not in ("bubble_s", "optimizer_s")]
    rows += [("memory/core", lambda r: r["memory"]["total_bytes"], lambda v: f"{v / GiB:.1f} GiB"),
             ("HBM/core", lambda r: r["memory"]["capacity_bytes"], lambda v: f"{v / GiB:.1f} GiB")]
    return rows


def title(r: dict) -> str:
    """`llama3-8b on 2 x trn1.32xlarge (LNC=1)`: the workload and the instances it holds; an
    UltraServer's servers and chips are said, as its "1 x" reads as one server otherwise."""
    nodes, spec = r.get("nodes", 1), INSTANCES.get(r["instance"])
    whole = (f"{spec.nodes * nodes} servers, {spec.devices * nodes} chips, "
             if spec is not None and spec.is_ultraserver else "")
    return f"{r['workload']} on {nodes} x {r['instance']} ({whole}LNC={r['lnc']})"


def format_model(r: dict) -> str:
    lines = _wrapped_title(title(r))
    for label, get, fmt in _rows(r):
        try:
            text = fmt(get(r))
        except KeyError:        # a row this workload does not report (mlp has no tokens)
            continue
        lines += under_label(label, text)
    m = r["memory"]
    parts = [f"{k} {m[k + '_bytes'] / GiB:.1f}" for k in
             ("weights", "gradients", "optimizer", "activations", "kv_cache", "reserved")
             if m[k + "_bytes"]]
    lines += under_label("memory detail", ", ".join(parts) + " GiB")
    return "\n".join(lines + _flops_note(r))


WIDTH = 80          # the report fits an 80-column terminal
_INDENT = 23        # where a row's value starts: two spaces, a 20-column label, a space


def under_label(label: str, text: str, lead: str = "") -> list[str]:
    """A row: `label`, then `lead` and `text`, wrapped after a comma or semicolon (else at a
    space) under the value's column, so that the row fits WIDTH columns."""
    first = f"  {label:<20} {lead}"
    indent = " " * (_INDENT + len(lead))
    lines, current = [], first
    for piece in _pieces(text):
        if len(current) + len(piece) > WIDTH and current not in (first, indent):
            lines.append(current.rstrip())
            current = indent
        current += piece + " "
    lines.append(current.rstrip())
    return lines


def _pieces(text: str) -> list[str]:
    """`text` cut after each ", " or "; " (a piece keeps its punctuation); a piece still wider
    than a row's value is cut at its spaces."""
    pieces = re.split(r"(?<=[,;]) ", text)
    room = WIDTH - _INDENT
    return [word for piece in pieces for word in ([piece] if len(piece) <= room else piece.split(" "))]


def _wrapped_title(text: str) -> list[str]:
    """The title, its " on <instance>" part on a line of its own if the whole is too wide, and
    a workload spec still wider than a line cut after its commas (and a bucket list wider than
    a line after its slashes)."""
    head, sep, tail = text.rpartition(" on ")
    if len(text) <= WIDTH or not sep:
        return [text]
    lines, current = [], ""
    pieces = [cut for piece in re.split(r"(?<=,)", head)
              for cut in ([piece] if len(piece) <= WIDTH - 4 else re.split(r"(?<=/)", piece))]
    for piece in pieces:
        if current and len(current) + len(piece) > WIDTH:
            lines.append(current)
            current = "    "
        current += piece
    return [*lines, current, f"  on {tail}"]


# figures of one step: between a training step and an output token, no ratio to take; nor
# between sequences trained and requests served (sequences/s of a training run and a decode)
_PER_STEP = ("time_s", "step_time_s", "tokens_per_s", "sequences_per_s", "model_flops",
             "hardware_flops", "breakdown")


def ratios(a: dict, b: dict) -> dict:
    """b / a for every number both results share at the same place (top level and one deep);
    None where a is 0 (no finite ratio: infinite if b is not 0, undefined if it is). Runs whose
    steps differ (a training step, a prompt, an output token) share no per-step figure."""
    unlike = "mode" in a and "mode" in b and _step_of(a) != _step_of(b)
    # a decode's tokens are the ones it generates, a prompt's the ones it reads
    tokens_differ = ("mode" in a and "mode" in b
                     and (a["mode"] == "decode") != (b["mode"] == "decode"))
    out: dict[str, Any] = {}
    for key, va in a.items():
        if (unlike and key in _PER_STEP) or (tokens_differ and key == "tokens_per_s"):
            continue
        vb = b.get(key)
        if isinstance(va, dict) and isinstance(vb, dict):
            sub = ratios(va, vb)
            if sub:
                out[key] = sub
        elif _number(va) and _number(vb):
            out[key] = vb / va if va else None
    return out


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


NO_RATIO, INFINITE = "\u2013", "\u221e"     # "–" and "∞"


def ratio_text(va: Any, vb: Any, ta: str | None = None, tb: str | None = None) -> str:
    """B/A as "1.95x"; where A is zero "–" if B is too (nothing to compare) and "∞" if it
    is not (B has what A had none of). Given the printed figures `ta`, `tb`, a figure that
    prints as zero counts as zero: its ratio would be digits of rounding noise."""
    if not (_number(va) and _number(vb)):
        return NO_RATIO
    a_zero = not va or (ta is not None and _shows_zero(ta))
    b_zero = not vb or (tb is not None and _shows_zero(tb))
    if a_zero:
        return NO_RATIO if b_zero else INFINITE
    if b_zero:          # exactly none left: "0.00x" read as a ratio rounded to nothing
        return "0x"
    ratio = vb / va
    # two significant digits below 0.01: "0.00x" read as nothing, for a 200-fold drop
    return f"{ratio:.2f}x" if abs(ratio) >= 0.01 or not ratio else f"{ratio:.2g}x"


def _shows_zero(text: str) -> bool:
    return not any(c in "123456789" for c in text)


def _step_of(r: dict) -> str:
    """What a run's step (its breakdown's seconds) is."""
    if r["mode"] == "decode" and "tpot_s" in r:
        return "one output token"
    return {"train": "a training step", "infer": "a forward pass"}.get(r["mode"], "the prompt")


def _merged(rows_a: list[Row], rows_b: list[Row]) -> list[tuple[str, Row | None, Row | None]]:
    """The rows of A and of B by label, in A's order, a row only one side has where that side
    has it: a training step beside a decode has step time on one side and TTFT on the other,
    and their tokens/s are not the same figure."""
    of_b = {row[0]: row for row in rows_b}
    labels_a = {row[0] for row in rows_a}
    out: list[tuple[str, Row | None, Row | None]] = []
    pending = [row for row in rows_b]
    for row in rows_a:
        if row[0] in of_b:
            while pending[0][0] != row[0]:            # B's own rows that come before it
                extra = pending.pop(0)
                if extra[0] not in labels_a:
                    out.append((extra[0], None, extra))
            pending.pop(0)
        out.append((row[0], row, of_b.get(row[0])))
    return out + [(row[0], None, row) for row in pending if row[0] not in labels_a]


def _shown(r: dict, row: Row | None) -> tuple[Any, str]:
    """(value, text) of a row for one side; (None, "–") where that side has no such figure."""
    if row is None:
        return None, NO_RATIO
    try:
        value = row[1](r)
    except KeyError:
        return None, NO_RATIO
    return value, row[2](value)


def format_comparison(a: dict, b: dict) -> str:
    lines = [*_wrapped_title(f"A: {title(a)}"), *_wrapped_title(f"B: {title(b)}"),
             f"  {'':<20} {'A':>22} {'B':>22} {'B/A':>8}"]
    steps_differ = _step_of(a) != _step_of(b)
    for label, row_a, row_b in _merged(_rows(a, b), _rows(b, a)):
        (va, ta), (vb, tb) = _shown(a, row_a), _shown(b, row_b)
        if va is None and vb is None:
            continue
        if label == "parallel":
            lines += under_label(label, ta, lead="A ")
            lines += under_label("", tb, lead="B ")
            continue
        # seconds of one step against seconds of another kind of step: no ratio to take
        unlike = steps_differ and label in _PER_STEP_LABELS
        ratio = NO_RATIO if unlike or va is None or vb is None else ratio_text(va, vb, ta, tb)
        lines.append(f"  {label:<20} {ta:>22} {tb:>22} {ratio:>8}")
    if steps_differ:
        lines.append(f"  (the breakdown is of A's step, {_step_of(a)}, and of B's, {_step_of(b)})")
    return "\n".join(lines + _flops_note(a, b))


def _flops_note(*results: dict) -> list[str]:
    """MFU and HFU count FLOPs as BF16 ones, against the BF16 peak (P1's adjusted FLOPs): an
    FP8 matmul's divided by FP8's speed-up, an FP32 one's times its slow-down. Said where it
    applies, as an FP8 run's MFU can fall while its throughput rises, and an FP32 run's rise
    above a BF16 run's while its throughput falls."""
    dtypes = {r.get("matmul_dtype", r.get("dtype")) for r in results}
    notes = []
    if "fp8" in dtypes:
        notes += ["  (MFU and HFU count FP8 FLOPs divided by FP8's speed-up over BF16, against the",
                  "   BF16 peak, as AWS's profiler adjusts them: where FP8 runs faster, MFU can",
                  "   fall while throughput rises)"]
    if "fp32" in dtypes:
        notes += ["  (MFU and HFU count FP32 matmul FLOPs four times, FP32's slow-down against",
                  "   BF16, against the BF16 peak, as AWS's profiler adjusts them: FP32 matmuls",
                  "   can raise MFU while they lower throughput)"]
    return notes
