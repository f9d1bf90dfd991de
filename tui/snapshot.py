"""neuron-top's overview as plain text: ``neuron-top -1`` (one snapshot, like ``nvitop -1``).

No Textual here: the text is built from the same view data the screens draw (tui.view,
tui.procs), so a script, a log or a pipe gets what the screen would show. Text taken from the
stream (tags, error strings, pod names) is escaped: no control sequence reaches the reader.
"""
from __future__ import annotations

import textwrap

from monitor.errors import one_line
from monitor.report import Report
from tui import __version__
from tui.faults import report_faults
from tui.fmt import fit, human_bytes, percent, tflops
from tui.procs import cell_text, fit_columns, process_rows
from tui.status import gaps_text
from tui.view import (DEVICE_CATEGORIES, HOST_CATEGORIES, NO_DEVICE, CoreGrid, average_label,
                      core_grid, instance_title, memory_summary, vcpu_usage)

__all__ = ["overview_text", "no_report_text"]


def _cut(line: str, width: int) -> str:
    return line if len(line) <= width else line[: width - 1] + "…"


def overview_text(report: Report, *, width: int = 80, show_flops: bool = False,
                  source: str = "") -> str:
    """The overview of one report, ``width`` columns wide, ending with a newline."""
    out: list[str] = []
    instance_id, instance_type = instance_title(report)
    kind = f" ({instance_type})" if instance_type else ""
    out.append(f"neuron-top {__version__} running on {instance_id}{kind}"
               + (f" · {one_line(source)}" if source else ""))
    # what the stream lacks, what failed and the faults wrap (the screen wraps them too): cut,
    # the names of the groups that failed were lost at 80 columns
    gaps = gaps_text(report)
    if gaps:
        out += _wrapped("! " + one_line(gaps), width)
    for fault in report_faults(report):
        out += _wrapped(("FAULT: " if fault.severity == "error" else "WARNING: ")
                        + one_line(fault.text), width)
    out += _grid_lines(report, show_flops, width)
    u = vcpu_usage(report, report.runtimes)
    out.append("vCPU Utilization")
    out.append(f"  System vCPU Usage   user {percent(u.system_user)}  system {percent(u.system_system)}")
    out.append(f"  Runtime vCPU Usage  user {percent(u.runtime_user)}  system {percent(u.runtime_system)}")
    out += _memory_lines(report, width)
    out += _process_lines(report, width)
    return "".join(_cut(line, width) + "\n" for line in out)


def _wrapped(text: str, width: int) -> list[str]:
    """A banner line wrapped at words, its continuation lines indented two columns."""
    return textwrap.wrap(text, width, subsequent_indent="  ") or [""]


LABEL, CELL = 6, 10  # "ND12  " and "[ 55.00%]" with a space before it


def _grid_lines(report: Report, show_flops: bool, width: int) -> list[str]:
    """The grid laid out to ``width``: a device's cores on one line while they fit, else the
    columns in blocks of equal width, each under its own NC header (never a core cut off)."""
    grid = core_grid(report, report.runtimes)
    version = f"NeuronCore {one_line(grid.core_version)} " if grid.core_version else "NeuronCore "
    if show_flops:
        total = grid.total_flops
        lines = [f"{version}TFLOPs (Total: {tflops(total)})"]
    else:
        lines = [f"{version}Utilization ({average_label(grid)})"]
    if not grid.devices:
        return lines + [NO_DEVICE]
    per_device = grid.cores_per_device
    blocks = -(-per_device // max(1, (width - LABEL) // CELL))
    per_block = -(-per_device // blocks)
    for first in range(0, per_device, per_block):
        locals_ = range(first, min(first + per_block, per_device))
        lines.append(" " * LABEL + "".join(f"NC{c}".rjust(CELL) for c in locals_))
        for device in range(grid.devices):
            cells = "".join(_grid_cell(grid, device * per_device + local, show_flops).rjust(CELL)
                            for local in locals_)
            lines.append(f"ND{device}".ljust(LABEL) + cells)
    return lines


def _grid_cell(grid: CoreGrid, core: int, show_flops: bool) -> str:
    # A core no runtime reports is idle: 0.00%, as the screen and the average show it (a core
    # whose stream lacks a figure, or that a runtime with failed counters may hold, is N/A)
    if show_flops:
        flops = float(grid.flops[core])
        value = tflops(None if flops != flops else flops)
    else:
        util = float(grid.utilization[core])
        value = percent(None if util != util else util)
    return f"[{value:>7}]"


def _memory_lines(report: Report, width: int) -> list[str]:
    s = memory_summary(report.runtimes)
    if not s.reported:
        return ["Memory Usage Summary", f"  N/A ({s.missing})"]
    lines = ["Memory Usage Summary"]
    for head, total, values, names in (("Host Used Memory", s.host_total, s.host, HOST_CATEGORIES),
                                       ("Device Used Memory", s.device_total, s.device,
                                        DEVICE_CATEGORIES)):
        pairs = [f"Total {human_bytes(total)}"] + [f"{name} {human_bytes(values.get(key))}"
                                                    for key, name in names]
        line = f"  {head:<19}"
        for pair in pairs:  # whole pairs, wrapped under the heading
            if len(line) + len(pair) > width and line.strip() != head:
                lines.append(line.rstrip())
                line = " " * 21
            line += pair + "  "
        lines.append(line.rstrip())
    return lines


def _process_lines(report: Report, width: int) -> list[str]:
    """The process table's columns that fit ``width``, as on the screen (tui.procs)."""
    rows = process_rows(report)
    columns = fit_columns(width, rows)
    head = " ".join(title.rjust(w) if right else title.ljust(w)
                    for (_, title, _, right, _), w in columns)
    lines = ["Processes", head.rstrip()]
    for row in rows:
        cells = [one_line(cell_text(row, key)) for (key, *_), _ in columns]
        lines.append(" ".join(text.rjust(w) if right else fit(text, w)
                              for text, ((_, _, _, right, _), w) in zip(cells, columns)).rstrip())
    if not rows:
        lines.append("  no Neuron runtime is running")
    return lines


def no_report_text(source: str, rejected: int, reasons: list[str], failure: str = "") -> str:
    """What ``-1``/``--json`` say when the input ended without a single valid report."""
    lines = [f"neuron-top: no valid report from {one_line(source)}"
             + (f" ({rejected} line(s) rejected)" if rejected else "")]
    if failure:
        lines.append(f"  source failed: {one_line(failure)}")
    lines += [f"  {one_line(reason)}" for reason in reasons]
    return "\n".join(lines) + "\n"
