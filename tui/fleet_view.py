"""The fleet table as data: columns, sorting, filtering and cell text, from a FleetSnapshot.

Pure functions, no Textual: the widgets only draw what these return.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from operator import attrgetter, itemgetter

from monitor.fleet import FleetSnapshot, FleetTotals, InstanceRow
from monitor.vocab import ENGINES
from tui.fmt import fit, human_bytes, human_rate

# (key, header, width, right-aligned, priority): narrow terminals drop the lowest priority
# first; width 0 = the rest (at least 8). "history" is the braille graph.
COLUMNS = (("instance_id", "INSTANCE", 19, False, 10), ("state", "STATE", 13, False, 10),
           ("instance_type", "TYPE", 13, False, 7), ("zone", "AZ", 10, False, 3),
           ("cores", "ND/NC", 6, True, 5), ("util_mean", "UTIL", 6, True, 10),
           ("util_max", "MAX", 6, True, 6), ("engines", "T/V/S/G/D %", 14, False, 2),
           ("hbm_bytes_per_s", "HBM", 9, True, 4), ("memory_used", "DEV MEM", 12, True, 5),
           ("power_watts", "POWER", 6, True, 4), ("errors", "ERR", 4, True, 8),
           ("ecc", "ECC", 4, True, 8), ("history", "UTIL HISTORY", 14, False, 9),
           ("tags", "RUNTIMES", 0, False, 1))
SORT_KEYS = ("instance_id", "state", "instance_type", "zone", "cores", "util_mean", "util_max",
             "hbm_bytes_per_s", "memory_used", "power_watts", "errors", "ecc")
HEADERS = {key: header for key, header, *_ in COLUMNS}


def layout(width: int) -> list[tuple[str, int]]:
    """(column key, width) that fit in ``width`` cells, one space apart, in table order."""
    chosen = [c for c in COLUMNS]
    def total(cols):
        return sum(max(w, 8) if w == 0 else w for _, _, w, _, _ in cols) + len(cols) - 1
    while total(chosen) > width and len(chosen) > 1:
        drop = min(chosen, key=lambda c: c[4])
        chosen.remove(drop)
    fixed = sum(w for _, _, w, _, _ in chosen if w) + len(chosen) - 1
    return [(key, w if w else max(8, width - fixed)) for key, _, w, _, _ in chosen]


def _sort_value(row: InstanceRow, key: str):
    if key == "state":
        return (row.up, row.since or 0.0)
    return getattr(row, key)


def fleet_rows(snapshot: FleetSnapshot | None, sort_key: str = "instance_id",
               reverse: bool = False, query: str = "") -> list[InstanceRow]:
    """Rows matching ``query`` (substring of id, type, AZ, state or a runtime tag), sorted;
    missing values last, ties by instance id."""
    if snapshot is None:
        return []
    rows = list(snapshot.rows)
    if query:
        needle = query.lower()
        rows = [r for r in rows if needle in r.instance_id.lower() or needle in
                r.instance_type.lower() or needle in r.zone.lower() or
                needle in ("up" if r.up else "down") or any(needle in t.lower() for t in r.tags)]
    rows.sort(key=attrgetter("instance_id"))
    keyed = [(_sort_value(r, sort_key), r) for r in rows]
    present = [pair for pair in keyed if pair[0] is not None]
    present.sort(key=itemgetter(0), reverse=reverse)   # stable: ties stay by instance id
    return [r for _, r in present] + [r for value, r in keyed if value is None]


def clock_text(seconds: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(seconds))


def _pct(ratio: float | None) -> str:
    return "–" if ratio is None else f"{ratio * 100:.1f}%"


def _count(value: float | None) -> str:
    return "–" if value is None else f"{round(value):d}"


def _short_bytes(value: float | None) -> str:
    if value is None:
        return "–"
    return human_bytes(value).replace("B", "").replace(".0", "")


def _state(row: InstanceRow) -> str:
    if row.up:
        return "up"
    return f"down {clock_text(row.since)}" if row.since else "down"


def down_note(row: InstanceRow) -> str:
    """The header's line for a down instance asked to open."""
    since = f" since {clock_text(row.since)}" if row.since else ""
    return f"{row.instance_id} is down{since} ({row.down_reason}); nothing to show"


def _engines(row: InstanceRow) -> str:
    mix = row.engines
    if not mix:
        return "–"
    return "/".join([f"{mix[e] * 100:.0f}" if e in mix else "-" for e in ENGINES])


