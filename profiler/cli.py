"""`neuron-profile`: capture, view, diff and advise (AWS's command names and flags, §4)."""
from __future__ import annotations

import argparse
import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from device_model.cliargs import non_negative_int, positive_int as _positive
from device_model.errors import SpecError
from device_model.fileio import stderr_or_null

from . import __version__
from .capture.options import DEFAULT_SESSION, RECORDER_KINDS, CaptureOptions
from .errors import ProfilerUsageError
from .model.profile import ProfileError

FORMATS = ("summary-text", "summary-json", "json", "chrome", "perfetto")



def _path_text(text: str) -> str:
    """A path option's text: an empty one is a usage error (it fell back to the default)."""
    if not text:
        raise argparse.ArgumentTypeError("an empty path")
    return text

def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="neuron-profile",
                                description="Capture Trainium runs on the chip model and analyse them.")
    p.add_argument("--version", action="version", version=f"neuron-profile {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    _capture_parser(sub)
    _view_parser(sub)
    d = sub.add_parser("diff", help="compare two profiles per operator and per engine")
    d.add_argument("a", metavar="A", help="baseline profile")
    d.add_argument("b", metavar="B", help="profile to compare")
    d.add_argument("--by", choices=("name", "kind"), default="name", help="group operators by")
    d.add_argument("--limit", type=_positive, default=20, help="operator rows to show")
    d.add_argument("--json", action="store_true", help="print JSON")
    a = sub.add_parser("advise", help="ranked findings with evidence and a fix")
    a.add_argument("-s", "--session-file", required=True, metavar="PROFILE")
    a.add_argument("--json", action="store_true", help="print JSON")
    return p


def _capture_parser(sub) -> None:
    from .capture.builtin_plans import available
    c = sub.add_parser(
        "capture", help="capture a built-in run or a PyTorch script",
        description="Capture a built-in run (--workload) or a real PyTorch script given after "
                    "`--`, e.g. `neuron-profile capture -s out.nsprof -- python train.py`, or a "
                    "torchrun job, every worker a rank: `-- torchrun --nproc-per-node 2 train.py`. "
                    "Workloads: " + "; ".join(f"{k} ({v})" for k, v in available().items()))
    c.add_argument("-s", "--session-file", default=DEFAULT_SESSION, metavar="OUT", type=_path_text,
                   help=f"profile to write (default {DEFAULT_SESSION})")
    c.add_argument("--workload", "-w", metavar="SPEC", help="NAME[:key=value,...], e.g. mlp:layers=4")
    c.add_argument("--instance", "-i", default="trn2.48xlarge", metavar="TYPE")
    c.add_argument("--lnc", type=int, choices=(1, 2), help="logical NeuronCore config")
    c.add_argument("--cores", type=_positive, metavar="N", help="logical cores of the job (default: all)")
    c.add_argument("--nodes", type=_positive, default=1, metavar="N", help="instances of the job")
    for flag in ("tp", "pp", "dp"):
        c.add_argument(f"--{flag}", type=_positive, metavar="N", help=f"{flag.upper()} degree")
    c.add_argument("--ranks", metavar="WHICH", help="built-in runs: ranks to capture, each its own "
                   "NeuronCore in the profile: stages (one per pipeline stage; default), first, last, "
                   "or stage numbers like 0,3; scripts (torchrun): the ranks to keep: all (default), "
                   "first, last or rank numbers like 0,2")
    c.add_argument("--num-exec", type=_positive, default=1, metavar="N", help="executions to run")
    c.add_argument("--profile-nth-exec", type=_positive, default=1, metavar="N",
                   help="keep every Nth execution at instruction level (2 skips warm-up)")
    c.add_argument("--auto-cast", choices=("none", "matmult", "all"), default="matmult",
                   help="scripts: cast FP32 to BF16 for matmuls (compiler default) or everywhere")
    c.add_argument("--detail-steps", type=non_negative_int, default=4, metavar="N",
                   help="scripts: steps kept at instruction level, the last N (default: %(default)s; "
                        "0 = all); the summaries and advice cover those steps")
    c.add_argument("--progress", choices=("auto", "on", "off"), default="auto")
    c.add_argument("--steps", type=_step_window, metavar="FIRST[-[LAST]]",
                   help="scripts: record only these steps (5, 3-6 or 3-; counted from 1); the script "
                        "runs unrecorded outside them")
    c.add_argument("--recorder", choices=RECORDER_KINDS, default="auto",
                   help="scripts: native (C++ RecordFunction hook, built on first use) or python "
                        "(TorchDispatchMode, no compiler needed); auto falls back to python")


def _step_window(text: str) -> tuple[int, int | None]:
    """`5` (that step), `3-6`, `3-` (from step 3 on)."""
    first, dash, last = text.partition("-")
    try:
        lo = int(first)
        hi = (int(last) if last else None) if dash else lo
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected FIRST, FIRST-LAST or FIRST-, got {text!r}") from None
    if lo < 1 or (hi is not None and hi < lo):
        raise argparse.ArgumentTypeError(f"steps count from 1 and LAST >= FIRST, got {text!r}")
    return lo, hi


# AWS's formats and options for Neuron Explorer's database and web UI, which a file-based
# profile has no use for: named in one line rather than "invalid choice" or "unrecognized".
WEB_UI = ("the database and web UI of AWS's Neuron Explorer are not part of this tool: use "
          "--output-format perfetto or chrome for a timeline, summary-text for the figures")


def _output_format(text: str) -> str:
    if text in FORMATS:
        return text
    if text in ("db", "parquet"):
        raise argparse.ArgumentTypeError(f"{text}: {WEB_UI}")
    raise argparse.ArgumentTypeError(f"{text!r}: one of {', '.join(FORMATS)}")


class _WebUiOption(argparse.Action):
    def __call__(self, parser, namespace, values, option_string=None):
        parser.error(f"{option_string}: {WEB_UI}")


def _view_parser(sub) -> None:
    v = sub.add_parser("view", help="summaries and traces of a profile")
    v.add_argument("-s", "--session-file", required=True, metavar="PROFILE")
    v.add_argument("--output-format", default="summary-text", type=_output_format, metavar="FORMAT",
                   help="one of " + ", ".join(FORMATS))
    for option in ("--db-endpoint", "--db-bucket", "--db-org", "--db-token", "--port"):
        v.add_argument(option, action=_WebUiOption, nargs="?", help=argparse.SUPPRESS)
    v.add_argument("--ingest-only", action=_WebUiOption, nargs=0, help=argparse.SUPPRESS)
    v.add_argument("--output-file", metavar="F", type=_path_text, help="- for stdout; default: stdout for "
                   "summaries, <profile>.json for chrome (a folder <profile>_trace of one "
                   "rank_<r>.pt.trace.json per rank for several ranks, unless F ends in .json or "
                   ".json.gz), "
                   "<profile>.pftrace for perfetto")
    v.add_argument("--limit", type=_positive, default=15, help="top operators to list")


def _instance(args):
    from device_model import instance
    return instance(args.instance, args.lnc)


def cmd_capture(args, script: list[str]) -> int:
    if script and args.workload:
        raise ProfilerUsageError("give either --workload or a script after --, not both")
    script_ranks = None
    if script and args.ranks:
        from .analysis.ranks import parse_rank_selection
        try:
            script_ranks = parse_rank_selection(args.ranks)
        except ProfileError as e:
            raise ProfilerUsageError(str(e)) from None
    if args.steps and not script:
        raise ProfilerUsageError("--steps applies to scripts; built-in runs take --num-exec/--profile-nth-exec")
    if script:
        from .capture.script_launch import capture_script
        path = Path(args.session_file)
        before = _file_identity(path)
        code = capture_script(script, _instance(args), _capture_options(args))
        if script_ranks is not None and _file_identity(path) not in (None, before):
            _keep_ranks(path, script_ranks)
        return code
    if not args.workload:
        raise ProfilerUsageError("nothing to capture: give --workload SPEC or `-- python script.py ...`")
    return _capture_builtin(args)


def _capture_builtin(args) -> int:
    """A built-in run; the first Ctrl-C (or SIGTERM, SIGHUP) stops it once every rank has placed
    the execution being placed and keeps those (exit 128 + the signal), a second one aborts. The
    handlers stay until the profile is written: a signal while it is encoded or written lets
    the write finish (a second aborts it, leaving no file and no temporary)."""
    from device_model.workloads import Placement
    from .capture.builtin import capture_workload
    from .capture.builtin_plans import resolve_placement
    from .capture.output import check_destination, save_or_keep
    from .progress import progress_bar
    check_destination(args.session_file)
    inst = _instance(args)
    # refused before anything runs, and with its degrees filled in the profile names the job
    placement = resolve_placement(args.workload, inst, Placement(
        cores=args.cores, nodes=args.nodes, tp=args.tp, pp=args.pp, dp=args.dp))
    stopped: list[int] = []
    doing = ["capture"]
    with _stop_signals(stopped, doing):
        # the bar's total comes with the first tick
        with progress_bar(args.progress, 0, "capturing") as tick:
            profile = capture_workload(args.workload, inst, placement, num_exec=args.num_exec,
                                       nth_exec=args.profile_nth_exec, ranks=args.ranks,
                                       progress=tick, stop=lambda: bool(stopped))
        doing[0] = "write"
        path = save_or_keep(profile, args.session_file)
    if path is None:
        return 128 + stopped[0] if stopped else 1
    _report_written(path, profile)
    return 128 + stopped[0] if stopped else 0


_STOP_NOTES = {"capture": "stopping after this round of executions (every rank's), keeping those "
                          "simulated (again to abort)",
               "write": "writing the profile first (again to abort)"}


@contextmanager
def _stop_signals(stopped: list[int], doing: list[str]) -> Iterator[None]:
    """While the block runs, the first SIGINT, SIGTERM or SIGHUP is noted in `stopped` (the
    work asks for it) with a line saying what happens (`doing[0]`: capture or write); a second
    raises Stopped (a KeyboardInterrupt). The previous handlers come back when the block ends."""
    import signal
    from . import console

    def stop(signum, frame) -> None:
        if stopped:
            raise Stopped(signum)
        stopped.append(signum)
        console.note(f"{signal.Signals(signum).name}: {_STOP_NOTES[doing[0]]}")

    stops = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.signal(sig, stop) for sig in stops}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _file_identity(path: Path) -> tuple[int, ...] | None:
    """What tells the profile a capture wrote from the file that was there before: a profile is
    written to a new file renamed over the old one, so its inode (and mtime) change. None when
    there is no file."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size


def _keep_ranks(path: Path, which) -> None:
    """Script captures: keep only the `--ranks` chosen in the profile this capture wrote (never
    an older one: a capture that wrote nothing, or wrote elsewhere, leaves it as it was). A rank
    that is not in the capture is named in one line and the whole profile kept."""
    from .analysis.ranks import select_ranks
    from .model.fileformat import load, save
    profile = load(path)
    try:
        kept = select_ranks(profile, which)
    except ProfileError as e:
        print(f"neuron-profile: {e}; kept every rank in {path}", file=sys.stderr)
        return
    if kept is not profile:
        save(kept, path)
        _report_written(path, kept)


def _capture_options(args) -> CaptureOptions:
    return CaptureOptions(session_file=str(args.session_file), auto_cast=args.auto_cast,
                          detail_steps=args.detail_steps, progress=args.progress, dp=args.dp,
                          recorder=args.recorder, steps=args.steps)


def _report_written(path: Path, profile) -> None:
    from .console import contents
    ranks = len(profile.meta.get("ranks") or ())
    each = f"{ranks} ranks, " if ranks > 1 else ""
    print(f"neuron-profile: wrote {path} ({each}{contents(profile)})", file=sys.stderr)


def _write(data: bytes, output: str | None) -> None:
    """`data` to `output` (atomically), or to stdout when it is None or `-`."""
    from .export.traceio import STDOUT, write_atomic
    write_atomic(STDOUT if output is None else output, data)


def _not_the_profile(output: str | None, session_file: str) -> None:
    """A usage error when `output` is the profile being read (its own name, `--output-file`
    naming it, a link to it): the export would replace the profile with its trace."""
    from .export.traceio import STDOUT
    if output is None or output == STDOUT:
        return
    try:
        same = os.path.samefile(output, session_file)
    except OSError:             # no such output yet: it cannot be the profile
        return
    if same:
        raise ProfilerUsageError(f"{output} is the profile being read (-s {session_file}); "
                                 "give another --output-file")


def cmd_view(args) -> int:
    from .console import count
    from .export.traceio import STDOUT
    from .model.fileformat import load
    _not_the_profile(args.output_file, args.session_file)
    profile = load(args.session_file)
    fmt = args.output_format
    if fmt in ("summary-text", "summary-json", "json"):
        from .analysis import render
        data = {"summary-text": lambda: render.summary_text(profile, args.limit).encode(),
                "summary-json": lambda: render.summary_json(profile, args.limit),
                "json": lambda: render.profile_json(profile)}[fmt]()
        _write(data, args.output_file)
        return 0
    stem = str(Path(args.session_file).with_suffix(""))
    out = args.output_file
    if fmt == "chrome":
        from .analysis.ranks import is_multi_rank
        from .export.chrome_ranks import write_chrome_dir, write_chrome_ranks
        one_file = out == STDOUT or (out or "").endswith((".json", ".json.gz"))
        if is_multi_rank(profile) and not one_file:
            # one file per rank, the folder HTA and TensorBoard open
            out = out or stem + "_trace"
            _not_the_profile(out, args.session_file)
            paths, n = write_chrome_dir(profile, out)
            print(f"neuron-profile: wrote {len(paths)} rank traces to {out}{os.sep} "
                  f"({count(n, 'event')})", file=sys.stderr)
            return 0
        out = out or stem + ".json"
        _not_the_profile(out, args.session_file)
        n = write_chrome_ranks(profile, out)
    else:
        from .export.perfetto import write_perfetto
        out = out or stem + ".pftrace"
        _not_the_profile(out, args.session_file)
        n = write_perfetto(profile, out)
    where = "stdout" if out == STDOUT else out
    print(f"neuron-profile: wrote {where} ({count(n, 'event')})", file=sys.stderr)
    return 0


def cmd_diff(args) -> int:
    from .analysis.diff import diff_profiles, diff_text, diff_json
    from .model.fileformat import load
    result = diff_profiles(load(args.a), load(args.b), by=args.by)
    _write(diff_json(result) if args.json else diff_text(result, args.limit).encode(), None)
    return 0


def cmd_advise(args) -> int:
    from .analysis.advise import advise, findings_json, findings_text
    from .model.fileformat import load
    profile = load(args.session_file)
    findings, steps = advise(profile), profile.rows("steps")
    _write(findings_json(findings, steps) if args.json else findings_text(findings, steps).encode(), None)
    return 0


def split_script(argv: list[str]) -> tuple[list[str], list[str]]:
    """`capture [opts] -- cmd args`: the command after the first `--` is the script to run."""
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1:]
    return argv, []


class Stopped(KeyboardInterrupt):
    """A stop signal that ends the command as Ctrl-C does (what was being written is removed,
    exit 128 + the signal): SIGTERM or SIGHUP during view, diff or advise, a second signal
    during a built-in capture."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@contextmanager
