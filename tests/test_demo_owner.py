"""The runtimes of a foreground owner (`neuron-top --demo`, `neuron-sim run`) end with it, however
it ends: the owner is SIGKILLed here, so nothing of its own can clean up."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from device_model.runtime.launcher import _pid_alive

OWNER = """
import sys, time
from monitor.live import simulated_demo_source
source = simulated_demo_source()
from device_model.runtime.shm import read_instance
print(" ".join(str(a["pid"]) for a in read_instance(source.root).apps), flush=True)
time.sleep(600)
"""


def test_demo_runtimes_stop_when_their_owner_is_killed():
    owner = subprocess.Popen([sys.executable, "-c", OWNER], stdout=subprocess.PIPE, text=True)
    try:
        pids = [int(p) for p in owner.stdout.readline().split()]
        assert pids and all(_pid_alive(p, "device_model.runtime") for p in pids)
    finally:
        os.kill(owner.pid, signal.SIGKILL)
        owner.wait()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and any(_pid_alive(p, "device_model.runtime") for p in pids):
        time.sleep(0.1)
    alive = [p for p in pids if _pid_alive(p, "device_model.runtime")]
    for p in alive:          # leave no process behind whatever the outcome
        os.kill(p, signal.SIGKILL)
    assert not alive, f"runtimes {alive} outlived their killed owner"