def _memory(used_total: tuple[float | None, float | None]) -> str:
    used, total = used_total
    if used is None and total is None:
        return "–"
    return f"{_short_bytes(used)}/{_short_bytes(total)}"


def _rate(value: float | None) -> str:
    return "–" if value is None else human_rate(value)


def _watts(value: float | None) -> str:
    return "–" if value is None else f"{value:.0f}W"


# Numeric cells as (the fields read, text of those values): readings often repeat from one
# refresh to the next (counts, memory, power), so the table looks the text up by value.
VALUE_TEXT: dict[str, tuple[tuple[str, ...], Callable]] = {
    "util_mean": (("util_mean",), _pct),
    "util_max": (("util_max",), _pct),
    "hbm_bytes_per_s": (("hbm_bytes_per_s",), _rate),
    "memory_used": (("memory_used", "memory_total"), _memory),
    "power_watts": (("power_watts",), _watts),
    "errors": (("errors",), _count),
    "ecc": (("ecc",), _count),
}


def _of_row(fields: tuple[str, ...], text: Callable) -> Callable[[InstanceRow], str]:
    read = attrgetter(*fields)
    return lambda row: text(read(row))


# The text of each column (the history column is drawn by the widget): one function per key,
# looked up once per layout by the table instead of once per cell.
CELL_TEXT: dict[str, Callable[[InstanceRow], str]] = {
    "instance_id": lambda row: row.instance_id,
    "instance_type": lambda row: row.instance_type,
    "zone": lambda row: row.zone,
    "state": _state,
    "cores": lambda row: f"{row.devices}/{row.cores}",
    "engines": _engines,
    "tags": lambda row: ",".join(row.tags) if row.tags else ("–" if row.up else ""),
    **{key: _of_row(fields, text) for key, (fields, text) in VALUE_TEXT.items()},
}


def cell(row: InstanceRow, key: str) -> str:
    """The text of one cell (the history column is drawn by the widget)."""
    text = CELL_TEXT.get(key)
    return text(row) if text is not None else str(getattr(row, key, ""))


def header_cell(key: str, width: int, right: bool, sort_key: str, reverse: bool) -> str:
    text = HEADERS[key] + (("▼" if reverse else "▲") if key == sort_key else "")
    return fit(text, width) if not right else text[:width].rjust(width)


def _si(value: float, unit: str) -> str:
    for prefix, scale in (("E", 1e18), ("P", 1e15), ("T", 1e12), ("G", 1e9), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.2f} {prefix}{unit}"
    return f"{value:.0f} {unit}"


def totals_line(totals: FleetTotals, snapshot: FleetSnapshot) -> str:
    busy = (f"{totals.cores_busy:.1f} of {totals.cores} NeuronCores busy "
            f"({totals.cores_busy / totals.cores * 100:.0f}%)" if totals.cores else "no NeuronCores")
    parts = [f"{totals.up} up, {totals.down} down", busy]
    if snapshot.extensions:
        modelled = any(r.modelled for r in snapshot.rows if r.up)
        if totals.flops_per_s is not None:
            parts.append(f"{_si(totals.flops_per_s, 'FLOP/s')} model")
        if totals.mfu is not None:
            parts.append(f"MFU {totals.mfu * 100:.1f}%")
        if totals.power_watts is not None:
            parts.append(f"{_si(totals.power_watts, 'W')}{' (modelled)' if modelled else ''}")
        if totals.hbm_bytes_per_s is not None:
            parts.append(f"HBM {human_rate(totals.hbm_bytes_per_s)}")
    window = f"{snapshot.window / 60:g}m" if snapshot.window >= 60 else f"{snapshot.window:g}s"
    parts.append(f"errors {totals.errors:.0f} · ECC {totals.ecc:.0f} in {window}")
    return " · ".join(parts)


def source_line(url: str, selector: str, snapshot: FleetSnapshot | None) -> str:
    parts = [f"prometheus {url}"]
    if selector:
        parts.append(f"{{{selector}}}")
    if snapshot is not None:
        parts.append(f"scrape {snapshot.scrape_interval:g}s")
        parts.append(f"refreshed {clock_text(snapshot.at)} ({snapshot.queries} queries"
                     f"{', recorded series' if snapshot.recorded else ''})")
        if not snapshot.extensions and snapshot.rows:
            parts.append("AWS metrics only: no engines, HBM, power, FLOP/s or MFU")
    return " · ".join(parts)
