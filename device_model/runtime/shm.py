"""Shared-memory counters of simulated Neuron runtimes: one counter file per runtime process
(writer and reader), in the per-user runtime directory (``rundir.py``) beside the instance
description (``instance_file.py``); this module is the door to all three.

Layout (``layout.py``): prefix, JSON header (static parts), two slots. The writer fills the slot
that is not current, bumping that slot's sequence number to odd before and to even after, stores
a CRC32 of the record, then advances the generation counter that names the current slot. A reader
copies the current slot and accepts it only if the slot's sequence number was even and unchanged
across the copy and the CRC matches, so it never sees a torn update; a writer killed mid-update
leaves the other slot intact. The writer holds an exclusive ``flock`` on its file for its whole
life: a file nobody holds a lock on belongs to a dead runtime (safe against pid reuse).
"""
from __future__ import annotations

import fcntl
import math
import mmap
import os
import stat
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from ..fileio import PRIVATE, replacing
from . import layout as L
from .instance_file import INSTANCE_FILE, SimInstance, read_instance, remove_instance, write_instance
from .layout import (DEVICE_MEMORY, DMA_QUEUES, ECC_KINDS, ENGINES, ERROR_KINDS, EXEC_STATUS,
                     FLOP_KINDS, HOST_MEMORY, PHASES, latency_bin_values)
from .rundir import CorruptCounters, RuntimeDirError, open_regular, runtime_dir

__all__ = [
    "CorruptCounters", "RuntimeDirError", "SimInstance", "LoadedModel", "Subgraph", "RuntimeSnapshot",
    "RuntimeHandle", "CounterWriter", "runtime_dir", "read_instance", "write_instance",
    "remove_instance", "list_runtimes", "ENGINES", "DMA_QUEUES", "FLOP_KINDS", "EXEC_STATUS",
    "ERROR_KINDS", "HOST_MEMORY", "DEVICE_MEMORY", "ECC_KINDS", "PHASES", "INSTANCE_FILE",
    "latency_bin_values",
]

RUNTIME_GLOB = "runtime-*.ctr"
READ_ATTEMPTS = 64


# ------------------------------------------------------------------------ loaded models
@dataclass(frozen=True, slots=True)
class Subgraph:
    name: str
    core: int                         # logical NeuronCore index (instance-wide)
    device: int
    host_memory: dict[str, int]       # HOST_MEMORY keys
    device_memory: dict[str, int]     # constants, model_code, runtime_memory, tensors


@dataclass(frozen=True, slots=True)
class LoadedModel:
    name: str
    uuid: str
    model_id: int
    subgraphs: tuple[Subgraph, ...]

    def to_dict(self) -> dict:
        return {"name": self.name, "uuid": self.uuid, "model_id": self.model_id,
                "subgraphs": [{"name": s.name, "core": s.core, "device": s.device,
                               "host_memory": s.host_memory, "device_memory": s.device_memory}
                              for s in self.subgraphs]}

    @classmethod
    def from_dict(cls, d: dict) -> "LoadedModel":
        subs = tuple(Subgraph(str(s["name"]), int(s["core"]), int(s["device"]),
                              {k: int(v) for k, v in s["host_memory"].items()},
                              {k: int(v) for k, v in s["device_memory"].items()})
                     for s in d["subgraphs"])
        return cls(str(d["name"]), str(d["uuid"]), int(d["model_id"]), subs)


