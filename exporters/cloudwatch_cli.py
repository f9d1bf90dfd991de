"""`neuron-monitor-cloudwatch --emf`: neuron-monitor reports as CloudWatch EMF JSON lines.

    neuron-monitor | neuron-monitor-cloudwatch --emf --namespace NeuronMonitor --output /var/log/neuron.emf

No AWS credentials are needed: the CloudWatch agent (or a container log driver) ships the lines.
SIGHUP reopens --output (after logrotate has renamed it); `--exclude` leaves metrics out, each a
custom metric per dimension set that CloudWatch bills.
"""
from __future__ import annotations

import argparse
import re
import signal
import sys
import time
from pathlib import Path
from typing import IO

from exporters import metrics_table as mt
from exporters.cloudwatch import EmfEncoder
from exporters.exporter import package_version
from exporters.extract import Problem
from monitor.live import InputError, collector_reports
from monitor.sources import default_stdin, stdin_stream
from monitor.stdout import open_append, silence_stdout, stderr_or_null

PROG = "neuron-monitor-cloudwatch"
# CloudWatch namespaces: 1-255 characters of letters, digits and . - _ / # : (no leading colon).
NAMESPACE = re.compile(r"[A-Za-z0-9.\-_/#][A-Za-z0-9.\-_/#: ]{0,254}")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description="Write neuron-monitor reports (stdin, or --collect) as CloudWatch "
        "Embedded Metric Format JSON lines.",
        epilog="Example: neuron-monitor | neuron-monitor-cloudwatch --emf --output neuron.emf")
    p.add_argument("--emf", action="store_true",
                   help="write Embedded Metric Format (required: the only output; needs no credentials)")
    p.add_argument("--namespace", default="NeuronMonitor", help="CloudWatch namespace")
    p.add_argument("--region", metavar="REGION",
                   help="taken for AWS's command line; EMF lines carry no region (the agent "
                   "that ships them publishes to its own)")
    p.add_argument("--output", type=Path, metavar="FILE",
                   help="append to FILE (created 0600) instead of writing to stdout; SIGHUP "
                   "reopens it (log rotation)")
    p.add_argument("--exclude", metavar="METRIC[,METRIC...]", action="append", default=[],
                   help="leave these metrics out (names as the Prometheus exporter's), e.g. "
                   "neuron_core_engine_utilization_ratio,neuron_runtime_model_memory_used_bytes; "
                   "may be given again, each adding its metrics")
    p.add_argument("--collect", action="store_true", help="run the collector in this process")
    p.add_argument("-c", "--config", type=Path, metavar="CONFIG",
                   help="neuron-monitor configuration file for --collect")
    p.add_argument("--root", metavar="DIR", type=Path,
                   help="with --collect: the simulated instance `neuron-sim start --root DIR` "
                   "runs (default: the per-user one)")
    p.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
    return p


def main(argv: list[str] | None = None) -> int:
    stderr_or_null()          # before anything could print a diagnostic
    parser = build_parser()
    # Unknown flags first: "--bogus" is named as such, not reported as a missing --emf.
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    problem = None
    exclude = [name.strip() for names in args.exclude for name in names.split(",")
               if name.strip()]
    if not args.emf:
        problem = ("the following arguments are required: --emf (AWS's script publishes "
                   "through the CloudWatch API with boto3; this one writes EMF lines for the "
                   "CloudWatch agent to ship)")
    elif not NAMESPACE.fullmatch(args.namespace):
        problem = (f"--namespace {args.namespace!r}: 1-255 characters of letters, digits, spaces "
                   "and . - _ / # :")
    elif args.namespace.startswith("AWS/"):
        problem = (f"--namespace {args.namespace!r}: AWS/ namespaces are AWS's own, CloudWatch "
                   "refuses it")
    elif unknown_metrics := sorted(set(exclude) - set(mt.BY_NAME)):
        problem = f"--exclude: no metric named {', '.join(unknown_metrics)}"
    elif args.config is not None and not args.collect:
        problem = "-c/--config applies to --collect only"
    elif args.root is not None and not args.collect:
        problem = "--root applies to --collect only"
    if problem:
        parser.print_usage(sys.stderr)
        print(f"{PROG}: error: {problem}", file=sys.stderr)
        return 2
    if args.output is None and sys.stdout is None:     # started with stdout closed (`>&-`)
        print(f"{PROG}: error: stdout is closed: give --output FILE", file=sys.stderr)
        return 2
    try:
        out = Output(args.output)
    except OSError as exc:
        print(f"{PROG}: error: cannot open --output {str(args.output)!r}: {exc.strerror}",
              file=sys.stderr)
        return 2
    try:
        reports = (collector_reports(args.config, root=args.root) if args.collect else
                   stdin_stream(default_stdin(), f"{PROG}: input", None, lambda: None))
    except InputError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    if args.output is not None:      # to stdout a hangup still ends it, as by default
        signal.signal(signal.SIGHUP, lambda *_: out.reopen_later())
    try:
        return _run(reports, EmfEncoder(args.namespace, time.time, exclude), out)
    except KeyboardInterrupt:
        return 0
    except BrokenPipeError:
        silence_stdout()
        return 0
    except OutputFailed as failed:      # a full disk, an I/O error: said once, no traceback
        exc = failed.error
        if out.path is None:
            silence_stdout()
        where = "stdout" if args.output is None else f"--output {str(args.output)!r}"
        print(f"{PROG}: error: cannot write to {where}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    except OSError as exc:      # reading the input (a socket reset, a collector's file)
        source = "the collector" if args.collect else "stdin"
        print(f"{PROG}: error: cannot read from {source}: {exc.strerror or exc}",
              file=sys.stderr)
        return 1
    finally:
        out.close()


class OutputFailed(Exception):
    """Writing the records failed (a full disk, an I/O error): the OSError is `.error`."""

    def __init__(self, error: OSError) -> None:
        super().__init__(error)
        self.error = error


class Output:
    """stdout, or FILE opened for appending (created 0600); after SIGHUP the next write opens
    FILE again, so a rotated file is left to its rotator and a new one started."""

    def __init__(self, path: Path | None):
        self.path = path
        self._reopen = False
        self._file: IO[bytes] = sys.stdout.buffer if path is None else self._open()

    def _open(self) -> IO[bytes]:
        return open_append(self.path)

    def reopen_later(self) -> None:
        self._reopen = self.path is not None

    def write(self, data: bytes) -> None:
        try:
            if self._reopen:
                self._reopen = False
                self._file.close()
                self._file = self._open()
            self._file.write(data)
            self._file.flush()
        except BrokenPipeError:
            raise
        except OSError as exc:      # told apart from the input's errors, which reach main too
            raise OutputFailed(exc) from exc


    def close(self) -> None:
        if self.path is not None:
            self._file.close()


def _run(reports, encoder: EmfEncoder, out: Output) -> int:
    told: set[str] = set()
    written = 0
    for report in reports:
        written += 1
        problems: list[Problem] = []
        # A log shipper tails this output, so records are appended as whole lines per report.
        out.write(encoder.lines(report, problems))
        for p in problems:
            if p.kind not in told:
                told.add(p.kind)
                print(f"{PROG}: {p.message} (further {p.kind} problems are not reported)",
                      file=sys.stderr, flush=True)
    if not written:  # an empty or wholly invalid input, or an upstream neuron-monitor that failed
        print(f"{PROG}: error: the input held no valid neuron-monitor report", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
