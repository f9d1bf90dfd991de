"""`neuron-ls`: the simulated instance's Neuron devices and the processes using them.

Flags as AWS's: ``-w/--wide``, ``-a/--show-all-procs``, ``-t/--topology``, ``-j/--json-output``,
plus ``--root DIR`` for the runtime directory of a simulated instance. Without an instance it
prints the real tool's no-driver message and exits 1 (neuron-tools.md §5, issue #633).
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import psutil

from device_model import __version__
from device_model.errors import SpecError
from device_model.runtime import shm
from device_model.catalog.specs import get_instance
from monitor.stdout import silence_stdout, stderr_or_null
from monitor.ls_render import (
    NOT_A_RUNTIME, LsProcess, build_view, render_json, render_table, render_topology,
)

__all__ = ["main", "build_parser", "NO_DEVICE_MESSAGE"]

PROG = "neuron-ls"
NO_DEVICE_MESSAGE = ('FATA[0000] Failed to discover neuron devices error="Unable to read device '
                     'information from the driver. Make sure the neuron driver is loaded '
                     '(no simulated instance in {root}; start one with neuron-sim start)"')


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="List the Neuron devices of the simulated "
                                "instance, their links and the processes using them.")
    p.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    p.add_argument("-w", "--wide", action="store_true",
                   help="one row per process with PID, COMMAND (cut to 80 characters, 40 "
                        "without -w) and RUNTIME VERSION")
    p.add_argument("-a", "--show-all-procs", action="store_true",
                   help="also list processes using a device without a Neuron runtime")
    p.add_argument("-t", "--topology", action="store_true",
                   help="a short device table, then the NeuronLink topology")
    p.add_argument("-j", "--json-output", action="store_true", help="print JSON")
    p.add_argument("--root", metavar="DIR", type=Path,
                   help="runtime directory of the simulated instance (default: per-user directory)")
    return p


def main(argv: list[str] | None = None) -> int:
    stderr_or_null()          # before anything could print a diagnostic
    args = build_parser().parse_args(argv)
    if args.root is not None and not os.path.lexists(args.root):  # looking must not create it
        print(f"{PROG}: error: no simulated instance at {args.root}", file=sys.stderr)
        return 1
    try:
        directory = shm.runtime_dir(args.root)
        instance = shm.read_instance(args.root)
    except shm.RuntimeDirError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except shm.CorruptCounters as exc:
        print(NO_DEVICE_MESSAGE.format(root=f"{directory} ({exc})"), file=sys.stderr)
        return 1
    if instance is None:
        print(NO_DEVICE_MESSAGE.format(root=directory), file=sys.stderr)
        return 1
    try:
        spec = get_instance(instance.catalog_name)
    except SpecError as exc:
        print(f"{PROG}: error: the simulated instance is of an unknown type: {exc}",
              file=sys.stderr)
        return 1
    processes = _processes(args.root, args.show_all_procs, spec.devices)
    view = build_view(spec, instance.lnc, instance.instance_id, processes,
                      instance_type=instance.instance_type)
    out = sys.stdout
    if out is None:             # started with stdout closed (`>&-`)
        print(f"{PROG}: error: stdout is closed: nowhere to write the listing", file=sys.stderr)
        return 2
    try:
        if args.json_output:
            out.buffer.write(render_json(view, show_all=args.show_all_procs))
        else:
            out.write(render_table(view, wide=args.wide, show_all=args.show_all_procs,
                                   topology=args.topology))
            if args.topology:                    # two blank lines, as AWS's
                out.write("\n\n" + render_topology(view))
        out.flush()
    except BrokenPipeError:
        silence_stdout()
    except OSError as exc:      # a full disk, an I/O error: said once, not a traceback
        silence_stdout()
        print(f"{PROG}: error: cannot write to stdout: {exc.strerror or exc}", file=sys.stderr)
        return 1
    return 0


def _processes(root: Path | None, show_all: bool, devices: int) -> dict[int, list[LsProcess]]:
    """Device index -> processes with a runtime on it (and, with -a, this tool itself, which
    like the real neuron-ls has every device open while it runs)."""
    found: dict[int, list[LsProcess]] = {}
    for handle in shm.list_runtimes(root):
        try:
            if not handle.is_alive():
                continue
            header = handle.header()
        except shm.CorruptCounters as exc:
            print(f"{PROG}: warning: skipping runtime {handle.pid}: {exc}", file=sys.stderr)
            continue
        finally:
            handle.close()
        process = LsProcess(handle.pid, _command(handle.pid, header.get("workload", "")),
                            __version__)
        for device in sorted({int(d) for d in header["core_devices"]}):
            if 0 <= device < devices:
                found.setdefault(device, []).append(process)
    if show_all:
        me = LsProcess(os.getpid(), _command(os.getpid(), PROG), NOT_A_RUNTIME)
        for device in range(devices):
            found.setdefault(device, []).append(me)     # after the runtimes, as AWS lists it
    return found


def _command(pid: int, fallback: str) -> str:
    try:
        argv = psutil.Process(pid).cmdline()
    except (psutil.Error, OSError):
        return fallback
    if not argv:
        return fallback
    # Show console scripts by name ("neuron-ls -a", not "/usr/bin/python3 /…/neuron-ls -a").
    if len(argv) > 1 and os.path.basename(argv[0]).startswith("python"):
        argv = argv[1:]
        while len(argv) > 1 and argv[0].startswith("-") and argv[0] != "-m":   # -P, -u, -X opt
            argv = argv[2:] if argv[0] in ("-X", "-W") else argv[1:]
        if argv[0] == "-m" and len(argv) > 1:
            argv = argv[1:]
    argv = [os.path.basename(argv[0]), *argv[1:]]
    return " ".join(argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