# ------------------------------------------------------------------------ snapshots
@dataclass(frozen=True, slots=True)
class RuntimeSnapshot:
    """Cumulative counters of one runtime since it started (arrays are read-only views).

    Per-core arrays are indexed like `cores`; physical axis = `lnc`; engine axis = ENGINES;
    per-device arrays are indexed like `devices`."""
    pid: int
    tag: str
    workload: str
    instance_type: str
    started_at: float
    wall_time: float                  # time.time() when these counters were written
    sim_time: float                   # simulated seconds since start
    phase: str
    cores: tuple[int, ...]            # logical core ids
    lnc: int
    core_devices: tuple[int, ...]     # device of each core
    devices: tuple[int, ...]          # devices touched, in dev_* order
    core_busy_s: np.ndarray           # (n,)
    phys_busy_s: np.ndarray           # (n, lnc)
    engine_active_s: np.ndarray       # (n, lnc, 5)
    instructions: np.ndarray          # (n, lnc, 5)
    flops: np.ndarray                 # (n, 4) FLOP_KINDS
    hbm_read_bytes: np.ndarray        # (n,)
    hbm_write_bytes: np.ndarray
    dma_bytes: np.ndarray             # (n, 4) DMA_QUEUES
    collective_bytes: np.ndarray
    collective_s: np.ndarray
    throttled_s: np.ndarray
    exec_status: dict[str, int]
    errors: dict[str, int]
    latency_count: int                # executions ever recorded in the ring
    latency_total: np.ndarray         # last min(count, ring) latencies, oldest first (seconds)
    latency_device: np.ndarray
    latency_executions: int           # executions ever counted in the histograms
    latency_hist_total: np.ndarray    # (LATENCY_BINS,) executions per bin (layout.latency_bins)
    latency_hist_device: np.ndarray
    host_memory: dict[str, int]
    device_memory: np.ndarray         # (n, 5) DEVICE_MEMORY
    dev_energy_j: np.ndarray          # (d,)
    dev_power_w: np.ndarray
    dev_temperature_c: np.ndarray
    dev_throttle: np.ndarray
    dev_hbm_read_bytes: np.ndarray
    dev_hbm_write_bytes: np.ndarray
    dev_ecc: np.ndarray               # (d, 4) ECC_KINDS
    models: tuple[LoadedModel, ...]

    @property
    def physical_cores(self) -> np.ndarray:
        """Physical core ids (n, lnc): logical core c at LNC=L is physical c*L .. c*L+L-1."""
        return np.asarray(self.cores)[:, None] * self.lnc + np.arange(self.lnc)[None, :]

    def model_flops(self) -> np.ndarray:
        return self.flops[:, 0]

    def hardware_flops(self) -> np.ndarray:
        return self.flops[:, 1]

    def latencies_since(self, count: int) -> tuple[np.ndarray, np.ndarray]:
        """Latencies recorded after the ring held `count` entries (clipped to the ring)."""
        new = max(0, min(self.latency_count - count, self.latency_total.size))
        return self.latency_total[self.latency_total.size - new:], self.latency_device[self.latency_device.size - new:]


# ------------------------------------------------------------------------ writer
def _header_dims(h: dict) -> tuple[int, int, int, int]:
    return len(h["cores"]), int(h["lnc"]), len(h["devices"]), int(h["ring"])


class CounterWriter:
    """The runtime's side: creates `runtime-<pid>.ctr` 0600, locks it, publishes records."""

    def __init__(self, root: Path | str | None, header: dict, pid: int | None = None) -> None:
        self.dir = runtime_dir(root)
        self.pid = pid if pid is not None else os.getpid()
        header = {**header, "pid": self.pid}
        self.dtype = L.record_dtype(*_header_dims(header))
        self.record = np.zeros((), dtype=self.dtype)
        hdr = orjson.dumps(header)
        header_off = L.PREFIX_SIZE
        slots_off = (header_off + len(hdr) + 63) // 64 * 64
        self.slot_size = L.slot_size(self.dtype.itemsize)
        size = slots_off + 2 * self.slot_size
        prefix = L.PREFIX.pack(L.MAGIC, L.VERSION, header_off, len(hdr), slots_off, self.slot_size,
                               self.dtype.itemsize)
        image = bytearray(size)
        image[: len(prefix)] = prefix
        image[header_off: header_off + len(hdr)] = hdr
        zero_crc = zlib.crc32(bytes(self.dtype.itemsize))
        for s in range(2):
            off = slots_off + s * self.slot_size
            image[off + 8: off + 12] = zero_crc.to_bytes(4, "little")
        self.path = self.dir / f"runtime-{self.pid}.ctr"
        # the descriptor stays open (locked, then mapped) once the file is in place
        with replacing(self.path, mode=PRIVATE, prefix=".tmp-", suffix=".ctr", keep_open=True) as fh:
            fd = fh.fileno()
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fh.write(bytes(image))
        self.fd = fd
        self.mm = mmap.mmap(fd, size)
        self.slots_off = slots_off
        self.gen = np.ndarray((1,), "<u8", self.mm, L.GEN_OFFSET)
        self.seq = [np.ndarray((1,), "<u8", self.mm, slots_off + s * self.slot_size) for s in range(2)]
        self.crc = [np.ndarray((1,), "<u4", self.mm, slots_off + s * self.slot_size + 8) for s in range(2)]

    def publish(self) -> None:
        """Copy `self.record` into the spare slot, then make that slot current."""
        slot = int(self.gen[0] + 1) % 2
        off = self.slots_off + slot * self.slot_size + L.SLOT_HEAD
        data = self.record.tobytes()
        self.seq[slot][0] += 1                  # odd: being written
        self.mm[off: off + len(data)] = data
        self.crc[slot][0] = zlib.crc32(data)
        self.seq[slot][0] += 1                  # even: complete
        self.gen[0] += 1

    def close(self, remove: bool = True) -> None:
        if self.mm.closed:
            return
        if remove:
            self.path.unlink(missing_ok=True)
        self.gen = self.seq = self.crc = None    # release buffer exports before closing the map
        self.mm.close()
        os.close(self.fd)


