"""HostSampler: real host metrics through psutil, and the share arithmetic on fixed counters."""
from __future__ import annotations

import collections
import os
import subprocess
import sys
import time

import psutil
import pytest

from monitor.host import CPU_FIELDS, HostSampler
from monitor.report import Report, SystemData

SPIN = "import time\nend = time.process_time() + 30\nwhile time.process_time() < end: pass\n"


def test_real_vcpu_usage_shares_are_ratios_that_sum_to_at_most_one():
    sampler = HostSampler()
    time.sleep(0.3)
    vcpu = sampler.vcpu_usage()
    assert vcpu.error == "" and vcpu.period >= 0.3
    assert len(vcpu.per_cpu) == psutil.cpu_count()
    for shares in [vcpu.average, *vcpu.per_cpu.values()]:
        assert set(shares) == set(CPU_FIELDS)
        assert all(0.0 <= v <= 1.0 for v in shares.values())
        assert sum(shares.values()) <= 1.0 + 1e-9
    assert vcpu.context_switches > 0  # the sleep alone switches context


def test_real_memory_info():
    memory = HostSampler().memory_info()
    vm = psutil.virtual_memory()
    assert memory.error == "" and memory.total_bytes == vm.total
    assert 0 < memory.used_bytes <= memory.total_bytes
    assert memory.swap_used_bytes <= memory.swap_total_bytes


def test_busy_child_process_is_seen_and_vanished_pid_gives_error():
    child = subprocess.Popen([sys.executable, "-c", SPIN])
    try:
        sampler = HostSampler()
        sampler.process_vcpu(child.pid)  # baseline
        time.sleep(0.6)
        vcpu = sampler.process_vcpu(child.pid)
        # process_time() is a syscall, so the spin shows up as user and system time.
        share_of_one_cpu = (vcpu.user + vcpu.system) * psutil.cpu_count()
        assert vcpu.error == "" and vcpu.period >= 0.6
        assert 0.3 < share_of_one_cpu <= 1.05, vcpu  # one spinning thread ~ one vCPU
    finally:
        child.kill()
        child.wait()
    gone = sampler.process_vcpu(child.pid)
    assert gone.error == f"process not found: {child.pid}" and gone.user is None   # not idle


def test_first_sample_of_a_process_covers_its_lifetime():
    vcpu = HostSampler().process_vcpu(os.getpid())
    assert vcpu.error == "" and vcpu.period > 0
    assert 0.0 < vcpu.user + vcpu.system <= 1.0


def test_sample_builds_a_report_ready_system_data():
    sampler = HostSampler()
    system = sampler.sample(["vcpu_usage", "memory_info", "neuron_hw_counters"])
    assert system.vcpu is not None and system.memory is not None and system.hw_counters is None
    empty = Report.from_json(b'{"instance_info": {}}')
    report = Report((), system, empty.instance, empty.hardware)
    again = Report.from_json(report.to_json())
    assert again.system.memory == system.memory
    assert again.system.vcpu.context_switches == system.vcpu.context_switches
    assert sampler.sample([]) == SystemData()


# ---------------------------------------------------------------- fixed counters
CpuTimes = collections.namedtuple("CpuTimes", "user nice system idle iowait irq softirq steal guest guest_nice")
ProcTimes = collections.namedtuple("ProcTimes", "user system")


class FixedHost:
    """A psutil stand-in whose counters the test sets; exercises only the arithmetic."""
    NoSuchProcess = psutil.NoSuchProcess
    AccessDenied = psutil.AccessDenied
    ZombieProcess = psutil.ZombieProcess

    def __init__(self):
        self.cpus = [CpuTimes(0, 0, 0, 0, 0, 0, 0, 0, 0, 0)] * 2
        self.switches = 1000
        self.proc_times = {}

    def cpu_count(self):
        return len(self.cpus)

    def cpu_times(self, percpu):
        return list(self.cpus)

    def cpu_stats(self):
        return collections.namedtuple("S", "ctx_switches")(self.switches)

    def Process(self, pid):  # noqa: N802 (psutil's name)
        host = self

        class Proc:
            def cpu_times(self):
                if pid not in host.proc_times:
                    raise psutil.NoSuchProcess(pid)
                return host.proc_times[pid]

            def create_time(self):
                return 90.0

            def is_running(self):
                return pid in host.proc_times
        if pid not in self.proc_times:
            raise psutil.AccessDenied(pid) if pid == 1 else psutil.NoSuchProcess(pid)
        return Proc()


def test_shares_and_context_switch_delta_from_fixed_counters():
    host, now = FixedHost(), [10.0]
    sampler = HostSampler(host, clock=lambda: now[0], wall_clock=lambda: 100.0)
    # cpu0: 3 s user, 1 s system, 4 s idle, 1 s guest (inside user); cpu1: 2 s iowait, 6 s idle
    host.cpus = [CpuTimes(3, 0, 1, 4, 0, 0, 0, 0, 1, 0), CpuTimes(0, 0, 0, 6, 2, 0, 0, 0, 0, 0)]
    host.switches = 1500
    now[0] = 14.0
    vcpu = sampler.vcpu_usage()
    assert vcpu.period == 4.0 and vcpu.context_switches == 500
    assert vcpu.per_cpu[0] == {"user": 0.375, "nice": 0.0, "system": 0.125, "idle": 0.5,
                               "io_wait": 0.0, "irq": 0.0, "soft_irq": 0.0}
    assert vcpu.per_cpu[1]["io_wait"] == 0.25 and vcpu.per_cpu[1]["idle"] == 0.75
    assert vcpu.average["user"] == 3 / 16 and vcpu.average["idle"] == 10 / 16
    still = sampler.vcpu_usage()  # no tick elapsed: an idle CPU, not a division by zero
    assert still.average["idle"] == 1.0 and still.context_switches == 0