def _stop_signals_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP raise Stopped, as SIGINT raises KeyboardInterrupt, so an export they
    stop cleans up after itself instead of dying with a temporary file left behind."""
    import signal

    def stop(signum, frame) -> None:
        raise Stopped(signum)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def main(argv: list[str] | None = None) -> int:
    stderr_or_null()          # before anything could print a diagnostic
    argv = list(sys.argv[1:] if argv is None else argv)
    own, script = split_script(argv)
    args = build_parser().parse_args(own)
    if script and args.command != "capture":
        print("neuron-profile: error: only `capture` runs a command after --", file=sys.stderr)
        return 2
    try:
        if args.command == "capture":
            return cmd_capture(args, script)
        with _stop_signals_interrupt():
            return {"view": cmd_view, "diff": cmd_diff, "advise": cmd_advise}[args.command](args)
    except (ProfilerUsageError, SpecError, ProfileError) as e:
        print(f"neuron-profile: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:         # stdout's reader closed the pipe (`| head`): stop quietly
        return 0
    except OSError as e:
        where = f"{e.filename}: " if e.filename else ""
        print(f"neuron-profile: error: {where}{e.strerror or e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        return _interrupted(e)
    except RuntimeError as e:
        # A stop raised inside a lock's own code (the trace writer thread's start, a full
        # queue's wait) leaves the lock released twice: threading raises "release unlocked
        # lock" with the stop as its context. It is still that stop.
        stop = e.__context__
        if isinstance(stop, KeyboardInterrupt):
            return _interrupted(stop)
        raise


def _interrupted(e: KeyboardInterrupt) -> int:
    import signal
    signum = getattr(e, "signum", signal.SIGINT)
    print(f"neuron-profile: interrupted by {signal.Signals(signum).name}", file=sys.stderr)
    return 128 + signum


if __name__ == "__main__":
    sys.exit(main())
