"""Where each chip of an instance sits: torus links, PCI addresses, NUMA placement.

Devices are numbered row-major over `InstanceSpec.torus_dims` (an UltraServer's first axis is
the server), which reproduces AWS's neuron-ls example: on trn2.48xlarge device 0 is connected
to `12, 3, 4, 1` (up, left, down, right, wrapping around), device 5 to `1, 4, 9, 6`.
Per-server facts (PCI address, CPU affinity, NUMA node) are what that server's host reports.
"""
from __future__ import annotations

from collections.abc import Iterable

from ..errors import SpecError
from .specs import InstanceSpec

# PCI buses of trn2 devices 0..15 and their NUMA nodes in AWS's neuron-ls example
# (neuron-ls.rst, Trn2 section: devices 0-3 and 12-15 on node 1, 4-11 on node 0).
_TRN2_BUSES = (0xCC, 0xB5, 0xB6, 0xCB, 0x6F, 0x58, 0x59, 0x6E,
               0x9B, 0x84, 0x85, 0x9A, 0xF8, 0xE1, 0xE2, 0xF7)
_TRN2_NUMA = (1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1)
# trn1.32xlarge devices 0..15 as (bus, slot) and NUMA node: AWS's NUMA layout table
# (neuron-runtime/explore/runtime-performance-tips.rst, "trn1.32xlarge").
_TRN1_SLOTS = ((0x10, 0x1C), (0x10, 0x1D), (0xA0, 0x1C), (0xA0, 0x1D),
               (0x20, 0x1B), (0x20, 0x1C), (0x90, 0x1B), (0x90, 0x1C),
               (0x20, 0x1D), (0x20, 0x1E), (0x90, 0x1D), (0x90, 0x1E),
               (0x10, 0x1E), (0x10, 0x1B), (0xA0, 0x1E), (0xA0, 0x1B))
_TRN1_NUMA = (0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1)
_PCI_SLOTS = 32             # a PCI bus has 32 device numbers
_FALLBACK_BUS = 0x10        # assumption: devices beyond the published tables, unused by them
_THREADS_PER_CORE = 2       # assumption: SMT on, as the "48-95,144-191" example implies


def check_index(inst: InstanceSpec, idx: int) -> int:
    if isinstance(idx, bool) or not isinstance(idx, int) or not 0 <= idx < inst.devices:
        raise SpecError(f"device index {idx!r} is out of range for {inst.name}; "
                        f"allowed: 0-{inst.devices - 1}")
    return idx


def torus_coords(inst: InstanceSpec, idx: int) -> tuple[int, ...]:
    """Row-major coordinates in `inst.torus_dims`; () for instances without a torus."""
    check_index(inst, idx)
    coords = []
    for size in reversed(inst.torus_dims):
        idx, c = divmod(idx, size)
        coords.append(c)
    return tuple(reversed(coords))


def _index_of(inst: InstanceSpec, coords: Iterable[int]) -> int:
    idx = 0
    for size, c in zip(inst.torus_dims, coords):
        idx = idx * size + c % size
    return idx


def neighbours(inst: InstanceSpec, device_index: int) -> tuple[int, ...]:
    """Directly linked devices in neuron-ls order: per 2D plane up, left, down, right, then the
    previous and next server of an UltraServer ring. None for one chip or a switch fabric."""
    coords = torus_coords(inst, device_index)
    if not coords:
        return ()
    # Axis order: rows, cols within a plane, then the server ring (first axis) of a 3D torus.
    axes = list(range(len(coords)))[-2:] + list(range(len(coords)))[:-2]
    found: list[int] = []

    def add(axis: int, step: int) -> None:
        if inst.torus_dims[axis] < 2:
            return
        moved = list(coords)
        moved[axis] += step
        other = _index_of(inst, moved)
        if other != device_index and other not in found:
            found.append(other)

    row, col = axes[0], axes[1]
    for axis, step in ((row, -1), (col, -1), (row, +1), (col, +1)):
        add(axis, step)
    for axis in axes[2:]:
        add(axis, -1)
        add(axis, +1)
    return tuple(found)


