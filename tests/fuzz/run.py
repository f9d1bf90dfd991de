"""`make fuzz`: generated inputs through every parser; each must answer or refuse, never crash.

    python tests/fuzz/run.py [--n 10000] [--seed 1] [--only NAME ...]

Parsers and what counts as a refusal (anything else raised is a crash):

  config     monitor.config.MonitorConfig.from_dict / from_file       ConfigError
  stream     monitor.stream.classify_line, then Report.to_json         never raises
  overrides  catalog.overrides.load_overrides, with_overrides, and a   SpecError
             small estimate on the overridden catalog
  workload   `neuron-sim estimate -w SPEC [--vs ...]` in process      exit 2 (SpecError, usage)
  profile    profiler.load on mutated small profiles                  ProfileError
  counters   shm.RuntimeHandle.read on mutated counter files, and a   CorruptCounters; the
             Collector report over them                                collector never raises
  instance   shm.SimInstance.from_json on mutated instance files      CorruptCounters

Inputs are mutations of valid documents (one value replaced by a hostile one: NaN, inf, 1e300,
2**63, wrong types, non-ASCII digits, huge strings; keys deleted or added; bytes flipped,
truncated). Deterministic for a seed. Prints one line per parser and the first crashes found;
exits 1 if any parser crashed. Not part of the test run (minutes, not seconds).
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import io
import os
import random
import sys
import tempfile
import time
import traceback
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
FIXTURES = ROOT / "tests" / "fixtures"

HOSTILE = [None, True, False, 0, -1, 1, 2 ** 31, 2 ** 63, 2 ** 64, -2 ** 63, 10 ** 30, 1e300, -1e300,
           1e-300, 0.5, float("nan"), float("inf"), float("-inf"), "", "x", "x" * 5000, "1s",
           "\u0663s", "0.0000001s", "-1s", "1e400", "inf", "NaN", "\x1b[2J", [], [1, "a"], {},
           {"a": {"b": []}}, [[[]]], "999999999999999999999"]


def hostile(rng: random.Random):
    return copy.deepcopy(rng.choice(HOSTILE))  # a fresh list or dict: no shared, circular nodes


def _walk(doc, rng: random.Random, depth: int = 0):
    """(container, key) of a random node of `doc`."""
    node, key = None, None
    cur = doc
    for _ in range(rng.randint(1, 6)):
        if isinstance(cur, dict) and cur:
            node, key = cur, rng.choice(list(cur))
        elif isinstance(cur, list) and cur:
            node, key = cur, rng.randrange(len(cur))
        else:
            break
        cur = node[key]
    return node, key


def mutate_json(doc, rng: random.Random, edits: int | None = None):
    doc = orjson.loads(orjson.dumps(doc))
    for _ in range(edits or rng.randint(1, 3)):
        node, key = _walk(doc, rng)
        if node is None:
            return hostile(rng)
        action = rng.random()
        if action < 0.7:
            node[key] = hostile(rng)
        elif action < 0.85 and isinstance(node, dict):
            del node[key]
        elif isinstance(node, dict):
            node[rng.choice(["extra", "period", "type", "tag_filter", "\u0000", "metrics"])] = hostile(rng)
        else:
            node.append(hostile(rng))
    return doc


def dumps(doc) -> bytes:
    try:
        return orjson.dumps(doc)
    except (TypeError, orjson.JSONEncodeError):  # NaN/inf/big ints: as Python's json writes them
        import json
        return json.dumps(doc).encode()


def mutate_bytes(data: bytes, rng: random.Random) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        r = rng.random()
        if r < 0.4 and b:
            i = rng.randrange(len(b))
            b[i] = rng.randrange(256)
        elif r < 0.6:
            del b[rng.randrange(len(b) + 1):]
        elif r < 0.8 and b:
            i = rng.randrange(len(b))
            b[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
        elif b:
            i = rng.randrange(len(b))
            b[i:i + 8] = rng.choice([b"\xff" * 8, b"\x00" * 8, b"\x7f\xf0" + b"\x00" * 6])
    return bytes(b)


# ------------------------------------------------------------------ the parsers
def fuzz_config(rng, tmp):
    from monitor.config import ConfigError, MonitorConfig
    seeds = [MonitorConfig.default().to_dict(),
             {"period": "1s", "neuron_runtimes": [{"tag_filter": "^t", "period": "2s",
                                                  "metrics": [{"type": "neuroncore_counters"}]}],
              "system_metrics": [{"type": "vcpu_usage", "period": "500ms"}]}]
    path = tmp / "config.json"

    def one():
        doc = mutate_json(rng.choice(seeds), rng)
        if rng.random() < 0.2:
            path.write_bytes(mutate_bytes(dumps(doc), rng))
            call = lambda: MonitorConfig.from_file(path)  # noqa: E731
        else:
            call = lambda: MonitorConfig.from_dict(doc)  # noqa: E731
        try:
            config = call()
        except ConfigError:
            return "refused", doc
        config.base_period, config.to_dict(), config.runtime_groups_for("llama-train")
        return "accepted", doc
    return one


def fuzz_stream(rng, tmp):
    from monitor.stream import classify_line
    seeds = []
    for f in sorted(FIXTURES.glob("neuron_monitor_*.json")):
        try:
            seeds.append(orjson.loads(f.read_bytes()))
        except orjson.JSONDecodeError:
            pass

    def one():
        r = rng.random()
        line = dumps(mutate_json(rng.choice(seeds), rng)) if r < 0.8 else mutate_bytes(
            dumps(rng.choice(seeds)), rng)
        report, kind, _ = classify_line(line)
        if report is None:
            return "refused", line[:300]
        report.to_json()
        return "accepted", line[:300]
    return one


def fuzz_overrides(rng, tmp):
    from dataclasses import fields

    from device_model.catalog.costs import CostParams
    from device_model.catalog.overrides import Catalog, load_overrides
    from device_model.core import instance
    from device_model.errors import SpecError
    from device_model.workloads import estimate
    names = [f.name for f in fields(CostParams)]
    values = ["0", "1", "-1", "0.5", "1e300", "inf", "nan", "-inf", "1e400", "true", '"x"', "[]",
              "[1, 2]", "99999999999999999999", "1.0000001", "2", "1e-300", "{a = 1}"]
    path = tmp / "o.toml"
    base = Catalog.default()

    def one():
        lines = []
        for _ in range(rng.randint(1, 3)):
            section = rng.choice(["[costs]", "[costs]", '[device.trainium2]', '[instance."trn2.48xlarge"]',
                                  "[bogus]"])
            key = rng.choice(names + ["hbm_bytes", "tdp_watts", "devices", "bogus"])
            lines += [section, f"{key} = {rng.choice(values)}"]
        text = "\n".join(lines).encode()
        if rng.random() < 0.1:
            text = mutate_bytes(text, rng)
        path.write_bytes(text)
        try:
            catalog = base.with_overrides(load_overrides(path))
            inst = instance("trn2.48xlarge", costs=catalog.costs, spec=catalog.instance("trn2.48xlarge"))
            estimate("matmul:m=256,k=256,n=256", inst)
        except SpecError:
            return "refused", text
        return "accepted", text
    return one


def fuzz_workload(rng, tmp):
    from device_model.cli import main
    from device_model.workloads import REGISTRY
    names = sorted(REGISTRY)
    keys = sorted({p.name for w in REGISTRY.values() for p in w.params})
    values = ["1", "2", "64", "128", "4k", "1M", "0", "-1", "inf", "1e400", "nan", "1.5", "2P", "",
              "\u0663", "99999999999999999999", "true", "bf16", "fp8", "train", "decode", "x" * 300,
              "128/256", "0/128", "128//", "/", "64/x", "/".join(map(str, range(1, 2001)))]
    os.environ.setdefault("NEURONSCOPE_MAX_INSTRUCTIONS", "200000")  # keep each run short

    small = ["1", "2", "4", "64", "128", "256", "1K", "1M", "128/512", "256/4096"]

    def one():
        name = rng.choice(names + ["", "bogus", "MATMUL", "matmul:"])
        own = [p.name for p in REGISTRY[name].params] if name in REGISTRY else keys
        tame = rng.random() < 0.5
        chosen = rng.sample(own, min(len(own), rng.randint(0, 3))) if tame else \
            [rng.choice(keys) for _ in range(rng.randint(0, 4))]
        pairs = [f"{k}={rng.choice(small if tame else values)}" for k in chosen]
        spec = name + (":" + ",".join(pairs) if pairs else "")
        argv = ["estimate", "-w", spec]
        r = rng.random()
        if r < 0.3:
            argv += ["--vs", f"{rng.choice(keys + ['nodes', 'tp', 'instance'])}={rng.choice(values)}"]
        elif r < 0.4:
            argv += [rng.choice(["--nodes", "--tp", "--cores", "--lnc"]), rng.choice(values)]
        if rng.random() < 0.3:
            argv.append("--json")
        out, err = io.TextIOWrapper(io.BytesIO()), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as exc:
                code = exc.code
        if code == 0:
            return "accepted", argv
        if code == 2 and "Traceback" not in err.getvalue():
            return "refused", argv
        raise AssertionError(f"exit {code}: {err.getvalue()[-300:]}")
    return one


def fuzz_profile(rng, tmp):
    import profiler
    from device_model import instance
    prof = profiler.capture_workload("mlp:tokens=64,hidden=128,layers=1", instance("trn2.48xlarge"))
    good = tmp / "good.nsprof"
    profiler.save(prof, good)
    data = good.read_bytes()
    path = tmp / "p.nsprof"
    magic_len = 8
    (hlen,) = __import__("struct").unpack("<I", data[magic_len:magic_len + 4])
    header = orjson.loads(data[magic_len + 4: magic_len + 4 + hlen])
    blobs = data[magic_len + 4 + hlen: -17]

    def rebuilt(h) -> bytes:
        import struct
        hb = dumps(h)
        body = data[:magic_len] + struct.pack("<I", len(hb)) + hb + blobs
        return body + b"NSPROFEND" + struct.pack("<Q", len(body) + 17)

    def one():
        blob = rebuilt(mutate_json(header, rng)) if rng.random() < 0.7 else mutate_bytes(data, rng)
        path.write_bytes(blob)
        try:
            profiler.load(path)
        except profiler.ProfileError:
            return "refused", blob[:200]
        return "accepted", blob[:200]
    return one


def fuzz_counters(rng, tmp):
    import numpy as np

    from collector_sim import FakeRuntime, write_instance
    from device_model.runtime import shm
    from monitor.collector import Collector
    from monitor.config import RUNTIME_GROUPS, SYSTEM_GROUPS, MonitorConfig
    root = tmp / "rt"
    root.mkdir(mode=0o700)
    write_instance(root)
    rt = FakeRuntime(root, os.getpid(), "train", [0, 1], cores_per_device=4, ring=8)
    rt.step(1.0, executions=3)
    good = rt.path.read_bytes()
    fd = rt.writer.fd  # the writer keeps its lock: the runtime stays "alive"
    config = MonitorConfig.from_dict({"period": "1s", "neuron_runtimes": [
        {"metrics": [{"type": t} for t in RUNTIME_GROUPS]}],
        "system_metrics": [{"type": t} for t in SYSTEM_GROUPS]})
    collector = Collector(config, root=root)
    dtype = rt.writer.dtype
    slots_off, slot_size = rt.writer.slots_off, rt.writer.slot_size
    fields = dtype.names

    def one():
        r = rng.random()
        if r < 0.5:  # one counter value out of range, slot checksums made right
            img = bytearray(good)
            rec = np.zeros((), dtype=dtype)
            rec[...] = np.frombuffer(good, dtype=dtype, count=1, offset=slots_off + 16)[0] \
                if (int.from_bytes(good[40:48], "little") % 2) == 0 else \
                np.frombuffer(good, dtype=dtype, count=1, offset=slots_off + slot_size + 16)[0]
            field = rng.choice(fields)
            value = rng.choice([1e300, -1.0, float("nan"), float("inf"), 2.0 ** 63, 9.2e18, 1e30, 0.0])
            kind = dtype[field].base.kind
            if kind in "ui":
                value = rng.choice([0, 2 ** 63 - 1, 2 ** 60, 2 ** 48 + 1] + ([2 ** 64 - 1] if kind == "u" else [-1]))
            rec[field] = value
            raw = rec.tobytes()
            import zlib
            for s in range(2):
                off = slots_off + s * slot_size
                img[off + 16: off + 16 + len(raw)] = raw
                img[off + 8: off + 12] = zlib.crc32(raw).to_bytes(4, "little")
                img[off: off + 8] = (0).to_bytes(8, "little")
            blob = bytes(img)
        else:
            blob = mutate_bytes(good, rng)
        os.ftruncate(fd, 0)
        os.pwrite(fd, blob, 0)
        handle = shm.RuntimeHandle(rt.path, os.getpid())
        try:
            handle.read()
            outcome = "accepted"
        except shm.CorruptCounters:
            outcome = "refused"
        finally:
            handle.close()
        collector.collect().to_json()  # the monitor goes on either way
        return outcome, blob[:120]
    return one


def fuzz_instance(rng, tmp):
    from collector_sim import write_instance
    from device_model.runtime import shm
    root = tmp / "inst"
    root.mkdir(mode=0o700)
    good = orjson.loads(write_instance(root).to_json())

    def one():
        data = dumps(mutate_json(good, rng)) if rng.random() < 0.8 else mutate_bytes(dumps(good), rng)
        try:
            shm.SimInstance.from_json(data)
        except shm.CorruptCounters:
            return "refused", data[:200]
        return "accepted", data[:200]
    return one


FUZZERS = {"config": fuzz_config, "stream": fuzz_stream, "overrides": fuzz_overrides,
           "workload": fuzz_workload, "profile": fuzz_profile, "counters": fuzz_counters,
           "instance": fuzz_instance}


def run(name: str, n: int, seed: int, tmp: Path) -> int:
    rng = random.Random(f"{seed}-{name}")
    work = tmp / name
    work.mkdir()
    one = FUZZERS[name](rng, work)
    counts = {"accepted": 0, "refused": 0}
    crashes: dict[str, tuple[str, str]] = {}
    crashed = 0
    t0 = time.monotonic()
    for _ in range(n):
        try:
            outcome, _ = one()
            counts[outcome] += 1
        except Exception as exc:  # a crash: anything but the parser's own refusal
            crashed += 1
            frame = traceback.extract_tb(exc.__traceback__)[-1]
            where = f"{type(exc).__name__} at {Path(frame.filename).name}:{frame.lineno}"
            crashes.setdefault(where, (str(exc)[:160], traceback.format_exc(limit=-3)))
    dt = time.monotonic() - t0
    print(f"{name:<10} {n:>7} inputs  {counts['accepted']:>6} accepted  {counts['refused']:>6} refused  "
          f"{crashed:>5} crashes  {dt:6.1f} s", flush=True)
    for where, (message, tb) in list(crashes.items())[:5]:
        print(f"    crash: {where}: {message}")
    return crashed


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="fuzz", description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=10_000, help="inputs per parser (default 10000)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--only", nargs="+", choices=sorted(FUZZERS), default=list(FUZZERS))
    args = p.parse_args(argv)
    total = 0
    with tempfile.TemporaryDirectory(prefix="neuronscope-fuzz-") as tmp:
        os.chmod(tmp, 0o700)
        for name in args.only:
            total += run(name, args.n, args.seed, Path(tmp))
    print(f"total: {total} crashes")
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
