"""Collectives on the CC-cores and DMA rings: an alpha-beta model with size-dependent algorithms
(trn2-arch.md §6 "Collectives"; C1-C4)."""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..catalog.costs import CostParams
from ..program import CollectiveGroup
from ..catalog.specs import DeviceSpec

MB = 1 << 20


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


def intra_algorithm(nbytes: float, ranks: int) -> tuple[str, int, int]:
    """C2: Mesh below 1 MB, recursive halving-doubling to 56 MB, KangaRing above.
    Returns (name, latency steps per phase, NeuronLink links used per chip)."""
    if ranks <= 1:
        return "local", 0, 0
    if nbytes < 1 * MB:
        return "mesh", 1, 4
    if nbytes <= 56 * MB:
        return "rdh", max(1, math.ceil(math.log2(ranks))), 4
    return "kangaring", max(1, math.ceil(ranks / 2)), 2


def _phases(kind: str) -> int:
    return 2 if kind == "all_reduce" else 1      # all-reduce = reduce-scatter + all-gather


def collective_cost(kind: str, nbytes: float, group: CollectiveGroup, device: DeviceSpec,
                    costs: CostParams) -> CollectiveCost:
    n = group.ranks
    moved = bus_factor(kind, n) * nbytes if kind != "send_recv" else nbytes
    if n <= 1 and kind != "send_recv":
        return CollectiveCost(0.0, "local", 0, 0.0, 0.0, 0.0)
    phases = _phases(kind)
    reduces = kind in ("all_reduce", "reduce_scatter")
    dma_core = device.dma_engines_per_core * device.dma_engine_bw
    if group.nodes > 1:
        # Hierarchical (C3): inter-node first over EFA, then inside the node.
        per_rank_efa = device.efa_bw / group.ranks_per_device * costs.cc_link_efficiency
        inter_ranks = group.nodes
        inter_moved = bus_factor(kind, inter_ranks) * nbytes / max(1, n // inter_ranks)
        inter_steps = phases * (inter_ranks - 1)
        t_inter = inter_steps * costs.cc_alpha_inter_s + inter_moved / per_rank_efa
        intra = CollectiveGroup(n // inter_ranks, group.ranks_per_device,
                                max(1, group.devices // inter_ranks), 1, group.topology)
        rest = collective_cost(kind, nbytes, intra, device, costs) if intra.ranks > 1 else None
        t = t_inter + (rest.seconds if rest else 0.0)
        algo = "hierarchical"
        steps = inter_steps + (rest.steps if rest else 0)
    elif group.devices <= 1:
        # All ranks on one chip: DMA through HBM, the reduction done by DMA collective compute.
        bw = dma_core * costs.cc_local_bw_fraction
        steps = phases
        t = steps * costs.cc_alpha_intra_s + moved / bw
        algo = "local-dma"
    else:
        algo, steps_per_phase, links = intra_algorithm(nbytes, n)
        steps = steps_per_phase * phases
        link_bw = device.neuronlink_bw / device.neuronlink_links
        per_rank = links * link_bw * costs.cc_link_efficiency / group.ranks_per_device
        if reduces:   # N3: DMA collective compute reduces at ~50% of DMA throughput
            per_rank = min(per_rank, dma_core * costs.cc_reduce_dma_fraction)
        t = steps * costs.cc_alpha_intra_s + moved / per_rank
    t += costs.cc_launch_s
    algbw = nbytes / t if t > 0 else 0.0
    return CollectiveCost(t, algo, steps, moved, algbw, algbw * bus_factor(kind, n))
