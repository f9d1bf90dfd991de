"""PyTorch capture overhead per aten operator, against an uninstrumented run and torch.profiler.

The shipped example's transformer (examples/train_transformer.py) trains for --steps steps on one
thread, interleaved run by run under: nothing; our native recorder (C++ RecordFunction callback,
module/optimizer hooks, per-step collection); our Python recorder (TorchDispatchMode); an empty
TorchDispatchMode (the floor of the Python design); torch.profiler(record_shapes=True). Each run
brackets start to stop, so collection work at step ends and at the stop is included. Overhead per
op = (run - median uninstrumented) / aten calls at the dispatcher (what the Python recorder sees).
Mapping the recording onto the chip model after the run is reported separately.

Usage: python bench/bench_capture.py [--runs 7] [--steps 10]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from device_model import instance  # noqa: E402
from profiler.capture.recorders import start_recorder  # noqa: E402
from profiler.capture.to_profile import recording_to_profile  # noqa: E402
from train_transformer import TinyGPT  # noqa: E402
from benchlib import fmt  # noqa: E402


class Passthrough(TorchDispatchMode):
    """The floor of any TorchDispatchMode recorder: a mode that only calls through."""
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = TinyGPT(64, 64, 4, 2, 32)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randint(0, 64, (8, 32))

    def train():
        for _ in range(args.steps):
            loss = F.cross_entropy(model(x).reshape(-1, 64), x.reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

    def recorded(kind: str):
        def run():
            rec = start_recorder(kind)
            train()
            return rec.stop()
        return run

    def torch_profiled():
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True):
            train()

    def floor():
        with Passthrough():
            train()

    train()                                              # warm-up; also builds the native library
    n_ops = len(recorded("python")())
    native = recorded("native")()
    t_map = time.perf_counter()
    prof = recording_to_profile(native, instance("trn2.48xlarge"), detail_steps=1)
    t_map = time.perf_counter() - t_map
    variants = {"uninstrumented": train, "native recorder": recorded("native"),
                "python recorder": recorded("python"), "empty TorchDispatchMode": floor,
                "torch.profiler(shapes)": torch_profiled}
    wall: dict[str, list[float]] = {k: [] for k in variants}
    cpu: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(args.runs):                           # interleaved, so drift hits all alike
        for name, fn in variants.items():
            t, c = time.perf_counter(), time.thread_time()
            fn()
            cpu[name].append(time.thread_time() - c)
            wall[name].append(time.perf_counter() - t)
    # overhead per op from paired differences (run i of a variant minus run i uninstrumented)
    per_op = {clock: {k: [(t - b) / n_ops * 1e6 for t, b in zip(v, times["uninstrumented"])]
                      for k, v in times.items()} for clock, times in (("wall", wall), ("cpu", cpu))}
    print(f"== PyTorch capture: {args.steps} training steps of the example transformer, {n_ops:,} aten calls "
          f"at the dispatcher ({len(native):,} kept by the native recorder), {args.runs} runs ==")
    base = statistics.median(wall["uninstrumented"])
    print(f"{'':26s}{'wall time':>26s}  {'overhead µs/op, wall':>28s}  {'overhead µs/op, thread CPU':>30s}")
    print(f"{'uninstrumented':26s}{fmt(wall['uninstrumented'], 1e3, ' ms'):>26s}  ({base / n_ops * 1e6:.2f} µs/op of work)")
    for name in list(variants)[1:]:
        print(f"{name:26s}{fmt(wall[name], 1e3, ' ms'):>26s}  {fmt(per_op['wall'][name]):>28s}  {fmt(per_op['cpu'][name]):>30s}")
    for clock in ("wall", "cpu"):
        ours = statistics.median(per_op[clock]["native recorder"])
        for other in ("python recorder", "torch.profiler(shapes)"):
            ratio = statistics.median(per_op[clock][other]) / max(ours, 1e-9)
            print(f"  ratio {other} / native overhead ({clock}): {ratio:.1f}x")
    print(f"mapping + simulation after the run (native recording): {t_map * 1e3:.0f} ms "
          f"({t_map / len(native) * 1e6:.1f} µs per kept call; {prof.rows('ops'):,} chip ops)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
