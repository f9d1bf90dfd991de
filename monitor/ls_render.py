"""neuron-ls output: the device table, the torus drawing and the JSON list.

Layout follows AWS's neuron-ls (neuron-tools.md §5): a header block (instance type and id, the
logical NeuronCore config on Trn2 and later), then an ASCII table with ``+----+`` borders and
two-line centred column headers, data cells left-aligned with one space of padding.

Three tables:
- default: NEURON DEVICE | NEURON CORES | NEURON CORE IDS | NEURON MEMORY | CONNECTED DEVICES |
  PCI BDF | CPU AFFINITY | NUMA NODE (one row per device, full PCI address);
- ``--wide`` / ``--show-all-procs``: NEURON DEVICE | NEURON CORES | NEURON MEMORY |
  CONNECTED DEVICES | PCI BDF | PID | COMMAND | RUNTIME VERSION (one row per process on the device,
  short PCI address ``cc:00.0``); commands cut to 40 characters, 80 with ``--wide``;
- ``--topology``: NEURON DEVICE | NEURON CORES | NEURON MEMORY | CONNECTED DEVICES | PCI BDF,
  followed by the torus drawing.

Header cells are centred with the odd space on the right, as AWS's tables are.

Everything here is pure: the CLI (ls_cli.py) gathers an ``LsView`` and these functions format it.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import orjson

from device_model.catalog import topology
from device_model.catalog.specs import InstanceSpec
from device_model.catalog.topology import format_cpulist

__all__ = ["LsProcess", "LsDevice", "LsView", "render_table", "render_topology", "render_json",
           "COMMAND_WIDTH", "WIDE_COMMAND_WIDTH", "NOT_A_RUNTIME", "build_view"]

COMMAND_WIDTH = 40  # neuron-ls cuts commands to this ("neuron-bench exec --run-as-cc-neff --..."),
WIDE_COMMAND_WIDTH = 80  # and to this with --wide (neuron-ls.rst examples)
NOT_A_RUNTIME = "NA"  # RUNTIME VERSION of a process that holds the device without a runtime
GiB = 1 << 30


@dataclass(frozen=True, slots=True)
class LsProcess:
    pid: int
    command: str
    runtime_version: str  # NOT_A_RUNTIME for tools such as neuron-ls itself


@dataclass(frozen=True, slots=True)
class LsDevice:
    index: int
    core_ids: tuple[int, ...]  # logical NeuronCore ids on this device
    memory_bytes: int
    connected: tuple[int, ...]  # neuron-ls order: up, left, down, right (then server ring)
    bdf: str  # full PCI address "0000:cc:00.0"
    cpu_affinity: str
    numa_node: int
    processes: tuple[LsProcess, ...] = ()

    @property
    def short_bdf(self) -> str:
        return self.bdf.split(":", 1)[1] if self.bdf.count(":") == 2 else self.bdf


@dataclass(frozen=True, slots=True)
class LsView:
    instance_type: str
    instance_id: str
    lnc: int
    show_lnc: bool  # the header line exists on Trn2 and later only
    topology: str  # "single" | "torus2d" | "torus3d" | "switch"
    torus_dims: tuple[int, ...]
    devices: tuple[LsDevice, ...]


# --------------------------------------------------------------------------- table
_DEFAULT_HEADERS = (("NEURON", "DEVICE"), ("NEURON", "CORES"), ("NEURON", "CORE IDS"),
                    ("NEURON", "MEMORY"), ("CONNECTED", "DEVICES"), ("PCI", "BDF"),
                    ("CPU", "AFFINITY"), ("NUMA", "NODE"))
_TOPOLOGY_HEADERS = (("NEURON", "DEVICE"), ("NEURON", "CORES"), ("NEURON", "MEMORY"),
                     ("CONNECTED", "DEVICES"), ("PCI", "BDF"))
_PROCESS_HEADERS = (*_TOPOLOGY_HEADERS, ("PID", ""), ("COMMAND", ""), ("RUNTIME", "VERSION"))


def render_table(view: LsView, wide: bool = False, show_all: bool = False,
                 topology: bool = False) -> str:
    """The header block and device table, newline-terminated (`topology`: the short table that
    AWS's --topology prints above its drawing)."""
    lines = [f"instance-type: {view.instance_type}", f"instance-id: {view.instance_id}"]
    if view.show_lnc:
        lines.append(f"logical-neuroncore-config: {view.lnc}")
    if wide or show_all:
        groups = [_process_rows(d, wide, show_all) for d in view.devices]
        # Devices spanning several rows need a rule between them to stay readable.
        ruled = show_all or any(len(g) > 1 for g in groups)
        lines += _grid(_PROCESS_HEADERS, groups, ruled)
    elif topology:
        lines += _grid(_TOPOLOGY_HEADERS, [[_device_cells(d)] for d in view.devices], ruled=False)
    else:
        groups = [[_default_row(d)] for d in view.devices]
        lines += _grid(_DEFAULT_HEADERS, groups, ruled=False)
    return "\n".join(lines) + "\n"


def _default_row(d: LsDevice) -> list[str]:
    return [str(d.index), str(len(d.core_ids)), format_cpulist(d.core_ids) if d.core_ids else "",
            _memory(d.memory_bytes), ", ".join(map(str, d.connected)), d.bdf, d.cpu_affinity,
            str(d.numa_node)]


def _device_cells(d: LsDevice) -> list[str]:
    return [str(d.index), str(len(d.core_ids)), _memory(d.memory_bytes),
            ", ".join(map(str, d.connected)), d.short_bdf]


def _process_rows(d: LsDevice, wide: bool, show_all: bool) -> list[list[str]]:
    device_cells = _device_cells(d)
    procs = [p for p in d.processes if show_all or p.runtime_version != NOT_A_RUNTIME]
    if not procs:
        return [device_cells + ["", "", ""]]
    rows = []
    for i, p in enumerate(procs):
        cells = device_cells if i == 0 else [""] * len(device_cells)
        command = _cut(_printable(p.command), WIDE_COMMAND_WIDTH if wide else COMMAND_WIDTH)
        rows.append(cells + [str(p.pid), command, p.runtime_version])
    return rows


def _printable(text: str) -> str:
    # A command line may hold anything (newlines, escapes, wide characters); one table cell
    # must stay one line of one-column characters.
    return "".join(c if c.isascii() and c.isprintable() else "?" for c in text)


def _memory(n: int) -> str:
    return f"{n // GiB} GB"


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 3] + "..."


