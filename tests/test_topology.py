"""Chip placement: torus links as neuron-ls shows them, hop distances, rings, PCI and NUMA."""
from __future__ import annotations

import dataclasses
import itertools
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from device_model.errors import SpecError
from device_model.catalog.specs import INSTANCES, get_instance
from device_model.catalog.topology import (cpu_affinity, format_cpulist, hops, neighbours, numa_node,
                                   pci_bdf, ring_order, server_of, torus_coords)

TRN2 = get_instance("trn2.48xlarge")
TRN1 = get_instance("trn1.32xlarge")
ULTRA = get_instance("trn2u-ultraserver")
TRN3 = get_instance("trn3-ultraserver")
SINGLE = get_instance("trn1.2xlarge")
TORI = [i for i in INSTANCES.values() if i.topology.startswith("torus")]

# CONNECTED DEVICES and PCI BDF columns of AWS's neuron-ls example (trn2n.48xlarge); the
# trn1.32xlarge example shows the same connections.
NEURON_LS_TRN2 = """\
0 | 12, 3, 4, 1 | cc:00.0
1 | 13, 0, 5, 2 | b5:00.0
2 | 14, 1, 6, 3 | b6:00.0
3 | 15, 2, 7, 0 | cb:00.0
4 | 0, 7, 8, 5 | 6f:00.0
5 | 1, 4, 9, 6 | 58:00.0
6 | 2, 5, 10, 7 | 59:00.0
7 | 3, 6, 11, 4 | 6e:00.0
8 | 4, 11, 12, 9 | 9b:00.0
9 | 5, 8, 13, 10 | 84:00.0
10 | 6, 9, 14, 11 | 85:00.0
11 | 7, 10, 15, 8 | 9a:00.0
12 | 8, 15, 0, 13 | f8:00.0
13 | 9, 12, 1, 14 | e1:00.0
14 | 10, 13, 2, 15 | e2:00.0
15 | 11, 14, 3, 12 | f7:00.0"""
ROWS = [row.split(" | ") for row in NEURON_LS_TRN2.splitlines()]


@pytest.mark.parametrize("idx, connected, bdf", ROWS)
def test_trn2_matches_aws_neuron_ls_example(idx, connected, bdf):
    i = int(idx)
    assert ", ".join(map(str, neighbours(TRN2, i))) == connected
    assert neighbours(TRN1, i) == neighbours(TRN2, i)
    assert pci_bdf(TRN2, i) == f"0000:{bdf}"


# AWS's trn1.32xlarge NUMA layout (runtime-performance-tips.rst): PCI BDF, CPU affinity, node.
TRN1_LAYOUT = """\
0000:10:1c.0 0-31,64-95 0; 0000:10:1d.0 0-31,64-95 0; 0000:a0:1c.0 32-63,96-127 1
0000:a0:1d.0 32-63,96-127 1; 0000:20:1b.0 0-31,64-95 0; 0000:20:1c.0 0-31,64-95 0
0000:90:1b.0 32-63,96-127 1; 0000:90:1c.0 32-63,96-127 1; 0000:20:1d.0 0-31,64-95 0
0000:20:1e.0 0-31,64-95 0; 0000:90:1d.0 32-63,96-127 1; 0000:90:1e.0 32-63,96-127 1
0000:10:1e.0 0-31,64-95 0; 0000:10:1b.0 0-31,64-95 0; 0000:a0:1e.0 32-63,96-127 1
0000:a0:1b.0 32-63,96-127 1"""
# NUMA nodes of trn2 devices 0..15 in AWS's neuron-ls example (node 1: CPUs 48-95,144-191).
TRN2_NUMA = [1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1]


def test_trn1_pci_and_numa_placement_follow_aws_layout():
    rows = [r.split() for r in TRN1_LAYOUT.replace(";", "\n").split("\n")]
    assert [[pci_bdf(TRN1, i), cpu_affinity(TRN1, i), str(numa_node(TRN1, i))]
            for i in range(16)] == rows


def test_trn2_numa_placement_matches_aws_example():
    assert [numa_node(TRN2, i) for i in range(16)] == TRN2_NUMA
    assert {cpu_affinity(TRN2, i) for i in range(16) if TRN2_NUMA[i]} == {"48-95,144-191"}
    assert {cpu_affinity(TRN2, i) for i in range(16) if not TRN2_NUMA[i]} == {"0-47,96-143"}
    assert cpu_affinity(SINGLE, 0) == "0-7"


@pytest.mark.parametrize("inst", INSTANCES.values(), ids=list(INSTANCES))
def test_links_are_symmetric_and_counted(inst):
    degree = {"single": 0, "switch": 0, "torus2d": 4, "torus3d": 6}[inst.topology]
    for a in range(inst.devices):
        linked = neighbours(inst, a)
        assert len(linked) == len(set(linked)) == degree
        assert a not in linked
        for b in linked:
            assert a in neighbours(inst, b)
            assert hops(inst, a, b) == 1


