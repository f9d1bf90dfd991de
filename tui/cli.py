"""``neuron-top``: command line. Builds a Source and runs the app; bad usage exits 2 with one line."""
from __future__ import annotations

import argparse
import os
import pathlib
import sys

from tui import __version__

PROG = "neuron-top"


class UsageError(Exception):
    """One line for stderr; exit status 2."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
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
    from tui import fleet_cli  # the fleet view's flags (--prometheus, --selector, ...)

    fleet_cli.add_arguments(parser, source)
    parser.add_argument("--speed", type=float, default=1.0, metavar="X",
                        help="replay speed factor (default 1.0)")
    parser.add_argument("--loop", action="store_true", help="replay: start over at the end")
    parser.add_argument("--stale-after", type=float, default=None, metavar="SECONDS",
                        help="banner when no report arrives for this long "
                             "(default: 3 report periods, at least 5 s)")
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    return parser


def _stdin_source():
    """Take the data stream off fd 0 and give the keyboard (/dev/tty) to the UI instead."""
    from monitor.sources import StreamSource

    if sys.stdin is None or sys.stdin.isatty():
        raise UsageError("stdin is a terminal; pipe a stream in: neuron-monitor | neuron-top -")
    data_fd = os.dup(0)
    try:
        tty_fd = os.open("/dev/tty", os.O_RDWR)
    except OSError:
        os.close(data_fd)
        raise UsageError("no terminal for keyboard input (/dev/tty); run neuron-top in a "
                         "terminal") from None
    os.dup2(tty_fd, 0)
    os.close(tty_fd)
    return StreamSource(data_fd, "stdin")


def _readable_file(name: str) -> pathlib.Path:
    path = pathlib.Path(name)
    if not path.exists():
        raise UsageError(f"{name}: no such file")
    if path.is_dir():
        raise UsageError(f"{name}: is a directory")
    if not os.access(path, os.R_OK):
        raise UsageError(f"{name}: permission denied")
    return path


def make_source(args: argparse.Namespace):
    from monitor.live import local_instance_source, simulated_demo_source
    from monitor.sources import ReplaySource, StreamSource

    if args.speed <= 0:
        raise UsageError(f"--speed must be > 0, got {args.speed:g}")
    if args.stale_after is not None and args.stale_after <= 0:
        raise UsageError(f"--stale-after must be > 0, got {args.stale_after:g}")
    if args.stream is not None and args.stream != "-":
        raise UsageError(f"unexpected argument {args.stream!r}; use --input FILE or '-' for stdin")
    name = args.input if args.input is not None else args.stream
    if name == "-":
        return _stdin_source()
    if name is not None:
        path = _readable_file(name)
        return StreamSource(os.open(path, os.O_RDONLY), path.name)
    if args.replay is not None:
        return ReplaySource(_readable_file(args.replay), speed=args.speed, loop=args.loop)
    if not args.demo:
        local = local_instance_source()          # one `neuron-sim start` left running
        if local is not None:
            return local
    try:
        return simulated_demo_source()
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot start the simulated instance: {exc}") from None


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from tui import fleet_cli

    url = fleet_cli.wanted(args)
    if url is not None:
        return fleet_cli.run(url, args, PROG)
    try:
        source = make_source(args)
    except UsageError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    from tui.app import NeuronTopApp

    app = NeuronTopApp(source, stale_after=args.stale_after)
    try:
        app.run()
    except KeyboardInterrupt:
        pass
    finally:
        source.close()
    return app.return_code or 0


if __name__ == "__main__":
    raise SystemExit(main())
