"""``neuron-top``: command line. Builds a Source and runs the app; bad usage exits 2 with one line."""
from __future__ import annotations

import argparse
import math
import os
import pathlib
import re
import shutil
import signal
import stat
import sys
from typing import NoReturn

from monitor.errors import one_line
from monitor.stdout import stderr_or_null
from tui import __version__
from tui.signals import ExitSignals, Terminated

PROG = "neuron-top"
DEMO_SETTLE_S = 15.0    # seconds -1/--json wait for the demo's runtimes to load (loads take <= 10)


class UsageError(Exception):
    """One line for stderr; exit status 2."""


class OneLineParser(argparse.ArgumentParser):
    """argparse's own usage errors (an unknown flag, a value that is not a number) as one line
    like neuron-top's others, status 2: argparse printed its whole usage first, eight lines."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {one_line(message)} (--help lists the options)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog=PROG,
        description="Live NeuronCore, memory, engine and process view of a Trainium host, from the "
                    "simulated instance or any neuron-monitor JSON stream.",
        epilog="examples:  neuron-top --demo   |   neuron-monitor | neuron-top -   |   "
               "neuron-top --replay capture.jsonl --speed 4")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("stream", nargs="?", metavar="-",
                        help="'-' reads a neuron-monitor JSON stream from stdin")
    source.add_argument("--input", metavar="FILE",
                        help="read a neuron-monitor JSON stream from FILE ('-' for stdin)")
    source.add_argument("--replay", metavar="FILE", help="replay a recorded stream at its own pace")
    source.add_argument("--demo", action="store_true",
                        help="start the default simulated trn2.48xlarge instance (a Llama training "
                             "job and an inference service) and show it; it stops on quit")
    source.add_argument("--root", metavar="DIR", type=pathlib.Path,
                        help="the simulated instance `neuron-sim start --root DIR` runs "
                             "(default: the one started without --root, else the demo)")
    from tui import fleet_cli  # the fleet view's flags (--prometheus, --selector, ...)

    fleet_cli.add_arguments(parser, source)
    parser.add_argument("--speed", type=float, default=1.0, metavar="X",
                        help="replay speed factor (default 1.0)")
    parser.add_argument("--loop", action="store_true", help="replay: start over at the end")
    parser.add_argument("--stale-after", type=float, default=None, metavar="SECONDS",
                        help="banner when no report arrives for this long "
                             "(default: 3 report periods, at least 5 s)")
    parser.add_argument("--readonly", action="store_true",
                        help="never send a signal to a runtime (the I/T/K keys are off)")
    once = parser.add_mutually_exclusive_group()
    once.add_argument("-1", "--once", action="store_true",
                      help="print one snapshot of the overview as text and exit (like nvitop -1); "
                           "a file given with --input shows its last report")
    once.add_argument("--json", action="store_true",
                      help="print one report as neuron-monitor JSON (one line) and exit")
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    return parser


def piped_stdin() -> bool:
    """stdin is a pipe, socket or file: data, not a keyboard (a terminal or /dev/null is not)."""
    try:
        mode = os.fstat(0).st_mode
    except (OSError, ValueError):
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISREG(mode) or stat.S_ISSOCK(mode)


def keyboard_from_tty() -> None:
    """Give the UI the terminal (/dev/tty) as fd 0 when stdin is data: the screen reads its
    keys from fd 0, and would take a piped stream's text for key presses."""
    if not piped_stdin():
        return
    try:
        tty_fd = os.open("/dev/tty", os.O_RDWR)
    except OSError:
        raise UsageError("no terminal for keyboard input (/dev/tty); run neuron-top in a "
                         "terminal") from None
    os.dup2(tty_fd, 0)
    os.close(tty_fd)


def _stdin_source(keyboard: bool = True):
    """Take the data stream off fd 0 and give the keyboard (/dev/tty) to the UI instead."""
    from monitor.sources import StreamSource

    if sys.stdin is None or sys.stdin.isatty():
        raise UsageError("stdin is a terminal; pipe a stream in: neuron-monitor | neuron-top -")
    if not keyboard:  # -1 / --json: no UI, no keyboard
        return StreamSource(os.dup(0), "stdin")
    data_fd = os.dup(0)
    try:
        keyboard_from_tty()
    except UsageError:
        os.close(data_fd)
        raise
    return StreamSource(data_fd, "stdin")


def imply_stdin(args: argparse.Namespace) -> None:
    """`neuron-monitor | neuron-top`, without the '-': the screen reads a stream piped in with
    no other source named as with '-' (it used to start the simulated instance and take the
    stream's text for key presses). `-1` and `--json` still need the '-': run from a script or
    over ssh their stdin is often a pipe that is not a stream (a `while read` loop's file)."""
    named = (args.stream, args.input, args.replay, args.prometheus)
    if all(n is None for n in named) and not (args.demo or args.once or args.json) \
            and piped_stdin():
        args.stream = "-"


