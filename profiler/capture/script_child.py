"""The child process of `neuron-profile capture -- python SCRIPT ARGS`: runs the script under the
recorder and, whatever way the script ends, leaves its recording as a part file for the capture
to map and write.

Started as `PYTHON BOOT/neuronscope_record.py TASK -- SCRIPT ARGS` (bootstrap.py) with the
interpreter the user named, TASK being a `ScriptTask` as JSON. It imports only what bootstrap.CHILD_FILES
copies (standard library, numpy, torch), so the script's own environment needs no neuronscope.
The first SIGINT, SIGTERM or SIGHUP stops the script (as a KeyboardInterrupt in it); later ones
are ignored while the part is written, and the exit code is then 128 + that signal.
`record_run` is shared with the torchrun workers (profiler/capture/torchrun_worker.py).
"""
from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable

from .. import console

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
MIN_TORCH = (2, 0)          # global module and optimizer-step hooks
MIN_PYTHON = (3, 10)        # slotted dataclasses

_stopped_by: list[int] = []
_in_target = [False]


def _stop_once(signum, frame) -> None:
    """The first stop signal stops the script; later ones are ignored while the part is written."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    _stopped_by.append(signum)
    if _in_target[0]:
        raise KeyboardInterrupt


def install_stop_handlers() -> None:
    for sig in STOP_SIGNALS:
        signal.signal(sig, _stop_once)


def stopped_by() -> int | None:
    return _stopped_by[0] if _stopped_by else None


def _version(text: str) -> tuple[int, ...]:
    import re
    return tuple(int(v) for v in re.findall(r"\d+", text.split("+")[0])[:2])


def torch_problem() -> str | None:
    """Why this interpreter cannot record (an old Python, no torch or a torch too old, no
    numpy), in one line, or None."""
    here = sys.executable
    if sys.version_info < MIN_PYTHON:
        return (f"{here} is Python {sys.version.split()[0]}; recording needs Python "
                f"{'.'.join(map(str, MIN_PYTHON))} or later")
    try:
        import torch
    except ImportError as e:
        return f"{here} has no torch to record ({e}); install torch in that environment"
    version = getattr(torch, "__version__", "unknown")
    if _version(str(version)) < MIN_TORCH:
        return (f"{here} has torch {version}; recording needs torch "
                f"{'.'.join(map(str, MIN_TORCH))} or later")
    try:
        import numpy  # noqa: F401
    except ImportError:
        return f"{here} has no numpy, which the recorder needs; install numpy in that environment"
    return None


class CannotRun(Exception):
    """The target never started (`-m` naming no module that can run, a script that does not
    compile): one line says why, and no profile is written."""


def _script_frames(tb):
    """The traceback from the script's first frame on: this module's and runpy's frames, which
    Python's own `python SCRIPT` does not show, left off. None when the error came from them."""
    import runpy
    ours = {os.path.abspath(__file__), runpy.__file__, "<frozen runpy>"}
    while tb is not None and tb.tb_frame.f_code.co_filename in ours:
        tb = tb.tb_next
    return tb


def _run_file(path: str) -> None:
    """Run a script file as `python SCRIPT` does: as module __main__, with `__file__` absolute
    and sys.argv[0] as typed (runpy.run_path would make sys.argv[0] absolute too)."""
    import builtins
    import types
    from importlib.machinery import SourceFileLoader
    with open(path, "rb") as fh:
        # bytes: the file's coding cookie applies; dont_inherit: this module's own `from
        # __future__ import annotations` must not become the script's
        code = compile(fh.read(), path, "exec", dont_inherit=True)
    main = types.ModuleType("__main__")
    main.__file__, main.__cached__, main.__builtins__ = path, None, builtins
    main.__loader__ = SourceFileLoader("__main__", path)
    if sys.version_info < (3, 14):    # its __main__ starts with one; 3.14 builds it lazily
        main.__annotations__ = {}
    saved = sys.modules["__main__"]
    sys.modules["__main__"] = main    # pickling (a spawned DataLoader worker) finds its classes
    try:
        exec(code, main.__dict__)
    finally:
        sys.modules["__main__"] = saved


