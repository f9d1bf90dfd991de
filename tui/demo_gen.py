"""Generate ``demo_stream.jsonl``: a recorded neuron-monitor stream of a busy trn2.48xlarge.

The stream starts from AWS's documented example document (neuron-tools.md §1.2) and varies it:
four runtimes on 16 devices x 4 logical cores (LNC=2), every AWS metric group plus both
neuronscope extension groups. It is what ``neuron-top --demo`` replays until an in-process
collector is available. Regenerate with ``python -m tui.demo_gen``.
"""
from __future__ import annotations

import argparse
import math
import os
import pathlib
import tempfile

import numpy as np
import orjson

DEVICES, CORES_PER_DEVICE, VCPUS = 16, 4, 192
DEVICE_MEMORY = 103079215104
PEAK_FLOPS = 2 * 79e12  # BF16 dense, two physical cores per logical core at LNC=2
HBM_PER_CORE = 725e9  # one HBM stack per logical core at LNC=2
ENGINES = ("tensor", "vector", "scalar", "gpsimd", "dma")

# (pid, tag, first core, core count, base utilization, wave amplitude, model name)
RUNTIMES = (
    (41872, "llama3-70b-train", 0, 32, 0.86, 0.06, "llama3_70b_tp32"),
    (52011, "bert-large-infer", 32, 16, 0.42, 0.25, "bert_large_b16"),
    (52240, "mistral-7b-serve", 48, 12, 0.61, 0.30, "mistral_7b_decode"),
    (60313, "60313", 60, 2, 0.18, 0.15, "eval_resnet50"),
)


def _pct(ratio: float) -> float:
    return round(min(max(float(ratio), 0.0), 1.0) * 100, 2)


def _utilization(rng: np.random.Generator, step: int, base: float, amp: float, n: int) -> np.ndarray:
    phase = np.arange(n) * 0.37
    wave = base + amp * np.sin(step / 4.0 + phase) + rng.normal(0, 0.03, n)
    return np.clip(wave, 0.0, 0.995)


