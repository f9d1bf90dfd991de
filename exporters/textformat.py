"""Building blocks of the Prometheus text formats (0.0.4 and OpenMetrics 1.0).

Everything here is written so that the output is byte-identical to prometheus_client's
`generate_latest` for the same samples: labels sorted by name, values written the way Go writes
floats, label values escaped the same way. The exposition renderer uses these pieces to build
each series' line prefix once and only format the value on every report.
"""
from __future__ import annotations

import math

TEXT_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
OPENMETRICS_CONTENT_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"

_INF = math.inf


def format_value(value: float) -> str:
    """A float sample value as prometheus_client writes it (floatToGoString).

    repr, except: NaN/+Inf/-Inf spelled as Prometheus does, and positive values with more than
    six integer digits (below repr's own switch to exponents at 1e16) written `d.ddde+NN`.
    Values must be floats: an int would lose its ".0".
    """
    text = repr(value)
    if value >= 1e6:
        dot = text.find(".")
        if dot > 6:
            mantissa = f"{text[0]}.{text[1:dot]}{text[dot + 1:]}".rstrip("0.")
            return f"{mantissa}e+{dot - 1:02d}"
        if value == _INF:
            return "+Inf"
    elif value != value:
        return "NaN"
    elif value == -_INF:
        return "-Inf"
    return text


def escape_label_value(value: str) -> str:
    """Backslash, newline and double quote are the only characters a label value escapes."""
    if "\\" in value or "\n" in value or '"' in value:
        return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
    return value


def escape_help(text: str, openmetrics: bool) -> str:
    escaped = text.replace("\\", "\\\\").replace("\n", "\\n")
    return escaped.replace('"', '\\"') if openmetrics else escaped


def label_block(names: tuple[str, ...], values: tuple[str, ...]) -> str:
    """`{a="1",b="2"}` with the labels sorted by name, or "" without labels."""
    if not names:
        return ""
    pairs = sorted(zip(names, values))
    return "{" + ",".join(f'{name}="{escape_label_value(value)}"' for name, value in pairs) + "}"


def family_header(name: str, help_text: str, kind: str, openmetrics: bool) -> str:
    """The `# HELP` and `# TYPE` lines of one family, `name` being the name the format wants."""
    return f"# HELP {name} {escape_help(help_text, openmetrics)}\n# TYPE {name} {kind}\n"
