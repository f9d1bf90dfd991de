"""neuron-top's overview as plain text: ``neuron-top -1`` (one snapshot, like ``nvitop -1``).

No Textual here: the text is built from the same view data the screens draw (tui.view,
tui.procs), so a script, a log or a pipe gets what the screen would show. Text taken from the
stream (tags, error strings, pod names) is escaped: no control sequence reaches the reader.
"""
from __future__ import annotations

from monitor.coverage import stream_gaps
from monitor.errors import one_line
from monitor.report import Report
from tui import __version__
from tui.faults import report_faults
from tui.fmt import core_ranges, human_bytes, per_second, percent, tflops
from tui.procs import process_rows
from tui.view import DEVICE_CATEGORIES, HOST_CATEGORIES, core_grid, memory_summary, vcpu_usage

__all__ = ["overview_text", "no_report_text"]


def _cut(line: str, width: int) -> str:
    return line if len(line) <= width else line[: width - 1] + "…"


def overview_text(report: Report, *, width: int = 80, show_flops: bool = False,
                  source: str = "") -> str:
    """The overview of one report, ``width`` columns wide, ending with a newline."""
    out: list[str] = []
    inst = report.instance
    kind = f" ({one_line(inst.type)})" if inst.type else ""
    out.append(f"neuron-top {__version__} running on {one_line(inst.id) or 'unknown instance'}{kind}"
               + (f" · {one_line(source)}" if source else ""))
    gaps = stream_gaps(report)
    if gaps:
        out.append("! " + one_line(gaps.summary()))
    for fault in report_faults(report):
        out.append(("FAULT: " if fault.severity == "error" else "WARNING: ") + one_line(fault.text))
    out += _grid_lines(report, show_flops)
    u = vcpu_usage(report, report.runtimes)
    out.append("vCPU Utilization")
    out.append(f"  System vCPU Usage   user {percent(u.system_user)}  system {percent(u.system_system)}")
    out.append(f"  Runtime vCPU Usage  user {percent(u.runtime_user)}  system {percent(u.runtime_system)}")
    out += _memory_lines(report, width)
    out += _process_lines(report)
    return "".join(_cut(line, width) + "\n" for line in out)


def _grid_lines(report: Report, show_flops: bool) -> list[str]:
    grid = core_grid(report, report.runtimes)
    version = f"NeuronCore {one_line(grid.core_version)} " if grid.core_version else "NeuronCore "
    if show_flops:
        total = grid.total_flops
        lines = [f"{version}TFLOPs (Total: {'N/A' if total is None else f'{total / 1e12:.2f}'})"]
    else:
        lines = [f"{version}Utilization (Avg: {percent(grid.average)})"]
    lines.append("      " + "".join(f"NC{c}".rjust(10) for c in range(grid.cores_per_device)))
    for device in range(grid.devices):
        cells = []
        for local in range(grid.cores_per_device):
            core = device * grid.cores_per_device + local
            if not grid.in_use[core]:
                value = "-"
            elif show_flops:
                flops = float(grid.flops[core])
                value = tflops(None if flops != flops else flops)
            else:
                value = percent(float(grid.utilization[core]))
            cells.append(f"[{value:>7}]".rjust(10))
        lines.append(f"ND{device}".ljust(6) + "".join(cells))
    return lines


def _memory_lines(report: Report, width: int) -> list[str]:
    s = memory_summary(report.runtimes)
    if not s.reported:
        return ["Memory Usage Summary", "  N/A (no memory_used group in this stream)"]
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


def _process_lines(report: Report) -> list[str]:
    rows = process_rows(report)
    with_pod = report.k8s is not None
    head = f"{'PID':>7} {'TAG':<20} {'CORES':<9} {'NC UTIL':>7} {'DEV MEM':>8} {'EXEC/s':>8} {'ERRORS':>6}"
    lines = ["Processes", head + (f" {'POD':<24}" if with_pod else "") + " STATUS"]
    for r in rows:
        pid = "N/A" if r.pid is None else r.pid   # pid 0 in the stream: the source does not know it
        line = (f"{pid:>7} {one_line(r.tag)[:20]:<20} {core_ranges(r.cores):<9} "
                f"{percent(r.utilization, 1):>7} {human_bytes(r.device_bytes):>8} "
                f"{per_second(r.executions_per_second):>8} "
                f"{'N/A' if r.errors is None else r.errors:>6}")
        if with_pod:
            line += f" {one_line(r.pod or '-')[:24]:<24}"
        lines.append(line + " " + (one_line(r.status) or "ok"))
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
