"""Deep checks of a profile read from a file: the header's metadata types, every column's dtype,
and the values later code relies on (finite times, indices inside their tables and enumerations,
rank row ranges). A file that passes can be summarised, diffed, advised and exported without an
exception; one that fails gives a `ProfileError` naming the field, in one line.
"""
from __future__ import annotations

import math

import numpy as np

from .profile import PHASES, ROW_REFS, SCHEMA, Profile, ProfileError

_NAME_LISTS = ("lane_rows", "lane_engines", "opcodes", "queues", "queue_rows")
_POSITIVE = ("tensor_peak_flops_bf16", "hbm_bw_per_stack")
_TEXT = ("instance", "device")
_OPTIONAL_TEXT = ("source", "workload", "command", "description", "host_name", "rank_label",
                  "device_type", "recorder", "auto_cast")
_OPTIONAL_INT = ("rank", "device_pid", "host_pid", "pipeline_stage", "pipeline_stages", "world_size",
                 "num_exec", "profile_nth_exec", "num_exec_requested", "compiled_graphs",
                 "unreadable_calls")
# lane rows the views look up by name: the TensorMatrix utilization counter of the traces
_REQUIRED_LANES = ("TensorMatrixE",)
# lists looked up by name (`list.index`): a repeated name would send rows to the wrong entry
_UNIQUE_NAMES = ("lane_rows", "queues")
# clocks (Hz) and rates above these are no chip's: a cycle count from them would not fit 64 bits
_MAX_HZ = 1e12
_MAX_RATE = 1e18
_OPTIONAL_NUMBER = ("created_unix_s", "exec_overhead_s")
# columns that hold times (seconds): finite
_TIMES = {"instructions": ("start", "end"), "ops": ("start", "end", "self_time"),
          "steps": ("start", "end", "host_start", "host_end"), "host": ("start", "end"),
          "collectives": ("start", "end"), "semaphores": ("time",), "throttles": ("start", "duration")}
_MAX_INDEX = 1 << 40


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


# seconds whose nanoseconds fit a signed 64-bit integer (what trace formats carry)
_MAX_SECONDS = (2 ** 63 - 1) / 1e9


def _is_number(v) -> bool:
    return (isinstance(v, (int, float)) and not isinstance(v, bool)) and math.isfinite(v)


def _check_meta(meta: dict, where: str) -> None:
    def bad(key: str, what: str) -> ProfileError:
        return ProfileError(f"{where}: metadata {key!r} {what}")

    for key in _NAME_LISTS:
        v = meta.get(key)
        if not isinstance(v, list) or not v or not all(isinstance(x, str) for x in v):
            raise bad(key, "must be a non-empty list of names")
        if len(v) > 255:
            raise bad(key, "has too many entries")
        if key in _UNIQUE_NAMES and len(set(v)) != len(v):
            raise bad(key, "names an entry twice")
    for lane in _REQUIRED_LANES:
        if lane not in meta["lane_rows"]:
            raise bad("lane_rows", f"lacks the {lane!r} lane")
    if len(meta["lane_engines"]) != len(meta["lane_rows"]):
        raise bad("lane_engines", "must name one engine per entry of 'lane_rows'")
    if "phases" in meta and meta["phases"] != list(PHASES):
        raise bad("phases", f"must be {list(PHASES)}")
    for key in _TEXT:
        if not isinstance(meta.get(key), str):
            raise bad(key, "must be a string")
    for key in _OPTIONAL_TEXT:
        if key in meta and not isinstance(meta[key], str):
            raise bad(key, "must be a string")
    if not isinstance(meta.get("trace_metadata", {}), dict):
        raise bad("trace_metadata", "must be an object")
    notes = meta.get("notes", [])
    if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
        raise bad("notes", "must be a list of strings")
    lnc = meta.get("lnc")
    if not _is_int(lnc) or lnc not in (1, 2):
        raise bad("lnc", "must be 1 or 2")
    for key in _POSITIVE:
        if not _is_number(meta.get(key)) or not 0 < meta[key] <= _MAX_RATE:
            raise bad(key, f"must be a positive number up to {_MAX_RATE:g}")
    clocks = meta.get("clocks_hz")
    if not isinstance(clocks, dict) or "base" not in clocks or \
            not all(_is_number(v) and 0 < v <= _MAX_HZ for v in clocks.values()):
        raise bad("clocks_hz", "must map engines and 'base' to positive frequencies up to 1 THz")
    for key in _OPTIONAL_INT:
        if key in meta and (not _is_int(meta[key]) or not 0 <= meta[key] < _MAX_INDEX):
            raise bad(key, "must be a non-negative integer")
    for key in _OPTIONAL_NUMBER:
        if key in meta and (not _is_number(meta[key]) or not 0 <= meta[key] < _MAX_SECONDS):
            raise bad(key, "must be a non-negative number of seconds (before the year 2262)")
    placement = meta.get("placement")
    if "placement" in meta:
        if not isinstance(placement, dict) or not all(
                _is_int(v) and 1 <= v < _MAX_INDEX for v in placement.values()):
            raise bad("placement", "must map tp/pp/dp to positive integers")