def _grid(headers: Sequence[tuple[str, str]], groups: Sequence[list[list[str]]],
          ruled: bool) -> list[str]:
    rows = [r for g in groups for r in g]
    widths = [max([len(a), len(b)] + [len(r[i]) for r in rows]) + 2
              for i, (a, b) in enumerate(headers)]
    rule = "+" + "+".join("-" * w for w in widths) + "+"
    out = [rule]
    for line in (0, 1):
        out.append("|" + "|".join(_centred(h[line], w) for h, w in zip(headers, widths)) + "|")
    out.append(rule)
    for gi, group in enumerate(groups):
        for row in group:
            out.append("|" + "|".join(f" {c}".ljust(w) for c, w in zip(row, widths)) + "|")
        if ruled and gi < len(groups) - 1:
            out.append(rule)
    out.append(rule)
    return out


def _centred(text: str, width: int) -> str:
    left = (width - len(text)) // 2       # str.center puts an odd space on the left
    return " " * left + text + " " * (width - len(text) - left)


# --------------------------------------------------------------------------- topology
_WRAP_IN, _LINK, _WRAP_OUT = "*––►", "◄––►", "◄––*"


def render_topology(view: LsView) -> str:
    """The NeuronLink drawing: a torus grid with wrap-around markers, one plane per server."""
    if view.topology in ("torus2d", "torus3d") and len(view.torus_dims) >= 2:
        rows, cols = view.torus_dims[-2:]
        planes = len(view.devices) // (rows * cols)
        out = ["Neuron Device Topology"]
        for plane in range(planes):
            first = plane * rows * cols
            if planes > 1:
                out += ["", f"Server {plane} (devices {first}-{first + rows * cols - 1})"]
            out += _torus_plane(first, rows, cols, width=len(str(len(view.devices) - 1)))
        out += ["", "Legend:", "", f"        {_WRAP_IN} = Wrap-around link"]
        if planes > 1:
            out.append("        each device is also linked to the device at the same position "
                       "on the previous and next server (a ring across the UltraServer)")
        return "\n".join(out) + "\n"
    if view.topology == "switch":
        return ("Neuron Device Topology\n"
                f"{len(view.devices)} devices connected all-to-all through NeuronSwitch\n")
    return "Neuron Device Topology\nsingle device, no NeuronLink connections\n"