def _engine_group(rng: np.random.Generator, cores: range, util: np.ndarray, period: float) -> dict:
    in_use = {}
    for core, u in zip(cores, util):
        mix = np.clip(np.array([u, u * 0.55, u * 0.35, u * 0.12, u * 0.7]) + rng.normal(0, 0.02, 5), 0, 1)
        flops = int(u * PEAK_FLOPS * period)
        read = int(mix[4] * HBM_PER_CORE * 0.55 * period)
        write = int(mix[4] * HBM_PER_CORE * 0.2 * period)
        in_use[str(core)] = {
            "engine_utilization": {e: _pct(m) for e, m in zip(ENGINES, mix)},
            "model_flops": int(flops * 0.93), "hardware_flops": flops,
            "hbm_read_bytes": read, "hbm_write_bytes": write,
            "dma_bytes": {"input": read // 8, "output": write // 4, "weight": read // 2,
                          "collective": read // 16},
            "collective_bytes": read // 16, "collective_time": round(float(u) * 0.08 * period, 6),
        }
    return {"period": period, "error": "", "neuroncores_in_use": in_use}


def _memory_group(pid: int, cores: range, model: str, period: float) -> dict:
    per_core = {}
    subgraphs = {}
    for i, core in enumerate(cores):
        per_core[str(core)] = {"constants": 193986816 + 4096 * i, "model_code": 176285056,
                               "model_shared_scratchpad": 67108864, "runtime_memory": 33554432,
                               "tensors": 20971520 * (1 + core % 3)}
        subgraphs[f"sg_{i:02d}"] = {
            "neuroncore_index": core, "neuron_device_index": core // CORES_PER_DEVICE,
            "memory_used_bytes": {"host": 20480, "neuron_device": 21001024, "usage_breakdown": {
                "host": {"application_memory": 20480, "constants": 0, "dma_buffers": 0, "tensors": 0},
                "neuron_device": {"constants": 20971520, "model_code": 29504, "runtime_memory": 0,
                                  "tensors": 0}}}}
    device = sum(sum(v.values()) for v in per_core.values())
    host = {"application_memory": 6996594688, "constants": 0, "dma_buffers": 1048576 * len(cores),
            "tensors": 4194304}
    return {"period": period, "error": "", "neuron_runtime_used_bytes": {
        "host": sum(host.values()), "neuron_device": device,
        "usage_breakdown": {"host": host, "neuroncore_memory_usage": per_core}},
        "loaded_models": [{"name": model, "uuid": f"{pid:08x}91f2f66e83ea419dace1da07",
                           "model_id": 10000 + pid % 1000, "is_running": True,
                           "subgraphs": subgraphs}]}


def _latency(base: float) -> dict:
    keys = ("p0", "p1", "p25", "p50", "p75", "p99", "p100")
    factors = (0.8, 0.85, 0.95, 1.0, 1.08, 1.6, 2.1)
    return {k: round(base * f, 6) for k, f in zip(keys, factors)}


def _runtime(rng, step: int, spec: tuple) -> tuple[dict, np.ndarray]:
    pid, tag, first, count, base, amp, model = spec
    period = round(1.0 + rng.uniform(0, 0.0002), 9)
    cores = range(first, first + count)
    util = _utilization(rng, step, base, amp, count)
    faulty = tag == "60313" and 12 <= step < 15
    executions = int(40 * count * float(util.mean())) + 1
    errors = {"generic": 0, "numerical": 3 if faulty else 0, "transient": 0, "model": 0,
              "runtime": 0, "hardware": 0}
    report = {
        "neuroncore_counters": {"period": period, "error": "", "neuroncores_in_use": {
            str(c): {"neuroncore_utilization": _pct(u), "flops": int(u * PEAK_FLOPS),
                     "v3d": {f"nc_v3.{2 * c}": {"neuroncore_utilization": _pct(u * 0.97)},
                             f"nc_v3.{2 * c + 1}": {"neuroncore_utilization": _pct(u * 1.02)}}}
            for c, u in zip(cores, util)}},
        "execution_stats": {"period": period, "error": "", "error_summary": errors,
            "execution_summary": {"completed": executions, "completed_with_err": 0,
                                  "completed_with_num_err": 3 if faulty else 0, "timed_out": 0,
                                  "incorrect_input": 0, "failed_to_queue": 0},
            "latency_stats": {"total_latency": _latency(0.011 + 0.004 * (1 - base)),
                              "device_latency": _latency(0.010 + 0.004 * (1 - base))}},
        "memory_used": _memory_group(pid, cores, model, period),
        "neuron_runtime_vcpu_usage": {"period": period, "error": "", "vcpu_usage": {
            "user": _pct(0.3 + 0.2 * float(util.mean())), "system": _pct(0.08)}},
        "neuroncore_engine_counters": _engine_group(rng, cores, util, period),
    }
    return {"pid": pid, "neuron_runtime_tag": tag, "error": "", "report": report}, util


def _system(rng, step: int, core_util: np.ndarray, energy: np.ndarray) -> dict:
    avg = {"user": 32.77 + 5 * math.sin(step / 5), "nice": 0.0, "system": 9.4, "io_wait": 0.2,
           "irq": 0.0, "soft_irq": 0.3}
    avg["idle"] = 100 - sum(avg.values())
    usage = {str(i): {k: round(max(float(v + rng.normal(0, 2) * (k in ("user", "system"))), 0.0), 2)
                      for k, v in avg.items()} for i in range(VCPUS)}
    device_util = core_util.reshape(DEVICES, CORES_PER_DEVICE).mean(axis=1)
    power = 95 + 390 * device_util + rng.normal(0, 4, DEVICES)
    energy += power
    devices = []
    for d in range(DEVICES):
        read = int(device_util[d] * 4 * HBM_PER_CORE * 0.4)
        write = int(device_util[d] * 4 * HBM_PER_CORE * 0.15)
        devices.append({"neuron_device_index": d, "hbm_read_bytes": read, "hbm_write_bytes": write,
                        "hbm_bandwidth_utilization": _pct((read + write) / 2.9e12),
                        "power_watts": round(float(power[d]), 1),
                        "energy_joules": round(float(energy[d]), 1),
                        "temperature_celsius": round(38 + 0.09 * float(power[d]), 1),
                        "throttle_ratio": round(max(0.0, float(power[d]) - 450) / 200, 3),
                        "modelled": True})
    ecc = [{"neuron_device_index": d, "mem_ecc_corrected": 1 if (d == 14 and step >= 16) else 0,
            "mem_ecc_uncorrected": 0, "sram_ecc_uncorrected": 0, "sram_ecc_corrected": 0}
           for d in range(DEVICES)]
    return {
        "neuron_hw_counters": {"period": 1.030359284, "error": "", "neuron_devices": ecc},
        "vcpu_usage": {"period": 0.999974868, "error": "", "context_switch_count": 123456 + 811 * step,
                       "average_usage": {k: round(v, 2) for k, v in avg.items()}, "usage_data": usage},
        "memory_info": {"period": 1.0, "error": "", "memory_total_bytes": 2199023255552,
                        "memory_used_bytes": 412316860416 + 2 ** 26 * step, "swap_total_bytes": 0,
                        "swap_used_bytes": 0},
        "neuron_device_counters": {"period": 1.0, "error": "", "neuron_devices": devices},
    }


def generate(frames: int, seed: int = 7) -> list[bytes]:
    """``frames`` consecutive one-line reports, deterministic for a given seed."""
    rng = np.random.default_rng(seed)
    energy = np.zeros(DEVICES)
    lines = []
    for step in range(frames):
        core_util = np.zeros(DEVICES * CORES_PER_DEVICE)
        runtimes = []
        for spec in RUNTIMES:
            entry, util = _runtime(rng, step, spec)
            core_util[spec[2]:spec[2] + spec[3]] = util
            runtimes.append(entry)
        doc = {"neuron_runtime_data": runtimes, "system_data": _system(rng, step, core_util, energy),
               "instance_info": {"instance_name": "demo-trn2", "instance_id": "i-0d3e0000000000001",
                                 "instance_type": "trn2.48xlarge",
                                 "instance_availability_zone": "us-west-2b",
                                 "instance_availability_zone_id": "usw2-az2",
                                 "instance_region": "us-west-2", "ami_id": "ami-0011223344556677b",
                                 "subnet_id": "subnet-112233ee", "error": ""},
               "neuron_hardware_info": {"neuron_device_type": "trainium2", "neuron_device_version": "v4",
                                        "neuroncore_version": "v3d", "neuron_device_count": DEVICES,
                                        "neuron_device_memory_size": DEVICE_MEMORY,
                                        "neuroncore_per_device_count": CORES_PER_DEVICE,
                                        "logical_neuroncore_config": 2, "error": ""}}
        lines.append(orjson.dumps(doc))
    return lines


def write_stream(path: pathlib.Path, frames: int, seed: int) -> None:
    """Write atomically: a temp file in the same folder, then rename."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".demo_stream.")
    with os.fdopen(fd, "wb") as out:
        out.write(b"\n".join(generate(frames, seed)) + b"\n")
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=20)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--output", type=pathlib.Path,
                        default=pathlib.Path(__file__).with_name("demo_stream.jsonl"))
    args = parser.parse_args(argv)
    write_stream(args.output, args.frames, args.seed)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
