"""One torchrun worker under `neuron-profile capture -- torchrun ...`.

torchrun starts every worker as
`python BOOT/_neuronscope_capture/neuronscope_record.py --worker SCRIPT ARGS`;
the capture's task (a `ScriptTask` as JSON) comes in $NEURONSCOPE_RANK_CAPTURE. A worker records
itself like the single-process child (profiler/capture/script_child.py) and, whatever way the
script ends (return, exit, an exception, SIGINT, SIGHUP, or the SIGTERM torchrun sends the other
workers when one fails), writes its recording, unmapped, as one part file
(profiler/capture/rank_part.py). Mapping onto the chip is left to the capture, so a worker that
torchrun stops (and kills 30 s later) only has one file to write.
"""
from __future__ import annotations

import os
import sys

from .. import console
from .script_child import install_stop_handlers, record_run, torch_problem

ENV = "NEURONSCOPE_RANK_CAPTURE"


def _identity() -> tuple[int, int, int]:
    """(rank, local rank, world size), as torchrun set them for this worker."""
    env = os.environ
    return int(env.get("RANK", 0)), int(env.get("LOCAL_RANK", 0)), int(env.get("WORLD_SIZE", 1))


def worker_main(argv: list[str]) -> int:
    import threading
    install_stop_handlers()
    problem = torch_problem()
    if problem:
        console.error(problem)
        return 2
    from .options import ScriptTask
    from .rank_part import RankPart, save_part
    try:
        task = ScriptTask.from_json(os.environ[ENV])
    except (KeyError, ValueError):
        console.error(f"${ENV} is not set; this worker runs under "
                      f"`{console.PROG} capture -- torchrun ...`")
        return 2
    main_thread = threading.get_ident()   # the recording's; a watchdog thread may do the saving

    def save(code: int, recording) -> None:
        rank, local_rank, world = _identity()
        save_part(task.parts, RankPart(rank, local_rank, world, os.getpid(), code, main_thread,
                                       recording))
    code = record_run(task, argv, save)     # the part gets written whatever
    return 2 if code is None else code


if __name__ == "__main__":
    sys.exit(worker_main(sys.argv[1:]))
