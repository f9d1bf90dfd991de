"""The runtimes of a foreground owner (`neuron-top --demo`, `neuron-sim run`) end with it, however
it ends: the owner is SIGKILLed here, so nothing of its own can clean up; SIGTERM and SIGHUP end
`neuron-top --demo` as q does."""
from __future__ import annotations

import fcntl
import os
import pty
import signal
import struct
import subprocess
import sys
import termios
import threading
import time

import pytest

from device_model.runtime.launcher import _pid_alive
from device_model.runtime.shm import read_instance

OWNER = """
import sys, time
from monitor.live import simulated_demo_source
source = simulated_demo_source()
from device_model.runtime.shm import read_instance
print(" ".join(str(a["pid"]) for a in read_instance(source.root).apps), flush=True)
time.sleep(600)
"""


def test_demo_runtimes_stop_when_their_owner_is_killed(tmp_path):
    # TMPDIR: the killed owner cannot remove its demo directory; it goes with the test's
    owner = subprocess.Popen([sys.executable, "-c", OWNER], stdout=subprocess.PIPE, text=True,
                             env=dict(os.environ, TMPDIR=str(tmp_path)))
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


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_neuron_top_demo_ends_cleanly_on_sigterm_and_sighup(tmp_path, signum):
    """`kill` or a closed terminal ends `neuron-top --demo` as q does: exit status 128 + the
    signal, its runtimes gone and its private runtime directory removed."""
    env = dict(os.environ, TMPDIR=str(tmp_path), TERM="xterm-256color")
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    app = subprocess.Popen([sys.executable, "-m", "tui.cli", "--demo"], stdin=slave, stdout=slave,
                           stderr=slave, env=env, start_new_session=True)
    os.close(slave)
    threading.Thread(target=_drain, args=(master,), daemon=True).start()
    pids: list[int] = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not pids:
            roots = list(tmp_path.glob("neuron-top-demo-*"))
            desc = read_instance(roots[0]) if roots else None
            apps = desc.apps if desc is not None else []
            pids = [int(a["pid"]) for a in apps] if apps and all(a.get("pid") for a in apps) else []
            time.sleep(0.2)
        assert pids, "neuron-top --demo started no runtimes"
        time.sleep(2)   # on screen, collecting
        app.send_signal(signum)
        assert app.wait(30) == 128 + signum
    finally:
        if app.poll() is None:
            app.kill()
            app.wait()
        os.close(master)
    assert not list(tmp_path.glob("neuron-top-demo-*"))
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and any(_pid_alive(p, "device_model.runtime") for p in pids):
        time.sleep(0.1)
    assert not [p for p in pids if _pid_alive(p, "device_model.runtime")]


def _drain(fd: int) -> None:
    """Read what the app writes to its terminal (a full pty would block it)."""
    while True:
        try:
            if not os.read(fd, 65536):
                return
        except OSError:
            return