def test_process_shares_of_the_whole_host():
    host, now = FixedHost(), [50.0]
    sampler = HostSampler(host, clock=lambda: now[0], wall_clock=lambda: 100.0)
    host.proc_times[42] = ProcTimes(4.0, 1.0)
    first = sampler.process_vcpu(42)  # started at wall 90 -> 10 s ago, 2 vCPUs
    assert first.period == 10.0 and first.user == 0.2 and first.system == 0.05
    host.proc_times[42] = ProcTimes(6.0, 1.0)
    now[0] = 52.0
    second = sampler.process_vcpu(42)
    assert second.period == 2.0 and second.user == 0.5 and second.system == 0.0
    assert sampler.process_vcpu(1).error == "no permission to read process 1"
    del host.proc_times[42]
    assert sampler.process_vcpu(42).error == "process not found: 42"


def test_forget_drops_exited_pids():
    host, now = FixedHost(), [50.0]
    sampler = HostSampler(host, clock=lambda: now[0], wall_clock=lambda: 100.0)
    host.proc_times.update({1: ProcTimes(0, 0), 2: ProcTimes(0, 0)})
    sampler.process_vcpu(1), sampler.process_vcpu(2)
    sampler.forget(keep=[2])
    assert list(sampler._procs) == [2]


@pytest.mark.parametrize("failure", [OSError("no /proc"), RuntimeError("broken")])
def test_unreadable_host_counters_give_group_errors(failure):
    host = FixedHost()
    sampler = HostSampler(host, clock=lambda: 1.0)

    def broken(*args, **kwargs):
        raise failure
    host.cpu_times = broken
    host.virtual_memory = broken
    assert sampler.vcpu_usage().error.startswith("cannot read CPU times")
    assert sampler.memory_info().error.startswith("cannot read memory info")


# ---------------------------------------------------------------- direct /proc reading
STAT = """cpu  {a} 0 0 0 0 0 0 0 0 0
cpu0 {u0} 0 {s0} {i0} 0 0 0 0 0 0
cpu1 0 {n1} 0 {i1} {w1} 0 0 0 0 0
intr 12345 1 2 3
ctxt {ctxt}
btime 1700000000
"""
MEMINFO = """MemTotal:       16000000 kB
MemFree:         1000000 kB
MemAvailable:    4000000 kB
Buffers:          100000 kB
SwapTotal:       2000000 kB
SwapFree:         500000 kB
"""


def write_proc(root, **ticks):
    values = dict(a=0, u0=0, s0=0, i0=0, n1=0, i1=0, w1=0, ctxt=0) | ticks
    (root / "stat").write_text(STAT.format(**values))
    (root / "meminfo").write_text(MEMINFO)


def test_procfs_root_is_parsed(tmp_path):
    write_proc(tmp_path, ctxt=100)
    now = [0.0]
    sampler = HostSampler(clock=lambda: now[0], procfs=str(tmp_path))
    write_proc(tmp_path, u0=300, s0=100, i0=600, n1=50, i1=900, w1=50, ctxt=175)
    now[0] = 10.0
    vcpu = sampler.vcpu_usage()
    assert vcpu.per_cpu[0]["user"] == 0.3 and vcpu.per_cpu[0]["idle"] == 0.6
    assert vcpu.per_cpu[1] == {"user": 0.0, "nice": 0.05, "system": 0.0, "idle": 0.9,
                               "io_wait": 0.05, "irq": 0.0, "soft_irq": 0.0}
    assert vcpu.context_switches == 75 and vcpu.period == 10.0
    memory = sampler.memory_info()
    assert (memory.total_bytes, memory.used_bytes) == (16000000 * 1024, 12000000 * 1024)
    assert (memory.swap_total_bytes, memory.swap_used_bytes) == (2000000 * 1024, 1500000 * 1024)


def test_broken_procfs_gives_group_errors(tmp_path):
    sampler = HostSampler(procfs=str(tmp_path / "missing"))
    assert sampler.vcpu_usage().error.startswith("cannot read CPU times")
    assert sampler.memory_info().error.startswith("cannot read memory info")
    (tmp_path / "stat").write_text("intr 1\n")
    assert HostSampler(procfs=str(tmp_path)).vcpu_usage().error.startswith("cannot read CPU times")


@pytest.mark.skipif(not os.path.isfile("/proc/stat"), reason="Linux /proc only")
def test_real_procfs_agrees_with_psutil():
    direct, through_psutil = HostSampler(procfs="/proc"), HostSampler(FixedHostProxy())
    assert direct.memory_info().total_bytes == through_psutil.memory_info().total_bytes
    assert direct.memory_info().swap_total_bytes == through_psutil.memory_info().swap_total_bytes
    assert len(direct.vcpu_usage().per_cpu) == len(through_psutil.vcpu_usage().per_cpu)


class FixedHostProxy:
    """The real psutil, but not the psutil module object: forces the psutil code path."""
    def __getattr__(self, name):
        return getattr(psutil, name)