def test_ultraserver_rings_same_coordinates_across_servers():
    for idx in range(16):
        ring = [idx + 16 * s for s in range(4)]
        for s, dev in enumerate(ring):
            assert set(neighbours(ULTRA, dev)[4:]) == {ring[(s - 1) % 4], ring[(s + 1) % 4]}
            assert torus_coords(ULTRA, dev) == (s, idx // 4, idx % 4)
    assert neighbours(ULTRA, 0) == (12, 3, 4, 1, 48, 16)


@pytest.mark.parametrize("inst", INSTANCES.values(), ids=list(INSTANCES))
def test_per_server_placement(inst):
    bdfs = {pci_bdf(inst, i) for i in range(inst.devices)}
    assert len(bdfs) == inst.devices                      # unique across servers too
    per_server_cpus = inst.vcpus // inst.nodes
    for server in range(inst.nodes):
        devices = [i for i in range(inst.devices) if server_of(inst, i)[0] == server]
        nodes = {numa_node(inst, i) for i in devices}
        assert nodes == set(range(inst.numa_nodes // inst.nodes))
        cpus = set()
        for node in nodes:
            dev = next(i for i in devices if numa_node(inst, i) == node)
            cpus |= set(parse_cpulist(cpu_affinity(inst, dev)))
        assert cpus == set(range(per_server_cpus))        # the nodes partition the host's vCPUs


def parse_cpulist(text: str) -> list[int]:
    out = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out += range(int(lo), int(hi or lo) + 1)
    return out


@given(st.sets(st.integers(0, 300), max_size=60))
def test_cpulist_round_trips(cpus):
    assert set(parse_cpulist(format_cpulist(cpus))) == cpus if cpus else format_cpulist(cpus) == ""


def device_pairs(inst):
    idx = st.integers(0, inst.devices - 1)
    return st.tuples(idx, idx, idx)


@pytest.mark.parametrize("inst", [TRN2, ULTRA, TRN3, SINGLE], ids=lambda i: i.name)
def test_hops_is_a_metric(inst):
    @given(device_pairs(inst))
    def check(abc):
        a, b, c = abc
        assert hops(inst, a, b) == hops(inst, b, a)
        assert (hops(inst, a, b) == 0) == (a == b)
        assert hops(inst, a, c) <= hops(inst, a, b) + hops(inst, b, c)
    check()


def test_torus_diameters():
    assert max(hops(TRN2, a, b) for a, b in itertools.product(range(16), repeat=2)) == 4
    assert max(hops(ULTRA, 0, b) for b in range(64)) == 6
    assert hops(TRN3, 0, 63) == 1 and neighbours(TRN3, 0) == ()


@pytest.mark.parametrize("inst", TORI, ids=lambda i: i.name)
def test_full_ring_is_a_closed_cycle_of_single_hops(inst):
    ring = ring_order(inst)
    assert sorted(ring) == list(range(inst.devices))
    assert all(hops(inst, a, b) == 1 for a, b in zip(ring, ring[1:] + ring[:1]))


@given(st.sets(st.integers(0, 63), min_size=1, max_size=64))
def test_ring_of_any_subset_is_a_permutation(subset):
    ring = ring_order(ULTRA, subset)
    assert sorted(ring) == sorted(subset)


def test_ring_of_a_block_uses_links():
    assert ring_order(TRN2, [5, 4, 1, 0]) == (0, 1, 5, 4)
    assert ring_order(TRN3, [3, 1, 2]) == (1, 2, 3)
    assert ring_order(SINGLE) == (0,)


@pytest.mark.parametrize("call", [
    lambda: neighbours(TRN2, 16),
    lambda: hops(TRN2, -1, 0),
    lambda: pci_bdf(SINGLE, 1),
    lambda: ring_order(TRN2, [0, 0]),
    lambda: torus_coords(TRN2, True),
    lambda: cpu_affinity(TRN2, "0"),
])
def test_bad_indices_raise_spec_error(call):
    with pytest.raises(SpecError, match="trn"):
        call()


@given(st.lists(st.integers(1, 5), min_size=2, max_size=3))
def test_any_torus_shape_has_symmetric_links_and_a_metric(dims):
    rank = len(dims)
    inst = dataclasses.replace(ULTRA if rank == 3 else TRN2, torus_dims=tuple(dims),
                               devices=math.prod(dims), nodes=dims[0] if rank == 3 else 1,
                               topology=f"torus{rank}d")
    for a in range(inst.devices):
        linked = neighbours(inst, a)
        assert len(linked) == len(set(linked)) and a not in linked
        assert all(a in neighbours(inst, b) for b in linked)
        assert [b for b in range(inst.devices) if hops(inst, a, b) == 1] == sorted(linked)
    assert sorted(ring_order(inst)) == list(range(inst.devices))