def _torus_plane(first: int, rows: int, cols: int, width: int) -> list[str]:
    cell = width + 3  # "[" + space + number + "]", number right-aligned as "[ 0 ]", "[12 ]"
    pitch = cell + len(_LINK)
    centres = [len(_WRAP_IN) + c * pitch + cell // 2 for c in range(cols)]
    total = len(_WRAP_IN) + cols * cell + (cols - 1) * len(_LINK) + len(_WRAP_OUT)

    def marks(char: str) -> str:
        line = [" "] * total
        for x in centres:
            line[x] = char
        return "".join(line)             # AWS's lines keep their width

    out = [marks("*"), marks("│"), marks("▼")]
    for r in range(rows):
        cells = [f"[{first + r * cols + c:>{width}} ]" for c in range(cols)]
        out.append(_WRAP_IN + _LINK.join(cells) + _WRAP_OUT)
        if r < rows - 1:
            out += [marks("▲"), marks("│"), marks("▼")]
    out += [marks("▲"), marks("│"), marks("*")]
    return out


# --------------------------------------------------------------------------- JSON
def render_json(view: LsView, show_all: bool = False) -> bytes:
    """neuron-ls -j: a JSON list, one object per device (numa_node is a string, as AWS's)."""
    # the LNC exists on Trn2 and later only, as the header line does (and neuron-monitor's
    # logical_neuroncore_config): a trn1 device has no such key
    lnc = {"logical_neuroncore_config": view.lnc} if view.show_lnc else {}
    return orjson.dumps([{
        "neuron_device": d.index, "bdf": d.short_bdf, "cpu_affinity": d.cpu_affinity,
        "numa_node": str(d.numa_node), "connected_to": list(d.connected),
        "nc_count": len(d.core_ids), **lnc,
        "memory_size": d.memory_bytes, "neuroncore_ids": list(d.core_ids),
        "neuron_processes": [{"pid": p.pid, "command": _cut(p.command, COMMAND_WIDTH),
                              "neuron_runtime_version": p.runtime_version}
                             for p in d.processes
                             if show_all or p.runtime_version != NOT_A_RUNTIME]}
        for d in view.devices], option=orjson.OPT_INDENT_2) + b"\n"


# --------------------------------------------------------------------------- building a view
def build_view(inst: InstanceSpec, lnc: int, instance_id: str,
               processes: dict[int, list[LsProcess]] | None = None,
               instance_type: str | None = None) -> LsView:
    """The view of a catalog instance; ``processes`` maps device index -> processes on it."""
    per_device = inst.device.logical_cores(lnc)
    processes = processes or {}
    devices = tuple(LsDevice(
        index=d, core_ids=tuple(range(d * per_device, (d + 1) * per_device)),
        memory_bytes=inst.device.hbm_bytes, connected=topology.neighbours(inst, d),
        bdf=topology.pci_bdf(inst, d), cpu_affinity=topology.cpu_affinity(inst, d),
        numa_node=topology.numa_node(inst, d), processes=tuple(processes.get(d, ())))
        for d in range(inst.devices))
    return LsView(instance_type or inst.name, instance_id, lnc,
                  show_lnc=inst.device.lnc_selectable, topology=inst.topology,
                  torus_dims=inst.torus_dims, devices=devices)
