"""`neuron-profile capture -- torchrun [OPTIONS] SCRIPT ARGS`: every worker of a torchrun job
recorded for real, and the ranks merged into one profile.

The command (also `python -m torch.distributed.run ...`) is read with torchrun's own parser and
run as `PYTHON -m torch.distributed.run OPTIONS BOOT/ENTRY --worker SCRIPT ARGS` (ENTRY:
bootstrap.ENTRY), PYTHON being torchrun's own interpreter (its script's shebang, or the Python
named before `-m torch.distributed.run`), with the recording modules on its path from the
capture's private folder (bootstrap.py), so each worker records itself
(profiler/capture/torchrun_worker.py) and leaves a part file (profiler/capture/rank_part.py)
there.
After torchrun ends, the parts become one profile of several ranks (`meta["ranks"]`, as the
built-in pipeline captures have): rank = torch rank, each its own NeuronCore where
`place_ranks` puts a world of that size on the instance, its collectives over that group, and
its measured CPU timeline as its host process, all on one clock (CLOCK_MONOTONIC is shared
by the processes of one machine). The capture's exit code is torchrun's, or 128 + the signal
that stopped the capture.
"""
from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass
from pathlib import Path

from .. import console
from ..errors import ProfilerUsageError
from .child_process import CaptureFolder, child_env, run_child
from .interpreter import resolve_program, torchrun_interpreter
from .options import CaptureOptions, ScriptTask
from .output import ChildExit, check_destination, finish_capture

LAUNCHER_MODULE = "torch.distributed.run"


@dataclass(frozen=True, slots=True)
class TorchrunCommand:
    options: tuple[str, ...]      # torchrun's own options as given, less -m/--module
    kind: str                     # "path" or "module", like script_launch.parse_command's
    target: str
    args: tuple[str, ...]
    local_world: int              # workers torchrun starts on this machine
    single_node: bool


def is_torchrun(command: list[str]) -> bool:
    if not command:
        return False
    if Path(command[0]).name == "torchrun":
        return True
    return (Path(command[0]).name.startswith("python") and command[1:3] == ["-m", LAUNCHER_MODULE])


def _launcher_args(command: list[str]) -> list[str]:
    return command[1:] if Path(command[0]).name == "torchrun" else command[3:]


def interpreter_of(command: list[str]) -> str:
    """The Python that runs torchrun, and so its workers: the one its script starts, or the one
    named before `-m torch.distributed.run`."""
    if Path(command[0]).name == "torchrun":
        return torchrun_interpreter(command[0])
    return resolve_program(command[0])


def _parser():
    from torch.distributed.run import get_args_parser
    parser = get_args_parser()

    def error(message: str):
        raise ProfilerUsageError(f"torchrun: {message}")
    parser.error = error          # one line instead of argparse's usage and exit
    return parser


def parse_torchrun(command: list[str]) -> TorchrunCommand:
    from torch.distributed.run import determine_local_world_size
    tokens = _launcher_args(command)
    try:
        with contextlib.redirect_stdout(io.StringIO()):       # --help's text is no capture's output
            ns = _parser().parse_args(tokens)
    except SystemExit:            # --help and the like
        raise ProfilerUsageError("torchrun: nothing to capture; expected `torchrun [OPTIONS] SCRIPT [ARGS]`") from None
    if ns.no_python:
        raise ProfilerUsageError("torchrun --no-python starts a program, not Python workers; capture needs "
                        "`torchrun [OPTIONS] SCRIPT.py [ARGS]`")
    if ns.run_path:
        raise ProfilerUsageError("torchrun --run-path runs the script in the launcher itself; capture runs "
                        "it in workers (drop --run-path)")
    script_at = len(tokens) - len(ns.training_script_args) - 1
    if script_at < 0 or tokens[script_at] != ns.training_script:
        raise ProfilerUsageError(f"torchrun: cannot find the training script {ns.training_script!r} in the command")
    try:
        local_world = determine_local_world_size(ns.nproc_per_node)
    except ValueError as e:
        raise ProfilerUsageError(f"torchrun --nproc-per-node: {e}") from None
    if local_world < 1:
        raise ProfilerUsageError(f"torchrun --nproc-per-node must be at least 1, not {ns.nproc_per_node}")
    if not ns.module and not Path(ns.training_script).is_file():
        raise ProfilerUsageError(f"script not found: {ns.training_script}")
    options = tuple(t for t in tokens[:script_at] if t not in ("-m", "--module"))
    return TorchrunCommand(options, "module" if ns.module else "path", ns.training_script,
                           tuple(ns.training_script_args), local_world,
                           str(ns.nnodes).split(":")[-1] == "1")


