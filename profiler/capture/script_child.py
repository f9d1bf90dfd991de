"""The child process of `neuron-profile capture -- python SCRIPT ARGS`: runs the script under the
recorder and writes the profile of what ran, whatever way the script ends.

Started as `python -m profiler.capture.script_child TASK -- SCRIPT ARGS`, TASK being a
`ScriptTask` as JSON. `record_run` is shared with the torchrun workers
(profiler/capture/torchrun_worker.py).
"""
from __future__ import annotations

import signal
import sys
from pathlib import Path

from device_model.errors import SpecError

from .. import console
from .options import ScriptTask


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
        console.note("script interrupted; writing the profile of what ran")
        return 130
    except BaseException:
        import traceback
        traceback.print_exc()          # the script's own error, shown as Python would
        console.note("script raised; writing the profile of what ran")
        return 1


def _interrupt_once(signum, frame) -> None:
    """The first SIGINT stops the script; more (e.g. one forwarded by the parent) are ignored."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt


def record_run(task: ScriptTask, target_argv: list[str], stop_signals: tuple) -> tuple[int, object] | None:
    """Run the target under the configured recorder: (its exit code, the recording), or None after
    one line on stderr when no recorder can start. Once the target ends, `stop_signals` are
    ignored, so the recording is always handed back."""
    from .recorders import start_recorder
    try:
        recorder = start_recorder(task.options.recorder, steps=task.options.steps, note=console.note)
    except ValueError as e:
        console.error(str(e))
        return None
    try:
        code = run_target(task.kind, target_argv[0], target_argv[1:])
    finally:
        for sig in stop_signals:
            signal.signal(sig, signal.SIG_IGN)
        recording = recorder.stop()
    return code, recording


def child_main(argv: list[str]) -> int:
    signal.signal(signal.SIGINT, _interrupt_once)
    task = ScriptTask.from_json(argv[0])
    options = task.options
    target_argv = argv[2:]
    from device_model import instance
    from device_model.workloads.micro import place_ranks
    from ..model.fileformat import save
    from ..progress import progress_bar
    from .to_profile import recording_to_profile
    inst = instance(task.instance, task.lnc)
    ran = record_run(task, target_argv, (signal.SIGINT,))
    if ran is None:
        return 2
    code, recording = ran
    world = _world_size() or options.dp or 1
    group = place_ranks(inst, world) if world > 1 else None
    try:
        with progress_bar(options.progress, len(recording.steps()),
                          f"simulating steps on {inst.spec.name}") as tick:
            profile = recording_to_profile(recording, inst, auto_cast=options.auto_cast,
                                           detail_steps=options.detail_steps, command=task.command,
                                           group=group, meta={"world_size": world}, progress=tick)
        path = save(profile, options.session_file)
    except (SpecError, ValueError) as e:
        console.error(str(e))
        return code or 2
    console.note(f"wrote {path} ({profile.rows('steps')} steps, {profile.rows('ops')} operators, "
                 f"{profile.rows('instructions')} instructions; script exit code {code})")
    return code


def _world_size() -> int:
    try:
        import torch.distributed as dist
        return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 0
    except Exception:          # a script may leave the process group half torn down
        return 0


if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1:]))