# ------------------------------------------------------------------------ reader
class RuntimeHandle:
    """The reader's side of one counter file.

    The file is read with pread() into private bytes, never mapped: a file truncated or rewritten
    while we read it gives a short read (a CorruptCounters), where a mapping would fault (SIGBUS)."""

    def __init__(self, path: Path, pid: int) -> None:
        self.path = path
        self.pid = pid
        self._fd: int | None = None
        self._header: dict | None = None
        self._layout: tuple[int, int, int, np.dtype] | None = None
        self._models: tuple[LoadedModel, ...] = ()

    def __repr__(self) -> str:
        return f"RuntimeHandle(pid={self.pid}, path={str(self.path)!r})"

    def is_alive(self) -> bool:
        """True while the runtime process holds its lock on the file (a non-regular file is no
        runtime's)."""
        try:
            fd = open_regular(self.path)
        except (OSError, CorruptCounters):
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        except OSError:
            return False
        finally:
            os.close(fd)
        return False

    def remove(self) -> None:
        """Delete the file of a dead runtime (no-op for a live one, or for anything that is not
        a regular file)."""
        self.close()
        try:
            regular = stat.S_ISREG(self.path.lstat().st_mode)
        except OSError:
            return
        if regular and not self.is_alive():
            self.path.unlink(missing_ok=True)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def header(self) -> dict:
        self._open()
        assert self._header is not None
        return self._header

    def _open(self) -> None:
        if self._fd is not None:
            return
        try:
            fd = open_regular(self.path)
        except FileNotFoundError:
            raise CorruptCounters(f"{self.path.name}: vanished") from None
        except OSError as e:
            raise CorruptCounters(f"{self.path.name}: cannot open ({e.strerror})") from None
        try:
            size = os.fstat(fd).st_size
            if size < L.PREFIX_SIZE:
                raise CorruptCounters(f"{self.path.name}: truncated ({size} bytes)")
            head = os.pread(fd, L.PREFIX_SIZE + L.MAX_HEADER, 0)
            self._header, self._layout = _parse_head(self.path.name, head, size)
            self._models = _parse_models(self._header)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def read(self) -> RuntimeSnapshot:
        """A consistent copy of the current counters; CorruptCounters if the file is damaged."""
        self._open()
        fd, h = self._fd, self._header
        assert fd is not None and h is not None and self._layout is not None
        slots_off, slot_size, record_size, dtype = self._layout
        want = L.SLOT_HEAD + record_size
        try:
            for _ in range(READ_ATTEMPTS):
                gen = os.pread(fd, 8, L.GEN_OFFSET)
                if len(gen) != 8:
                    break
                slot = int.from_bytes(gen, "little") % 2
                off = slots_off + slot * slot_size
                data = os.pread(fd, want, off)
                if len(data) != want:
                    break
                seq1 = int.from_bytes(data[:8], "little")
                if seq1 % 2 or os.pread(fd, 8, off) != data[:8]:
                    continue
                record = data[L.SLOT_HEAD:]
                if zlib.crc32(record) != int.from_bytes(data[8:12], "little"):
                    raise CorruptCounters(f"{self.path.name}: checksum mismatch in slot {slot}")
                r = np.frombuffer(record, dtype=dtype, count=1)[0]
                _check_record(self.path.name, r, record)
                return _snapshot(h, r, self._models)
            else:
                raise CorruptCounters(f"{self.path.name}: no consistent update after {READ_ATTEMPTS} attempts")
        except OSError as e:
            raise CorruptCounters(f"{self.path.name}: cannot read ({e.strerror})") from None
        raise CorruptCounters(f"{self.path.name}: truncated while reading")


# Counters are cumulative seconds, bytes, FLOPs, counts and watts: finite and not negative, and
# below bounds far beyond any real run (a value past them is damage, not a measurement): counts
# below 2**60 so that sums of a few stay 64-bit integers, memory sizes below 2**48 bytes (256 TiB).
MAX_COUNTER = float(2 ** 53)    # ids, times and sizes in headers
MAX_FLOAT = 1e30
MAX_COUNT = 2 ** 60
MAX_MEMORY = 2 ** 48


