"""Faults worth a banner: ECC events, execution errors, runtimes in error or gone."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from monitor.report import Report
from tui.fmt import pid_text


@dataclass(frozen=True, slots=True)
class Fault:
    severity: str  # "error" or "warning"
    text: str


def report_faults(report: Report, vanished: Iterable[tuple[int | None, str]] = ()
                  ) -> tuple[Fault, ...]:
    """Faults in one report; ``vanished``: the (pid, tag) of runtimes that left since the
    previous report (pid None where the source does not know it)."""
    faults: list[Fault] = []
    hw = report.system.hw_counters
    for ecc in (hw.devices or ()) if hw else ():
        uncorrected = (ecc.mem_ecc_uncorrected or 0) + (ecc.sram_ecc_uncorrected or 0)
        corrected = (ecc.mem_ecc_corrected or 0) + (ecc.sram_ecc_corrected or 0)
        if uncorrected:   # with its corrected ones, which an uncorrected one had hidden
            also = f" (and {corrected} corrected)" if corrected else ""
            faults.append(Fault("error", f"ND{ecc.index}: {uncorrected} uncorrected ECC{also}"))
        elif corrected:
            faults.append(Fault("warning", f"ND{ecc.index}: {corrected} corrected ECC"))
    for runtime in report.runtimes:
        if runtime.error:
            faults.append(Fault("error", f"{runtime.tag} ({pid_text(runtime.known_pid)}): "
                                         f"{runtime.error}"))
        stats = runtime.execution_stats
        errors = sum(stats.errors.values()) if stats else 0
        if errors:
            kinds = ",".join(k for k, v in stats.errors.items() if v)
            faults.append(Fault("error", f"{runtime.tag}: {errors} execution errors ({kinds})"))
    for pid, tag in vanished or ():
        faults.append(Fault("error", f"{tag} ({pid_text(pid)}) stopped reporting"))
    return tuple(faults)
