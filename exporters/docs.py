"""docs/metrics.md, generated from the metric table.

    python -m exporters.docs            # print it
    python -m exporters.docs --write    # rewrite docs/metrics.md (temp file, then rename)
"""
from __future__ import annotations

import pathlib
import sys

from exporters import metrics_table as mt

DOC = pathlib.Path(__file__).resolve().parent.parent / "docs" / "metrics.md"

INTRO = """# Metrics of neuron-monitor-prometheus

Generated from `exporters/metrics_table.py` by `python -m exporters.docs --write`; do not edit.

The first table is AWS's `neuron-monitor-prometheus.py`, reproduced exactly: names, types, labels
and HELP text. Those metrics carry AWS's instance labels (`instance_name`, `instance_id`,
`instance_type`, `availability_zone`, `region`, `subnet_id`, from the first report); runtime
metrics add `runtime_tag`. Counters add each report's per-period counts, and in the 0.0.4 text
format are followed by a `<name>_created` gauge family, as prometheus_client writes them.
Values are the stream's, scaled as AWS's script scales them: a percentage is divided by 100 and
not clipped, so a utilization a stream reports above 100 % is exported above 1, as AWS exports it.

The second table is what neuronscope adds, named by Prometheus conventions (one `neuron_`
prefix, base units, ratios 0..1, `_total` on counters) and without target labels: join them with
`instance_info` / `neuron_hardware_info` on Prometheus's `instance` label when needed.
Per-core series carry `neuron_device_index` = logical core index // cores per device.
"""


def _row(spec: mt.MetricSpec) -> str:
    labels = ", ".join(f"`{label}`" for label in spec.labels) or "–"
    unit = spec.unit or "–"
    return f"| `{spec.name}` | {spec.kind} | {labels} | {unit} | {spec.help} | `{spec.group}`: {spec.source} |"


def markdown() -> str:
    head = "| name | type | labels | unit | HELP | source |\n|---|---|---|---|---|---|"
    parts = [INTRO, "## AWS neuron-monitor-prometheus metrics\n", head,
             *(_row(s) for s in mt.AWS_METRICS),
             "\n## neuronscope metrics\n", head, *(_row(s) for s in mt.EXTRA_METRICS)]
    return "\n".join(parts) + "\n"


def main(argv: list[str]) -> int:
    text = markdown()
    if "--write" in argv:
        tmp = DOC.with_suffix(".md.tmp")
        tmp.write_text(text)
        tmp.replace(DOC)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
