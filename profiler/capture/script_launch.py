"""`neuron-profile capture -- PYTHON SCRIPT ARGS`: run a PyTorch script for real under the
recorder, in a child process of the interpreter the user named, and write its profile.

The child (`PYTHON BOOT/neuronscope_record.py TASK -- SCRIPT ARGS`, which runs
profiler/capture/script_child.py) imports only the recording modules, copied into the capture's
private folder (bootstrap.py), so the script's own virtualenv needs no neuronscope. It runs the
script with `runpy` as `__main__` and, whatever way the script ends (return, sys.exit, an
exception, SIGINT, SIGTERM, SIGHUP), leaves its recording as a part file; this process then maps
it onto the chip and writes the profile. The exit code is the script's, or 128 + the signal that
stopped the capture. A `torchrun ...` command goes to profiler/capture/torchrun_launch.py
instead (one recorded worker per rank).
"""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from .. import console
from ..errors import ProfilerUsageError
from .child_process import CaptureFolder, child_env, run_child
from .interpreter import looks_like_python, resolve_program
from .options import CaptureOptions, ScriptTask
from .output import ChildExit, check_destination, finish_capture

def parse_command(command: list[str]) -> tuple[str, str, str, list[str]]:
    """(interpreter, 'path'|'module', target, args) from `PYTHON SCRIPT ARGS`, `PYTHON -m MODULE
    ARGS` or a bare `SCRIPT.py ARGS` (run with neuron-profile's own Python)."""
    cmd = list(command)
    interpreter = sys.executable
    if cmd and looks_like_python(cmd[0]) and not cmd[0].endswith(".py"):
        interpreter = resolve_program(cmd[0])
        cmd = cmd[1:]
    if not cmd:
        raise ProfilerUsageError("no script to run after --; expected `python SCRIPT [ARGS]`")
    if cmd[0] == "-m":
        if len(cmd) < 2:
            raise ProfilerUsageError("`python -m` needs a module name")
        return interpreter, "module", cmd[1], cmd[2:]
    if cmd[0].startswith("-"):
        raise ProfilerUsageError(f"unsupported python option {cmd[0]!r}; expected `python SCRIPT [ARGS]`")
    script = Path(cmd[0])
    if not script.is_file():
        raise ProfilerUsageError(_not_runnable(cmd))
    return interpreter, "path", str(script), cmd[1:]


def _not_runnable(cmd: list[str]) -> str:
    """Why `cmd[0]`, no script file, cannot be run: a program that is not Python, a missing
    interpreter (it comes before a script or `-m`: `-- pyhton3 train.py`), or a missing script."""
    word = cmd[0]
    if word.endswith(".py"):
        return f"script not found: {word}"
    if shutil.which(word):
        return f"{word!r} is not a Python script; capture runs `python SCRIPT [ARGS]`"
    if cmd[1:] and (cmd[1] == "-m" or cmd[1].endswith(".py") or Path(cmd[1]).is_file()):
        where = "" if os.sep in word else " on the PATH"
        target = " ".join(cmd[1:3] if cmd[1] == "-m" else cmd[1:2])
        return f"{word}: no such program{where} (the interpreter for {target})"
    return f"script not found: {word}"


def capture_script(command: list[str], inst, options: CaptureOptions) -> int:
    """Record `command` (a Python script or a torchrun job) and write its profile to
    `options.session_file`; the script's exit code (torchrun's for a job), or 128 + the signal
    that stopped the capture."""
    from .torchrun_launch import capture_torchrun, is_torchrun
    if is_torchrun(command):
        return capture_torchrun(command, inst, options)
    interpreter, kind, target, script_args = parse_command(command)
    check_destination(options.session_file)
    from .bootstrap import ENTRY, make_bootstrap
    with CaptureFolder.create() as work:
        task = ScriptTask(options=options, kind=kind, target=target, command=" ".join(command),
                          instance=inst.spec.name, lnc=inst.lnc, parts=str(work.parts))
        boot = make_bootstrap(work.boot)
        child = [interpreter, str(boot / ENTRY), task.to_json(), "--", target, *script_args]
        code, signum = run_child(child, child_env(boot))
        return _write_profile(task, inst, work, ChildExit(code, signum, "script"))


def _write_profile(task: ScriptTask, inst, work: CaptureFolder, child: ChildExit) -> int:
    from device_model.workloads.micro import place_ranks
    from ..progress import progress_bar
    from .rank_part import load_part, part_path
    from .to_profile import recording_to_profile
    options = task.options
    path = part_path(work.parts, 0)
    if not path.exists():
        if child.code != 2:             # 2: the child said why in one line
            console.error(f"the script's process wrote no recording (exit code {child.code}); no profile written")
        return child.final or 2

    def build():
        part = load_part(path)
        world = part.world_size or options.dp or 1
        group = place_ranks(inst, world) if world > 1 else None
        meta = {"world_size": world}
        ran = len(part.recording.boundaries)        # the steps the script ended
        if options.steps is not None and options.steps[0] > ran + 1:
            window = f"{options.steps[0]}-{options.steps[1] or ''}"
            meta["notes"] = [f"--steps {window} was never reached: the script ended "
                             f"{ran} step{'s' if ran != 1 else ''}"]
        with progress_bar(options.progress, 0, f"simulating steps on {inst.spec.name}") as tick:
            return recording_to_profile(part.recording, inst, auto_cast=options.auto_cast,
                                        detail_steps=options.detail_steps, command=task.command,
                                        group=group, meta=meta, progress=tick,
                                        host_pid=part.pid, main_thread=part.main_thread,
                                        stopped=part.exit_code != 0)
    return finish_capture(build, options.session_file, work, child)
