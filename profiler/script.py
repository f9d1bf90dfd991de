"""`neuron-profile capture -- python SCRIPT ARGS`: run a PyTorch script for real under the
recorder, in a child Python process, and write its profile.

The child (`python -m profiler.script CONFIG -- SCRIPT ARGS`) runs the script with `runpy` as
`__main__`; whatever way the script ends (return, sys.exit, an exception, SIGINT), the profile of
what ran is written, and the child exits with the script's exit code, which capture returns.
A `torchrun ...` command goes to profiler/script_ranks.py instead (one recorded worker per rank).
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import orjson

from device_model.errors import SpecError


def parse_command(command: list[str]) -> tuple[str, str, list[str]]:
    """('path'|'module', target, args) from `python SCRIPT ARGS` or `python -m MODULE ARGS`."""
    cmd = list(command)
    if cmd and Path(cmd[0]).name.startswith("python"):
        cmd = cmd[1:]
    if not cmd:
        raise SpecError("no script to run after --; expected `python SCRIPT [ARGS]`")
    if cmd[0] == "-m":
        if len(cmd) < 2:
            raise SpecError("`python -m` needs a module name")
        return "module", cmd[1], cmd[2:]
    if cmd[0].startswith("-"):
        raise SpecError(f"unsupported python option {cmd[0]!r}; expected `python SCRIPT [ARGS]`")
    script = Path(cmd[0])
    if not script.is_file():
        if shutil.which(cmd[0]) and not cmd[0].endswith(".py"):
            raise SpecError(f"{cmd[0]!r} is not a Python script; capture runs `python SCRIPT [ARGS]`")
        raise SpecError(f"script not found: {cmd[0]}")
    return "path", str(script), cmd[1:]


def capture_script(command: list[str], inst, args) -> int:
    from .script_ranks import capture_torchrun, is_torchrun
    if is_torchrun(command):
        return capture_torchrun(command, inst, args)
    kind, target, script_args = parse_command(command)
    config = {"instance": inst.spec.name, "lnc": inst.lnc, "out": str(args.session_file),
              "auto_cast": args.auto_cast, "detail_steps": args.detail_steps, "kind": kind,
              "target": target, "progress": args.progress, "command": " ".join(command),
              "dp": args.dp or 1, "recorder": args.recorder, "steps": args.steps}
    child = [sys.executable, "-m", "profiler.script", orjson.dumps(config).decode(), "--", target, *script_args]
    return wait_child(subprocess.Popen(child, env=child_env()))


def child_env(**extra: str) -> dict[str, str]:
    """This environment, with the profiler importable in the child and `extra` added."""
    env = {**os.environ, **extra}
    root = str(Path(__file__).resolve().parent.parent)
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


# --- the child ------------------------------------------------------------------------------

def run_target(kind: str, target: str, args: list[str]) -> int:
    import runpy
    sys.argv = [target, *args]
    try:
        if kind == "module":
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            sys.path.insert(0, str(Path(target).resolve().parent))
            runpy.run_path(target, run_name="__main__")
        return 0
    except SystemExit as e:
        code = e.code
        if code is None:
            return 0
        if isinstance(code, int):
            return code
        print(code, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        _note("neuron-profile: script interrupted; writing the profile of what ran")
        return 130
    except BaseException:
        import traceback
        traceback.print_exc()          # the script's own error, shown as Python would
        _note("neuron-profile: script raised; writing the profile of what ran")
        return 1


def _note(line: str) -> None:
    """One write per line, so the lines of torchrun's unbuffered workers do not interleave."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def _interrupt_once(signum, frame) -> None:
    """The first SIGINT stops the script; more (e.g. one forwarded by the parent) are ignored."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt


def record_run(config: dict, target_argv: list[str], stop_signals: tuple) -> tuple[int, object] | None:
    """Run the target under the configured recorder: (its exit code, the recording), or None after
    one line on stderr when no recorder can start. Once the target ends, `stop_signals` are
    ignored, so the recording is always handed back."""
    from .torch_capture import start_recorder
    try:
        recorder = start_recorder(config.get("recorder"), steps=config.get("steps"))
    except ValueError as e:
        print(f"neuron-profile: error: {e}", file=sys.stderr)
        return None
    try:
        code = run_target(config["kind"], target_argv[0], target_argv[1:])
    finally:
        for sig in stop_signals:
            signal.signal(sig, signal.SIG_IGN)
        recording = recorder.stop()
    return code, recording


def child_main(argv: list[str]) -> int:
    signal.signal(signal.SIGINT, _interrupt_once)
    config = orjson.loads(argv[0])
    target_argv = argv[2:]
    from device_model import instance
    from device_model.workloads.micro import place_ranks
    from .fileformat import save
    from .progress import progress_bar
    from .torch_mapping import recording_to_profile
    inst = instance(config["instance"], config["lnc"])
    ran = record_run(config, target_argv, (signal.SIGINT,))
    if ran is None:
        return 2
    code, recording = ran
    world = _world_size() or config["dp"]
    group = place_ranks(inst, world) if world > 1 else None
    try:
        with progress_bar(config.get("progress", "auto"), len(recording.steps()),
                          f"simulating steps on {inst.spec.name}") as tick:
            profile = recording_to_profile(recording, inst, auto_cast=config["auto_cast"],
                                           detail_steps=config["detail_steps"], command=config["command"],
                                           group=group, meta={"world_size": world}, progress=tick)
        path = save(profile, config["out"])
    except (SpecError, ValueError) as e:
        print(f"neuron-profile: error: {e}", file=sys.stderr)
        return code or 2
    print(f"neuron-profile: wrote {path} ({profile.rows('steps')} steps, {profile.rows('ops')} operators, "
          f"{profile.rows('instructions')} instructions; script exit code {code})", file=sys.stderr)
    return code


def _world_size() -> int:
    try:
        import torch.distributed as dist
        return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 0
    except Exception:          # a script may leave the process group half torn down
        return 0


if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1:]))
