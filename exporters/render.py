"""Families -> exposition bytes, in the 0.0.4 text format or OpenMetrics 1.0.

Both are joins of the lines `state.Series` keeps ready; only the family headers and the place
of counters' `_created` samples differ (0.0.4 moves them into a trailing `<name>_created` gauge
family, as prometheus_client does; OpenMetrics keeps them next to their `_total`).
"""
from __future__ import annotations

from collections.abc import Iterable

from exporters.state import Family
from exporters.textformat import family_header

_TEXT_TYPE = {"gauge": "gauge", "counter": "counter", "info": "gauge"}


def render_text(families: Iterable[Family]) -> list[str]:
    out: list[str] = []
    append, extend = out.append, out.extend
    for fam in families:
        spec = fam.spec
        append(family_header(spec.name, spec.help, _TEXT_TYPE[spec.kind], False))
        series = fam.series.values()
        extend([s.line for s in series])
        if spec.created and fam.series:
            append(family_header(spec.family + "_created", spec.help, "gauge", False))
            extend([s.created_line for s in series])
    return out


def render_openmetrics(families: Iterable[Family]) -> list[str]:
    out: list[str] = []
    append, extend = out.append, out.extend
    for fam in families:
        spec = fam.spec
        append(family_header(spec.family, spec.help, spec.kind, True))
        if spec.created:
            for s in fam.series.values():
                append(s.line)
                append(s.created_line)
        else:
            extend([s.line for s in fam.series.values()])
    return out


OPENMETRICS_EOF = "# EOF\n"