def run_target(kind: str, target: str, args: list[str]) -> int:
    import runpy
    sys.argv = [target, *args]
    _in_target[0] = True
    try:
        if stopped_by():               # stopped while the recorder started: run nothing
            raise KeyboardInterrupt
        if kind == "module":
            sys.path.insert(0, os.getcwd())           # as `python -m MODULE` has it
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            path = os.path.abspath(target)            # __file__ absolute, as `python SCRIPT` has it
            sys.path.insert(0, os.path.dirname(path))
            if os.path.isfile(path):
                _run_file(path)
            else:                                     # a folder or zip with a __main__.py
                runpy.run_path(path, run_name="__main__")
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
        signum = stopped_by() or signal.SIGINT
        console.note(f"script stopped by {signal.Signals(signum).name}; writing the profile of what ran")
        return 128 + signum
    except BaseException as e:
        import traceback
        shown = _script_frames(e.__traceback__)
        if shown is None:          # raised before any of the script ran: finding or compiling it
            if kind == "module" and isinstance(e, ImportError):
                raise CannotRun(f"python -m {target}: {e}") from None
            traceback.print_exception(type(e), e, None)
            raise CannotRun("the script did not start; no profile written") from None
        traceback.print_exception(type(e), e, shown)   # the script's own error, as Python shows it
        console.note("script raised; writing the profile of what ran")
        return 1
    finally:
        _in_target[0] = False


def record_run(task, target_argv: list[str], save: Callable[[int, object], None]) -> int | None:
    """Run the target under the configured recorder and hand `save` its exit code and the
    recording; the code is returned. None after one line on stderr when no recorder can start
    or the target cannot (nothing is saved then). Once the target ends, the stop signals are
    ignored, so the recording is always handed over; a stop signal makes the code 128 + it. A
    script that ends with os._exit (training scripts do, to skip hanging worker shutdowns) runs
    no finally block: the recording is saved on the way out."""
    from .recorders import start_recorder
    try:
        recorder = start_recorder(task.options.recorder, steps=task.options.steps, note=console.note)
    except ValueError as e:
        console.error(str(e))
        return None

    def finish():
        if threading.current_thread() is threading.main_thread():  # signal() refuses others
            for sig in STOP_SIGNALS:
                signal.signal(sig, signal.SIG_IGN)
        recording = recorder.stop()
        from .recording import compiled_graph_count
        recording.compiled_graphs = compiled_graph_count()
        return recording

    real_exit, main_pid = os._exit, os.getpid()

    def exit_now(status: int) -> None:
        # a forked worker (a DataLoader's, multiprocessing's) leaves by os._exit too: not ours;
        # a watchdog thread's os._exit saves as the main thread's would. Whatever the saving
        # meets (a full disk), the process exits as the script asked.
        try:
            if os.getpid() == main_pid and os._exit is exit_now:
                os._exit = real_exit
                save(_exit_code(status), finish())
        finally:
            real_exit(status)

    os._exit = exit_now
    code: int | None = None
    try:
        code = run_target(task.kind, target_argv[0], target_argv[1:])
    except CannotRun as e:
        console.error(str(e))
    finally:
        if os._exit is exit_now:
            os._exit = real_exit
        recording = finish()
    if code is None:
        return None
    code = _exit_code(code)
    save(code, recording)
    return code


def _exit_code(code: int) -> int:
    return 128 + stopped_by() if stopped_by() else code


def child_main(argv: list[str]) -> int:
    install_stop_handlers()
    problem = torch_problem()
    if problem:
        console.error(problem)
        return 2
    from .options import ScriptTask
    from .rank_part import RankPart, save_part
    task = ScriptTask.from_json(argv[0])
    main_thread = threading.get_ident()   # the recording's; a watchdog thread may do the saving

    def save(code: int, recording) -> None:
        save_part(task.parts, RankPart(0, 0, _world_size(), os.getpid(), code, main_thread,
                                       recording))
    code = record_run(task, argv[2:], save)
    return 2 if code is None else code


def _world_size() -> int:
    """The script's process group size, or 0 when it made none."""
    try:
        import torch.distributed as dist
        return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 0
    except Exception:          # a script may leave the process group half torn down
        return 0


if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1:]))
