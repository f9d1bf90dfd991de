"""Costs of the simulated runtime: condensing a timeline into counters, one runtime tick, and
reading a counter file, each against its baseline measured in the same run.

    python bench/bench_runtime.py
"""
from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import orjson

from device_model import instance
from device_model.runtime.counters import ExecutionProfile
from device_model.runtime.apps import build_app_program
from device_model.runtime.process import Runtime, RuntimeConfig
from device_model.runtime.shm import list_runtimes

RUNS = 7


def timed(fn, runs: int = RUNS) -> tuple[float, float, float]:
    samples = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t)
    return statistics.median(samples), min(samples), max(samples)


def python_loop_profile(run, bins: int = 256) -> np.ndarray:
    """Baseline: the same binning as ExecutionProfile.from_run, one Python step per instruction."""
    cols = run.timeline.columns
    wall = run.timeline.wall
    out = [[0.0] * 4 for _ in range(bins)]
    for s, e, f, r, w in zip(cols["start"].tolist(), cols["end"].tolist(), cols["flops"].tolist(),
                             cols["hbm_r"].tolist(), cols["hbm_w"].tolist()):
        b = min(int((s + e) / 2 / wall * bins), bins - 1)
        row = out[b]
        row[0] += 1
        row[1] += f
        row[2] += r
        row[3] += w
    return np.array(out)


def ticking_runtime(root: Path, cores: tuple[int, ...], step: float, **kw):
    """A 2048-cubed matmul runtime on `cores`, and its tick: advance `step` simulated seconds
    and publish the counters."""
    rt = Runtime(RuntimeConfig(instance="trn2.48xlarge", workload="matmul:m=2048,k=2048,n=2048",
                               cores=cores, tag="bench", root=root, **kw))
    sim = [0.0]

    def tick():
        sim[0] += step
        rt.advance(sim[0])
        rt.publish()
    return rt, tick


def main() -> None:
    inst = instance("trn2.48xlarge")
    app = build_app_program("demo-train:layers=2,hidden=2048,seq=2048", inst, 48)
    run = inst.run(app.program)
    n = len(run.timeline)
    med, lo, hi = timed(lambda: ExecutionProfile.from_run(run))
    base, blo, bhi = timed(lambda: python_loop_profile(run), runs=5)
    print(f"profile condensation: {n / med / 1e6:.2f} M instr/s [{n / hi / 1e6:.2f}-{n / lo / 1e6:.2f}] "
          f"({n} instructions); Python loop baseline {n / base / 1e6:.2f} M instr/s; ratio {base / med:.1f}x")

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        root.chmod(0o700)
        rt, tick = ticking_runtime(root, tuple(range(64)), 0.1)
        for _ in range(20):
            tick()
        med, lo, hi = timed(lambda: [tick() for _ in range(100)])
        per_tick = med / 100
        print(f"runtime tick (advance 0.1 s + publish, 64 cores): {per_tick * 1e6:.0f} us "
              f"[{lo / 100 * 1e6:.0f}-{hi / 100 * 1e6:.0f}]; at 10 Hz = {per_tick * 10 * 100:.2f} % of one core "
              f"(baseline: the 100 ms tick interval; ratio {0.1 / per_tick:.0f}x headroom)")

        # a fast simulation's tick: --speed 10000 covers 1,000 simulated seconds (about 2,000
        # batches) each 0.1 s; it keeps up while a tick takes less than that
        fast_root = root / "fast"        # a runtime's counter file is named by its pid
        fast_root.mkdir(mode=0o700)
        fast, fast_tick = ticking_runtime(fast_root, (0, 1, 2, 3), 1000.0, speed=1e4)
        fast_tick()
        med, lo, hi = timed(fast_tick, runs=5)
        print(f"fast tick (--speed 10000: advance 1,000 s + publish, 4 cores): {med * 1e3:.0f} ms "
              f"[{lo * 1e3:.0f}-{hi * 1e3:.0f}] (baseline: the 100 ms tick interval; "
              f"{'keeps up' if med < 0.1 else 'falls behind'}, {0.1 / med:.2f}x)")
        fast.close()

        [h] = list_runtimes(root)
        snap = h.read()
        as_json = orjson.dumps({k: (v.tolist() if isinstance(v, np.ndarray) else v)
                                for k, v in ((f, getattr(snap, f)) for f in snap.__slots__) if k != "models"})
        med, lo, hi = timed(lambda: [h.read() for _ in range(200)])
        base, blo, bhi = timed(lambda: [orjson.loads(as_json) for _ in range(200)])
        print(f"counter file read (64 cores, {h.path.stat().st_size // 1024} KiB): {med / 200 * 1e6:.0f} us "
              f"[{lo / 200 * 1e6:.0f}-{hi / 200 * 1e6:.0f}]; orjson.loads of the same counters "
              f"({len(as_json) // 1024} KiB) {base / 200 * 1e6:.0f} us; ratio {base / med:.1f}x")
        rt.close()


if __name__ == "__main__":
    main()
