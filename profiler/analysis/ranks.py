"""The captured ranks of a profile, each as a profile of its own.

A capture of several ranks (one per pipeline stage) stores every rank's rows contiguously in each
table and lists them in `meta["ranks"]`: rank, stage, stages, core, node, description and the
[start, stop) rows of every table. `rank_views` cuts the profile into one single-rank profile per
rank (row references rebased), so every single-NeuronCore view (summaries, traces, advice) works
per rank unchanged. Profiles without `meta["ranks"]` (older files, PyTorch captures) are one rank.
"""
from __future__ import annotations

import numpy as np

from ..model.profile import Profile, ProfileError

HOST_PID_BASE = 1 << 20       # host process of rank r: HOST_PID_BASE + r (device pid: r)


def rank_entries(profile: Profile) -> list[dict]:
    return list(profile.meta.get("ranks") or [])


def is_multi_rank(profile: Profile) -> bool:
    return len(rank_entries(profile)) > 1


def rank_label(entry: dict) -> str:
    stages = int(entry.get("stages", 1))
    where = f", pipeline stage {entry['stage']} of {stages}" if stages > 1 else ""
    return f"rank {entry['rank']}{where}"


def _rebased(col: np.ndarray, base: int) -> np.ndarray:
    """Row references into another table (-1: none) moved to the view's own rows."""
    return np.where(col >= 0, col - base, col).astype(col.dtype) if base else col


def rank_view(profile: Profile, entry: dict) -> Profile:
    """One rank as a single-rank profile: its rows, its NeuronCore and host process ids."""
    rows = entry.get("rows") or {}
    tables = {}
    for name, table in profile.tables.items():
        n = int(next(iter(table.values())).shape[0]) if table else 0
        a, b = rows.get(name, (0, n))
        if not 0 <= a <= b <= n:
            raise ProfileError(f"rank {entry.get('rank')}: rows {a}..{b} of table {name!r} out of range")
        tables[name] = {c: col[a:b] for c, col in table.items()}
    ops0, host0 = rows.get("ops", (0, 0))[0], rows.get("host", (0, 0))[0]
    tables["instructions"]["op"] = _rebased(tables["instructions"]["op"], ops0)
    tables["collectives"]["op"] = _rebased(tables["collectives"]["op"], ops0)
    tables["host"]["op"] = _rebased(tables["host"]["op"], ops0)
    tables["ops"]["host"] = _rebased(tables["ops"]["host"], host0)
    meta = {k: v for k, v in profile.meta.items() if k != "ranks"}
    rank = int(entry["rank"])
    meta.update({"rank": rank, "core": int(entry.get("core", 0)), "node": int(entry.get("node", 0)),
                 "pipeline_stage": int(entry.get("stage", 0)),
                 "pipeline_stages": int(entry.get("stages", 1)), "device_pid": rank,
                 "host_pid": HOST_PID_BASE + rank, "rank_label": rank_label(entry),
                 "host_name": f"Host ({rank_label(entry)})",
                 "description": entry.get("description", meta.get("description", ""))})
    view = Profile(meta, profile.strings, tables)
    view.validate(f"rank {rank}")
    return view


def rank_views(profile: Profile) -> list[Profile]:
    """One profile per captured rank; a single-rank profile is returned as it is."""
    entries = rank_entries(profile)
    if len(entries) <= 1:
        return [profile]
    return [rank_view(profile, e) for e in entries]


def rank_keys(view: Profile) -> dict:
    """Leading summary keys naming a rank view's rank and stage ({} for a whole profile)."""
    meta = view.meta
    if "rank" not in meta:
        return {}
    return {"rank": meta["rank"], "pipeline_stage": meta.get("pipeline_stage", 0),
            "pipeline_stages": meta.get("pipeline_stages", 1)}


def parse_rank_selection(text: str) -> str | list[int]:
    """`--ranks` of a script capture: `all`, `first`, `last` or rank numbers like `0,2`."""
    word = text.strip().lower()
    if word in ("all", "first", "last"):
        return word
    try:
        ranks = sorted({int(part) for part in word.split(",")})
    except ValueError:
        raise ProfileError(f"--ranks: expected all, first, last or rank numbers like 0,2, got {text!r}") from None
    if not ranks or ranks[0] < 0:
        raise ProfileError(f"--ranks: rank numbers count from 0, got {text!r}")
    return ranks


def select_ranks(profile: Profile, which: str | list[int]) -> Profile:
    """The profile of the chosen captured ranks only (`parse_rank_selection`'s result), their
    rows kept in order and every row reference rebased; a profile of one rank is its rank 0."""
    entries = rank_entries(profile) or [{"rank": int(profile.meta.get("rank", 0)), "rows": {}}]
    present = [int(e["rank"]) for e in entries]
    if which == "all":
        return profile
    wanted = [present[0]] if which == "first" else [present[-1]] if which == "last" else which
    missing = sorted(set(wanted) - set(present))
    if missing:
        have = ", ".join(map(str, present))
        raise ProfileError(f"--ranks: rank {missing[0]} is not in the capture (ranks: {have})")
    if not rank_entries(profile):
        return profile
    chosen = [e for e in entries if int(e["rank"]) in wanted]
    parts: dict[str, list[dict[str, np.ndarray]]] = {name: [] for name in profile.tables}
    new_entries, first = [], {name: 0 for name in profile.tables}
    for entry in chosen:
        view_rows = {}
        for name, table in profile.tables.items():
            a, b = entry["rows"][name]
            part = {c: col[a:b] for c, col in table.items()}
            parts[name].append(part)
            view_rows[name] = [first[name], first[name] + (b - a)]
        old = entry["rows"]
        for name, col, table_ref in (("instructions", "op", "ops"), ("collectives", "op", "ops"),
                                     ("host", "op", "ops"), ("ops", "host", "host")):
            part = parts[name][-1]
            shift = first[table_ref] - old[table_ref][0]
            part[col] = np.where(part[col] >= 0, part[col] + shift, part[col]).astype(part[col].dtype)
        for name in profile.tables:
            first[name] = view_rows[name][1]
        new_entries.append({**entry, "rows": view_rows})
    tables = {name: {c: np.concatenate([p[c] for p in ps]) for c in profile.tables[name]}
              for name, ps in parts.items()}
    meta = {**profile.meta, "ranks": new_entries}
    out = Profile(meta, profile.strings, tables)
    out.validate("selected ranks")
    return out