def _check_record(name: str, r: np.void, raw: bytes) -> None:
    """Refuse a record whose values no runtime could have written (NaN, inf, negative, 1e300).
    Every field is 8 bytes wide, so the record is checked as three flat views at once."""
    kinds = _record_kinds(r.dtype)
    f = np.frombuffer(raw, "<f8")[kinds.floats]
    u = np.frombuffer(raw, "<u8")[kinds.counts]
    i = np.frombuffer(raw, "<i8")[kinds.sizes]
    with np.errstate(invalid="ignore"):
        ok = (bool(np.all((f >= 0.0) & (f <= kinds.float_limits))) and bool(np.all(u <= MAX_COUNT))
              and bool(np.all((i >= 0) & (i <= MAX_MEMORY))))
    if not ok:
        raise CorruptCounters(f"{name}: counter {_first_bad(r)!r} out of range")


@dataclass(frozen=True, slots=True)
class _Kinds:
    floats: np.ndarray        # indices of the float64 words of a record
    float_limits: np.ndarray
    counts: np.ndarray        # uint64 words
    sizes: np.ndarray         # int64 words


_KINDS: dict[np.dtype, _Kinds] = {}


def _record_kinds(dtype: np.dtype) -> _Kinds:
    kinds = _KINDS.get(dtype)
    if kinds is None:
        words: dict[str, list[int]] = {"f": [], "u": [], "i": []}
        limits: list[float] = []
        for field in dtype.names:
            sub, offset = dtype.fields[field][:2]
            first, n = offset // 8, max(1, sub.itemsize // 8)
            kind = sub.base.kind
            words[kind].extend(range(first, first + n))
            if kind == "f":
                limits += [MAX_COUNTER if field in ("wall_time", "sim_time") else MAX_FLOAT] * n
        kinds = _KINDS[dtype] = _Kinds(*(np.asarray(words[k], np.int64) for k in "f"),
                                        np.asarray(limits), *(np.asarray(words[k], np.int64) for k in "ui"))
    return kinds


def _first_bad(r: np.void) -> str:
    """The first field out of range (for the message; only on the error path)."""
    for field in r.dtype.names:
        v = np.asarray(r[field])
        if v.size == 0:
            continue
        if v.dtype.kind == "f":
            limit = MAX_COUNTER if field in ("wall_time", "sim_time") else MAX_FLOAT
            ok = bool(np.isfinite(v).all()) and v.min() >= 0.0 and v.max() <= limit
        else:
            ok = v.min() >= 0 and v.max() <= (MAX_MEMORY if v.dtype.kind == "i" else MAX_COUNT)
        if not ok:
            return field
    return "?"


def _parse_head(name: str, buf: bytes, size: int) -> tuple[dict, tuple[int, int, int, np.dtype]]:
    try:
        magic, version, header_off, header_len, slots_off, slot_size, record_size = \
            L.PREFIX.unpack_from(buf, 0)
    except Exception:
        raise CorruptCounters(f"{name}: unreadable prefix") from None
    if magic != L.MAGIC:
        raise CorruptCounters(f"{name}: not a counter file (bad magic)")
    if version != L.VERSION:
        raise CorruptCounters(f"{name}: counter format version {version}; supported: {L.VERSION}")
    if not (0 < header_len <= L.MAX_HEADER and L.PREFIX_SIZE <= header_off
            and header_off + header_len <= min(size, len(buf))):
        raise CorruptCounters(f"{name}: header length {header_len} out of range")
    try:
        h = orjson.loads(buf[header_off: header_off + header_len])
        _check_header(h)
        dtype = L.record_dtype(*_header_dims(h))
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, OverflowError) as e:
        raise CorruptCounters(f"{name}: bad header ({e})") from None
    expected = slots_off + 2 * slot_size
    if record_size != dtype.itemsize or slot_size != L.slot_size(record_size) or size != expected \
            or slots_off < header_off + header_len:
        raise CorruptCounters(f"{name}: truncated or resized ({size} bytes, expected {expected})")
    return h, (slots_off, slot_size, record_size, dtype)


_HEADER_TYPES = {"pid": int, "tag": str, "workload": str, "instance_type": str, "started_at": (int, float),
                 "cores": list, "lnc": int, "core_devices": list, "devices": list, "ring": int, "models": list}
MAX_ID = 1 << 16   # core and device ids (an instance has at most a few hundred)


