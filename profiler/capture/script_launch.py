"""`neuron-profile capture -- python SCRIPT ARGS`: run a PyTorch script for real under the
recorder, in a child Python process, and write its profile.

The child (`python -m profiler.capture.script_child TASK -- SCRIPT ARGS`, profiler/capture/script_child.py)
runs the script with `runpy` as `__main__`; whatever way the script ends (return, sys.exit, an
exception, SIGINT), the profile of what ran is written, and the child exits with the script's
exit code, which capture returns. A `torchrun ...` command goes to
profiler/capture/torchrun_launch.py instead (one recorded worker per rank).
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from ..errors import ProfilerUsageError
from .child_process import child_env, wait_child
from .options import CaptureOptions, ScriptTask

CHILD_MODULE = "profiler.capture.script_child"


def parse_command(command: list[str]) -> tuple[str, str, list[str]]:
    """('path'|'module', target, args) from `python SCRIPT ARGS` or `python -m MODULE ARGS`."""
    cmd = list(command)
    if cmd and Path(cmd[0]).name.startswith("python"):
        cmd = cmd[1:]
    if not cmd:
        raise ProfilerUsageError("no script to run after --; expected `python SCRIPT [ARGS]`")
    if cmd[0] == "-m":
        if len(cmd) < 2:
            raise ProfilerUsageError("`python -m` needs a module name")
        return "module", cmd[1], cmd[2:]
    if cmd[0].startswith("-"):
        raise ProfilerUsageError(f"unsupported python option {cmd[0]!r}; expected `python SCRIPT [ARGS]`")
    script = Path(cmd[0])
    if not script.is_file():
        if shutil.which(cmd[0]) and not cmd[0].endswith(".py"):
            raise ProfilerUsageError(f"{cmd[0]!r} is not a Python script; capture runs `python SCRIPT [ARGS]`")
        raise ProfilerUsageError(f"script not found: {cmd[0]}")
    return "path", str(script), cmd[1:]


def capture_script(command: list[str], inst, options: CaptureOptions) -> int:
    """Record `command` (a Python script or a torchrun job) and write its profile to
    `options.session_file`; the script's exit code (torchrun's for a job)."""
    from .torchrun_launch import capture_torchrun, is_torchrun
    if is_torchrun(command):
        return capture_torchrun(command, inst, options)
    kind, target, script_args = parse_command(command)
    task = ScriptTask(options=options, kind=kind, target=target, command=" ".join(command),
                      instance=inst.spec.name, lnc=inst.lnc)
    child = [sys.executable, "-m", CHILD_MODULE, task.to_json(), "--", target, *script_args]
    return wait_child(subprocess.Popen(child, env=child_env()))
