"""`python -m device_model.runtime`: one simulated Neuron runtime process.

The app tag comes from NEURON_PROCESS_TAG (else the pid) and the cores from
NEURON_RT_VISIBLE_CORES (else every core of the instance), as for a real Neuron runtime.
SIGTERM, SIGINT or SIGHUP stop it cleanly (counter file removed); SIGKILL leaves the file behind
for readers to recognise as dead. With `--parent PID` (what a foreground owner such as
`neuron-sim run` or `neuron-top --demo` passes) it also stops cleanly once that process is gone,
however it ended, so a killed owner leaves no runtime behind.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

from .. import __version__
from ..catalog.specs import DEFAULT_INSTANCE
from ..core import instance
from ..errors import SpecError
from .faults import exec_timeout, parse_duration, parse_fault
from .apps import TAG_MAX, parse_cores
from .layout import PUBLISH_INTERVAL_S
from .process import EXEC_TIMEOUT_S, MAX_TICK_WALL_S, Runtime, RuntimeConfig


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m device_model.runtime",
                                description="One simulated Neuron runtime process.")
    p.add_argument("--version", action="version", version=f"neuron-sim runtime {__version__}")
    p.add_argument("--instance", "-i", default=DEFAULT_INSTANCE, metavar="TYPE")
    p.add_argument("--lnc", type=int, choices=(1, 2))
    p.add_argument("--workload", "-w", required=True, metavar="SPEC")
    p.add_argument("--inject", action="append", default=[], metavar="FAULT@TIME")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--speed", type=float, default=1.0, help="simulated seconds per wall second")
    p.add_argument("--app-index", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--root", type=Path, help="runtime directory (default: per-user)")
    p.add_argument("--interval", type=float, default=PUBLISH_INTERVAL_S,
                   help="seconds between counter updates")
    p.add_argument("--duration", metavar="TIME", help="stop after this much simulated time")
    p.add_argument("--parent", type=int, metavar="PID",
                   help="stop when this process (the one that started us) is gone")
    return p


def config_from(args, env: dict[str, str]) -> RuntimeConfig:
    if not (0 < args.speed <= 1e6):
        raise SpecError(f"--speed {args.speed!r} must be in (0, 1e6]")
    if not (0.001 <= args.interval <= 60):
        raise SpecError(f"--interval {args.interval!r} must be between 0.001 and 60 seconds")
    inst = instance(args.instance, args.lnc)
    visible = env.get("NEURON_RT_VISIBLE_CORES")
    cores = parse_cores(visible, inst.logical_cores) if visible else tuple(range(inst.logical_cores))
    tag = env.get("NEURON_PROCESS_TAG") or str(os.getpid())
    if len(tag) > TAG_MAX:
        raise SpecError(f"NEURON_PROCESS_TAG is {len(tag)} characters; allowed: at most {TAG_MAX}")
    timeout = exec_timeout(env)
    return RuntimeConfig(instance=args.instance, workload=args.workload, cores=cores, tag=tag,
                         lnc=inst.lnc, seed=args.seed, speed=args.speed,
                         faults=tuple(parse_fault(f) for f in args.inject), app_index=args.app_index,
                         root=args.root, interval=args.interval,
                         exec_timeout_s=EXEC_TIMEOUT_S if timeout is None else timeout)


def serve(rt: Runtime, interval: float, duration: float | None, stop: list[int],
          parent: int | None = None) -> None:
    """Pace simulated time to the wall clock until stopped, `duration` simulated seconds, or
    the `parent` process is gone (we are then re-parented: one getppid per interval)."""
    t0 = time.monotonic()
    while not stop and (parent is None or os.getppid() == parent):
        tick = time.monotonic()
        target = (tick - t0) * rt.cfg.speed
        if duration is not None:
            target = min(target, duration)
        rt.advance(target, budget_s=MAX_TICK_WALL_S)
        rt.publish()
        if duration is not None and rt.sim >= duration:
            break
        time.sleep(max(0.0, interval - (time.monotonic() - tick)))


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    stop: list[int] = []     # the stop signals received

    def on_signal(signum, frame):
        stop.append(signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    try:
        cfg = config_from(args, dict(os.environ))
        duration = parse_duration(args.duration, "--duration") if args.duration else None
        rt = Runtime(cfg)
    except SpecError as e:
        print(f"neuron-sim runtime: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"neuron-sim runtime: error: {e}", file=sys.stderr)
        return 1
    try:
        serve(rt, cfg.interval, duration, stop, args.parent)
    finally:
        rt.close()
    # the log's last line says how it ended, so that `neuron-sim status` tells a runtime that
    # was stopped from one killed without a word (SIGKILL, the OOM killer)
    if stop:
        how = f"stopped by {signal.Signals(stop[0]).name}"
    elif duration is not None and rt.sim >= duration:
        how = f"ran its --duration ({args.duration})"
    else:
        how = f"stopped: its launcher (pid {args.parent}) is gone"
    print(f"neuron-sim runtime: {how}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
