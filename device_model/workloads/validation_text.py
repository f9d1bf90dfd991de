"""`neuron-sim validate` as text: the terminal table, and the Markdown tables docs/fidelity.md
carries (tests/test_fidelity_doc.py checks that the document's tables are current)."""
from __future__ import annotations

import re
import textwrap
from statistics import median

from .validation import HELD_OUT, TARGETS

MARKDOWN_HEADER = ("| id | figure | hardware | published | simulated | error | source |\n"
                   "|---|---|---|---|---|---|---|")
_SOURCE_PREFIX = "aws-neuron-sdk "


def _value(metric: str, v: float) -> str:
    if metric.endswith("per_s"):
        return f"{v:,.2f}/s"
    if v >= 1:
        return f"{v:.3f} s"
    if v >= 1e-3:
        return f"{v * 1e3:.2f} ms"
    return f"{v * 1e6:.1f} us"


def wrap_text(text: str, width: int, indent: str, subsequent: str) -> list[str]:
    """`text` in lines of `width`, broken at spaces and, inside a word wider than a line (a
    workload spec), after its commas and slashes: never inside a name or a number, so that
    a spec reads and copies whole (`lla` / `ma3.1-405b` was one)."""
    pieces = [p for p in re.split(r"(?<=[ ,/])", text) if p]
    lines, line = [], indent
    for piece in pieces:
        if len(line) + len(piece.rstrip()) > width and line.strip():
            lines.append(line.rstrip())
            line = subsequent
        line += piece
    lines.append(line.rstrip())
    # a piece wider than a line on its own (none of the table's) is cut, as it must be
    return [cut for one in lines for cut in (textwrap.wrap(one, width, subsequent_indent=subsequent)
                                             if len(one) > width else [one])]


def format_report(rep: dict, width: int = 80) -> str:
    """The table for a terminal: per row its numbers on one line, then what was measured, the
    hardware, the workload spec and the source wrapped beneath."""
    def wrap(text: str, indent: str = "     ") -> list[str]:
        return wrap_text(text, width, indent, indent + "  ")
    lines = []
    if "overrides" in rep:
        ov = rep["overrides"]
        changed = [f"{k} = {c['value']:.4g} (default {c['default']:.4g})"
                   if isinstance(c["default"], (int, float)) else f"{k} = {c['value']}"
                   for k, c in ov["costs"].items()]
        changed += [f"[device.{d}]" for d in ov["devices"]]
        changed += [f"[instance.{i}]" for i in ov["instances"]]
        lines += wrap(f"under the overrides of {ov['file']}: " + (", ".join(changed) or "none"),
                      "")
    lines.append(f"{'id':<4} {'published':>12} {'simulated':>12} {'error':>7}  role")
    for r in rep["rows"]:
        lines.append(f"{r['id']:<4} {_value(r['metric'], r['published']):>12} "
                     f"{_value(r['metric'], r['simulated']):>12} {r['error'] * 100:+6.1f}%  "
                     f"{r['role']}{' (gap)' if abs(r['error']) > TARGETS[r['role']][1] else ''}")
        lines += wrap(f"{r['figure']}: {r['hardware']}; {r['workload']}; {r['source']}")
    for key, label in (("calibration", "calibration rows"), ("held_out", "held-out rows")):
        s = rep[key]
        if s["rows"]:
            verdict = "met" if s["meets_target"] else "NOT met"
            lines.append(f"{label}: {s['rows']}, median |error| {s['median_abs_error'] * 100:.1f}%, "
                         f"worst {s['worst_abs_error'] * 100:.1f}%")
            lines.append(f"  (target: median <= {s['target_median'] * 100:.0f}%, worst <= "
                         f"{s['target_worst'] * 100:.0f}%: {verdict})")
    if rep.get("conflicts"):
        lines.append("contradicting published pairs (least worst error at the model's ratio):")
        for c in rep["conflicts"]:
            lines += wrap(f"{' / '.join(c['rows'])}: at least {c['floor'] * 100:.1f}% (the "
                          f"model: {c['worst'] * 100:.1f}%): the second "
                          f"{c['published_ratio']:.2f}x the first published, "
                          f"{c['simulated_ratio']:.2f}x modelled ({c['why']})", "  ")
    lines.append("by kind (chip and figure; rows, of them calibration; what `estimate` prints):")
    for k in rep["kinds"]:
        rows = f"{k['rows']:>3} ({k['calibration_rows']} cal.)"
        lines.append(f"  {k['chip']:<10} {k['figure']:<22} {rows:<12} median "
                     f"{k['median_abs_error'] * 100:5.1f}%  worst {k['worst_abs_error'] * 100:5.1f}%")
    lines.append("calibrated constants (overridable in an override file's [costs] table):")
    for c in rep["constants"]:
        mine = (f" (yours; {c['default']:.4g} as {c['row']} set it)" if "default" in c
                else f", set by {c['row']}")
        lines += wrap(f"{c['name']} = {c['value']:.4g}{mine}: {c['what']}", "  ")
    return "\n".join(lines)


