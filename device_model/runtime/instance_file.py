"""The instance description `neuron-sim start` writes into the runtime directory (instance_info,
neuron_hardware_info and topology), validated field by field when it is read back."""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from .rundir import CorruptCounters, atomic_write, read_regular, runtime_dir

INSTANCE_FILE = "instance.json"


@dataclass(frozen=True, slots=True)
class SimInstance:
    """What `neuron-sim start` wrote: instance_info, neuron_hardware_info and topology."""
    instance_name: str
    instance_id: str
    instance_type: str              # as neuron-monitor prints it
    catalog_name: str               # device_model.catalog.specs name
    availability_zone: str
    availability_zone_id: str
    region: str
    ami_id: str
    subnet_id: str
    device_type: str
    device_version: str
    core_version: str
    device_count: int
    device_memory_bytes: int
    cores_per_device: int           # logical cores per device at `lnc`
    lnc: int
    seed: int
    speed: float
    started_at: float
    connected_devices: tuple[tuple[int, ...], ...]
    apps: tuple[dict, ...]          # {"tag", "workload", "cores"} per app
    launcher_pid: int

    def to_json(self) -> bytes:
        d = {k: getattr(self, k) for k in self.__slots__}
        d["connected_devices"] = [list(c) for c in self.connected_devices]
        d["apps"] = list(self.apps)
        return orjson.dumps({"format": "neuronscope-instance", "version": 1, **d}, option=orjson.OPT_INDENT_2)

    @classmethod
    def from_json(cls, data: bytes) -> "SimInstance":
        """Parse and validate an instance description: every field of its type and in range,
        else CorruptCounters naming the field."""
        try:
            d = orjson.loads(data)
        except orjson.JSONDecodeError as e:
            raise CorruptCounters(f"instance description is not JSON: {e}") from None
        if not isinstance(d, dict) or d.get("format") != "neuronscope-instance":
            raise CorruptCounters("instance description has no 'format': 'neuronscope-instance'")
        kw: dict[str, Any] = {}
        for name in cls.__slots__:
            if name not in d:
                raise CorruptCounters(f"instance description lacks {name!r}")
            kw[name] = _instance_field(name, d[name])
        return cls(**kw)


_INSTANCE_INTS = {"device_count": (0, 4096), "device_memory_bytes": (0, 1 << 50),
                  "cores_per_device": (0, 64), "lnc": (1, 8), "seed": (-(1 << 63), 1 << 63),
                  "launcher_pid": (0, 1 << 31)}
_INSTANCE_FLOATS = {"speed": (0.0, 1e6), "started_at": (0.0, float(2 ** 53))}


def _instance_field(name: str, v: Any) -> Any:
    bad = CorruptCounters(f"instance description: {name!r} has a wrong type or is out of range")
    if name in _INSTANCE_INTS:
        lo, hi = _INSTANCE_INTS[name]
        if type(v) is not int or not lo <= v < hi:
            raise bad
        return v
    if name in _INSTANCE_FLOATS:
        lo, hi = _INSTANCE_FLOATS[name]
        if type(v) not in (int, float) or not (math.isfinite(v) and lo <= v <= hi):
            raise bad
        return float(v)
    if name == "connected_devices":
        if type(v) is not list or len(v) > 4096 or not all(
                type(c) is list and len(c) <= 64 and all(type(x) is int and 0 <= x < 4096 for x in c)
                for c in v):
            raise bad
        return tuple(tuple(c) for c in v)
    if name == "apps":
        if type(v) is not list or len(v) > 4096 or not all(
                type(a) is dict and type(a.get("tag")) is str and type(a.get("workload", "")) is str
                and (a.get("pid") is None or (type(a.get("pid")) is int and 0 < a["pid"] < 1 << 31))
                for a in v):
            raise bad
        return tuple(dict(a) for a in v)
    if type(v) is not str or len(v) > 4096:   # every other field is a name or an id
        raise bad
    return v


MAX_INSTANCE_BYTES = 1 << 20


def read_instance(root: Path | str | None = None) -> SimInstance | None:
    """The simulated instance in `root`, or None when none was started."""
    path = runtime_dir(root) / INSTANCE_FILE
    try:
        data = read_regular(path, MAX_INSTANCE_BYTES)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise CorruptCounters(f"{INSTANCE_FILE}: cannot read ({e.strerror})") from None
    return SimInstance.from_json(data)


def write_instance(root: Path | str | None, inst: SimInstance) -> Path:
    path = runtime_dir(root) / INSTANCE_FILE
    atomic_write(path, inst.to_json())
    return path


def remove_instance(root: Path | str | None = None) -> None:
    (runtime_dir(root) / INSTANCE_FILE).unlink(missing_ok=True)
