"""`neuron-sim`: estimates on the chip model (more subcommands arrive with the simulated runtime)."""
from __future__ import annotations

import argparse
import sys

import orjson

from . import __version__
from .catalog.specs import DEFAULT_INSTANCE, instance_names
from .core import instance
from .errors import SpecError
from .fileio import silence_stdout, stderr_or_null
from .progress import TerminalLine, reporting
from .workloads import REGISTRY, Placement, estimate
from .workloads.report import (apply_vs, format_comparison, format_model, ratio_text, ratios,
                               time_text, title)
from .cliargs import Once, repeated_option
from .cliargs import positive_int as _positive
from .runtime.layout import ENGINES as ENGINE_ORDER
from .limits import MAX_NODES

MAX_CORES = 1 << 20       # logical cores, and any parallel degree


def _at_most(limit: int):
    def parse(text: str) -> int:
        value = _positive(text)
        if value > limit:
            raise argparse.ArgumentTypeError(f"{text!r} is more than the limit of {limit:,}")
        return value
    return parse


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="neuron-sim", description="Simulated Trainium instances.")
    p.add_argument("--version", action="version", version=f"neuron-sim {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    est = sub.add_parser("estimate", help="estimate a workload's time and utilisation",
                         description="Estimate a workload on the chip model. Workloads: "
                         + "; ".join(f"{w.name} ({w.help})" for w in REGISTRY.values()))
    est.add_argument("--workload", "-w", required=True, action=Once, metavar="SPEC",
                     help="NAME[:key=value,...], e.g. matmul:m=4096,k=4096,n=4096,dtype=bf16")
    # every option once: a second `--tp` had silently replaced the first, where a second `-w`
    # or `--vs` was refused
    est.add_argument("--instance", "-i", default=DEFAULT_INSTANCE, metavar="TYPE", action=Once,
                     help=f"instance type (default: {DEFAULT_INSTANCE}): "
                     + ", ".join(instance_names()))
    est.add_argument("--lnc", type=int, choices=(1, 2), action=Once,
                     help="logical NeuronCore config (default: the instance's, 2 on trn2 and "
                     "trn3, 1 on trn1)")
    est.add_argument("--cores", type=_at_most(MAX_CORES), action=Once,
                     help="logical cores to use (default: all of the instances for models, 1 "
                     "for a matmul; a collective takes its ranks= instead)")
    est.add_argument("--nodes", type=_at_most(MAX_NODES), default=1, action=Once,
                     help="instances (EFA-connected)")
    est.add_argument("--tp", type=_at_most(MAX_CORES), action=Once, help="tensor-parallel degree")
    est.add_argument("--pp", type=_at_most(MAX_CORES), action=Once, help="pipeline-parallel degree")
    est.add_argument("--dp", type=_at_most(MAX_CORES), action=Once, help="data-parallel degree")
    est.add_argument("--vs", action=Once, metavar="KEY=VALUE[,...]",
                     help="what-if: a second configuration differing in instance, nodes, lnc, tp, "
                     "pp, dp, cores or any workload option; printed side by side with ratios")
    est.add_argument("--overrides", metavar="TOML", action=Once,
                     help="override catalog and cost constants")
    est.add_argument("--json", action="store_true", help="print JSON")
    val = sub.add_parser("validate", help="the chip model against AWS's published measurements",
                         description="Simulate every published row the project ships and print "
                         "published, simulated and error, the median and worst error, and the "
                         "constants calibrated on them.")
    val.add_argument("--overrides", metavar="TOML", action=Once,
                     help="override catalog and cost constants")
    form = val.add_mutually_exclusive_group()
    form.add_argument("--json", action="store_true", help="print JSON")
    form.add_argument("--markdown", action="store_true",
                      help="print the calibration and held-out rows as Markdown tables")
    val.add_argument("--check", action="store_true",
                     help="exit 1 when the calibration targets or the held-out median are "
                     "missed, or a row is past its bound (a known gap's: the error it meets "
                     "today), after printing as usual: for CI and override files")
    from .runtime.commands import add_commands
    add_commands(sub)
    return p


def _catalog(args):
    from .catalog.overrides import Catalog, load_overrides
    return Catalog.default().with_overrides(load_overrides(args.overrides))


def _instance(args):
    if args.overrides:
        catalog = _catalog(args)
        return instance(args.instance, args.lnc, costs=catalog.costs, spec=catalog.instance(args.instance))
    return instance(args.instance, args.lnc)