def hops(inst: InstanceSpec, a: int, b: int) -> int:
    """Link hops between two devices: torus distance with wrap-around; 1 through a switch."""
    ca, cb = torus_coords(inst, a), torus_coords(inst, b)
    if inst.topology == "switch" or not ca:
        return 0 if a == b else 1
    return sum(min(abs(x - y), n - abs(x - y)) for x, y, n in zip(ca, cb, inst.torus_dims))


def _snake_rank(inst: InstanceSpec) -> dict[int, int]:
    """Boustrophedon order over the torus: each step moves one position along one axis."""
    if not inst.torus_dims:
        return {i: i for i in range(inst.devices)}
    order: list[tuple[int, ...]] = [()]
    for size in reversed(inst.torus_dims):
        order = [(i, *rest) for i in range(size)
                 for rest in (order if i % 2 == 0 else order[::-1])]
    return {_index_of(inst, c): rank for rank, c in enumerate(order)}


def ring_order(inst: InstanceSpec, devices: Iterable[int] | None = None) -> tuple[int, ...]:
    """An order of `devices` (default: all) for ring collectives in which consecutive devices
    are linked where possible: greedy nearest neighbour, ties broken along a snake path, so a
    whole 4x4 torus (or 4x4x4) gives a ring of single hops that closes on itself."""
    chosen = list(range(inst.devices)) if devices is None else list(devices)
    for d in chosen:
        check_index(inst, d)
    if len(set(chosen)) != len(chosen):
        raise SpecError(f"duplicate device in ring {chosen} for {inst.name}")
    if not chosen:
        return ()
    rank = _snake_rank(inst)
    left = set(chosen)
    current = min(chosen, key=rank.__getitem__)
    order = [current]
    left.remove(current)
    while left:
        current = min(left, key=lambda d: (hops(inst, current, d), rank[d]))
        order.append(current)
        left.remove(current)
    return tuple(order)


# --- per-server placement ------------------------------------------------------------------

def server_of(inst: InstanceSpec, idx: int) -> tuple[int, int]:
    """(server number, device index on that server)."""
    check_index(inst, idx)
    return divmod(idx, inst.devices_per_node)


def pci_bdf(inst: InstanceSpec, idx: int) -> str:
    """Stable PCI address "dddd:bb:ss.0"; the domain is the server number in an UltraServer."""
    server, local = server_of(inst, idx)
    if inst.device.name == "trainium1" and local < len(_TRN1_SLOTS):
        bus, slot = _TRN1_SLOTS[local]
    elif inst.device.name != "trainium1" and local < len(_TRN2_BUSES):
        bus, slot = _TRN2_BUSES[local], 0x00
    else:
        bus, slot = divmod(local, _PCI_SLOTS)
        bus += _FALLBACK_BUS
    return f"{server:04x}:{bus:02x}:{slot:02x}.0"


def numa_node(inst: InstanceSpec, idx: int) -> int:
    """NUMA node on the device's own server: AWS's published layouts for a two-socket server of
    16 Trainium1 or Trainium2 devices (trn3 as trn2: assumption); otherwise devices fill nodes
    from the highest down (assumption)."""
    _, local = server_of(inst, idx)
    per_server = inst.numa_nodes // inst.nodes
    if per_server == 2 and inst.devices_per_node == 16:
        return (_TRN1_NUMA if inst.device.name == "trainium1" else _TRN2_NUMA)[local]
    return per_server - 1 - local * per_server // inst.devices_per_node


def cpu_affinity(inst: InstanceSpec, idx: int) -> str:
    """The vCPUs of the device's NUMA node as a Linux cpulist, e.g. "48-95,144-191": cores are
    split evenly over the nodes and hyperthread siblings follow all cores."""
    node = numa_node(inst, idx)
    cores = inst.vcpus // inst.nodes // _THREADS_PER_CORE
    per_node = cores // (inst.numa_nodes // inst.nodes)
    first = range(node * per_node, (node + 1) * per_node)
    cpus = [*first, *(c + cores for c in first)]
    return format_cpulist(cpus)


def format_cpulist(cpus: Iterable[int]) -> str:
    """[0, 1, 2, 5] -> "0-2,5" (the Linux cpulist format)."""
    spans: list[list[int]] = []
    for c in sorted(set(cpus)):
        if spans and c == spans[-1][1] + 1:
            spans[-1][1] = c
        else:
            spans.append([c, c])
    return ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in spans)
