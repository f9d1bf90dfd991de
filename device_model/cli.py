"""`neuron-sim`: estimates on the chip model (more subcommands arrive with the simulated runtime)."""
from __future__ import annotations

import argparse
import sys

import orjson

from . import __version__
from .core import instance
from .errors import SpecError
from .workloads import REGISTRY, Placement, estimate

ENGINE_ORDER = ("tensor", "vector", "scalar", "gpsimd", "dma")


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be positive")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="neuron-sim", description="Simulated Trainium instances.")
    p.add_argument("--version", action="version", version=f"neuron-sim {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    est = sub.add_parser("estimate", help="estimate a workload's time and utilisation",
                         description="Estimate a workload on the chip model. Workloads: "
                         + "; ".join(f"{w.name} ({w.help})" for w in REGISTRY.values()))
    est.add_argument("--workload", "-w", required=True, metavar="SPEC",
                     help="NAME[:key=value,...], e.g. matmul:m=4096,k=4096,n=4096,dtype=bf16")
    est.add_argument("--instance", "-i", default="trn2.48xlarge", metavar="TYPE")
    est.add_argument("--lnc", type=int, choices=(1, 2), help="logical NeuronCore config")
    est.add_argument("--cores", type=_positive, default=1, help="logical cores running replicas")
    est.add_argument("--overrides", metavar="TOML", help="override catalog and cost constants")
    est.add_argument("--json", action="store_true", help="print JSON")
    return p


def _instance(args):
    if args.overrides:
        from .overrides import Catalog, load_overrides
        catalog = Catalog.default().with_overrides(load_overrides(args.overrides))
        return instance(args.instance, args.lnc, costs=catalog.costs, spec=catalog.instance(args.instance))
    return instance(args.instance, args.lnc)


def format_estimate(r: dict) -> str:
    lines = [f"{r['workload']} on {r['instance']} (LNC={r['lnc']})",
             f"  time            {r['time_s'] * 1e3:12.4f} ms"]
    for key, label in (("tflops", "throughput"),):
        if key in r:
            lines.append(f"  {label:<15} {r[key]:12.2f} TFLOP/s")
    for key in ("mfu", "hfu", "mbu"):
        lines.append(f"  {key.upper():<15} {r[key] * 100:11.1f} %")
    for key, label in (("algbw_gbps", "algbw"), ("busbw_gbps", "busbw")):
        if key in r:
            lines.append(f"  {label:<15} {r[key]:12.2f} GB/s")
    if "algorithm" in r:
        lines.append(f"  algorithm       {r['algorithm']:>12} ({r['ranks']} ranks, {r['devices']} devices,"
                     f" {r['nodes']} nodes)")
    active = r["engine_active"]
    lines.append("  engines active  " + "  ".join(f"{e} {active[e] * 100:.0f}%" for e in ENGINE_ORDER))
    return "\n".join(lines)


def cmd_estimate(args) -> int:
    inst = _instance(args)
    result = estimate(args.workload, inst, Placement(cores=args.cores))
    if args.json:
        sys.stdout.buffer.write(orjson.dumps(result, option=orjson.OPT_INDENT_2) + b"\n")
    else:
        print(format_estimate(result))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return {"estimate": cmd_estimate}[args.command](args)
    except SpecError as e:
        print(f"neuron-sim: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
