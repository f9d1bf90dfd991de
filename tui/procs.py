"""The process table as data: one row per runtime, sortable and filterable."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from monitor.errors import one_line
from monitor.report import K8sInfo, Report, RuntimeReport
from tui.fmt import core_ranges, human_bytes, per_second, percent
from tui.view import failed_groups, host_vcpu_count, usable


@dataclass(frozen=True, slots=True)
class ProcessRow:
    pid: int | None  # None: the source does not know the process (shown as N/A, sorted last)
    tag: str
    cores: tuple[int, ...]
    utilization: float | None  # mean over its cores, ratio
    device_bytes: int | None
    host_bytes: int | None
    vcpu: float | None  # user + system of one vCPU as top counts it (1.5 = 150 %); None: no count
    vcpu_host: float | None  # user + system as the stream has it: a share of the whole host
    executions_per_second: float | None
    errors: int | None  # execution errors within the period
    latency_p50: float | None  # seconds
    status: str  # "" when healthy, else the runtime's error text, or which of its groups failed
    pod: str | None = None  # namespace/pod of its cores (neuron_k8s_info), None without it


# (key, header, width, right-aligned, priority): narrow terminals keep the highest priority
# first (fit_columns); width 0 = takes the rest (at least STATUS_MIN).
# Every width leaves a cell for the sort arrow after the title, so the header never shifts.
COLUMNS = (("pid", "PID", 7, True, 9), ("tag", "TAG", 20, False, 9), ("cores", "CORES", 9, False, 7),
           ("utilization", "NC UTIL", 8, True, 8), ("device_bytes", "DEV MEM", 8, True, 6),
           ("host_bytes", "HOST MEM", 9, True, 2), ("vcpu", "vCPU", 6, True, 3),
           ("executions_per_second", "EXEC/s", 8, True, 5), ("errors", "ERRORS", 7, True, 7),
           ("latency_p50", "P50 LAT", 8, True, 4), ("pod", "POD", 20, False, 6),
           ("status", "STATUS", 0, False, 1))
SORT_KEYS = tuple(key for key, *_ in COLUMNS if key not in ("status", "pod"))
STATUS_MIN = 6
# STATUS's priority and least width while a row has an error to show: ERRORS' priority, and
# room to read the start of the reason ("runtime not re…") rather than "runti…"
STATUS_FAILING = (7, 14)


def fit_columns(width: int, rows: list[ProcessRow], grow_tag: int = 0
                ) -> list[tuple[tuple, int]]:
    """The columns that fit ``width`` cells (one space after each), in table order, with their
    widths. The most important go in first and every one that still fits follows, so leaving
    out a wide column makes room for the narrower ones after it. STATUS ranks with ERRORS while
    some row has a status (a failed runtime's reason), else last, and takes the rest of the
    line; POD only with Kubernetes info; ``grow_tag`` widens TAG (the tree's branches). PID
    and TAG always stay."""
    status_rank, status_min = STATUS_FAILING if any(r.status for r in rows) else (1, STATUS_MIN)
    columns = [(key, title, w + grow_tag if key == "tag" else w, right,
                status_rank if key == "status" else rank)
               for key, title, w, right, rank in COLUMNS
               if key != "pod" or any(r.pod is not None for r in rows)]
    kept: set[str] = set()
    used = 0
    for column in sorted(columns, key=lambda c: -c[4]):   # stable: ties in table order
        need = (column[2] or status_min) + 1
        if used + need <= width or column[0] in ("pid", "tag"):
            kept.add(column[0])
            used += need
    shown = [c for c in columns if c[0] in kept]
    fixed = sum(c[2] + 1 for c in shown if c[2])
    return [(c, c[2] if c[2] else max(status_min, width - fixed)) for c in shown]


def cell_text(row: ProcessRow, key: str) -> str:
    """A cell as the table prints it. Stream text (tag, status, pod) comes escaped, so its width
    is measured on what shows: an ESC shows as four cells (a backslash, x1b), not none."""
    value = getattr(row, key)
    if value is None:
        return "N/A"
    if key == "status":
        return one_line(value) if value else "ok"
    if isinstance(value, str):
        return one_line(value)
    if key == "cores":
        return core_ranges(value)
    if key in ("device_bytes", "host_bytes"):
        return human_bytes(value)
    if key == "vcpu" and value >= 10:  # past 1000 % (ten vCPUs), whole percents as top: 6 cells
        return percent(value, 0)
    if key in ("utilization", "vcpu"):
        return percent(value, 1)
    if key == "executions_per_second":
        return per_second(value)
    if key == "latency_p50":
        return f"{value * 1000:.2f}ms"
    return str(value)


def highest_first(key: str) -> bool:
    """The direction a column sorts in when first chosen: numbers highest first (as top and
    nvitop do), the tag alphabetically."""
    return key != "tag"


def pod_text(k8s: K8sInfo | None, cores: tuple[int, ...]) -> str | None:
    """``namespace/pod`` of the cores (several joined by ","); None when the stream has no k8s info."""
    if k8s is None:
        return None
    names = [f"{p.namespace}/{p.pod}" if p.namespace else (p.pod or "?") for p in k8s.pods_of(cores)]
    return ",".join(names) if names else "-"


def process_row(runtime: RuntimeReport, k8s: K8sInfo | None = None,
                host_vcpus: int = 0) -> ProcessRow:
    """``host_vcpus``: the host's vCPU count (0: unknown), to turn the runtime's share of the host
    into top's share of one vCPU."""
    counters = runtime.neuroncore_counters
    cores = tuple(sorted(counters.cores)) if counters else ()
    util = (sum(c.utilization for c in counters.cores.values()) / len(cores)) if cores else None
    used = usable(runtime.memory_used)   # a failed group reads N/A, not 0
    stats = usable(runtime.execution_stats)
    rate = errors = p50 = None
    if stats is not None:
        period = stats.period or 1.0
        rate = sum(stats.statuses.values()) / period
        errors = sum(stats.errors.values())
        p50 = stats.total_latency.p50 if stats.total_latency else None
    vcpu = usable(runtime.vcpu)
    host = (vcpu.user + vcpu.system) if vcpu else None
    of_one = host * host_vcpus if host is not None and host_vcpus else None
    return ProcessRow(runtime.known_pid, runtime.tag, cores, util,
                      used.device_bytes if used else None, used.host_bytes if used else None,
                      of_one, host, rate, errors, p50, runtime_status(runtime), pod_text(k8s, cores))


def runtime_status(runtime: RuntimeReport) -> str:
    """"" when healthy; else the runtime's error, or the groups that failed ("memory_used,
    execution_stats failed"): their figures read N/A, and "ok" would say they were fine."""
    if runtime.error:
        return runtime.error
    failed = failed_groups(runtime)
    return f"{', '.join(failed)} failed" if failed else ""


def matches(row: ProcessRow, query: str) -> bool:
    """``query``: terms separated by commas or spaces, any of which may match. ``pid:N`` is that
    pid exactly, ``tag:TEXT`` a tag containing TEXT; a bare term matches the pid, tag, status or pod."""
    for term in query.replace(",", " ").lower().split():
        kind, _, needle = term.partition(":") if ":" in term else ("", "", term)
        if kind == "pid":
            if needle.isdigit() and row.pid == int(needle):   # an unknown pid (None) is none
                return True
        elif kind == "tag":
            if needle in row.tag.lower():
                return True
        elif ((row.pid is not None and term in str(row.pid)) or term in row.tag.lower()
              or term in row.status.lower() or term in (row.pod or "").lower()):
            return True
    return False


def process_rows(report: Report, sort_key: str = "pid", reverse: bool = False,
                 query: str = "", runtimes: Iterable[RuntimeReport] | None = None
                 ) -> list[ProcessRow]:
    """Rows of ``runtimes`` (default: every runtime of the report; an app tab passes its own)
    matching ``query`` (see ``matches``), sorted; missing values last."""
    count = host_vcpu_count(report)
    rows = [process_row(r, report.k8s, count)
            for r in (report.runtimes if runtimes is None else runtimes)]
    if query:
        rows = [r for r in rows if matches(r, query)]
    present = [r for r in rows if getattr(r, sort_key) is not None]
    missing = [r for r in rows if getattr(r, sort_key) is None]
    present.sort(key=lambda r: (getattr(r, sort_key), r.pid or 0, r.tag), reverse=reverse)
    return present + missing
