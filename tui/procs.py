"""The process table as data: one row per runtime, sortable and filterable."""
from __future__ import annotations

from dataclasses import dataclass

from monitor.report import K8sInfo, Report, RuntimeReport
from tui.view import host_vcpu_count


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
    status: str  # "" when healthy, else the runtime's error text
    pod: str | None = None  # namespace/pod of its cores (neuron_k8s_info), None without it


# (key, header, width, right-aligned, priority): narrow terminals drop the lowest priority first;
# width 0 = takes the rest (at least 6).
# Every width leaves a cell for the sort arrow after the title, so the header never shifts.
COLUMNS = (("pid", "PID", 7, True, 9), ("tag", "TAG", 20, False, 9), ("cores", "CORES", 9, False, 7),
           ("utilization", "NC UTIL", 8, True, 8), ("device_bytes", "DEV MEM", 8, True, 6),
           ("host_bytes", "HOST MEM", 9, True, 2), ("vcpu", "vCPU", 6, True, 3),
           ("executions_per_second", "EXEC/s", 8, True, 5), ("errors", "ERRORS", 7, True, 7),
           ("latency_p50", "P50 LAT", 8, True, 4), ("pod", "POD", 20, False, 6),
           ("status", "STATUS", 0, False, 1))
SORT_KEYS = tuple(key for key, *_ in COLUMNS if key not in ("status", "pod"))


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
    used = runtime.memory_used
    stats = runtime.execution_stats
    rate = errors = p50 = None
    if stats is not None:
        period = stats.period or 1.0
        rate = sum(stats.statuses.values()) / period
        errors = sum(stats.errors.values())
        p50 = stats.total_latency.p50 if stats.total_latency else None
    host = (runtime.vcpu.user + runtime.vcpu.system) if runtime.vcpu else None
    of_one = host * host_vcpus if host is not None and host_vcpus else None
    return ProcessRow(runtime.known_pid, runtime.tag, cores, util,
                      used.device_bytes if used else None, used.host_bytes if used else None,
                      of_one, host, rate, errors, p50, runtime.error, pod_text(k8s, cores))


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
                 query: str = "") -> list[ProcessRow]:
    """Rows matching ``query`` (see ``matches``), sorted; missing values last."""
    count = host_vcpu_count(report)
    rows = [process_row(r, report.k8s, count) for r in report.runtimes]
    if query:
        rows = [r for r in rows if matches(r, query)]
    present = [r for r in rows if getattr(r, sort_key) is not None]
    missing = [r for r in rows if getattr(r, sort_key) is None]
    present.sort(key=lambda r: (getattr(r, sort_key), r.pid or 0, r.tag), reverse=reverse)
    return present + missing
