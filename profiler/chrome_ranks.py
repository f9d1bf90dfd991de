"""Chrome trace of several captured ranks: one NeuronCore process and one host process per rank.

Each rank's view (`ranks.rank_view`) is written by the single-core writer (`chrome.chrome_chunks`)
and the streams are joined into one `traceEvents` array. The single-core writer puts every
NeuronCore event on pid 0 and numbers flows from the view's own rows, so each rank's stream is
relabelled: `"pid":0,` becomes the rank's pid, and its flow ids get a rank prefix
(`<index>000<id>`: unique for up to 999 ranks since ids are positive). Replacing bytes is exact
here: in JSON a double quote inside a string is always escaped, so `"pid":0,` or
`{"ph":"s","id":` only occur as the writer's own keys, and no key spans a newline (raw newlines
never occur inside JSON strings), which is where the stream is cut between replacements.
"""
from __future__ import annotations

from typing import Iterable, Iterator

from .chrome import chrome_chunks, write_chrome
from .model import Profile, ProfileError
from .ranks import rank_views
from .traceio import write_atomic

EVENTS_OPEN = b'"traceEvents":[\n'
EVENTS_CLOSE = b"\n]}\n"
MAX_RANKS = 999


def _replaced(chunks: Iterable[bytes], pairs: list[tuple[bytes, bytes]]) -> Iterator[bytes]:
    """`chunks` with every `old` replaced by `new`, cutting only after newlines."""
    carry = b""
    for chunk in chunks:
        buf = carry + chunk
        cut = buf.rfind(b"\n") + 1
        out, carry = buf[:cut], buf[cut:]
        for old, new in pairs:
            out = out.replace(old, new)
        if out:
            yield out
    for old, new in pairs:
        carry = carry.replace(old, new)
    if carry:
        yield carry


def _events_only(chunks: Iterable[bytes], keep_head: bool, keep_tail: bool) -> Iterator[bytes]:
    """A trace stream without its header (up to `"traceEvents":[`) and/or its closing `]}`;
    events of one stream are followed by `,` when the array continues."""
    it = iter(chunks)
    first = next(it)
    at = first.find(EVENTS_OPEN)
    if at < 0:
        raise ProfileError("chrome writer: trace header not found")
    pending = first if keep_head else first[at + len(EVENTS_OPEN):]
    for chunk in it:
        if pending:
            yield pending
        pending = chunk
    if keep_tail:
        yield pending
        return
    if not pending.endswith(EVENTS_CLOSE):
        raise ProfileError("chrome writer: trace does not end with the events array")
    yield pending[:-len(EVENTS_CLOSE)] + b",\n"


def _relabelling(view: Profile, index: int) -> list[tuple[bytes, bytes]]:
    pid = int(view.meta["device_pid"])
    pairs = [(b'"pid":0,', b'"pid":%d,' % pid),
             (b'"args":{"name":"NeuronCore 0 (',
              b'"args":{"name":"NeuronCore %d (%s, ' % (pid, view.meta["rank_label"].encode()))]
    if index:
        pairs += [(b'{"ph":"%s","id":' % ph, b'{"ph":"%s","id":%d000' % (ph, index)) for ph in (b"s", b"f")]
    return pairs


def _joined(views: list[Profile], counted: list[int]) -> Iterator[bytes]:
    """The ranks' streams one after the other, each written only when reached."""
    for i, view in enumerate(views):
        chunks, n = chrome_chunks(view)
        counted.append(n)
        yield from _replaced(_events_only(chunks, i == 0, i == len(views) - 1), _relabelling(view, i))


def write_chrome_ranks(profile: Profile, path: str) -> int:
    """`chrome.write_chrome`, with one NeuronCore and one host process per captured rank."""
    views = rank_views(profile)
    if len(views) == 1:
        return write_chrome(profile, path)
    if len(views) > MAX_RANKS:
        raise ProfileError(f"a Chrome trace holds at most {MAX_RANKS} ranks, this profile has {len(views)}")
    counted: list[int] = []
    write_atomic(path, _joined(views, counted))
    return sum(counted)
