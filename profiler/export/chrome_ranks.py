"""Chrome trace of several captured ranks: one NeuronCore process and one host process per rank.

Each rank's view (`ranks.rank_view`) names its processes (NeuronCore pid = the rank, host pid =
2^20 + rank); `chrome.trace_ids` gives every rank its own range of correlation and flow ids, and
the ranks' event streams (`chrome.chrome_events`) are joined into one `traceEvents` array. Views
are written one after the other, each only when reached, so one rank's layout is in memory at a
time. A single-rank profile gives exactly `chrome.write_chrome`'s trace.
"""
from __future__ import annotations

from typing import Iterator

from .chrome import EVENTS_END, chrome_events, chrome_header, trace_ids
from ..model.profile import Profile
from ..analysis.ranks import rank_views
from .traceio import write_atomic


def _joined(views: list[Profile], counted: list[int]) -> Iterator[bytes]:
    ids = trace_ids(views)
    yield chrome_header(views, ids)
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
    write_atomic(path, _joined(rank_views(profile), counted))
    return sum(counted)