def capture_torchrun(command: list[str], inst, options: CaptureOptions) -> int:
    """Run the torchrun job with every worker recorded and write one profile of its ranks to
    `options.session_file`; torchrun's exit code."""
    from .torchrun_worker import ENV
    cmd = parse_torchrun(command)
    if options.dp:
        raise ProfilerUsageError("--dp is for single-process scripts; under torchrun the ranks are its workers")
    interpreter = interpreter_of(command)
    check_destination(options.session_file)
    from .bootstrap import ENTRY, make_bootstrap
    with CaptureFolder.create() as work:
        task = ScriptTask(options=options, kind=cmd.kind, target=cmd.target, parts=str(work.parts))
        boot = make_bootstrap(work.boot)
        launch = [interpreter, "-m", LAUNCHER_MODULE, *cmd.options, str(boot / ENTRY), "--worker", cmd.target,
                  *cmd.args]
        # torchrun in a session of its own: a Ctrl-C (or SIGTERM, SIGHUP) reaches it once, passed
        # on by run_child, and it stops its workers, each in a session of its own, and waits for
        # them to write their parts
        code, signum = run_child(launch, child_env(boot, **{ENV: task.to_json()}),
                                 new_session=True)
        return _write_profile(cmd, work, inst, options, " ".join(command), code, signum)


def _write_profile(cmd: TorchrunCommand, work: CaptureFolder, inst, options: CaptureOptions, command: str,
                   code: int, signum: int | None) -> int:
    from .rank_part import load_part
    child = ChildExit(code, signum, "torchrun")
    parts = []
    for path in sorted(work.parts.glob("rank-*.npz")):
        try:
            parts.append(load_part(path))
        except (OSError, ValueError) as e:
            console.note(f"{e}; left out of the profile")
    recorded = {p.local_rank for p in parts}
    for local in range(cmd.local_world):
        if local not in recorded:
            who = f"rank {local}" if cmd.single_node else f"local rank {local}"
            console.note(f"{who} wrote no recording; left out of the profile")
    if not parts:
        console.error("no worker wrote a recording; no profile written")
        return child.final or 2
    return finish_capture(lambda: parts_to_profile(parts, inst, auto_cast=options.auto_cast,
                                                   detail_steps=options.detail_steps, command=command),
                          options.session_file, work, child, plural=True,
                          described=lambda p: f"{console.count(len(parts), 'rank')}, {console.contents(p)}")


def rank_placement(inst, rank: int) -> dict:
    """Where `rank` sits, as place_ranks fills cores (device by device): its core on its server
    and that server (an UltraServer's four servers counted apart, as torchrun counts nodes)."""
    per_node = inst.device.logical_cores(inst.lnc) * inst.spec.devices_per_node
    return {"core": rank % per_node, "node": rank // per_node}


def parts_to_profile(parts: list, inst, *, auto_cast: str = "matmult", detail_steps: int = 4,
                     command: str = ""):
    """One profile of the workers' recordings, a rank each, in rank order."""
    from device_model.workloads.micro import place_ranks
    from ..model.builder import ProfileBuilder
    from .rank_align import align_collectives
    from .to_profile import add_recording
    parts = sorted(parts, key=lambda p: p.rank)
    ranks = [p.rank for p in parts]
    if len(set(ranks)) != len(ranks):
        raise ValueError(f"two workers recorded the same rank ({ranks})")
    world = max(max(p.world_size for p in parts), ranks[-1] + 1)
    group = place_ranks(inst, world) if world > 1 else None
    recorders = sorted({p.recording.recorder for p in parts})
    builder = ProfileBuilder(inst, "pytorch", command=command, auto_cast=auto_cast, recorder=",".join(recorders),
                             host_name=f"Host: {command} (measured CPU)", world_size=world,
                             launcher="torchrun")
    t0 = min(p.recording.t0 for p in parts)
    for part in parts:
        builder.begin_rank(part.rank, stage=0, stages=1, **rank_placement(inst, part.rank),
                           local_rank=part.local_rank, pid=part.pid, exit_code=part.exit_code,
                           description=f"torchrun worker {part.rank} of {world} (pid {part.pid}, "
                                       f"exit code {part.exit_code})")
        add_recording(builder, part.recording, inst, auto_cast=auto_cast, detail_steps=detail_steps,
                      group=group, t0=t0, main_thread=part.main_thread,
                      stopped=part.exit_code != 0)
    # each worker was simulated on its own clock: a collective ends when its last rank joins
    return align_collectives(builder.build(), inst.costs.exec_overhead_s)