def _readable_file(name: str) -> pathlib.Path:
    path = pathlib.Path(name)
    if not path.exists():
        raise UsageError(f"{name}: no such file")
    if path.is_dir():
        raise UsageError(f"{name}: is a directory")
    if not os.access(path, os.R_OK):
        raise UsageError(f"{name}: permission denied")
    return path


def _positive_finite(flag: str, value: float) -> None:
    # float() takes "nan" and "inf"; neither is a speed or a duration (--speed=inf replayed
    # without any pause).
    if not (math.isfinite(value) and value > 0):
        raise UsageError(f"{flag} must be > 0 and finite, got {value:g}")


def check_args(args: argparse.Namespace) -> None:
    """Usage errors that need no source: checked before anything starts."""
    _positive_finite("--speed", args.speed)
    if args.stale_after is not None:
        _positive_finite("--stale-after", args.stale_after)
    if args.stream is not None and args.stream != "-":
        raise UsageError(f"unexpected argument {args.stream!r}; use --input FILE or '-' for stdin")
    for flag, name in (("--input", args.input), ("--replay", args.replay)):
        if name == "":
            raise UsageError(f"{flag}: an empty path")   # it read as '.': "is a directory"
        if name is not None and name != "-":
            _readable_file(name)


def _check_flags_have_their_mode(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """A flag of another mode is a usage error, not silently ignored: the fleet view's without
    --prometheus, --loop and --speed without --replay."""
    from tui import fleet_cli
    for name in fleet_cli.FLAGS:
        if getattr(args, name) != parser.get_default(name):
            raise UsageError(f"--{name.replace('_', '-')} is a fleet view flag: it needs "
                             "--prometheus URL")
    if args.replay is None:
        for name in ("loop", "speed"):
            if getattr(args, name) != parser.get_default(name):
                raise UsageError(f"--{name} applies to --replay FILE only")


def check_output(args: argparse.Namespace) -> None:
    """The screen needs a terminal: refuse rather than write escape codes into a pipe or file."""
    if not (args.once or args.json) and not sys.stdout.isatty():
        raise UsageError("stdout is not a terminal; use -1 for one text snapshot or --json for "
                         "one report as JSON")


def make_source(args: argparse.Namespace, signals: ExitSignals | None = None):
    """The source ``args`` name. With ``signals``, an exit signal from the demo's start on is
    only recorded (``signals.received``): the caller closes the source it gets back."""
    from monitor.live import local_instance_source, simulated_demo_source
    from monitor.sources import ReplaySource, StreamSource

    check_args(args)
    name = args.input if args.input is not None else args.stream
    if name == "-":
        return _stdin_source(keyboard=not (args.once or args.json))
    if not (args.once or args.json):
        keyboard_from_tty()                      # a file, a recording or the demo: keys from here
    if name is not None:
        path = _readable_file(name)
        return StreamSource(os.open(path, os.O_RDONLY), name)  # named as given: /dev/null, not null
    if args.replay is not None:
        return ReplaySource(_readable_file(args.replay), speed=args.speed, loop=args.loop)
    if args.root is not None:
        try:
            local = local_instance_source(args.root)
        except ValueError as exc:            # a directory open to others
            raise UsageError(str(exc)) from None
        if local is None:
            raise UsageError(f"no simulated instance runs in {args.root} "
                             f"(neuron-sim start --root {args.root})")
        return local
    if not args.demo:
        local = local_instance_source()          # one `neuron-sim start` left running
        if local is not None:
            return local
    if signals is not None:
        # Interrupted while forking a runtime, the launcher lost track of it: the runtime
        # lived on and kept writing into the directory being removed. So the start-up runs
        # to its end (about a second) and the caller stops the demo at once.
        signals.raising = False
    try:
        source = simulated_demo_source()
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot start the simulated instance: {exc}") from None
    if args.once or args.json:
        # The demo's training job loads its model for a few seconds: a snapshot of that would
        # show its cores idle. The screen shows the loading as it happens.
        source.settle_s = DEMO_SETTLE_S
    return source


def _number_flags() -> tuple[str, ...]:
    from tui import fleet_cli
    return ("--speed", "--stale-after",
            *(f"--{name.replace('_', '-')}" for name in fleet_cli.LIMITS))


_NEGATIVE = re.compile(r"-(\d|\.\d|inf|nan)", re.IGNORECASE | re.ASCII)


def glue_negative_values(argv: list[str]) -> list[str]:
    """`--speed -1` as `--speed=-1`. With `-1` an option of its own, argparse takes any
    negative number for an option and said "expected one argument" instead of the range."""
    out: list[str] = []
    numbers = _number_flags()
    args = iter(argv)
    for arg in args:
        if arg == "--":
            out.append(arg)
            out.extend(args)
            break
        if arg in numbers:
            value = next(args, None)
            if value is not None and _NEGATIVE.match(value):
                out.append(f"{arg}={value}")
                continue
            out.append(arg)
            if value is not None:
                out.append(value)
            continue
        out.append(arg)
    return out


def main(argv: list[str] | None = None) -> int:
    stderr_or_null()          # before anything could print a diagnostic
    parser = build_parser()
    args = parser.parse_args(glue_negative_values(sys.argv[1:] if argv is None else argv))
    from tui import fleet_cli

    imply_stdin(args)          # a piped stream is a named source: $NEURONSCOPE_PROMETHEUS yields
    url = fleet_cli.wanted(args)
    if url is not None:
        if args.once or args.json:
            print(f"{PROG}: -1 and --json print one host's report; the fleet view (--prometheus) "
                  "has no one-shot output: query Prometheus for the series", file=sys.stderr)
            return 2
        try:
            keyboard_from_tty()
        except UsageError as exc:
            print(f"{PROG}: {exc}", file=sys.stderr)
            return 2
        return fleet_cli.run(url, args, PROG)
    try:
        _check_flags_have_their_mode(parser, args)
        check_args(args)
        check_output(args)
    except UsageError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    # Installed before any source starts: a signal while the demo's runtimes start ends
    # neuron-top through the clean-up that removes its directory, as one during the screen does.
    with ExitSignals() as signals:
        try:
            status = _run_source(args, signals)
        except Terminated as exc:
            return exc.status
        except KeyboardInterrupt:   # Ctrl-C before the screen is up (opening a FIFO, -1 waiting)
            return 128 + signal.SIGINT
        return signals.status or status   # one that came during the clean-up, too


def _run_source(args: argparse.Namespace, signals: ExitSignals) -> int:
    try:
        source = make_source(args, signals)
    except UsageError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    try:
        if signals.status is not None:   # held while the demo started: it stops at once
            return signals.status
        if args.once or args.json:
            signals.raising = True   # a read may block: a signal must interrupt it
            return print_once(source, args)
        return _run_app(source, args, signals)
    finally:
        signals.raising = False   # a signal now must not cut the source's clean-up short
        source.close()


def _run_app(source, args: argparse.Namespace, signals: ExitSignals) -> int:
    from tui.app import NeuronTopApp
    from tui.ptree import lineage
    from tui.status import exit_status

    # Only the simulated instance's runtimes are processes on this host; a stream's or a
    # recording's pids belong to another machine, so no parents and no signals for them.
    local = args.input is None and args.stream is None and args.replay is None
    app = NeuronTopApp(source, stale_after=args.stale_after, readonly=args.readonly,
                       lineage=lineage if local else None, early_signal=lambda: signals.received)
    # From here the app's event loop takes the signals over; one before it does is kept for
    # the app to act on when it mounts (an exception inside Textual's start-up would leave the
    # terminal in raw mode).
    signals.raising = False
    try:
        app.run()
    except KeyboardInterrupt:
        pass
    return (app.return_code or signals.status
            or exit_status(app.ended, app.reports_seen, source.live))


def print_once(source, args: argparse.Namespace) -> int:
    """``-1`` / ``--json``: one report to stdout (the last of a file, else the first)."""
    from monitor.held import GroupHold
    from tui.snapshot import no_report_text, overview_text
    from tui.status import malformed_text

    report, failure = None, ""
    hold = GroupHold()   # the last of a file: each group at its latest reading in the file
    try:
        for report in source.reports():
            report = hold.apply(report)
            if source.live or args.replay is not None:
                break
    except (OSError, ValueError) as exc:
        failure = str(exc)
    except KeyboardInterrupt:
        return 130
    if report is None:
        sys.stderr.write(no_report_text(source.label, sum(source.malformed.values()),
                                        source.rejections, failure))
        return 1
    if skipped := malformed_text(source.malformed):    # said, as the status line says it
        print(f"{PROG}: {skipped}", file=sys.stderr)
    if args.json:
        sys.stdout.buffer.write(report.to_json() + b"\n")
    else:
        width = shutil.get_terminal_size((80, 24)).columns
        sys.stdout.write(overview_text(report, width=max(40, width), show_flops=False,
                                       source=source.label))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
