"""Fault syntax (parse, format round trip, bad input) and the seeded injector."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from device_model import instance
from device_model.errors import SpecError
from device_model.runtime.faults import (FAULT_KINDS, FaultInjector, format_fault, parse_duration,
                                 parse_fault)


def test_examples_from_the_docs():
    f = parse_fault("mem_ecc_uncorrected@30s")
    assert (f.kind, f.at, f.rate, f.every) == ("mem_ecc_uncorrected", 30.0, None, None)
    f = parse_fault("numerical@rate=0.01")
    assert f.rate == 0.01 and f.per_exec
    f = parse_fault("sram_ecc_corrected@rate=2/m,device=3")
    assert f.rate == pytest.approx(2 / 60) and not f.per_exec and f.device == 3
    f = parse_fault("mem_ecc_corrected@rate=0.5")          # ECC rates default to per second
    assert not f.per_exec and f.rate == 0.5
    f = parse_fault("timeout@every=1.5m,app=serve,count=2")
    assert (f.every, f.at, f.app, f.count) == (90.0, 90.0, "serve", 2)
    assert parse_duration("250ms") == pytest.approx(0.25)
    assert parse_duration("2h") == 7200.0


@pytest.mark.parametrize("text, needle", [
    ("bitflip@3s", "allowed: mem_ecc_corrected"),
    ("numerical", "needs @TIME"),
    ("numerical@soon", "bad fault time"),
    ("numerical@-3s", "non-negative"),
    ("numerical@rate=2", "probability"),
    ("numerical@rate=0.1/week", "allowed: exec"),
    ("numerical@3s,colour=red", "allowed: app=TAG"),
    ("numerical@3s,count=0", "positive"),
    ("numerical@every=0s", "at least 1ms"),
    # each failed execution is queued: more were silently cut to 1,000
    ("numerical@2s,count=5000", "at most 1,000 failed executions"),
    # a 64-bit counter near its top left the runtime unreadable for the rest of the run
    ("mem_ecc_corrected@2s,count=2000000000000000000", "at most 1,000,000,000 ECC events"),
    ("sram_ecc_corrected@every=1e-8s", "at least 1ms"),     # one draw per event: it hung
])
def test_bad_faults_name_the_problem(text, needle):
    with pytest.raises(SpecError, match=needle):
        parse_fault(text)


@settings(max_examples=200)
@given(kind=st.sampled_from(FAULT_KINDS),
       when=st.one_of(st.tuples(st.just("at"), st.floats(0, 1e6)),
                      st.tuples(st.just("every"), st.floats(0.001, 1e6)),
                      st.tuples(st.just("rate_exec"), st.floats(0, 1)),
                      st.tuples(st.just("rate_s"), st.floats(0, 1e3))),
       app=st.one_of(st.none(), st.from_regex(r"[a-z][a-z0-9_-]{0,10}", fullmatch=True)),
       device=st.one_of(st.none(), st.integers(0, 63)), count=st.integers(1, 5))
def test_format_parses_back(kind, when, app, device, count):
    how, value = when
    text = {"at": f"{kind}@{value!r}s", "every": f"{kind}@every={value!r}s",
            "rate_exec": f"{kind}@rate={value!r}/exec", "rate_s": f"{kind}@rate={value!r}/s"}[how]
    text += (f",app={app}" if app else "") + (f",device={device}" if device is not None else "")
    text += f",count={count}"
    spec = parse_fault(text)
    again = parse_fault(format_fault(spec))
    assert again.kind == spec.kind and again.app == spec.app and again.device == spec.device
    for field in ("at", "every", "rate"):
        a, b = getattr(spec, field), getattr(again, field)
        assert (a is None and b is None) or a == pytest.approx(b)
    assert again.per_exec == spec.per_exec and again.count == spec.count


def test_timed_and_periodic_events_fire_once_each():
    specs = [parse_fault("mem_ecc_uncorrected@30s,device=2"), parse_fault("sram_ecc_corrected@every=10s")]
    inj = FaultInjector(specs, np.random.default_rng(0), devices=(2, 3))
    fired = []
    for t0 in np.arange(0.0, 60.0, 0.7):
        fired += [(e.kind, e.device, e.count) for e in inj.due(t0, t0 + 0.7)]
    assert fired.count(("mem_ecc_uncorrected", 2, 1)) == 1
    assert sum(c for k, _, c in fired if k == "sram_ecc_corrected") == 6
    assert FaultInjector([parse_fault("numerical@1s,device=9")], np.random.default_rng(0), (0,)).specs == ()


def test_rates_are_seeded_and_close_to_expectation():
    def draws(seed):
        inj = FaultInjector([parse_fault("numerical@rate=0.01"), parse_fault("mem_ecc_corrected@rate=5/s")],
                            np.random.default_rng(seed), devices=(0, 1))
        exec_faults = sum(e.count for e in inj.per_execution(100_000))
        ecc = sum(e.count for e in inj.due(0.0, 1000.0))
        return exec_faults, ecc
    assert draws(1) == draws(1)
    assert draws(1) != draws(2)
    exec_faults, ecc = draws(3)
    assert 800 < exec_faults < 1200
    assert 4500 < ecc < 5500


def test_a_fault_that_could_never_fire_or_would_crash_is_refused_at_start(monkeypatch):
    from device_model.runtime.launcher import plan
    inst = instance("trn1.32xlarge")
    apps = ["a=matmul:m=512,k=512,n=512@0-1", "b=matmul:m=512,k=512,n=512@2-3"]
    with pytest.raises(SpecError, match="app 'a' runs on no core of device 1"):
        plan(inst, apps, ["mem_ecc_uncorrected@1s,device=1,app=a"])
    assert plan(inst, apps, ["mem_ecc_uncorrected@1s,device=1,app=b"])
    monkeypatch.setenv("NEURON_RT_EXEC_TIMEOUT", "0")     # divided the runtime by zero
    with pytest.raises(SpecError, match="NEURON_RT_EXEC_TIMEOUT='0' must be positive"):
        plan(inst, apps, [])
