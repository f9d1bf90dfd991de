"""`neuron-sim start | run | stop | status`: the command-line side of simulated instances."""
from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path

import orjson

from ..catalog.specs import DEFAULT_INSTANCE
from ..core import instance
from ..errors import SpecError
from .faults import parse_duration
from .launcher import _pid_alive, cleanup, exit_reason, launch, live_runtimes, plan, stop, terminate
from .layout import PUBLISH_INTERVAL_S
from .shm import CorruptCounters, list_runtimes, read_instance, runtime_dir

APP_HELP = ("TAG=WORKLOAD_SPEC@CORES, repeatable, e.g. train=demo-train:layers=2@0-47; "
            "default: a training job on 3/4 of the cores and an inference service on the rest")
INJECT_HELP = ("FAULT@TIME | FAULT@every=TIME | FAULT@rate=R[/exec|/s|/m|/h], optional ,app=TAG,device=N,count=N; "
               "e.g. mem_ecc_uncorrected@30s, numerical@rate=0.01 (docs/runtime.md)")


def _speed(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < value <= 1e6:
        raise argparse.ArgumentTypeError(f"{text!r} must be in (0, 1e6]")
    return value


def _seed(text: str) -> int:
    """A seed the random generators and the instance file both take: 0 .. 2**63 - 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if not 0 <= value < 1 << 63:
        raise argparse.ArgumentTypeError(f"{text!r} must be in 0 .. 2**63-1")
    return value


def add_commands(sub) -> None:
    for name, helptext in (("start", "start a simulated instance and its runtimes in the background"),
                           ("run", "run a simulated instance in the foreground (Ctrl-C stops it)")):
        p = sub.add_parser(name, help=helptext, description=helptext)
        p.add_argument("--instance", "-i", default=DEFAULT_INSTANCE, metavar="TYPE")
        p.add_argument("--lnc", type=int, choices=(1, 2), help="logical NeuronCore config")
        p.add_argument("--app", action="append", default=[], metavar="TAG=SPEC@CORES", help=APP_HELP)
        p.add_argument("--inject", action="append", default=[], metavar="FAULT@TIME", help=INJECT_HELP)
        p.add_argument("--seed", type=_seed, default=0,
                       help="seed of every random draw, 0 .. 2**63-1 (default 0)")
        p.add_argument("--speed", type=_speed, default=1.0, help="simulated seconds per wall second")
        p.add_argument("--root", type=Path, help="runtime directory (default: per-user)")
        p.add_argument("--interval", type=float, default=PUBLISH_INTERVAL_S, help=argparse.SUPPRESS)
        if name == "run":
            p.add_argument("--duration", metavar="TIME", help="stop after this much simulated time")
    p = sub.add_parser("stop", help="stop the simulated instance")
    p.add_argument("--root", type=Path, help="runtime directory (default: per-user)")
    p = sub.add_parser("status", help="show the simulated instance and its runtimes")
    p.add_argument("--root", type=Path, help="runtime directory (default: per-user)")
    p.add_argument("--json", action="store_true", help="print JSON")


def _start(args, foreground: bool):
    if not 0.001 <= args.interval <= 60:
        raise SpecError(f"--interval {args.interval!r} must be between 0.001 and 60 seconds")
    duration = getattr(args, "duration", None)
    if duration is not None and parse_duration(duration, "--duration") <= 0:
        raise SpecError(f"--duration {duration!r} must be more than 0")
    inst = instance(args.instance, args.lnc)
    root = runtime_dir(args.root)
    # a --root of its own is another place: another instance id, as a fleet's hosts have
    place = str(root) if args.root is not None else ""
    return launch(plan(inst, args.app, args.inject), root, args.seed, args.speed, interval=args.interval,
                  duration=duration, foreground=foreground, place=place), root


def _started_lines(desc) -> list[str]:
    lines = [f"started simulated {desc.instance_type} ({desc.instance_id}, LNC={desc.lnc}, seed {desc.seed}, "
             f"speed {desc.speed:g}x)"]
    lines += [f"  {a['tag']:<16} pid {a['pid']:<8} cores {a['cores']:<8} {a['workload']}" for a in desc.apps]
    return lines


def cmd_start(args) -> int:
    (desc, _), root = _start(args, foreground=False)
    print("\n".join(_started_lines(desc)))
    print(f"counters in {root}; `neuron-sim status`, `neuron-sim stop`")
    return 0


def cmd_run(args) -> int:
    stopping: list[int] = []

    def on_signal(signum, frame):
        stopping.append(signum)

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    (desc, procs), root = _start(args, foreground=True)
    print("\n".join(_started_lines(desc)), flush=True)
    try:
        while not stopping and any(p.poll() is None for p in procs):
            time.sleep(0.1)
    finally:
        terminate(procs)
        cleanup(root)
    failed = [p.returncode for p in procs if p.returncode not in (0, -signal.SIGTERM)]
    print("stopped", flush=True)
    return 1 if failed else 0


def cmd_stop(args) -> int:
    if args.root is not None and not args.root.is_dir():   # nothing to stop: create nothing
        print(f"no simulated instance in {args.root}")
        return 0
    root = runtime_dir(args.root)
    desc, killed = stop(root)
    if desc is None:
        print(f"no simulated instance in {root}")
        return 0
    print(f"stopped simulated {desc.instance_type} ({desc.instance_id})"
          + (f"; {killed} runtime(s) did not stop and were killed" if killed else ""))
    return 0


STALE_AFTER_S = 2.0  # a live runtime whose counters are older than this is stopped or hung


def status_data(root: Path) -> dict:
    try:
        desc, instance_error = read_instance(root), ""
    except CorruptCounters as e:  # report the runtimes all the same
        desc, instance_error = None, str(e)
    runtimes = []
    handles = list_runtimes(root)
    app_index = {a["pid"]: i for i, a in enumerate(desc.apps if desc is not None else ())
                 if a.get("pid")}
    for h in handles:
        entry: dict = {"pid": h.pid, "alive": h.is_alive(), "error": ""}
        try:
            s = h.read()
        except CorruptCounters as e:
            entry["error"] = str(e)
        else:
            sim = max(s.sim_time, 1e-9)
            entry.update(tag=s.tag, workload=s.workload, cores=list(s.cores), phase=s.phase, sim_time_s=s.sim_time,
                         utilization=float(s.core_busy_s.mean() / sim) if s.cores else 0.0,
                         executions=sum(s.exec_status.values()), errors=sum(s.errors.values()),
                         exec_status=s.exec_status, ecc=int(s.dev_ecc.sum()),
                         power_w=float(s.dev_power_w.sum()), updated_s_ago=max(0.0, time.time() - s.wall_time))
            entry["stale"] = entry["alive"] and entry["updated_s_ago"] > STALE_AFTER_S
        finally:
            h.close()
        if not entry["alive"]:
            # killed without cleaning up (its counter file stays until a collector drops it):
            # ended, as one whose file is gone, with why; its last counters stay in the JSON
            entry.update(exited=True, error=entry["error"] or _ended(root, app_index.get(h.pid)))
        runtimes.append(entry)
    listed = {h.pid for h in handles}
    for index, a in enumerate(desc.apps if desc is not None else ()):
        if not a.get("pid") or a["pid"] in listed:
            continue
        if _pid_alive(a["pid"], "device_model.runtime"):
            runtimes.append({"pid": a["pid"], "alive": True, "tag": a["tag"],
                             "error": f"runtime-{a['pid']}.ctr was deleted while the runtime runs"})
        else:   # ended (a crash removes its counter file too): say so, and why, from its log
            runtimes.append({"pid": a["pid"], "alive": False, "tag": a["tag"], "exited": True,
                             "error": _ended(root, index)})
    out = {"root": str(root), "instance": None if desc is None else _instance_dict(desc), "runtimes": runtimes}
    if instance_error:
        out["instance_error"] = instance_error
    return out


def _ended(root: Path, index: int | None) -> str:
    """Why an app's runtime ended, from its log; a runtime started by hand has none."""
    reason = exit_reason(root, index) if index is not None else ""
    return reason or "ended without a word: killed (SIGKILL, the OOM killer)"


def _instance_dict(desc) -> dict:
    return {k: getattr(desc, k) for k in ("instance_type", "instance_id", "region", "availability_zone", "lnc",
                                          "device_count", "cores_per_device", "seed", "speed", "started_at")}


def format_status(d: dict) -> str:
    inst = d["instance"]
    if inst is None and not d["runtimes"] and not d.get("instance_error"):
        return f"no simulated instance in {d['root']}"
    lines = []
    if d.get("instance_error"):
        lines.append(f"instance description unreadable: {d['instance_error']}")
    if inst is not None:
        up = time.time() - inst["started_at"]
        lines.append(f"{inst['instance_type']}  {inst['instance_id']}  {inst['availability_zone']}  "
                     f"LNC={inst['lnc']}  {inst['device_count']} devices x {inst['cores_per_device']} cores  "
                     f"seed {inst['seed']}  speed {inst['speed']:g}x  up {up:.0f} s")
    lines.append(f"{'TAG':<16} {'PID':>8} {'CORES':>6} {'PHASE':<13} {'UTIL':>6} {'EXECS':>9} {'ERRORS':>7} "
                 f"{'POWER':>8}  WORKLOAD")
    for r in d["runtimes"]:
        if r.get("exited"):
            lines.append(f"{r.get('tag', '?')[:16]:<16} {r['pid']:>8} {'':>6} {'exited':<13} "
                         f"{r['error']}")
            continue
        if r["error"] or "phase" not in r:
            lines.append(f"{r.get('tag', '?')[:16]:<16} {r['pid']:>8} {'':>6} {'unreadable':<13} {r['error']}")
            continue
        phase = "stale" if r.get("stale") else r["phase"]
        lines.append(f"{r['tag'][:16]:<16} {r['pid']:>8} {len(r['cores']):>6} {phase:<13} "
                     f"{r['utilization'] * 100:5.1f}% {r['executions']:>9} {r['errors']:>7} "
                     f"{r['power_w']:7.0f}W  {r['workload']}")
    return "\n".join(lines)


def cmd_status(args) -> int:
    if args.root is not None and not args.root.is_dir():   # looking must not create it
        print(f"neuron-sim: error: no simulated instance at {args.root}", file=sys.stderr)
        return 3
    root = runtime_dir(args.root)
    d = status_data(root)
    if args.json:
        sys.stdout.buffer.write(orjson.dumps(d, option=orjson.OPT_INDENT_2) + b"\n")
    else:
        print(format_status(d))
    return 0 if d["instance"] is not None or live_runtimes(root) else 3


COMMANDS = {"start": cmd_start, "run": cmd_run, "stop": cmd_stop, "status": cmd_status}