def _warn_unused_overrides(path: str | None, used) -> None:
    """Name the override tables none of the run's instances take (a [device.trainium1] table
    under a trn2 estimate), which would otherwise pass as applied."""
    if path:
        from .catalog.overrides import load_overrides
        for line in load_overrides(path).not_applying(tuple(used)):
            print(f"neuron-sim: warning: {line}", file=sys.stderr)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def format_estimate(r: dict) -> str:
    number, unit = time_text(r["time_s"]).split()
    lines = [title(r), f"  time            {number:>12} {unit}"]
    if "tflops" in r:
        lines.append(f"  throughput      {r['tflops']:12.2f} TFLOP/s")
    if r.get("cores", 1) > 1:                 # matmul --cores N: N at once, the time of one
        lines.append(f"  cores           {r['cores']:>12} (one matmul each)")
    for key in _UTILIZATIONS if "tflops" in r else ("mbu",):   # a collective does no FLOPs
        lines.append(f"  {key.upper():<15} {r[key] * 100:12.1f}%")
    if r.get("mbu_ceiling", 1.0) < 1.0:       # MBU is of one HBM stack: what this core reaches
        lines.append(f"  MBU ceiling     {r['mbu_ceiling'] * 100:12.1f}%")
    for key, label in (("algbw_gbps", "algbw"), ("busbw_gbps", "busbw")):
        if key in r:
            lines.append(f"  {label:<15} {r[key]:12.2f} GB/s")
    if "dtype" in r:
        lines.append(f"  dtype           {r['dtype']:>12}")
    if "algorithm" in r:
        counts = ", ".join(_count(r[k], k.removesuffix("s")) for k in ("ranks", "devices", "nodes"))
        lines.append(f"  algorithm       {r['algorithm']:>12} ({counts})")
    active = r["engine_active"]
    lines.append("  engines active  " + "  ".join(f"{e} {active[e] * 100:.0f}%" for e in ENGINE_ORDER))
    return "\n".join(lines)


_UTILIZATIONS = ("mfu", "hfu", "mbu")
_pct1 = lambda v: f"{v * 100:.1f}%"  # noqa: E731
_MICRO_ROWS = (("time", "time_s", time_text),
               ("throughput", "tflops", lambda v: f"{v:.2f} TFLOP/s"),
               ("cores", "cores", str),
               *((key.upper(), key, _pct1) for key in _UTILIZATIONS),
               ("MBU ceiling", "mbu_ceiling", _pct1),
               ("algbw", "algbw_gbps", lambda v: f"{v:.2f} GB/s"),
               ("busbw", "busbw_gbps", lambda v: f"{v:.2f} GB/s"))


def format_micro_comparison(a: dict, b: dict) -> str:
    """`--vs` for microbenchmarks: the rows of format_estimate side by side with B/A."""
    lines = [f"A: {title(a)}", f"B: {title(b)}", f"  {'':<16} {'A':>18} {'B':>18} {'B/A':>8}"]
    for key in ("dtype", "algorithm"):       # where the two runs part
        if key in a and key in b:
            lines.append(f"  {key:<16} {a[key]:>18} {b[key]:>18}")
    left_out = set() if "tflops" in a or "tflops" in b else {"mfu", "hfu"}  # no FLOPs done
    if min(a.get("mbu_ceiling", 1.0), b.get("mbu_ceiling", 1.0)) >= 1.0:    # nothing to say
        left_out.add("mbu_ceiling")
    if a.get("cores", 1) == b.get("cores", 1) == 1:
        left_out.add("cores")
    rows = [(label, a[key], b[key], fmt) for label, key, fmt in _MICRO_ROWS
            if key in a and key in b and key not in left_out]
    rows += [(e + " active", a["engine_active"][e], b["engine_active"][e], _pct1)
             for e in ENGINE_ORDER]
    for label, va, vb, fmt in rows:
        ta, tb = fmt(va), fmt(vb)
        lines.append(f"  {label:<16} {ta:>18} {tb:>18} {ratio_text(va, vb, ta, tb):>8}")
    return "\n".join(lines)


def _run(args, side: str = "") -> dict:
    """One estimate; `side` (`with --vs ...`) names the second configuration of a comparison in
    its errors and warnings, which would otherwise read as the first's."""
    placement = Placement(cores=args.cores, nodes=args.nodes, tp=args.tp, pp=args.pp, dp=args.dp)
    line = TerminalLine(sys.stderr)       # a long run's progress, on a terminal only
    try:
        with reporting(line):
            result = estimate(args.workload, _instance(args), placement)
    except SpecError as e:
        raise SpecError(f"{side}: {e}") if side else e
    finally:
        line.close()
    result.setdefault("nodes", args.nodes)     # microbenchmarks report the nodes they placed
    for warning in result.get("warnings", ()):
        print(f"neuron-sim: warning: {side + ': ' if side else ''}{warning}", file=sys.stderr)
    return result