def _check_columns(profile: Profile, where: str) -> None:
    for name, cols in SCHEMA.items():
        table = profile.tables[name]
        for col, dtype in cols.items():
            arr = table[col]
            if arr.dtype != np.dtype(dtype):
                raise ProfileError(f"{where}: column {name}.{col} is {arr.dtype.str}, expected {dtype}")
            if arr.dtype.kind == "f" and arr.size and not np.isfinite(arr).all():
                raise ProfileError(f"{where}: column {name}.{col} holds a value that is not finite")
        n = profile.rows(name)
        for col in (c for c in table if c not in cols):
            if table[col].shape[0] != n:
                raise ProfileError(f"{where}: column {name}.{col} has a different length")
        for col in _TIMES.get(name, ()):
            if n and np.abs(table[col]).max() > 1e9:
                raise ProfileError(f"{where}: column {name}.{col} holds a time out of range")


def _check_refs(profile: Profile, where: str) -> None:
    meta = profile.meta
    ins, ops = profile.tables["instructions"], profile.tables["ops"]
    n_ops, n_host = profile.rows("ops"), profile.rows("host")

    def within(table: str, col: str, limit: int, low: int = 0, names: str = "") -> None:
        """`names`: the metadata list the values index (named: it may be the edited part)."""
        arr = profile.tables[table][col]
        if arr.size and (int(arr.min()) < low or int(arr.max()) >= limit):
            of = f" (beyond metadata {names!r})" if names else ""
            raise ProfileError(f"{where}: column {table}.{col} holds a value out of range{of}")

    within("instructions", "opcode", len(meta["opcodes"]), names="opcodes")
    within("instructions", "lane", len(meta["lane_rows"]), names="lane_rows")
    within("instructions", "queue", max(len(meta["queue_rows"]), 1 << 8))
    within("ops", "phase", len(PHASES))
    within("ops", "host", n_host, -1)
    within("host", "op", n_ops, -1)
    within("collectives", "op", n_ops, -1)
    within("collectives", "ranks", 1 << 24, 1)
    within("semaphores", "sem", len(meta["lane_rows"]), names="lane_rows")
    for table, col in (("ops", "step"), ("steps", "step"), ("host", "step")):
        within(table, col, 1 << 30, -1 if table == "host" else 0)
    within("host", "tid", 1 << 40, 0)
    for table, col in (("ops", "instructions"),):
        within(table, col, 1 << 62, 0)
    steps = profile.tables["steps"]
    if steps["end"].size and (steps["end"] < steps["start"]).any():
        raise ProfileError(f"{where}: a step ends before it starts")
    if ins["op"].size and n_ops == 0:
        raise ProfileError(f"{where}: instructions without operators")
    if ops["start"].size and (ops["end"] < ops["start"]).any():
        raise ProfileError(f"{where}: an operator ends before it starts")
    if ins["start"].size and (ins["end"] < ins["start"]).any():   # a negative DMA active time
        raise ProfileError(f"{where}: an instruction ends before it starts")
    th = profile.tables["throttles"]["ratio"]
    if th.size and ((th < 0) | (th > 1)).any():
        raise ProfileError(f"{where}: column throttles.ratio holds a value out of range")


