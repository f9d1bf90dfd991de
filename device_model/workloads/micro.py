"""Microbenchmarks: one matmul on a core, one collective over ranks placed on the instance."""
from __future__ import annotations

import math

from ..engine.collectives import bus_factor, collective_cost
from ..core import Instance
from ..catalog.dtypes import DTYPES
from ..program import CollectiveGroup, Program
from ..catalog.specs import check_dtype
from ..errors import SpecError
from ..limits import MAX_NODES
from .spec import Param, parse_int, parse_size

DTYPE_NAMES = tuple(DTYPES)
MATMUL_PARAMS = (
    Param("m", parse_int, help="rows of the left operand"),
    Param("k", parse_int, help="contraction size"),
    Param("n", parse_int, help="columns of the right operand"),
    Param("batch", parse_int, 1, help="batch of independent matmuls"),
    Param("dtype", str, "bf16", choices=DTYPE_NAMES),
)
MAX_RANKS = 1 << 20   # a million ranks: beyond any cluster; more would only exhaust the machine


def parse_ranks(text: str) -> int:
    value = parse_int(text)
    if value > MAX_RANKS:
        raise ValueError(text)
    return value


COLLECTIVE_PARAMS = (
    Param("bytes", parse_size, help="per-rank buffer, e.g. 64M"),
    Param("ranks", parse_ranks, 2, help=f"number of ranks (logical cores), at most {MAX_RANKS:,}"),
    Param("dtype", str, "fp32", choices=DTYPE_NAMES),
)
COLLECTIVE_KINDS = {"allreduce": "all_reduce", "allgather": "all_gather",
                    "reducescatter": "reduce_scatter", "alltoall": "all_to_all"}


def place_ranks(inst: Instance, ranks: int, nodes: int = 1) -> CollectiveGroup:
    """Spread the ranks evenly over `nodes` instances (more if one cannot hold its share), and
    fill each instance's logical cores device by device (nccom-test's placement)."""
    per_device = inst.device.logical_cores(inst.lnc)
    per_node = inst.logical_cores      # an UltraServer's servers: one NeuronLink domain
    nodes = max(nodes, math.ceil(ranks / per_node))
    if nodes > ranks:
        raise SpecError(f"{ranks} ranks cannot be spread over {nodes} nodes")
    on_node = math.ceil(ranks / nodes)
    rpd = min(on_node, per_device)
    devices = nodes * math.ceil(on_node / rpd)
    return CollectiveGroup(ranks, rpd, devices, nodes, inst.spec.topology)


def _metrics(run) -> dict:
    """A run's metrics with its byte counts whole numbers (the timeline sums them in floats)."""
    m = run.metrics()
    return {**m, "hbm_read_bytes": round(m["hbm_read_bytes"]),
            "hbm_write_bytes": round(m["hbm_write_bytes"])}


def estimate_matmul(inst: Instance, opts: dict, cores: int) -> dict:
    """One matmul on a logical core; `cores` of them at once (throughput scales, time not)."""
    check_dtype(inst.spec, opts["dtype"])
    available = inst.logical_cores
    if not 1 <= cores <= available:
        raise SpecError(f"--cores {cores}: {inst.spec.name} has {available} logical cores at "
                        f"LNC={inst.lnc}")
    prog = Program()
    prog.matmul(opts["m"], opts["k"], opts["n"], opts["dtype"], batch=opts["batch"])
    per_stack = inst.device.cores_per_stack if (cores > 1 or inst.lnc > 1) else 1
    m = _metrics(inst.run(prog, busy_cores_per_stack=per_stack))
    flops = m["model_flops"]
    return {**m, "cores": cores, "tflops": flops / m["time_s"] / 1e12 * cores}


def check_ranks(inst: Instance, ranks: int, nodes: int) -> None:
    """A collective needs two ranks (one has nothing to exchange: its time would be the launch
    alone, its bandwidth its buffer over that), and `nodes` instances that hold them all."""
    if ranks < 2:
        raise SpecError(f"a collective needs ranks >= 2 (ranks={ranks} moves nothing)")
    per_node = inst.logical_cores
    need = math.ceil(ranks / per_node)
    if need > MAX_NODES:          # no --nodes the command line takes would hold them
        raise SpecError(f"{ranks:,} ranks need {need:,} nodes of {inst.spec.name}, more than the "
                        f"{MAX_NODES:,} a job may have ({MAX_NODES * per_node:,} ranks at most "
                        f"at LNC={inst.lnc})")
    if need > nodes:
        raise SpecError(f"{ranks} ranks need {need} nodes of {inst.spec.name} ({per_node} "
                        f"logical cores each at LNC={inst.lnc}); pass --nodes {need}")
    if ranks % nodes:             # as a model's --cores must split evenly over --nodes
        raise SpecError(f"ranks={ranks} does not split evenly over --nodes {nodes}")


def check_buffer(inst: Instance, nbytes: int) -> None:
    """The collective's buffer must fit a logical core's HBM (less the runtime's reserve), as a
    model's memory must: a larger one is not a collective any job can run."""
    from .memory import GiB, RUNTIME_RESERVE_BYTES
    capacity = inst.device.hbm_bytes // inst.device.logical_cores(inst.lnc)
    if nbytes > capacity - RUNTIME_RESERVE_BYTES:
        raise SpecError(f"bytes={nbytes:,} does not fit a logical core's HBM: "
                        f"{capacity / GiB:.0f} GiB at LNC={inst.lnc}, "
                        f"{RUNTIME_RESERVE_BYTES / GiB:.0f} GiB of it the runtime's")


def estimate_collective(inst: Instance, kind: str, opts: dict, nodes: int = 1) -> dict:
    check_dtype(inst.spec, opts["dtype"])
    element = DTYPES[opts["dtype"]].bytes
    if opts["bytes"] % element:           # nccl-tests counts elements: no such buffer exists
        raise SpecError(f"bytes={opts['bytes']:,} is not a whole number of {opts['dtype']} "
                        f"elements ({element} bytes each)")
    check_ranks(inst, opts["ranks"], nodes)
    check_buffer(inst, opts["bytes"])
    group = place_ranks(inst, opts["ranks"], nodes)
    prog = Program()
    prog.collective(kind, opts["bytes"], group, dtype=opts["dtype"])
    run = inst.run(prog)
    cost = collective_cost(kind, opts["bytes"], group, inst.device, inst.costs, lnc=inst.lnc,
                           dtype_bytes=DTYPES[opts["dtype"]].bytes)
    m = _metrics(run)
    t = run.latency          # nccl-tests style: each collective is its own execution
    algbw = opts["bytes"] / t
    return {**m, "time_s": t, "dtype": opts["dtype"], "algorithm": cost.algorithm,
            "ranks": group.ranks,
            "devices": group.devices, "nodes": group.nodes,
            "algbw_gbps": algbw / 1e9, "busbw_gbps": algbw * bus_factor(kind, group.ranks) / 1e9}
