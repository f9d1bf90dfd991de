"""One torchrun worker under `neuron-profile capture -- torchrun ...`.

torchrun starts every worker as `python -m profiler.capture.torchrun_worker SCRIPT ARGS` (its own `-m`);
the capture's task (a `ScriptTask` as JSON) comes in $NEURONSCOPE_RANK_CAPTURE. A worker records
itself like the single-process child (profiler/capture/script_child.py) and, whatever way the
script ends (return, exit, an exception, SIGINT, or the SIGTERM torchrun sends the other workers
when one fails), writes its recording, unmapped, as one part file (profiler/capture/rank_part.py).
Mapping onto the chip is left to the capture, so a worker that torchrun stops (and kills 30 s
later) only has one file to write.
"""
from __future__ import annotations

import os
import signal
import sys

from .. import console
from .options import ScriptTask
from .rank_part import RankPart, save_part

ENV = "NEURONSCOPE_RANK_CAPTURE"
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)

_stopped_by: list[int] = []


def _stop_once(signum, frame) -> None:
    """The first SIGINT or SIGTERM stops the script; later ones are ignored while the part is
    written."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    _stopped_by.append(signum)
    raise KeyboardInterrupt


def _identity() -> tuple[int, int, int]:
    """(rank, local rank, world size), as torchrun set them for this worker."""
    env = os.environ
    return int(env.get("RANK", 0)), int(env.get("LOCAL_RANK", 0)), int(env.get("WORLD_SIZE", 1))


def worker_main(argv: list[str]) -> int:
    import threading
    for sig in STOP_SIGNALS:
        signal.signal(sig, _stop_once)
    try:
        task = ScriptTask.from_json(os.environ[ENV])
    except (KeyError, ValueError):
        console.error(f"${ENV} is not set; this worker runs under "
                      f"`{console.PROG} capture -- torchrun ...`")
        return 2
    from .script_child import record_run
    ran = record_run(task, argv, STOP_SIGNALS)     # the part gets written whatever
    if ran is None:
        return 2
    code, recording = ran
    if _stopped_by:
        code = 128 + _stopped_by[0]
    rank, local_rank, world = _identity()
    save_part(task.parts, RankPart(rank, local_rank, world, os.getpid(), code, threading.get_ident(),
                                        recording))
    return code


if __name__ == "__main__":
    sys.exit(worker_main(sys.argv[1:]))
