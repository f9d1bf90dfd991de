"""Starting and waiting for the processes a script capture runs (the script's own, or torchrun):
the environment they get, and their exit code once they have written what they write."""
from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path


def child_env(**extra: str) -> dict[str, str]:
    """This environment, with the profiler importable in the child and `extra` added."""
    env = {**os.environ, **extra}
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH", "")]))
    return env


def wait_child(proc: subprocess.Popen) -> int:
    """The child's exit code, once it has ended (and written what it writes)."""
    forwarded = False
    while True:
        try:
            return _exit_code(proc.wait())
        except KeyboardInterrupt:
            # A terminal's Ctrl-C reaches the child too; a SIGINT sent to this process alone is
            # passed on once. Either way, wait for the child to write the profile.
            if not forwarded:
                forwarded = True
                try:
                    proc.send_signal(signal.SIGINT)
                except ProcessLookupError:
                    pass


def _exit_code(rc: int) -> int:
    return 128 - rc if rc < 0 else rc


