"""The binary layout of a runtime's counter file: names of the counter axes and the record dtype.

A counter file is a 64-byte prefix, a JSON header with the static parts (tag, cores, models), and
two *slots* (double buffer). Each slot is `[seq u64][crc32 u32][pad u32][record]`; the record is
one numpy structured scalar whose shape depends on the runtime's core, device and ring sizes.
"""
from __future__ import annotations

import struct

import numpy as np

from ..engine.isa import QUEUES

MAGIC = b"NSCTR\x00\x00\x01"
VERSION = 2                           # 2: latency histograms
PREFIX = struct.Struct("<8sIIIIII")    # magic, version, header_off, header_len, slots_off,
PREFIX_SIZE = 64                      # slot_size, record_size; then gen u64 at GEN_OFFSET
GEN_OFFSET = 40
SLOT_HEAD = 16                        # seq u64, crc32 u32, pad u32
MAX_HEADER = 1 << 20                  # a header bigger than this is not ours

ENGINES = ("tensor", "vector", "scalar", "gpsimd", "dma")
DMA_QUEUES = QUEUES                   # input, output, weight, collective
FLOP_KINDS = ("model", "hardware", "model_bf16", "hardware_bf16")
EXEC_STATUS = ("completed", "completed_with_err", "completed_with_num_err", "timed_out",
               "incorrect_input", "failed_to_queue")
ERROR_KINDS = ("generic", "numerical", "transient", "model", "runtime", "hardware")
HOST_MEMORY = ("application_memory", "constants", "dma_buffers", "tensors")
DEVICE_MEMORY = ("constants", "model_code", "model_shared_scratchpad", "runtime_memory", "tensors")
ECC_KINDS = ("mem_ecc_corrected", "mem_ecc_uncorrected", "sram_ecc_corrected", "sram_ecc_uncorrected")
PHASES = ("starting", "executing", "data_loading", "checkpoint", "idle", "timeout", "stopping")
PUBLISH_INTERVAL_S = 0.1    # assumption: a runtime rewrites its counter record this often

# Every execution's latency also lands in a histogram, so that a period with more executions
# than the ring holds still has percentiles over all of them (to within half a bin, 1%):
# geometric bins 2% wide from 1 us, bin 0 below that, the last bin 1 us x 1.02^1398 (~1e6 s) up.
LATENCY_BINS = 1400
LATENCY_BIN_FIRST_S = 1e-6
LATENCY_BIN_RATIO = 1.02


def latency_bins(seconds: np.ndarray) -> np.ndarray:
    """The histogram bin of each latency."""
    s = np.maximum(np.asarray(seconds, dtype=np.float64), LATENCY_BIN_FIRST_S * 0.5)
    index = np.floor(np.log(s / LATENCY_BIN_FIRST_S) / np.log(LATENCY_BIN_RATIO)) + 1
    return np.clip(np.nan_to_num(index, nan=0.0), 0, LATENCY_BINS - 1).astype(np.intp)


def latency_bin_values() -> np.ndarray:
    """The latency each bin stands for: its geometric middle (bin 0: the first bin's edge)."""
    k = np.arange(LATENCY_BINS, dtype=np.float64)
    values = LATENCY_BIN_FIRST_S * LATENCY_BIN_RATIO ** (k - 0.5)
    values[0] = LATENCY_BIN_FIRST_S
    return values


def record_dtype(cores: int, lnc: int, devices: int, ring: int) -> np.dtype:
    """The counter record of a runtime holding `cores` logical cores on `devices` devices."""
    n, e = cores, len(ENGINES)
    return np.dtype([
        ("wall_time", "<f8"), ("sim_time", "<f8"), ("phase", "<u8"),
        ("core_busy_s", "<f8", (n,)),
        ("phys_busy_s", "<f8", (n, lnc)),
        ("engine_active_s", "<f8", (n, lnc, e)),
        ("instructions", "<u8", (n, lnc, e)),
        ("flops", "<f8", (n, len(FLOP_KINDS))),
        ("hbm_read_bytes", "<f8", (n,)),
        ("hbm_write_bytes", "<f8", (n,)),
        ("dma_bytes", "<f8", (n, len(DMA_QUEUES))),
        ("collective_bytes", "<f8", (n,)),
        ("collective_s", "<f8", (n,)),
        ("throttled_s", "<f8", (n,)),
        ("exec_status", "<u8", (len(EXEC_STATUS),)),
        ("errors", "<u8", (len(ERROR_KINDS),)),
        ("latency_count", "<u8"),
        ("latency_total", "<f8", (ring,)),
        ("latency_device", "<f8", (ring,)),
        ("latency_executions", "<u8"),          # executions ever put in the histograms
        ("latency_hist_total", "<u8", (LATENCY_BINS,)),
        ("latency_hist_device", "<u8", (LATENCY_BINS,)),
        ("host_memory", "<i8", (len(HOST_MEMORY),)),
        ("device_memory", "<i8", (n, len(DEVICE_MEMORY))),
        ("dev_energy_j", "<f8", (devices,)),
        ("dev_power_w", "<f8", (devices,)),
        ("dev_temperature_c", "<f8", (devices,)),
        ("dev_throttle", "<f8", (devices,)),
        ("dev_hbm_read_bytes", "<f8", (devices,)),
        ("dev_hbm_write_bytes", "<f8", (devices,)),
        ("dev_ecc", "<u8", (devices, len(ECC_KINDS))),
    ])


def slot_size(record_size: int) -> int:
    return SLOT_HEAD + (record_size + 7) // 8 * 8