def _check_ranks(profile: Profile, where: str) -> None:
    """`meta["ranks"]`: entries as the captures write them, their rows tiling every table in
    rank order (each rank's rows contiguous), every row reference inside its own rank's rows."""
    if "ranks" not in profile.meta:
        return
    ranks = profile.meta["ranks"]
    if not isinstance(ranks, list) or not all(isinstance(e, dict) for e in ranks):
        raise ProfileError(f"{where}: metadata 'ranks' must be a list of rank entries")
    seen: set[int] = set()
    for e in ranks:
        rank = e.get("rank")
        if not _is_int(rank) or not 0 <= rank < _MAX_INDEX or rank in seen:
            raise ProfileError(f"{where}: metadata 'ranks' has an entry with a bad or repeated rank")
        seen.add(rank)
        _check_rank_entry(e, f"{where}: metadata 'ranks': rank {rank}", profile)
    if ranks:
        _check_rank_tiling(ranks, profile, where)
        for e in ranks:
            _check_rank_refs(profile, e, f"{where}: metadata 'ranks': rank {e['rank']}")


def _check_rank_entry(e: dict, where: str, profile: Profile) -> None:
    for key in ("stage", "core", "node"):
        if key in e and (not _is_int(e[key]) or not 0 <= e[key] < _MAX_INDEX):
            raise ProfileError(f"{where}: {key!r} must be a non-negative integer")
    # the labels of every view name a rank's pipeline stage: both are written by every capture
    if not _is_int(e.get("stages")) or not 1 <= e["stages"] < _MAX_INDEX:
        raise ProfileError(f"{where}: 'stages' must be a positive integer")
    if "stage" not in e or e["stage"] >= e["stages"]:
        raise ProfileError(f"{where}: 'stage' must be a stage number below 'stages'")
    if "description" in e and not isinstance(e["description"], str):
        raise ProfileError(f"{where}: 'description' must be a string")
    rows = e.get("rows")
    if not isinstance(rows, dict) or set(rows) != set(SCHEMA):
        raise ProfileError(f"{where}: 'rows' must give the rows of every table")
    for table, span in rows.items():
        n = profile.rows(table)
        if not (isinstance(span, list) and len(span) == 2 and all(_is_int(x) for x in span)
                and 0 <= span[0] <= span[1] <= n):
            raise ProfileError(f"{where}: rows of table {table!r} out of range")


def _check_rank_tiling(ranks: list[dict], profile: Profile, where: str) -> None:
    """The captures write every rank's rows one after the other: a rank view cut from anything
    else would hold another rank's rows, or lose some."""
    for table in SCHEMA:
        spans = [e["rows"][table] for e in ranks]
        ends = [0] + [b for _, b in spans]
        if [a for a, _ in spans] != ends[:-1] or ends[-1] != profile.rows(table):
            raise ProfileError(f"{where}: metadata 'ranks': the ranks' rows of table {table!r} "
                               "must follow one another and cover the table")


# the message when a table's row references (profile.ROW_REFS) leave its rank's rows
_OUTSIDE = {"instructions": "an instruction points to a missing operator",
            "collectives": "a collective points to a missing operator",
            "host": "a host call points to a missing operator",
            "ops": "an operator points to a missing host call"}


def _check_rank_refs(profile: Profile, e: dict, where: str) -> None:
    """A rank's rows point only at its own rows (-1: none), as its rank view needs."""
    for table, col, target in ROW_REFS:
        a, b = e["rows"][table]
        lo, hi = e["rows"][target]
        ref = profile.tables[table][col][a:b]
        inside = (ref >= lo) & (ref < hi)
        if table != "instructions":
            inside |= ref == -1
        if ref.size and not inside.all():
            raise ProfileError(f"{where}: {_OUTSIDE[table]} (of another rank)")


def check_profile(profile: Profile, where: str = "profile") -> None:
    """Raise ProfileError (one line naming the field) unless every view can use `profile`."""
    _check_meta(profile.meta, where)
    profile.require_tables(where)  # before the column checks read them
    _check_columns(profile, where)
    profile.validate(where)
    _check_refs(profile, where)
    _check_ranks(profile, where)
