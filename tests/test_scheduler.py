"""The vectorised lane recurrence equals the obvious loop; the CLI rejects bad input cleanly."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
from hypothesis import given, settings, strategies as st

from device_model.engine.schedule import place

durations = st.lists(st.floats(0, 1e-3, allow_nan=False), min_size=1, max_size=200)


@settings(max_examples=300, deadline=None)
@given(durations, st.data(), st.floats(0, 1e-3))
def test_place_matches_sequential_loop(dur, data, lane_free):
    ready = data.draw(st.lists(st.floats(0, 2e-3, allow_nan=False), min_size=len(dur), max_size=len(dur)))
    d, r = np.array(dur), np.array(ready)
    got = place(d, r, lane_free)
    prev = lane_free
    for i in range(len(d)):
        prev = d[i] + max(prev, r[i])
        assert abs(got[i] - prev) <= 1e-12 + 1e-9 * prev
    assert np.all(np.diff(got) >= -1e-15)


def neuron_sim(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "device_model.cli", *args],
                          capture_output=True, text=True, timeout=60)


BAD = [
    (["estimate", "--workload", "matmul:m=1,k=1,n=1", "--instance", "trn9.large"], "trn2.48xlarge"),
    (["estimate", "--workload", "matmul:m=1,k=1,n=1", "--instance", "trn1.2xlarge", "--lnc", "2"], "lnc"),
    (["estimate", "--workload", "conv:m=1"], "allowed: "),
    (["estimate", "--workload", "matmul:m=0,k=1,n=1"], "m="),
    (["estimate", "--workload", "matmul:m=1,k=1,n=1,dtype=int4"], "allowed: "),
    (["estimate", "--workload", "matmul:m=1,k=1,n=1,dtype=mxfp8", "--instance", "trn2.48xlarge"], "mxfp8"),
    (["estimate", "--workload", "matmul:m=1,k=1,n=1,q=2"], "unknown option 'q'"),
    (["estimate", "--workload", "matmul:m=1,k=1"], "needs n"),
    (["estimate", "--workload", "allreduce:bytes=1.5,ranks=2"], "bytes"),
]


def test_bad_input_gives_one_line_and_exit_2():
    for args, expected in BAD:
        r = neuron_sim(*args)
        assert r.returncode == 2, (args, r.stderr)
        lines = [line for line in r.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 or "usage:" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr
        assert expected.lower() in r.stderr.lower(), (args, r.stderr)


def test_malformed_override_file_names_the_field(tmp_path):
    bad = tmp_path / "o.toml"
    bad.write_text("[costs]\nmm_min_cycles = 'fast'\n")
    r = neuron_sim("estimate", "--workload", "matmul:m=128,k=128,n=128", "--overrides", str(bad))
    assert r.returncode == 2 and "mm_min_cycles" in r.stderr and "Traceback" not in r.stderr


def test_estimate_json_has_the_documented_keys():
    import orjson
    r = neuron_sim("estimate", "--workload", "matmul:m=2048,k=2048,n=2048", "--json")
    assert r.returncode == 0, r.stderr
    doc = orjson.loads(r.stdout)
    for key in ("time_s", "hfu", "mfu", "mbu", "engine_active"):
        assert key in doc
    assert set(doc["engine_active"]) >= {"tensor", "vector", "scalar", "gpsimd", "dma"}
    r = neuron_sim("estimate", "--workload", "allgather:bytes=64M,ranks=32", "--json")
    doc = orjson.loads(r.stdout)
    assert doc["algbw_gbps"] > 0 and doc["busbw_gbps"] == doc["algbw_gbps"] * 31 / 32


def test_a_collective_waits_for_its_producers_stores():
    """The CC-cores read a collective's input from HBM, so it starts after the producing op's
    output is stored, not when its compute ends."""
    from device_model import CollectiveGroup, Program, instance
    from device_model.engine.isa import L_CC, L_DMA
    p = Program()
    p.binary("add", 1 << 24, "bf16", name="producer")
    p.collective("all_reduce", 1 << 20, CollectiveGroup(2, 2, 1))
    tl = instance("trn1.2xlarge").run(p).timeline
    c = tl.columns
    store_end = c["end"][(c["op"] == 0) & (c["lane"] == L_DMA)].max()
    cc_start = c["start"][c["lane"] == L_CC].min()
    assert cc_start >= store_end
