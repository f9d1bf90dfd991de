"""Text and JSON views of a profile: `summary-text`, `summary-json`, `json` (AWS's shape)."""
from __future__ import annotations

import numpy as np
import orjson

from ..model.profile import PHASES, Profile
from .ranks import rank_keys, rank_views
from .summary import OpStat, step_ranges, summarize, top_operators


def printable(text: str) -> str:
    """`text` with control characters (an escape sequence in a damaged or hostile profile's
    operator names would reach the terminal) written as Python escapes: `\\x1b`."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii")
                   for c in text)


def _fmt_value(v) -> str:
    if v is None:           # a figure only instructions give, of steps kept at operator level
        return "unavailable"
    if isinstance(v, float):
        return f"{v:.6g}"
    return printable(str(v))


def human_time(seconds: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if abs(seconds) >= scale:
            return f"{seconds / scale:.3f} {unit}"
    return f"{seconds * 1e9:.1f} ns"


def human_count(x: float, unit: str = "") -> str:
    for suffix, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.2f} {suffix}{unit}"
    return f"{x:.0f} {unit}".rstrip()


def fit_name(name: str, width: int) -> str:
    """`name` in `width` columns, cut in the middle: operator names that differ tend to differ at
    the end (`layers.3.mlp.up.dx`, `..._attention_backward`), which cutting the end would hide."""
    name = printable(name)
    if len(name) <= width:
        return name
    tail = (width - 3) // 3
    return f"{name[:width - 3 - tail]}...{name[-tail:]}"


def ops_table(stats: list[OpStat]) -> str:
    """The top-operators table: one row per operator and phase (a forward op and its backward are
    separate rows), with units on every figure."""
    head = f"{'operator':<40} {'phase':<9} {'bound':<8} {'count':>6} {'self time':>12} {'self %':>7} " \
           f"{'FLOPs':>12} {'HBM bytes':>11}"
    lines = [head, "-" * len(head)]
    for s in stats:
        lines.append(f"{fit_name(s.name, 40):<40} {s.phase:<9} {s.bound:<8} {s.count:>6} {human_time(s.self_time):>12} "
                     f"{100 * s.self_share:>6.1f}% {human_count(s.flops, 'FLOP'):>12} "
                     f"{human_count(s.hbm_bytes, 'B'):>11}")
    return "\n".join(lines)


def summary_text(profile: Profile, limit: int = 15) -> str:
    """One block per captured rank (figures per rank), blocks separated by a blank line."""
    views = rank_views(profile)
    if len(views) > 1:
        return "\n".join(summary_text(v, limit) for v in views)
    summary = {**rank_keys(profile), **summarize(profile)}
    lines = [f"{k} {_fmt_value(v)}" for k, v in summary.items()]
    lines += [f"note {printable(str(n))}" for n in profile.meta.get("notes", ())]      # e.g. what torch.compile hid
    covered = (f"steps {summary['summarized_steps']} of {_profiled_steps(profile)}"
               if summary["step_count"] else "no steps")
    lines += ["", f"top operators (self time over the summarised {covered})",
              ops_table(top_operators(profile, limit))]
    return "\n".join(lines) + "\n"


def _profiled_steps(profile: Profile) -> str:
    """The steps a profile holds, after `of`: `3` for steps 1 to 3, where their count is their
    last number; their numbers where it is not (`--steps 3-4` holds steps 3 and 4, not 4 of
    them): `profiled steps 3-4`."""
    numbers = sorted(set(profile.table("steps")["step"].tolist()))
    if numbers == list(range(1, len(numbers) + 1)):
        return str(len(numbers))
    return f"profiled steps {step_ranges(numbers)}"


def _stat_dict(s: OpStat) -> dict:
    return {"name": s.name, "kind": s.kind, "phase": s.phase, "count": s.count, "self_time": s.self_time,
            "total_time": s.total_time, "flops": s.flops, "hbm_bytes": s.hbm_bytes,
            "bound": s.bound, "self_time_percent": 100 * s.self_share}


def summary_json(profile: Profile, limit: int | None = 50) -> bytes:
    views = rank_views(profile)         # one summary per captured rank, like AWS's per core
    doc = {"summary": [{**rank_keys(v), **summarize(v)} for v in views],
           "top_operators": [{**rank_keys(v), **_stat_dict(s)} for v in views
                             for s in top_operators(v, limit)],
           "metadata": profile.meta}
    return orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY) + b"\n"


def json_label(row: str, lanes: list[str]) -> str:
    """AWS's name for a timeline row in its JSON and Neuron Explorer (`TensorMatrix`, `Vector`,
    `Sync`: the schema's `timeline_track` and engine names), where the web timeline and the traces
    say `TensorMatrixE`, `VectorE`; DMA queues keep their names."""
    return row[:-1] if row in lanes and row.endswith("E") else row


def profile_json(profile: Profile) -> bytes:
    """AWS's `--output-format json` shape: `summary` plus one record per instruction (timestamps
    and durations in ns, `label` the timeline track) and, beyond AWS, the operator records (also
    in ns). With several captured ranks: one summary per rank, and records carry their `rank`."""
    views = rank_views(profile)
    if len(views) == 1:
        return orjson.dumps(_profile_doc(profile), option=orjson.OPT_SERIALIZE_NUMPY) + b"\n"
    doc: dict = {"summary": [], "instruction": [], "operator": [], "metadata": profile.meta}
    for v in views:
        part = _profile_doc(v)
        doc["summary"] += [{**rank_keys(v), **s} for s in part["summary"]]
        for key in ("instruction", "operator"):
            doc[key] += [{**r, "rank": v.meta["rank"]} for r in part[key]]
    return orjson.dumps(doc, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n"


def _ns_span(rows: dict) -> tuple[np.ndarray, np.ndarray]:
    """Start and duration in integer ns, the duration as the difference of the rounded ends (so
    back-to-back records stay back to back)."""
    start = np.rint(rows["start"] * 1e9).astype(np.int64)
    return start, np.rint(rows["end"] * 1e9).astype(np.int64) - start


def int64_counts(column: np.ndarray) -> np.ndarray:
    """A float column of byte or FLOP counts as int64 (a value past int64 is clipped)."""
    whole = np.rint(np.nan_to_num(column.astype(np.float64)))
    return np.clip(whole, -2.0 ** 63, 2.0 ** 63 - 1024).astype(np.int64)


def _profile_doc(profile: Profile) -> dict:
    ins = profile.table("instructions")
    ops = profile.table("ops")
    meta = profile.meta
    opcodes = np.array(meta["opcodes"], dtype=object)
    rows, row_names = profile.timeline_rows()
    names = np.array(profile.strings, dtype=object)
    start_ns, dur_ns = _ns_span(ins)
    labels = np.array([json_label(r, meta["lane_rows"]) for r in row_names], dtype=object)
    instruction = {"timestamp": start_ns, "duration": dur_ns, "label": labels[rows].tolist(),
                   "opcode": opcodes[ins["opcode"]].tolist(),
                   "hlo_name": names[ops["name_s"][ins["op"]]].tolist() if ins["op"].size else [],
                   # counts stored as float32 columns, written as the integers they are
                   "hbm_read_bytes": int64_counts(ins["hbm_r"]),
                   "hbm_write_bytes": int64_counts(ins["hbm_w"]),
                   "flops": int64_counts(ins["flops"])}
    keys = list(instruction)
    records = [dict(zip(keys, vals)) for vals in zip(*(
        v.tolist() if isinstance(v, np.ndarray) else v for v in instruction.values()))]
    op_start, op_dur = _ns_span(ops)
    operators = [{"name": profile.strings[n], "kind": profile.strings[k], "phase": PHASES[p], "step": st,
                  "timestamp": s, "duration": d, "module": profile.strings[m]}
                 for n, k, p, st, s, d, m in zip(ops["name_s"].tolist(), ops["kind_s"].tolist(),
                                                  ops["phase"].tolist(), ops["step"].tolist(),
                                                  op_start.tolist(), op_dur.tolist(),
                                                  ops["module_s"].tolist())]
    return {"summary": [summarize(profile)], "instruction": records, "operator": operators,
            "metadata": meta}