def format_markdown(rep: dict, role: str) -> str:
    """One role's rows as a Markdown table: a row past the role's worst-error target is marked
    "(gap)"; sources drop the repository name they all share."""
    lines = [MARKDOWN_HEADER]
    for r in rep["rows"]:
        if r["role"] != role:
            continue
        gap = " (gap)" if abs(r["error"]) > TARGETS[role][1] else ""
        cells = (r["id"], r["figure"], r["hardware"], _value(r["metric"], r["published"]),
                 _value(r["metric"], r["simulated"]), f"{r['error'] * 100:+.1f}%{gap}",
                 r["source"].removeprefix(_SOURCE_PREFIX))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


KINDS_HEADER = "| kind | rows | median \\|error\\| | worst |\n|---|---|---|---|"
# the held-out rows' kinds as docs/fidelity.md groups them: (label, row-id prefixes, metric,
# batched); `None` matches either
_HELD_OUT_KINDS = (
    ("trn1 training (HT)", ("HT",), None, None),
    ("trn1 decode TPOT, batch 1 (HI, I2)", ("HI", "I2"), "tpot_s", False),
    ("trn1 decode TPOT, batch 4–8 (HD)", ("HD",), "tpot_s", True),
    ("trn1 prefill TTFT, batch 1 (HI)", ("HI",), "ttft_s", False),
    ("trn1 prefill TTFT, batch 4–8 (HD)", ("HD",), "ttft_s", True),
    ("single-core encoders, batch 1 (HE)", ("HE",), None, False),
    ("single-core encoders, batch 4–16 (HE)", ("HE",), None, True),
    ("trn2 LNC=2 TP64 (HJ)", ("HJ",), None, None),
    ("multi-node all-reduce (HC)", ("HC",), None, None),
)


def _batched(workload: str) -> bool:
    found = re.search(r"batch=(\d+)", workload)
    return bool(found) and int(found.group(1)) > 1


def format_markdown_kinds(rep: dict) -> str:
    """The held-out rows by kind: rows, median and worst |error| of each group."""
    lines = [KINDS_HEADER]
    held = [r for r in rep["rows"] if r["role"] == HELD_OUT]
    for label, prefixes, metric, batched in _HELD_OUT_KINDS:
        errors = [abs(r["error"]) for r in held
                  if r["id"].startswith(prefixes)
                  and metric in (None, r["metric"])
                  and batched in (None, _batched(r["workload"]))]
        if errors:
            lines.append(f"| {label} | {len(errors)} | {median(errors) * 100:.1f}% | "
                         f"{max(errors) * 100:.1f}% |")
    return "\n".join(lines)


TRUST_HEADER = ("| chip | figure | rows | median \\|error\\| | worst |\n"
                "|---|---|---|---|---|")


def format_markdown_trust(rep: dict) -> str:
    """Every row by kind (chip and figure, both roles): the error `estimate` prints beside each
    figure it gives."""
    lines = [TRUST_HEADER]
    for k in rep["kinds"]:
        lines.append(f"| {k['chip'].capitalize()} | {k['figure']} | {k['rows']} | "
                     f"{k['median_abs_error'] * 100:.1f}% | {k['worst_abs_error'] * 100:.1f}% |")
    return "\n".join(lines)


def format_markdown_report(rep: dict) -> str:
    """Both roles' tables, each under a heading with its row count, median and worst, and the
    held-out rows by kind."""
    parts = []
    for key, role, label in (("calibration", "calibration", "Calibration rows"),
                             ("held_out", "held-out", "Held-out rows")):
        s = rep[key]
        if s["rows"]:
            parts.append(f"### {label} ({s['rows']}): median |error| "
                         f"{s['median_abs_error'] * 100:.1f}%, worst "
                         f"{s['worst_abs_error'] * 100:.1f}%\n\n" + format_markdown(rep, role))
    if rep["held_out"]["rows"]:
        parts.append("### Held-out rows by kind\n\n" + format_markdown_kinds(rep))
    parts.append("### Every row by kind, as `estimate` states it\n\n" + format_markdown_trust(rep))
    return "\n\n".join(parts)
