"""`neuron-profile diff A B`: per-operator and per-engine differences with ratios B/A.

Both profiles are compared over their summarised steps, per step (so a 3-step profile and a
1-step profile of the same run diff to ratios of 1). Operators match by name (or kind) and phase,
whatever phases each profile happens to hold. A profile
of several ranks counts all of them added up (`rank_summary.py`), so profiles with different
rank counts compare the work of the captured ranks per step.
"""
from __future__ import annotations

from dataclasses import dataclass

import orjson

from device_model.engine.isa import COMPUTE_ENGINES

from ..model.profile import Profile
from .render import fit_name, human_count, human_time, printable
from .rank_summary import summarize_ranks, top_operators_ranks
from .summary import ENGINE_LABEL

ENGINE_KEYS = (("total", "total_time"),
               *((ENGINE_LABEL[e], f"{e}_engine_active_time") for e in COMPUTE_ENGINES),
               ("DMA", "dma_active_time"), ("CC-core", "cc_op_active_time"))
METRIC_KEYS = ("mfu_estimated_percent", "mbu_estimated_percent", "hbm_read_bytes", "hbm_write_bytes",
               "model_flops")


@dataclass(frozen=True, slots=True)
class Row:
    name: str
    a: dict
    b: dict
    phase: str = ""         # an operator's phase (forward, backward, ...); "" for other rows

    def ratio(self, key: str) -> float | None:
        """B/A; None when A is zero (new in B, or absent from both) or either is unavailable."""
        a, b = self.a.get(key, 0.0), self.b.get(key, 0.0)
        return b / a if a and b is not None else None

    def ratio_text(self, key: str) -> str:
        if self.a.get(key, 0.0) is None or self.b.get(key, 0.0) is None:
            return "n/a"
        r = self.ratio(key)
        if r is not None:
            return f"{r:.2f}x"
        return "new" if self.b.get(key, 0.0) else "-"


@dataclass(frozen=True, slots=True)
class DiffResult:
    a_label: str
    b_label: str
    engines: list[Row]
    metrics: list[Row]
    operators: list[Row]


def _label(p: Profile) -> str:
    m = p.meta
    ranks = len(m.get("ranks") or ())
    each = f" ({ranks} ranks added up)" if ranks > 1 else ""      # never 1: one rank is not added up
    return f"{m.get('workload') or m.get('command') or m.get('source')} on {m['instance']}{each}"


def _ops(p: Profile, by: str, steps: int) -> dict[tuple[str, str], dict]:
    """Per operator (name or kind) and phase: its figures per step. The phase is part of the key
    in every profile, so an operator one profile runs in one phase and the other in two still
    matches phase for phase."""
    return {(s.name, s.phase): {"time": s.self_time / steps, "count": s.count / steps,
                                "bytes": s.hbm_bytes / steps, "flops": s.flops / steps, "bound": s.bound}
            for s in top_operators_ranks(p, None, by)}


def _per_step(value: float | None, steps: int) -> float | None:
    """A summary figure per step; None (unavailable: no instructions kept) stays None."""
    return None if value is None else value / steps


def diff_profiles(a: Profile, b: Profile, by: str = "name") -> DiffResult:
    sa, sb = summarize_ranks(a), summarize_ranks(b)
    na, nb = max(1, sa["step_count"]), max(1, sb["step_count"])
    engines = [Row(label, {"time": _per_step(sa[k], na)}, {"time": _per_step(sb[k], nb)})
               for label, k in ENGINE_KEYS]
    metrics = [Row(k, {"value": _per_step(sa[k], 1 if "percent" in k else na)},
                   {"value": _per_step(sb[k], 1 if "percent" in k else nb)}) for k in METRIC_KEYS]
    oa, ob = _ops(a, by, na), _ops(b, by, nb)
    keys = sorted(set(oa) | set(ob), key=lambda k: (-max(oa.get(k, {}).get("time", 0),
                                                         ob.get(k, {}).get("time", 0)), k))
    operators = [Row(name, oa.get((name, phase), {}), ob.get((name, phase), {}), phase)
                 for name, phase in keys]
    return DiffResult(_label(a), _label(b), engines, metrics, operators)


def count_text(count: float) -> str:
    """A count per step: whole counts as integers, others with two decimals at most (an op run
    every other step is 0.5 per step, not 0)."""
    if float(count).is_integer():
        return f"{count:.0f}"
    if abs(count) < 0.01:            # once in 300 steps: 0.003, not a bare "0."
        return f"{count:.1g}"
    return f"{count:.2f}".rstrip("0").rstrip(".")     # 1.999: "2", not "2."


def _maybe(text, value) -> str:
    """`text(value)`, or `n/a` for a figure unavailable in that profile."""
    return "n/a" if value is None else text(value)


def diff_text(d: DiffResult, limit: int = 20) -> str:
    lines = [f"A: {printable(d.a_label)}", f"B: {printable(d.b_label)}", "",
             "per step, per engine (active time)",
             f"{'engine':<10} {'A':>12} {'B':>12} {'B/A':>8}"]
    for r in d.engines:
        lines.append(f"{r.name:<10} {_maybe(human_time, r.a['time']):>12} "
                     f"{_maybe(human_time, r.b['time']):>12} {r.ratio_text('time'):>8}")
    lines += ["", f"{'metric':<24} {'A':>12} {'B':>12} {'B/A':>8}"]
    for r in d.metrics:
        text = (lambda v: f"{v:.2f}%") if "percent" in r.name else human_count
        lines.append(f"{r.name:<24} {_maybe(text, r.a['value']):>12} {_maybe(text, r.b['value']):>12} "
                     f"{r.ratio_text('value'):>8}")
    lines += ["", "per step, per operator and phase (self time, count, HBM bytes)",
              f"{'operator':<36} {'phase':<9} {'A time':>11} {'B time':>11} {'B/A':>8} {'A n':>6} "
              f"{'B n':>6} {'A bytes':>10} {'B bytes':>10}"]
    for r in d.operators[:limit]:
        lines.append(f"{fit_name(r.name, 36):<36} {r.phase:<9} {human_time(r.a.get('time', 0)):>11} "
                     f"{human_time(r.b.get('time', 0)):>11} {r.ratio_text('time'):>8} "
                     f"{count_text(r.a.get('count', 0)):>6} {count_text(r.b.get('count', 0)):>6} "
                     f"{human_count(r.a.get('bytes', 0), 'B'):>10} {human_count(r.b.get('bytes', 0), 'B'):>10}")
    return "\n".join(lines) + "\n"


def diff_json(d: DiffResult) -> bytes:
    def rows(rs: list[Row], key: str) -> list[dict]:
        return [{"name": r.name, "a": r.a, "b": r.b, "ratio": r.ratio(key)} for r in rs]
    operators = [{"name": r.name, "phase": r.phase, "a": r.a, "b": r.b, "ratio": r.ratio("time")}
                 for r in d.operators]
    doc = {"a": d.a_label, "b": d.b_label, "engines": rows(d.engines, "time"),
           "metrics": rows(d.metrics, "value"), "operators": operators}
    return orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n"
