"""Collectives on the CC-cores and DMA rings: an alpha-beta model with size-dependent algorithms
(trn2-arch.md §6 "Collectives"; C1-C4).

Bandwidth. The same DMA engines move collective data on and off chip (C4), so one per-rank rate
bounds every collective: `cc_dma_fraction` of the rank's DMA bandwidth (its physical cores'
engines), calibrated on C1's 1 GiB bus bandwidth and checked on C3's for NC-v2, on J2's prefill
for NC-v3 (`cc_dma_fraction_v3`, checked on the held-out HJ1). NeuronLink (the links inside
the group's footprint, shared by every rank of the chip running a collective of the same kind
for Mesh, by the concurrent groups for RDH and a ring) and EFA (the NICs of the group's chips
on each node, shared by the concurrent groups) can only lower it.

Latency. Intra-node algorithms follow C2: Mesh below 1 MB (2 steps per phase, each step as long
as the farthest hop in the group's torus footprint), recursive halving-doubling to 56 MB, then
KangaRing. Across instances trn1 runs a flat ring over all ranks (runtime docs, internode
collectives): 2(n-1) steps for an all-reduce, each crossing of an instance boundary paying the
EFA hop, pipelined `cc_ring_slots` deep while its chunks are empty and `cc_ring_slots_data` deep
once they carry data (receive, reduce, send); later generations run the hierarchical scheme (C3).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..catalog.costs import CostParams
from ..program import CollectiveGroup
from ..catalog.specs import DeviceSpec

MB = 1 << 20
TORUS_DIMS = {"torus2d": (4, 4), "torus3d": (4, 4, 4)}  # A3, A5: 4x4 per instance (x4 servers)
FLAT_RING_GENERATIONS = ("v2",)   # runtime docs (internode collectives): trn1 rings flat


@dataclass(frozen=True, slots=True)
class CollectiveCost:
    seconds: float
    algorithm: str
    steps: int
    bytes_moved: float      # bytes each rank sends
    algbw: float            # bytes/s, nccl-tests convention
    busbw: float


def bus_factor(kind: str, ranks: int) -> float:
    """nccl-tests: all-reduce 2(n-1)/n, all-gather / reduce-scatter / all-to-all (n-1)/n."""
    if ranks <= 1:
        return 0.0
    if kind == "all_reduce":
        return 2 * (ranks - 1) / ranks
    if kind == "send_recv":
        return 1.0
    return (ranks - 1) / ranks


def _span_hops(count: int, side: int) -> int:
    """Farthest ring distance among `count` consecutive positions of a `side`-long torus axis."""
    if count <= 1:
        return 0
    return side // 2 if count >= side else count - 1


def footprint(devices: int, topology: str) -> tuple[int, int]:
    """(links inside the group, farthest hop) for `devices` consecutive chips, row-major on the
    instance's torus (how the layouts place TP groups): two chips share one link, a torus row
    is a ring of 2 links per chip, more rows add the second axis' 2 links."""
    if devices <= 1:
        return 0, 0
    if topology == "switch":
        return 4, 1
    dims = TORUS_DIMS.get(topology, (4, 4))
    hops, left = 0, devices
    axes_used = 0
    for side in reversed(dims):           # fill the innermost axis first
        span = min(left, side)
        hops += _span_hops(span, side)
        axes_used += span > 1
        left = math.ceil(left / side)
    links = 1 if devices == 2 else 2 * axes_used
    return min(links, 4), hops


def intra_algorithm(nbytes: float, ranks: int) -> tuple[str, int, int]:
    """C2: Mesh below 1 MB, recursive halving-doubling to 56 MB, KangaRing above.
    Returns (name, latency steps per phase, NeuronLink links it can use per chip)."""
    if ranks <= 1:
        return "local", 0, 0
    if nbytes < 1 * MB:
        return "mesh", 2, 4            # C2: the mesh all-gather / reduce-scatter takes 2 steps
    if nbytes <= 56 * MB:
        return "rdh", max(1, math.ceil(math.log2(ranks))), 4
    return "kangaring", max(1, math.ceil(ranks / 2)), 2


