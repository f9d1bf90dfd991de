"""`advise` ranks findings by one measure, the time at stake per step in seconds: a host
data-loading stall of tens of milliseconds per step comes before device findings worth
microseconds, though its share of the (much longer) host step is smaller than theirs of the
device step."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import orjson
import pytest

from device_model import instance
from profiler.analysis.advise import advise, findings_json, findings_text
from profiler.capture.builtin import capture_workload

HOST_STEP = 0.1         # s: a script's wall-clock step
DATA_WAIT = 0.02        # s of it waiting on the DataLoader: 20% of the host step


def _with_data_waits(profile, host_step: float, wait: float):
    """`profile` with each step's host span `host_step` long, the first `wait` of it a
    DataLoader wait (what a script capture records), the device untouched."""
    strings = profile.strings + ("DataLoader.__next__", "data_loading")
    name, cat = len(strings) - 2, len(strings) - 1
    steps = dict(profile.table("steps"))
    n = steps["step"].size
    starts = np.arange(n) * host_step
    steps["host_start"], steps["host_end"] = starts, starts + host_step
    host = profile.table("host")
    waits = {"name_s": np.full(n, name), "cat_s": np.full(n, cat), "tid": np.zeros(n),
             "start": starts, "end": starts + wait, "op": np.full(n, -1), "step": steps["step"]}
    host = {c: np.r_[host[c], waits[c].astype(host[c].dtype)] for c in host}
    return replace(profile, strings=strings, tables={**profile.tables, "steps": steps, "host": host})


@pytest.fixture(scope="module")
def stalled():
    device = capture_workload("mlp:tokens=512,hidden=1024,layers=2", instance("trn2.48xlarge"),
                              num_exec=2, nth_exec=2)
    return _with_data_waits(device, HOST_STEP, DATA_WAIT)


def test_the_data_loading_stall_ranks_first(stalled):
    found = advise(stalled)
    assert found[0].rule == "host-data-loading"
    first = found[0]
    assert first.basis == "host" and first.impact == pytest.approx(DATA_WAIT / HOST_STEP)
    assert first.seconds == pytest.approx(DATA_WAIT)
    device = [f for f in found if f.basis == "device"]
    assert any(f.impact > first.impact for f in device)     # a larger share, of much less time
    assert all(f.seconds < 1e-2 for f in device)


def test_findings_are_ordered_by_time_at_stake_per_step(stalled):
    found = advise(stalled)
    seconds = [f.seconds for f in found]
    assert seconds == sorted(seconds, reverse=True) and all(s > 0 for s in seconds)
    doc = orjson.loads(findings_json(found, 2))
    assert [f["seconds"] for f in doc["findings"]] == seconds
    assert {f["basis"] for f in doc["findings"]} == {"host", "device"}


def test_text_says_time_per_step_and_whose_step_the_share_is_of(stalled):
    text = findings_text(advise(stalled), 2)
    first = " ".join(text.split("\n   evidence")[0].split())
    assert "(about 20.000 ms per step at stake, 20% of the host step)" in first
    assert "of the device step" in text
