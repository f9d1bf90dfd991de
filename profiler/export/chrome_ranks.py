"""Chrome traces of several captured ranks.

- `write_chrome_dir`: one Kineto-shaped file per rank in a folder
  (`rank_<r>.pt.trace.json[.gz]`), each with its rank in `distributedInfo`, as a distributed
  PyTorch job leaves them: the layout HolisticTraceAnalysis (`TraceAnalysis(trace_dir=...)`)
  and TensorBoard's profiler read. The folder appears whole or not at all, so neither reads a
  job with ranks missing.
- `write_chrome_ranks`: every rank in one file (one NeuronCore process and one host process per
  rank, on one time axis) for a trace viewer. Each rank's view (`ranks.rank_view`) names its
  processes (NeuronCore pid = the rank, host pid = 2^20 + rank); `chrome.trace_ids` gives every
  rank its own range of correlation and flow ids, and the ranks' event streams
  (`chrome.chrome_events`) are joined into one `traceEvents` array.

Views are written one after the other, each only when reached, so one rank's layout is in memory
at a time. A single-rank profile gives exactly `chrome.write_chrome`'s trace.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Iterator

from .chrome import EVENTS_END, chrome_events, chrome_header, trace_ids, world_size, write_chrome
from ..model.profile import Profile
from ..analysis.ranks import rank_views
from .traceio import replacing_folder, write_atomic

# what write_chrome_dir writes, and only that (ASCII digits: a replaced folder loses only these)
# rank_<r>.pt.trace.json: the suffix TensorBoard's profiler plugin reads a folder's workers by
# (Kineto's own), which HTA reads too; rank_<r>.json, an earlier export's, is replaced as well
RANK_FILE = re.compile(r"rank_\d+(\.pt\.trace)?\.json(\.gz)?", re.ASCII)


def _joined(views: list[Profile], counted: list[int], world: int) -> Iterator[bytes]:
    ids = trace_ids(views)
    yield chrome_header(views, ids, world)
    for i, (view, view_ids) in enumerate(zip(views, ids)):
        if i:
            yield b",\n"
        chunks, n = chrome_events(view, view_ids)
        counted.append(n)
        yield from chunks
    yield EVENTS_END


def write_chrome_ranks(profile: Profile, path: str) -> int:
    """`chrome.write_chrome`, with one NeuronCore and one host process per captured rank; returns
    the number of events."""
    counted: list[int] = []
    write_atomic(path, _joined(rank_views(profile), counted, world_size(profile)))
    return sum(counted)


def write_chrome_dir(profile: Profile, folder: str | os.PathLike, gzip: bool = False) -> tuple[list[Path], int]:
    """One trace file per captured rank in `folder`, which appears whole or not at all: written
    into a temporary folder beside it, then renamed. An existing `folder` is replaced only if it
    holds nothing but rank traces (an earlier export: its stale ranks go too); anything else is
    refused in one line. Returns the files and the number of events."""
    world = world_size(profile)
    paths, total = [], 0
    with replacing_folder(folder, RANK_FILE.fullmatch, "rank traces") as tmp:
        for view in rank_views(profile):
            rank = int(view.meta.get("rank", (view.meta.get("ranks") or [{}])[0].get("rank", 0)))
            name = f"rank_{rank}.pt.trace.json{'.gz' if gzip else ''}"
            total += write_chrome(view, str(tmp / name), world)
            paths.append(Path(folder) / name)
    return paths, total