def _phases(kind: str) -> int:
    return 2 if kind == "all_reduce" else 1      # all-reduce = reduce-scatter + all-gather


def dma_rate(device: DeviceSpec, costs: CostParams, lnc: int) -> float:
    """Per-rank collective bandwidth through the DMA engines (C4: the same engines on and off
    chip; the share per NeuronCore generation: C1 on NC-v2, J2 on NC-v3)."""
    return device.dma_bw_per_core * lnc * costs.cc_fraction(device)


def _link_rate(device: DeviceSpec, group: CollectiveGroup, links: int, costs: CostParams,
               ring: bool) -> float:
    """Per-rank NeuronLink rate. Mesh sends every rank's data straight to every other rank, so
    each rank on a chip takes its share of the links. RDH first reduces within the chip (each
    of its ranks takes a quarter of the chunks across chips, C2) and a ring passes data between
    a chip's ranks through HBM: a chip's links carry its data once, and only the concurrent
    groups share them (as they share EFA)."""
    link_bw = device.neuronlink_bw / device.neuronlink_links
    sharing = group.active / group.ranks_per_device if ring else group.active
    return links * link_bw * costs.cc_link_efficiency / sharing


def _efa_rate(device: DeviceSpec, group: CollectiveGroup, costs: CostParams) -> float:
    """EFA per group: the NICs of its chips on one node, shared by the groups that run on those
    chips at the same time (every active core of a chip runs its own)."""
    chips = max(1, group.devices // group.nodes)
    sharing = group.active / group.ranks_per_device
    return chips * device.efa_bw * costs.cc_link_efficiency / sharing


def _ring_hop_depth(chunk_bytes: float, costs: CostParams) -> float:
    """Ring steps in flight per EFA hop. An empty step only passes semaphores, `cc_ring_slots`
    of them per hop (C3 8 B). A step with data is receive, reduce, send (C3: slices pipeline the
    transfer against the reduction), `cc_ring_slots_data` deep once its DMA is bandwidth-bound;
    in between, its DMA's size efficiency eta (N6, `dma_eta_half_bytes`) says how far it is."""
    eta = chunk_bytes / (chunk_bytes + costs.dma_eta_half_bytes) if chunk_bytes > 0 else 0.0
    # exposed hop time per step is the mix of the two: 1/depth interpolates by eta
    per_hop = (1.0 - eta) / costs.cc_ring_slots + eta / costs.cc_ring_slots_data
    return 1.0 / per_hop


def _flat_ring(kind: str, nbytes: float, moved: float, group: CollectiveGroup,
               device: DeviceSpec, costs: CostParams, r_dma: float) -> tuple[float, int]:
    """trn1 across instances: one ring over all ranks. Each of its steps moves one chunk; a
    step with data pays the DMA fixed cost of its transfers (2 when it reduces: read the peer's
    chunk, write the sum; 1 otherwise, N6); each step also crosses an EFA hop somewhere on the
    ring, pipelined `_ring_hop_depth` deep (fewer steps in flight once chunks carry data), and
    the intra-node hops overlap those."""
    n, phases = group.ranks, _phases(kind)
    steps = phases * (n - 1)
    elems = nbytes / 4 / n                         # 4-byte elements per chunk
    with_data = min(1.0, elems)                    # chunks under one element are empty
    chunk = nbytes / n if elems >= 1 else 0.0
    per_step_pair = {"all_reduce": 3, "reduce_scatter": 2}.get(kind, 1)
    t_dma = (n - 1) * with_data * per_step_pair * costs.dma_fixed_latency_s
    t_hops = max(steps * costs.cc_alpha_inter_s / _ring_hop_depth(chunk, costs),
                 steps * costs.cc_alpha_intra_s)
    rate = min(r_dma, _efa_rate(device, group, costs))
    return t_hops + t_dma + moved / rate, steps


def reduce_weight(kind: str, dtype_bytes: float, costs: CostParams) -> float:
    """DMA collective compute reduces in FP32 (EVRF061): a narrower dtype's reduction steps
    take as long as FP32 ones of the same element count. An all-reduce is a reduce-scatter and
    an all-gather; `cc_allreduce_fp32_fraction` of its all-gather half still carries the FP32
    partial sums (cast back to the dtype at the end)."""
    widen = max(1.0, costs.cc_reduce_elem_bytes / dtype_bytes)
    gather = 1.0 + (widen - 1.0) * costs.cc_allreduce_fp32_fraction   # its all-gather half
    return {"all_reduce": (widen + gather) / 2, "reduce_scatter": widen}.get(kind, 1.0)


def collective_cost(kind: str, nbytes: float, group: CollectiveGroup, device: DeviceSpec,
                    costs: CostParams, lnc: int = 1, dtype_bytes: float = 4.0) -> CollectiveCost:
    # An all-to-all costs as an all-gather of the same buffer (assumption: nothing published
    # times one on Trainium): each rank sends (n-1)/n of it once (nccl-tests' bus factor), by
    # the same algorithms. Exact in bytes on one chip; across chips a lower bound, since its
    # chunk for a rank k hops away crosses k links where an all-gather forwards over one.
    n = group.ranks
    moved = bus_factor(kind, n) * nbytes if kind != "send_recv" else nbytes
    if n <= 1 and kind != "send_recv":
        return CollectiveCost(0.0, "local", 0, 0.0, 0.0, 0.0)
    phases = _phases(kind)
    r_dma = dma_rate(device, costs, lnc) / reduce_weight(kind, dtype_bytes, costs)
    if group.nodes > 1 and device.core_version_lnc1 in FLAT_RING_GENERATIONS:
        t, steps = _flat_ring(kind, nbytes, moved, group, device, costs, r_dma)
        algo = "flat-ring"
    elif group.nodes > 1:
        # Hierarchical (C3): inter-node first over EFA, then inside the node.
        inter_ranks = group.nodes
        inter_moved = bus_factor(kind, inter_ranks) * nbytes / max(1, n // inter_ranks)
        inter_steps = phases * (inter_ranks - 1)
        per_rank_efa = min(r_dma, device.efa_bw * costs.cc_link_efficiency / group.active)
        t_inter = inter_steps * costs.cc_alpha_inter_s + inter_moved / per_rank_efa
        intra = CollectiveGroup(n // inter_ranks, group.ranks_per_device,
                                max(1, group.devices // inter_ranks), 1, group.topology,
                                group.active_per_device)
        rest = (collective_cost(kind, nbytes, intra, device, costs, lnc, dtype_bytes)
                if intra.ranks > 1 else None)
        t = t_inter + (rest.seconds - costs.cc_launch_s if rest else 0.0)
        algo = "hierarchical"
        steps = inter_steps + (rest.steps if rest else 0)
    elif group.devices <= 1:
        # All ranks on one chip: DMA through HBM, the reduction done by DMA collective compute.
        steps = phases
        t = steps * costs.cc_alpha_intra_s + moved / r_dma
        algo = "local-dma"
    else:
        algo, steps_per_phase, algo_links = intra_algorithm(nbytes, n)
        links, far = footprint(group.devices, group.topology)
        steps = 1 if kind == "send_recv" else steps_per_phase * phases
        hop = far if algo == "mesh" else 1      # mesh sends straight to every rank
        rate = min(r_dma, _link_rate(device, group, min(links, algo_links), costs,
                                      ring=algo != "mesh"))   # C2: only Mesh fans out
        t = steps * hop * costs.cc_alpha_intra_s + moved / rate
    t += costs.cc_launch_s
    algbw = nbytes / t if t > 0 else 0.0
    return CollectiveCost(t, algo, steps, moved, algbw, algbw * bus_factor(kind, n))