def cmd_estimate(args) -> int:
    result = _run(args)
    if args.vs is not None:          # `--vs ''` is a usage error, not "no comparison"
        b_args = apply_vs(args, args.vs)
        note = f"with --vs {args.vs}: {b_args.vs_note}" if b_args.vs_note else ""
        if note:
            print(f"neuron-sim: warning: {note}", file=sys.stderr)
        other = _run(b_args, side=f"with --vs {args.vs}")
        if note:                 # in B's JSON warnings too, beside its own
            other["warnings"] = [*other.get("warnings", ()), note]
        _warn_unused_overrides(args.overrides, [_instance(a).spec for a in (args, b_args)])
        if args.json:
            out = {"a": result, "b": other, "ratio": ratios(result, other)}
            sys.stdout.buffer.write(orjson.dumps(out, option=orjson.OPT_INDENT_2) + b"\n")
        else:
            both = "mode" in result and "mode" in other
            print(format_comparison(result, other) if both else
                  format_micro_comparison(result, other))
            print(_trust_text(result, args.overrides, other))
        return 0
    _warn_unused_overrides(args.overrides, [_instance(args).spec])
    if args.json:
        sys.stdout.buffer.write(orjson.dumps(result, option=orjson.OPT_INDENT_2) + b"\n")
    else:
        print(format_model(result) if "mode" in result else format_estimate(result))
        print(_trust_text(result, args.overrides))
    return 0


def _changes_anything(path: str) -> bool:
    """Whether an override file sets any constant, device or instance (an empty one, or one of
    comments, leaves the model as shipped: its errors are the table's)."""
    from .catalog.overrides import load_overrides
    loaded = load_overrides(path)
    return bool(loaded.costs or loaded.devices or loaded.instances)


def _trust_text(result: dict, overrides: str | None, other: dict | None = None) -> str:
    """How far to trust the estimate: the table's medians, then the error of each figure's kind
    (under `--vs`, B's too where its figures are of other kinds: another chip, another prompt)."""
    from .workloads.trust import trust_lines
    from .workloads.validation import CALIBRATION, HELD_OUT, RECORDED_MEDIANS, rows_of
    cal, held = RECORDED_MEDIANS[CALIBRATION], RECORDED_MEDIANS[HELD_OUT]
    lines = [f"  (median error against published AWS measurements: {cal * 100:.0f}% on the "
             f"{rows_of(CALIBRATION)} it was\n   calibrated on, {held * 100:.0f}% on "
             f"{rows_of(HELD_OUT)} held-out ones; neuron-sim validate lists them)"]
    if other is None or trust_lines(other) == trust_lines(result):
        lines += trust_lines(result)
    else:
        lines += trust_lines(result, "A") + trust_lines(other, "B")
    if overrides and _changes_anything(overrides):   # the recorded errors are the defaults' own
        lines.append("  (with the default constants; the errors under yours:\n"
                     f"   neuron-sim validate --overrides {overrides})")
    return "\n".join(lines)


def cmd_validate(args) -> int:
    from .workloads import validation, validation_text
    overrides = None
    if args.overrides:
        from .catalog.overrides import load_overrides
        overrides = load_overrides(args.overrides)
        catalog = _catalog(args)
        specs = {row.instance: catalog.instance(row.instance) for row in validation.ROWS}
        _warn_unused_overrides(args.overrides, specs.values())
        costs = catalog.costs
        results = validation.run_all(costs, specs)
    else:
        costs = validation.DEFAULT_COSTS
        results = validation.cached_results(costs)     # once per process, as estimate's
    rep = validation.report(results, costs, overrides)
    if args.json:
        sys.stdout.buffer.write(orjson.dumps(rep, option=orjson.OPT_INDENT_2) + b"\n")
    elif args.markdown:
        print(validation_text.format_markdown_report(rep))
    else:
        print(validation_text.format_report(rep))
    if args.check:
        failed = _check_failures(rep)
        if failed:
            print(f"neuron-sim: validate --check: {'; '.join(failed)}", file=sys.stderr)
            return 1
    return 0


def _check_failures(rep: dict) -> list[str]:
    """What `validate --check` fails on, as the tests do: the calibration targets, the held-out
    median, and every row's own bound (a known gap's is the error it meets today, so the
    held-out worst target, which published rows contradicting each other put out of reach,
    fails only where a row grows past its bound)."""
    failed = []
    cal, held = rep["calibration"], rep["held_out"]
    if not cal["meets_target"]:
        failed.append("calibration target not met")
    if held["rows"] and held["median_abs_error"] > held["target_median"]:
        failed.append("held-out median target not met")
    if rep["past_bound"]:
        failed.append("past their bound: " + ", ".join(
            f"{r['id']} {r['error'] * 100:+.1f}% (bound {r['bound'] * 100:.0f}%)"
            for r in rep["past_bound"]))
    return failed


def main(argv: list[str] | None = None) -> int:
    stderr_or_null()          # before anything could print a diagnostic
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if repeated_option(args):
            raise SpecError(repeated_option(args))
        from .runtime.commands import COMMANDS
        status = {"estimate": cmd_estimate, "validate": cmd_validate,
                  **COMMANDS}[args.command](args)
        sys.stdout.flush()      # here, where a full disk can still be said in one line
        return status
    except SpecError as e:
        print(f"neuron-sim: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
    except OSError as e:       # stdout on a full disk: one line, not a traceback
        print(f"neuron-sim: error: cannot write the output: {e.strerror or e}", file=sys.stderr)
        silence_stdout()
        return 1


if __name__ == "__main__":
    sys.exit(main())
