"""The collector reads runtimes only through its backend (monitor/backend.py)."""
from __future__ import annotations

import pytest

from collector_sim import START, Clock, FakeRuntime, write_instance
from monitor.collector import NO_DEVICE_HARDWARE, Collector
from monitor.collector_shm import ShmBackend
from monitor.config import RUNTIME_GROUPS, SYSTEM_GROUPS, MonitorConfig

ALL = MonitorConfig.from_dict({
    "period": "1s", "neuron_runtimes": [{"metrics": [{"type": t} for t in RUNTIME_GROUPS]}],
    "system_metrics": [{"type": t} for t in SYSTEM_GROUPS]})


class Recording:
    """A backend that delegates to another and notes each call."""

    def __init__(self, inner):
        self.inner = inner
        self.unreadable = inner.unreadable
        self.calls: list[str] = []

    @property
    def removed(self):
        return self.inner.removed

    def instance(self):
        self.calls.append("instance")
        return self.inner.instance()

    def runtimes(self):
        self.calls.append("runtimes")
        return self.inner.runtimes()

    def close(self):
        self.calls.append("close")
        self.inner.close()


class Broken:
    """A runtime whose counters cannot be read, from a backend that is not shared memory."""

    class Unreadable(Exception):
        pass

    def __init__(self, path):
        self.pid, self.path = 7, path

    def read(self):
        raise self.Unreadable("checksum mismatch")

    def header(self):
        return {"tag": "broken"}

    def close(self):
        pass


@pytest.fixture
def root(tmp_path):
    path = tmp_path / "rt"
    path.mkdir(mode=0o700)
    return path


def test_an_injected_backend_gives_the_same_report_as_the_default(root):
    write_instance(root)
    rt = FakeRuntime(root, 4242, "train", [0, 1, 2, 3], cores_per_device=4)
    try:
        clock_a, clock_b = Clock(START + 10), Clock(START + 10)
        default = Collector(ALL, root=root, clock=clock_a)
        backend = Recording(ShmBackend(root))
        injected = Collector(ALL, clock=clock_b, backend=backend)
        rt.step(2.0, busy=0.5, flops=1e12)
        clock_a.advance(2.0)
        clock_b.advance(2.0)
        a, b = default.collect(), injected.collect()
        assert [r.pid for r in b.runtimes] == [4242]
        assert b.runtimes[0].neuroncore_counters == a.runtimes[0].neuroncore_counters
        assert b.hardware == a.hardware and b.instance == a.instance
        injected.close()
        assert backend.calls[:2] == ["instance", "runtimes"] and backend.calls[-1] == "close"
        default.close()
    finally:
        rt.close()


def test_a_backend_without_an_instance_reports_no_device(root):
    class Empty:
        unreadable = ()
        removed = 0

        def instance(self):
            return None

        def runtimes(self):
            raise AssertionError("no instance: runtimes are not listed")

        def close(self):
            pass

    report = Collector(ALL, clock=Clock(START), backend=Empty()).collect()
    assert report.runtimes == () and report.hardware == NO_DEVICE_HARDWARE
    # empty metadata says why, as AWS's does when IMDS fails (empty alone read as known)
    assert report.instance.id == "" and "not available" in report.instance.error


def test_a_backend_names_its_own_unreadable_errors(root, tmp_path):
    write_instance(root)
    shm_backend = ShmBackend(root)
    marker = tmp_path / "runtime-7"
    marker.touch()

    class OneBroken:
        unreadable = (Broken.Unreadable,)
        removed = 0

        def instance(self):
            return shm_backend.instance()

        def runtimes(self):
            return [Broken(marker)]

        def close(self):
            pass

    collector = Collector(ALL, clock=Clock(START), backend=OneBroken())
    (entry,) = collector.collect().runtimes
    assert (entry.pid, entry.tag) == (7, "broken")
    assert entry.error == "cannot read runtime counters: checksum mismatch"
    assert collector.corrupt == 1
