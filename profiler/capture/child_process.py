"""Starting and waiting for the process a script capture runs (the script's own, or torchrun):
the environment it gets, the signals passed on to it, and its exit code once it has written
what it writes.

The child is never left behind: SIGINT, SIGTERM and SIGHUP sent to the capture are passed on
to it (each kind once) while the capture waits for it to write its recording, and the kernel
sends it SIGTERM should the capture itself die (PR_SET_PDEATHSIG), so a `kill -9` of the capture
does not leave a script training on under pid 1.
"""
from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_PR_SET_PDEATHSIG = 1


def child_env(bootstrap: str | os.PathLike, **extra: str) -> dict[str, str]:
    """This environment, with the recording child's modules (`bootstrap`) first on the path and
    `extra` added."""
    env = {**os.environ, **extra}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(bootstrap), env.get("PYTHONPATH", "")]))
    return env


@dataclass(slots=True)
class CaptureFolder:
    """A private folder (0700) for one capture: the child's modules (`boot`), the parts the
    recording processes write (`parts`); removed at the end unless `keep()` was called (a
    recording that could not be written where asked stays here)."""
    path: Path
    kept: bool = False

    @classmethod
    def create(cls) -> "CaptureFolder":
        return cls(Path(tempfile.mkdtemp(prefix="neuronscope-capture-")))

    @property
    def boot(self) -> Path:
        return self.path / "boot"

    @property
    def parts(self) -> Path:
        path = self.path / "parts"
        path.mkdir(mode=0o700, exist_ok=True)
        return path

    def keep(self) -> None:
        self.kept = True

    def __enter__(self) -> "CaptureFolder":
        return self

    def __exit__(self, *exc) -> None:
        if not self.kept:
            import shutil
            shutil.rmtree(self.path, ignore_errors=True)


def _die_with_parent() -> None:          # runs in the child between fork and exec
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def run_child(argv: list[str], env: dict[str, str], *, new_session: bool = False) -> tuple[int, int | None]:
    """Run `argv` to its end: (its exit code, the first stop signal the capture received, or
    None). Each stop signal kind received meanwhile is passed on to the child once; with
    `new_session` the child (torchrun) gets a session of its own, so a terminal's Ctrl-C reaches
    it only through here."""
    received: list[int] = []
    proc: subprocess.Popen | None = None

    def forward(signum, frame) -> None:
        if signum in received:
            return
        received.append(signum)
        if proc is not None:
            _send(proc, signum)

    previous = {sig: signal.signal(sig, forward) for sig in STOP_SIGNALS}
    try:
        proc = subprocess.Popen(argv, env=env, start_new_session=new_session, preexec_fn=_die_with_parent)
        for sig in received:           # arrived while it was starting
            _send(proc, sig)
        rc = proc.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if proc is not None and proc.poll() is None:     # only if waiting itself failed
            proc.kill()
            proc.wait()
    return _exit_code(rc), (received[0] if received else None)


def _send(proc: subprocess.Popen, signum: int) -> None:
    try:
        proc.send_signal(signum)
    except ProcessLookupError:
        pass


def _exit_code(rc: int) -> int:
    return 128 - rc if rc < 0 else rc


class Interrupted(Exception):
    """A stop signal arrived while the capture mapped or wrote a recording."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class stop_signals_raise:
    """While the block runs, SIGINT, SIGTERM and SIGHUP raise Interrupted (the first; later ones
    are ignored), so the caller can keep the recording instead of dying with it."""

    def __enter__(self) -> "stop_signals_raise":
        def handler(signum, frame):
            for sig in STOP_SIGNALS:
                signal.signal(sig, signal.SIG_IGN)
            raise Interrupted(signum)
        self.previous = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)
