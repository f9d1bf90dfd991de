"""Parallel layout: tensor (tp) x pipeline (pp) x data (dp) ranks over logical cores, chips and
instances, and the collective groups each rank takes part in.

Ranks are numbered tp fastest, then dp, then pp, as NeuronX Distributed and Megatron number
them (`parallel_state.initialize_model_parallel`: data-parallel groups stride by tp inside one
pipeline stage's slice of the ranks, pipeline groups stride by world / pp), and filled core by
core, chip by chip, node by node. A TP group is therefore contiguous (on one chip or
neighbouring chips: NeuronLink), a DP group packs a stage's replicas as densely as tp allows,
and neighbouring pipeline stages sit a whole stage's slice apart, across EFA on a multi-node
job. (NxD's special case for tp=4 on trn1, TP groups strided over a node's chips, is not
modelled.)
"""
from __future__ import annotations

import math

from dataclasses import dataclass

from ..core import Instance
from ..errors import SpecError
from ..program import CollectiveGroup


@dataclass(frozen=True, slots=True)
class Layout:
    tp: int
    pp: int
    dp: int
    cores_per_device: int
    devices_per_node: int
    nodes: int
    topology: str
    ranks_per_node: int = 0      # --cores spread over --nodes; 0: every core of a node

    @property
    def ranks(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def cores_per_node(self) -> int:
        return self.cores_per_device * self.devices_per_node

    def group(self, size: int, stride: int, first: int = 0) -> CollectiveGroup:
        """The group of ranks first, first + stride, ...: how many share a chip, chips, nodes.
        A node's ranks fill its chips in order."""
        members = [first + i * stride for i in range(size)]
        per_node = self.ranks_per_node or self.cores_per_node
        node_of = [r // per_node for r in members]
        devices = [n * self.devices_per_node + (r % per_node) // self.cores_per_device
                   for r, n in zip(members, node_of)]
        per_device = max(devices.count(d) for d in set(devices))
        nodes = len(set(node_of))
        # every rank on a chip is in some group of this kind, all running at once: they share
        # its links and EFA (a chip `--cores` leaves partly idle shares them among fewer)
        active = max(self.ranks_on_device(d % self.devices_per_node) for d in set(devices))
        return CollectiveGroup(size, per_device, len(set(devices)), nodes, self.topology, active)

    def ranks_on_device(self, local: int) -> int:
        """Ranks on a node's chip `local` (0-based): a node's ranks fill its chips in order."""
        per_node = self.ranks_per_node or self.cores_per_node
        return min(self.cores_per_device, max(0, per_node - local * self.cores_per_device))

    @property
    def tp_group(self) -> CollectiveGroup:
        return self.group(self.tp, 1)

    @property
    def pp_pair(self) -> CollectiveGroup:
        """The first two pipeline stages (a send/recv pair), a stage's tp * dp ranks apart."""
        return self.pp_pair_after(0)

    def pp_pair_after(self, stage: int) -> CollectiveGroup:
        """Stage `stage` and the next: on one node, or across EFA where the boundary between
        their slices of the ranks is a node's (with 2 stages a node, every other one)."""
        slice_ = self.tp * self.dp
        return self.group(2, slice_, stage * slice_)

    @property
    def dp_group(self) -> CollectiveGroup:
        """A stage's replicas, tp ranks apart."""
        return self.group(self.dp, self.tp)

    def describe(self) -> dict:
        def where(g: CollectiveGroup) -> str:
            if g.nodes > 1:
                return "efa"
            return "neuronlink" if g.devices > 1 else "chip"
        return {"tp": self.tp, "pp": self.pp, "dp": self.dp, "ranks": self.ranks,
                "nodes": self.nodes,
                # as pp and dp: no link where the degree is 1 (no TP group talks)
                "tp_link": where(self.tp_group) if self.tp > 1 else None,
                # every link a stage boundary takes, in order: "neuronlink/efa" when some
                # boundaries are inside a node and others between nodes
                "pp_link": "/".join(dict.fromkeys(where(self.pp_pair_after(s))
                                                  for s in range(self.pp - 1)))
                           if self.pp > 1 else None,
                "dp_link": where(self.dp_group) if self.dp > 1 else None}


def _largest_divisor(n: int, limit: int, also: int) -> int:
    """Largest d <= limit dividing both n and also."""
    return max(d for d in range(1, max(1, limit) + 1) if n % d == 0 and also % d == 0)


def _mismatch(given: dict, tp: int, pp: int, dp: int, ranks: int, where: str) -> str:
    """Why tp*pp*dp is not the ranks, in the degrees the user gave (a derived one is named as
    such: `--tp 7` on 64 ranks is 7 not dividing 64, not a dp of 9 nobody asked for)."""
    named = [(k, v) for k, v in given.items() if v is not None]
    product = math.prod(v for _, v in named)
    if named and len(named) < 3 and ranks % product:
        flags = " * ".join(f"--{k} {v}" for k, v in named)
        flags += f" = {product}" if len(named) > 1 else ""
        return f"{flags} does not divide the {where}"
    degrees = "*".join(f"{v}" if given[k] is not None else f"{v} ({k}, derived)"
                       for k, v in (("tp", tp), ("pp", pp), ("dp", dp)))
    fewer = tp * pp * dp < ranks and "--cores gives" not in where
    return (f"tp*pp*dp = {degrees} = {tp * pp * dp} does not equal the {where}"
            + (f"; give the degrees that fill them, or --cores {tp * pp * dp}" if fewer else ""))


def resolve_layout(inst: Instance, nodes: int, cores: int | None, tp: int | None, pp: int | None,
                   dp: int | None, *, heads: int, training: bool,
                   replicas_first: bool = False) -> Layout:
    """Fill in missing degrees and check tp*pp*dp equals the ranks available.

    Ranks are all logical cores of `nodes` instances unless `cores` limits them. Defaults: for
    training, and for inference with `replicas_first` (an encoder: one model per core), tp=1,
    pp=1 and dp takes the rest; for other inference the largest tp that divides the heads and
    fits one node, with replicas (dp) on the rest. `cores` over several `nodes` are spread
    evenly, each node running its share."""
    per_device = inst.device.logical_cores(inst.lnc)
    per_node = per_device * inst.spec.devices
    available = per_node * nodes
    ranks = available if cores is None else cores
    if ranks > available:
        raise SpecError(f"--cores {ranks} exceeds the {available} logical cores of {nodes} x "
                        f"{inst.spec.name}")
    given = {"tp": tp, "pp": pp, "dp": dp}
    fixed = (pp or 1) * (dp or 1)
    if tp is None:
        if pp is not None and dp is not None:
            tp = max(1, ranks // fixed)
        elif training or replicas_first:
            tp = 1
        else:
            # within a node, and dividing a node's ranks, so that no TP group straddles two
            tp = _largest_divisor(heads, min(ranks // nodes, ranks // fixed),
                                  math.gcd(max(1, ranks // fixed), ranks // nodes))
    if pp is None:
        # the one degree left out takes the rest; dp given alone leaves tp=1 and pp=1, not a
        # pipeline as deep as the ranks nobody asked for (the error below names --cores)
        pp = max(1, ranks // (tp * dp)) if dp is not None and given["tp"] is not None else 1
    if dp is None:
        dp = max(1, ranks // (tp * pp))
    rank_s = "rank" if ranks == 1 else "ranks"
    where = (f"{ranks} {rank_s} --cores gives" if cores is not None else
             f"{ranks} {rank_s} (logical cores) of {nodes} x {inst.spec.name} at LNC={inst.lnc}")
    if tp * pp * dp != ranks:
        raise SpecError(_mismatch(given, tp, pp, dp, ranks, where))
    if ranks % nodes:         # --cores over --nodes: each node runs its equal share
        raise SpecError(f"--cores {ranks} does not split evenly over --nodes {nodes}")
    per_node_ranks = ranks // nodes
    if per_node_ranks % tp and tp % per_node_ranks:
        # contiguous TP groups would straddle nodes unevenly (the model costs the first only)
        raise SpecError(f"--tp {tp} splits TP groups across nodes: each of the {nodes} nodes "
                        f"runs {per_node_ranks} ranks; give a tp that divides {per_node_ranks} "
                        "or is a multiple of it")
    if not training and pp > 1:
        if given["pp"] is None:     # derived from tp and dp: the user asked for no pipeline
            raise SpecError(f"tp*dp = {tp * dp} does not fill the {where}, and inference has no "
                            f"pipeline parallelism: give tp*dp = {ranks}, or --cores {tp * dp}")
        raise SpecError("pipeline parallelism (pp > 1) is modelled for mode=train only")
    topology = inst.spec.topology
    return Layout(tp, pp, dp, per_device, inst.spec.devices, nodes, topology, ranks // nodes)