def _check_header(h: Any) -> None:
    if not isinstance(h, dict):
        raise ValueError("header is not an object")
    for key, kind in _HEADER_TYPES.items():
        if not isinstance(h.get(key), kind) or isinstance(h.get(key), bool):
            raise ValueError(f"{key!r} missing or of the wrong type")
    if not (1 <= h["lnc"] <= 8 and 1 <= h["ring"] <= 1 << 16 and len(h["cores"]) <= 4096
            and len(h["devices"]) <= 4096 and len(h["core_devices"]) == len(h["cores"])):
        raise ValueError("sizes out of range")
    if not all(type(c) is int and 0 <= c < MAX_ID for c in h["cores"] + h["devices"] + h["core_devices"]):
        raise ValueError(f"core and device ids must be integers in [0, {MAX_ID})")
    if not (0 < h["pid"] < 1 << 31 and math.isfinite(h["started_at"]) and 0 <= h["started_at"] <= MAX_COUNTER):
        raise ValueError("pid or started_at out of range")


def _parse_models(h: dict) -> tuple[LoadedModel, ...]:
    try:
        models = tuple(LoadedModel.from_dict(m) for m in h["models"])
        for m in models:
            values = [m.model_id] + [v for sg in m.subgraphs for v in (
                sg.core, sg.device, *sg.host_memory.values(), *sg.device_memory.values())]
            if not all(0 <= v <= MAX_MEMORY for v in values):
                    raise ValueError("a core, device, id or size out of range")
        return models
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as e:
        raise CorruptCounters(f"runtime {h['pid']}: bad loaded model ({e})") from None


def _snapshot(h: dict, r: np.void, models: tuple[LoadedModel, ...]) -> RuntimeSnapshot:
    ring = int(h["ring"])
    count = int(r["latency_count"])
    n = min(count, ring)
    order = (np.arange(count - n, count) % ring) if n else np.zeros(0, dtype=np.int64)
    phase = int(r["phase"])
    return RuntimeSnapshot(
        pid=int(h["pid"]), tag=h["tag"], workload=h["workload"], instance_type=h["instance_type"],
        started_at=float(h["started_at"]), wall_time=float(r["wall_time"]),
        sim_time=float(r["sim_time"]), phase=PHASES[phase] if phase < len(PHASES) else "unknown",
        cores=tuple(h["cores"]), lnc=int(h["lnc"]), core_devices=tuple(h["core_devices"]),
        devices=tuple(h["devices"]),
        core_busy_s=r["core_busy_s"], phys_busy_s=r["phys_busy_s"], engine_active_s=r["engine_active_s"],
        instructions=r["instructions"], flops=r["flops"], hbm_read_bytes=r["hbm_read_bytes"],
        hbm_write_bytes=r["hbm_write_bytes"], dma_bytes=r["dma_bytes"],
        collective_bytes=r["collective_bytes"], collective_s=r["collective_s"], throttled_s=r["throttled_s"],
        exec_status=dict(zip(EXEC_STATUS, r["exec_status"].tolist())),
        errors=dict(zip(ERROR_KINDS, r["errors"].tolist())),
        latency_count=count, latency_total=r["latency_total"][order], latency_device=r["latency_device"][order],
        latency_executions=int(r["latency_executions"]), latency_hist_total=r["latency_hist_total"],
        latency_hist_device=r["latency_hist_device"],
        host_memory=dict(zip(HOST_MEMORY, r["host_memory"].tolist())), device_memory=r["device_memory"],
        dev_energy_j=r["dev_energy_j"], dev_power_w=r["dev_power_w"], dev_temperature_c=r["dev_temperature_c"],
        dev_throttle=r["dev_throttle"], dev_hbm_read_bytes=r["dev_hbm_read_bytes"],
        dev_hbm_write_bytes=r["dev_hbm_write_bytes"], dev_ecc=r["dev_ecc"], models=models)


def list_runtimes(root: Path | str | None = None) -> list[RuntimeHandle]:
    """Counter files in the runtime directory, live or dead, ordered by pid. Anything else under
    a counter file's name (a FIFO, a symlink, a folder) is no runtime's and is passed over."""
    out = []
    for path in runtime_dir(root).glob(RUNTIME_GLOB):
        digits = path.name[len("runtime-"): -len(".ctr")]
        if not (digits.isascii() and digits.isdigit() and len(digits) <= 10):
            continue
        try:
            if not stat.S_ISREG(path.lstat().st_mode):
                continue
        except OSError:
            continue
        out.append(RuntimeHandle(path, int(digits)))
    return sorted(out, key=lambda h: h.pid)


def now() -> float:
    return time.time()
