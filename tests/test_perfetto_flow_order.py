"""Perfetto flows point forward: trace processor runs a flow from the first slice it reads with
the flow's id to the next, reading track events by timestamp and file order among equal ones.
An operator whose only instruction is exactly as long as itself (a pipeline send, the input
batch) begins at the instruction's instant; its span must still be read first, as must a host
call that launches an operator at the call's own instant."""
from __future__ import annotations

import collections

import numpy as np
import pytest

from device_model import instance
from device_model.workloads import Placement
from profiler.analysis.ranks import rank_views
from profiler.capture.builtin import capture_workload
from profiler.export.perfetto import SliceStream, write_perfetto

pb = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")

# a flow's source and target, by the kind of track each slice is on
FORWARD = {("host", "operator"), ("operator", "instruction")}


@pytest.fixture(scope="module")
def mlp():
    return capture_workload("mlp:tokens=512,hidden=512,layers=2,microbatches=2",
                            instance("trn2.48xlarge"), Placement(pp=2, dp=4), num_exec=3,
                            nth_exec=2)


def _track_kinds(trace) -> dict[int, str]:
    """Track uuid -> host, operator or instruction (the device's other threads)."""
    hosts = {p.track_descriptor.process.pid for p in trace.packet
             if p.track_descriptor.process.process_name.startswith("Host")}
    kinds = {}
    for p in trace.packet:
        d = p.track_descriptor
        if p.HasField("track_descriptor") and d.HasField("thread"):
            kinds[d.uuid] = ("host" if d.thread.pid in hosts else "operator"
                             if d.thread.thread_name.startswith("Operators") else "instruction")
    return kinds


def _flow_ends(data: bytes, kinds: dict[int, str] | None = None) -> dict[int, list[str]]:
    """Flow id -> the kinds of the tracks of its slices, in the order trace processor reads
    their BEGINs."""
    trace = pb.Trace.FromString(data)
    kinds = _track_kinds(trace) if kinds is None else kinds
    begins = [(p.timestamp, i, p.track_event) for i, p in enumerate(trace.packet)
              if p.HasField("track_event") and p.track_event.type == 1]
    ends = collections.defaultdict(list)
    for _, _, e in sorted(begins, key=lambda b: b[:2]):
        for flow in e.flow_ids:
            ends[flow].append(kinds[e.track_uuid])
    return ends


def _single_equal_instruction(view) -> int:
    """How many operators have one instruction that starts and ends with them."""
    ops, ins = view.table("ops"), view.table("instructions")
    alone = np.bincount(ins["op"], minlength=ops["start"].size)[ins["op"]] == 1
    same = (ins["start"] == ops["start"][ins["op"]]) & (ins["end"] == ops["end"][ins["op"]])
    return int((alone & same).sum())


def test_the_profile_has_operators_as_long_as_their_only_instruction(mlp):
    assert all(_single_equal_instruction(v) for v in rank_views(mlp))


def test_every_flow_starts_at_its_source(mlp, tmp_path):
    path = tmp_path / "mlp.pftrace"
    write_perfetto(mlp, str(path))
    ends = _flow_ends(path.read_bytes())
    assert ends and all(len(kinds) == 2 for kinds in ends.values())
    backwards = {f: kinds for f, kinds in ends.items() if tuple(kinds) not in FORWARD}
    assert not backwards


def test_a_source_opens_first_at_one_instant_whatever_the_batch_order():
    """Targets added before their sources, equally long or longer, at the same timestamp."""
    stream = SliceStream()
    one = np.ones(1, np.int64)
    flow = (np.ones(1, np.uint64),)
    launch = (np.full(1, 2, np.uint64),)
    stream.add(10 * one, 5 * one, 3 * one, one, flow, tier=2)             # the instruction
    stream.add(10 * one, 5 * one, 2 * one, one, flow + launch, tier=1)    # its operator
    stream.add(10 * one, 0 * one, 1 * one, one, launch, tier=0)           # the launching call
    kinds = {1: "host", 2: "operator", 3: "instruction"}
    assert {f: tuple(k) for f, k in _flow_ends(stream.tobytes(), kinds).items()} == {
        1: ("operator", "instruction"), 2: ("host", "operator")}
