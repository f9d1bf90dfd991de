"""Cost-model constants that are not properties of a device's datasheet.

Each value names its source (labels of ../shared/reference/trn2-arch.md) or says `assumption`.
Assumptions are the knobs calibration may tune (once, for all workloads) and a user may override
in the `[costs]` table of an override file (see `device_model.catalog.overrides`).
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace


@dataclass(frozen=True, slots=True)
class CostParams:
    # --- instruction costs (engine cycles) -------------------------------------------------
    mm_min_cycles: float = 64.0            # N2, N8': MM initiation interval max(N, 64)
    min_ii_cycles: float = 64.0            # N8': MIN_II for Vector/Scalar/GpSimd instructions
    dep_overhead_cycles: float = 100.0     # N2: dependent back-to-back Vector instructions
    gpsimd_start_cycles: float = 150.0     # N8': GPSIMD_START
    fast_ls_speedup: float = 4.0           # N1: fast LoadStationary up to 4x an MM of that size
    mm_k_block: int = 512                  # assumption: K block of an SBUF-accumulating matmul (M1)
    # Sustained MM issue rate over the max(N, 64)-cycle rule, per NeuronCore generation: LS
    # swaps, PSUM bank turns and semaphore waits a real kernel still pays.
    pe_efficiency_v2: float = 0.855        # assumption: calibrated on M1 (85.24% HFU)
    # NC-v3/v4: no kernel measurement published; the same 128x128 array fed through SBUF and
    # PSUM pays the same kinds of stalls, so M1's rate rather than a perfect one (1.0 had a trn2
    # matmul at 99.9% MFU and a trn1-to-trn2 comparison of compute-bound work 17% too kind)
    pe_efficiency_v3: float = 0.855        # assumption: as NC-v2 (M1)
    pe_efficiency_v4: float = 0.855        # assumption: as NC-v2 (M1)
    # --- latencies -----------------------------------------------------------------------
    semaphore_latency_s: float = 60e-9     # assumption: semaphore signal to dependent start
    dma_fixed_latency_s: float = 1.3e-6    # N6: per-transfer setup/semaphore latency (pipelinable)
    dge_latency_s: float = 0.6e-6          # N1, N7: hardware-DGE DMA instruction
    # --- DMA ----------------------------------------------------------------------------
    dma_eta_half_bytes: float = 512.0      # assumption: eta(s) = s/(s+512 B), s = bytes/partition
    dma_transfer_bytes: int = 1 << 20      # assumption: compiler's transfer size for big tensors
    # Decode reads the KV cache stored position-major ([positions, batch, KV heads, head_dim], as
    # transformers-neuronx keeps it): each partition of a cache load gets one position's KV heads
    # x head_dim run (256 B for one BF16 head of 128), so eta() of that run, not of the transfer.
    kv_cache_position_major: float = 1.0   # assumption: 1 = as above; 0 = one contiguous tensor
    # Weights depend on nothing computed: a matmul's weights load from the start of the k-th
    # earlier weight-loading op (1: double-buffered against the matmul before it, through the
    # elementwise ops between them; 0: only from the previous op's start). I10 (batch 1, its
    # elementwise ops between weight-streaming matmuls) set 1 over 0.
    weight_prefetch_ops: int = 1           # assumption: compiler weight double-buffering
    # Weight-only quantization (int8 or FP8 weights, BF16 matmuls): each weight tile is
    # dequantized on ScalarE/VectorE after it loads (transformers-neuronx `hlo.dequantize`:
    # convert, multiply by the per-channel scale, convert back), taken as passes over the tile.
    weight_dequant_passes: float = 1.0     # assumption: the three ops fused into one instruction
    dma_packet_bytes: int = 4096           # N5, C4: default DMA packet 4 KiB (queues switch per packet)
    cc_dma_packet_bytes: int = 65536       # C4: collective DMA packets default to 64 KiB
    # --- tiling -------------------------------------------------------------------------
    tile_free_elems: int = 2048            # assumption: F-chunk per partition for elementwise ops
    sbuf_usable_fraction: float = 0.85     # assumption: leave ~15% of SBUF (trn2-arch §6)
    sbuf_activation_share: float = 0.5     # assumption: SBUF for inference activations
    # --- TensorE throttling (dI/dt) ------------------------------------------------------
    throttle_idle_s: float = 3e-6          # P2: re-engages after ~3 us below 50%
    throttle_ramp_s: float = 3e-6          # P2: ramps to full over ~3 us
    throttle_start_ratio: float = 0.5      # P2: restarts at ~50%
    # --- collectives --------------------------------------------------------------------
    cc_alpha_intra_s: float = 1.5e-6       # C2: 1-2 us per intra-node hop
    cc_alpha_inter_s: float = 15e-6        # C1, C3: ~15 us per inter-node hop
    cc_link_efficiency: float = 0.9        # assumption: achieved/peak on NeuronLink and EFA
    cc_launch_s: float = 5e-6              # assumption: per-collective fixed cost (C1 floor)
    # Per-rank collective rate as a share of its DMA bandwidth, on and off chip (C4: the same
    # engines; HBM reads, writes and the ~50% DMA-side reduction of N3 all in it), per
    # NeuronCore generation (`cc_fraction`): NC-v2 from C1; NC-v3 from J2's prefill, whose
    # sequence-parallel collectives set it (HJ1, held out, lands at -4.4% with it).
    cc_dma_fraction: float = 0.21          # assumption: NC-v2, from C1 1 GiB (busbw 52.8 GiB/s)
    cc_dma_fraction_v3: float = 0.27       # assumption: NC-v3, calibrated on J2 TTFT (trn2 TP64)
    cc_dma_fraction_v4: float = 0.27       # assumption: NC-v4 as NC-v3 (no trn3 measurement)
    cc_reduce_elem_bytes: float = 4.0      # N3, EVRF061: DMA collective compute reduces in FP32
    cc_allreduce_fp32_fraction: float = 1.0  # assumption: AR gathers FP32 sums (I2 TTFT)
    cc_ring_slots: float = 4.0             # assumption: ring chunks in flight per EFA hop (C3)
    # A ring step that carries data is receive -> reduce -> send (C3): its chunk is sliced so the
    # transfer of one slice overlaps the reduction of the previous, two stages, so two steps in
    # flight per EFA hop once the step's DMA is bandwidth-bound (eta of its chunk -> 1).
    cc_ring_slots_data: float = 2.0        # assumption: C3 slicing (transfer || reduction)
    # --- runtime ------------------------------------------------------------------------
    exec_overhead_s: float = 50e-6         # assumption: per-execution launch overhead (C1 floor)
    # A generation request's fixed start, paid once before its first token, outside the device's
    # programs: the prompt's inputs uploaded, the cores switched from the token-generation
    # program to the context-encoding one, the first token's logits returned and sampled. The
    # published TTFT exceeds one decode step by 3-4 ms more than the model's prefill does, the
    # same for 7B, 70B and Llama-3-70B (not per layer, not per byte): set by I1's TTFT.
    generation_start_s: float = 4.8e-3     # assumption: per-request start (I1 TTFT)
    # An encoder's forward returns its outputs to the host (torch-neuronx hands back CPU
    # tensors): every token's last hidden state, or what its head computes instead. Rate of
    # a host-driven runtime copy on trn1.2xlarge, ~24 GiB/s for large copies (aws-neuron-sdk
    # issue #936); not tuned. A decoder step returns one position per sequence (its first one
    # inside `generation_start_s`), which this rate makes <= 0.1% of a TPOT: not charged.
    host_copy_bytes_per_s: float = 24 * 2**30  # assumption: host-driven copy rate (issue #936)

    def pe_efficiency(self, device) -> float:
        """The TensorE issue efficiency of `device`'s NeuronCore generation."""
        return getattr(self, f"pe_efficiency_{device.core_version_lnc1}", 1.0)

    def cc_fraction(self, device) -> float:
        """The collective DMA share of `device`'s NeuronCore generation (`cc_dma_fraction` on
        NC-v2 and any generation without its own)."""
        return getattr(self, f"cc_dma_fraction_{device.core_version_lnc1}", self.cc_dma_fraction)

    def with_overrides(self, values: dict[str, float]) -> "CostParams":
        known = {f.name for f in fields(self)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise KeyError(f"unknown cost constant {unknown[0]!r}; allowed: {', '.join(sorted(known))}")
        return replace(self, **values)


DEFAULT_COSTS = CostParams()
