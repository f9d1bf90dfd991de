"""The Trainium device and instance catalog: datasheet facts of Trainium1/2/3 and the EC2 shapes.

Every numeric constant in the catalog carries a trailing comment naming its source, a label of
`shared/reference/trn2-arch.md` (A1..A6 AWS architecture pages, N1..N9 NKI guides, P1..P3
profiler docs, C1..C4 collectives docs), `derived` (arithmetic on cited numbers) or
`assumption` (not published; a knob for calibration). `docs/devices.md` tables these comments,
so they are part of the documentation: keep one keyword per line.

Base units throughout: Hz, bytes, bytes/s, seconds, watts, degrees Celsius.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from ..errors import SpecError, unknown_name

KiB = 1024                      # unit
MiB = 1024 * KiB                # unit
GiB = 1024 * MiB                # unit
GB = 1e9                        # unit: decimal gigabyte (bandwidth figures are decimal)
GBPS = 1e9 / 8                  # unit: one gigabit per second, in bytes/s

# TensorE rate class of each dtype name (N8': TF32/FP16 run at the BF16 rate).
_RATE_CLASS = {"fp32": "fp32", "tf32": "bf16", "bf16": "bf16", "fp16": "bf16",
               "fp8": "fp8", "mxfp8": "mx", "mxfp4": "mx"}
TOPOLOGIES = ("single", "torus2d", "torus3d", "switch")
_TORUS_RANK = {"torus2d": 2, "torus3d": 3}


@dataclass(frozen=True, slots=True)
class DeviceSpec:
    """One Trainium chip. Per-core figures are per *physical* NeuronCore."""

    name: str
    device_type: str                    # neuron-monitor `neuron_device_type`
    device_version: str                 # neuron-monitor `neuron_device_version`
    core_arch: str
    core_version_lnc1: str              # neuron-monitor `neuroncore_version` at LNC=1
    core_version_lnc2: str | None       # ... at LNC=2 (None: LNC=2 unsupported)
    physical_cores: int
    tensor_hz: float
    vector_hz: float
    scalar_hz: float
    gpsimd_hz: float
    base_hz: float                      # profiler `neuroncore_cycle_count` clock
    pe_rows: int
    pe_cols: int
    moving_free_max: int                # elements of the moving operand's free dim per matmul
    psum_banks: int
    fp8_speedup: float                  # TensorE FP8 rate / BF16 rate
    mx_speedup: float                   # TensorE MXFP8/MXFP4 rate / BF16 rate; 0 = unsupported
    fp32_slowdown: float                # BF16 rate / FP32 rate
    vector_bf16_copy_speedup: float     # VectorE BF16 perf mode, tensor_copy/tensor_scalar
    vector_bf16_tt_speedup: float       # VectorE BF16 perf mode, tensor_tensor
    scalar_bf16_speedup: float          # ScalarE BF16 width / 128 lanes
    sbuf_bytes: int
    psum_bytes: int
    hbm_bytes: int
    hbm_stacks: int
    hbm_bw: float                       # whole device
    dma_engines_per_core: int
    dma_engine_bw: float                # per engine
    cc_cores: int                       # per device
    neuronlink_bw: float                # per device
    neuronlink_links: int               # per device
    efa_bw: float                       # per device
    tdp_watts: float                    # modelled power, not a datasheet figure
    idle_watts: float
    thermal_resistance_c_per_w: float   # modelled temperature = ambient + R * power
    ambient_c: float
    marketing_tflops: Mapping[str, float] = field(hash=False)  # chip datasheet, labels only
    dtypes: tuple[str, ...]
    lnc_options: tuple[int, ...]
    default_lnc: int

    def peak_flops(self, dtype: str) -> float:
        """Dense TensorE FLOP/s of one physical core: 2 * rows * cols * clock * dtype factor."""
        rate_class = _RATE_CLASS[check_dtype(self, dtype)]
        factor = {"fp32": 1.0 / self.fp32_slowdown, "bf16": 1.0,
                  "fp8": self.fp8_speedup, "mx": self.mx_speedup}[rate_class]
        return 2.0 * self.pe_rows * self.pe_cols * self.tensor_hz * factor

    @property
    def hbm_bw_per_stack(self) -> float:
        return self.hbm_bw / self.hbm_stacks

    @property
    def cores_per_stack(self) -> int:
        """Physical cores sharing one HBM stack (2 on trn2: the pair that forms an LNC=2 core)."""
        return self.physical_cores // self.hbm_stacks

    @property
    def dma_bw_per_core(self) -> float:
        return self.dma_engines_per_core * self.dma_engine_bw

    def mbu_ceiling(self, lnc: int) -> float:
        """The most of one HBM stack's bandwidth (MBU's denominator, as neuron-profile takes
        it at every LNC) a logical core can move: its physical cores' DMA rate, and their share
        of the stack (half of it for one trn2 core at LNC=1, which shares it with another)."""
        reach = lnc * min(self.dma_bw_per_core, self.hbm_bw_per_stack / self.cores_per_stack)
        return min(1.0, reach / self.hbm_bw_per_stack)

    @property
    def lnc_selectable(self) -> bool:
        """Whether LNC can be chosen (Trn2 and later): only then do neuron-monitor and neuron-ls
        show logical_neuroncore_config."""
        return len(self.lnc_options) > 1

    def core_version(self, lnc: int) -> str:
        """`neuroncore_version` as neuron-monitor reports it: "v3" at LNC=1, "v3d" at LNC=2."""
        check_lnc(self, lnc)
        return self.core_version_lnc1 if lnc == 1 else str(self.core_version_lnc2)

    def logical_cores(self, lnc: int) -> int:
        check_lnc(self, lnc)
        return self.physical_cores // lnc


@dataclass(frozen=True, slots=True)
class InstanceSpec:
    """One EC2 instance type or UltraServer: `devices` chips joined by `topology`."""

    name: str
    device: DeviceSpec
    devices: int
    vcpus: int
    host_memory_bytes: int
    efa_bw: float                       # whole instance
    topology: str                       # "single" | "torus2d" | "torus3d" | "switch"
    torus_dims: tuple[int, ...]         # () unless a torus; row-major device numbering
    numa_nodes: int                     # all servers together
    nodes: int                          # servers (4 in an UltraServer)
    is_ultraserver: bool

    @property
    def devices_per_node(self) -> int:
        return self.devices // self.nodes

    @property
    def physical_cores(self) -> int:
        return self.devices * self.device.physical_cores

    def logical_cores(self, lnc: int) -> int:
        return self.devices * self.device.logical_cores(lnc)

    @property
    def hbm_bytes(self) -> int:
        return self.devices * self.device.hbm_bytes

    @property
    def hbm_bw(self) -> float:
        return self.devices * self.device.hbm_bw

    def peak_flops(self, dtype: str) -> float:
        return self.physical_cores * self.device.peak_flops(dtype)


def check_lnc(spec: DeviceSpec | InstanceSpec, lnc: int) -> int:
    """Return `lnc` if the device supports it, else raise SpecError (e.g. LNC=2 on trn1)."""
    device = spec.device if isinstance(spec, InstanceSpec) else spec
    if isinstance(lnc, bool) or lnc not in device.lnc_options:
        allowed = ", ".join(map(str, device.lnc_options))
        raise SpecError(f"LNC={lnc!r} is not supported on {spec.name}; allowed: {allowed}")
    return lnc


def check_dtype(spec: DeviceSpec | InstanceSpec, dtype: str) -> str:
    """Return the canonical (lower-case) dtype name if the device supports it, else SpecError."""
    device = spec.device if isinstance(spec, InstanceSpec) else spec
    name = dtype.lower() if isinstance(dtype, str) else dtype
    if name not in device.dtypes:
        raise SpecError(f"dtype {dtype!r} is not supported on {spec.name}; "
                        f"allowed: {', '.join(device.dtypes)}")
    return name


def validate_device(dev: DeviceSpec) -> DeviceSpec:
    """Cross-field invariants the cost model relies on; SpecError names the first broken one."""
    _require(dev.default_lnc in dev.lnc_options,
             f"default_lnc={dev.default_lnc} is not one of lnc_options {dev.lnc_options}")
    for lnc in dev.lnc_options:
        _require(dev.physical_cores % lnc == 0,
                 f"physical_cores={dev.physical_cores} is not a multiple of LNC={lnc}")
    _require(dev.physical_cores % dev.hbm_stacks == 0,
             f"physical_cores={dev.physical_cores} is not a multiple of "
             f"hbm_stacks={dev.hbm_stacks}")
    _require(dev.idle_watts <= dev.tdp_watts,
             f"idle_watts={dev.idle_watts} exceeds tdp_watts={dev.tdp_watts}")
    _require(set(dev.dtypes) <= set(_RATE_CLASS), f"unknown dtype in {dev.dtypes}")
    return dev


def validate_instance(inst: InstanceSpec) -> InstanceSpec:
    _require(inst.topology in TOPOLOGIES,
             f"topology {inst.topology!r} is not one of {', '.join(TOPOLOGIES)}")
    rank = _TORUS_RANK.get(inst.topology, 0)
    _require(len(inst.torus_dims) == rank,
             f"topology {inst.topology} needs {rank} torus_dims, got {list(inst.torus_dims)}")
    if rank:
        _require(math.prod(inst.torus_dims) == inst.devices,
                 f"torus_dims {list(inst.torus_dims)} hold {math.prod(inst.torus_dims)} devices, "
                 f"not devices={inst.devices}")
    _require(inst.topology != "single" or inst.devices == 1,
             f"topology single needs devices=1, got {inst.devices}")
    _require(inst.devices % inst.nodes == 0,
             f"devices={inst.devices} is not a multiple of nodes={inst.nodes}")
    _require(rank != 3 or inst.torus_dims[0] == inst.nodes,
             f"a 3D torus rings its servers on the first axis: torus_dims[0] must equal "
             f"nodes={inst.nodes}")
    _require(inst.numa_nodes % inst.nodes == 0,
             f"numa_nodes={inst.numa_nodes} is not a multiple of nodes={inst.nodes}")
    # the collectives use the device's share; the instance's total is what AWS lists
    _require(math.isclose(inst.device.efa_bw * inst.devices, inst.efa_bw, rel_tol=1e-9),
             f"efa_bw: the instance's {inst.efa_bw * 8 / 1e9:g} Gbps is not devices="
             f"{inst.devices} x the device's {inst.device.efa_bw * 8 / 1e9:g} Gbps (the device's "
             f"efa_bw is its chip's share: override both)")
    _require(inst.vcpus % (2 * inst.numa_nodes) == 0,
             f"vcpus={inst.vcpus} does not split into 2 threads per core over "
             f"numa_nodes={inst.numa_nodes}")
    return inst


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise SpecError(message)


def _frozen(mapping: dict[str, float]) -> Mapping[str, float]:
    return MappingProxyType(dict(mapping))


# --------------------------------------------------------------------------------------------
# Devices (trn2-arch.md sections 1-3)
# --------------------------------------------------------------------------------------------

TRAINIUM1 = DeviceSpec(
    name="trainium1",
    device_type="trainium1",  # assumption: by analogy with "trainium2" (neuron-tools.md 1.2)
    device_version="v2",  # assumption: AWS shows "v4" only for trn2
    core_arch="NeuronCore-v2",  # A5
    core_version_lnc1="v2",  # neuron-tools.md 1.2: `v2` on trn1
    core_version_lnc2=None,  # A4: no LNC=2 before Trainium2
    physical_cores=2,  # A5: 2 x NeuronCore-v2 per chip
    tensor_hz=2.8e9,  # N2: TensorE 2.8 GHz
    vector_hz=1.12e9,  # N2: Vector 1.12 GHz
    scalar_hz=1.4e9,  # N2: Scalar 1.4 GHz
    gpsimd_hz=1.4e9,  # N2: GpSimd 1.4 GHz
    base_hz=1.4e9,  # P1: profiler NeuronCore base clock on Trn1
    pe_rows=128,  # N2: 128x128 systolic array
    pe_cols=128,  # N2
    moving_free_max=512,  # N2: one PSUM bank holds 512 FP32 per partition
    psum_banks=8,  # N2: 8 banks x 512 FP32
    fp8_speedup=1.0,  # A5: FP8 at the BF16 rate on Trn1
    mx_speedup=0.0,  # A5: no MX formats before Trn3
    fp32_slowdown=4.0,  # N2, N8': FP32 matmul costs 4x
    vector_bf16_copy_speedup=1.0,  # N1: the BF16 performance mode is new in NC-v3
    vector_bf16_tt_speedup=1.0,  # N1
    scalar_bf16_speedup=1.0,  # N2: 128 elements/cycle
    sbuf_bytes=24 * MiB,  # N2: 128 partitions x 192 KiB
    psum_bytes=2 * MiB,  # N2
    hbm_bytes=32 * GiB,  # A5
    hbm_stacks=2,  # A5
    hbm_bw=820 * GB,  # A5: 820 per chip (labelled GiB/s in the instance table)
    dma_engines_per_core=16,  # N5: 32 engines per chip / 2 cores (derived)
    dma_engine_bw=17 * GB,  # N5: 17 B/ns per engine on Trn1
    cc_cores=6,  # A5
    neuronlink_bw=384 * GB,  # A1 table, A5: NeuronLink-v2 384 per chip
    neuronlink_links=4,  # assumption: one link per 2D-torus neighbour (A5)
    efa_bw=800 * GBPS / 16,  # derived: A5 trn1.32xlarge 800 Gbps over 16 chips
    tdp_watts=210.0,  # assumption: no published figure
    idle_watts=52.0,  # assumption: ~25% of TDP
    thermal_resistance_c_per_w=0.24,  # assumption: ~85 C at TDP with 35 C inlet
    ambient_c=35.0,  # assumption: server inlet air
    marketing_tflops=_frozen({
        "fp32": 47.5,  # A5
        "tf32": 190.0,  # A5: FP8/FP16/BF16/TF32 190
        "bf16": 190.0,  # A5
        "fp16": 190.0,  # A5
        "fp8": 190.0,  # A5
    }),
    dtypes=("fp32", "tf32", "bf16", "fp16", "fp8"),  # A5: FP32, TF32, BF16, FP16, cFP8
    lnc_options=(1,),  # A4: LNC=2 is a Trainium2 feature
    default_lnc=1,  # A4
)

TRAINIUM2 = DeviceSpec(
    name="trainium2",
    device_type="trainium2",  # neuron-tools.md 1.2
    device_version="v4",  # neuron-tools.md 1.2: AWS example
    core_arch="NeuronCore-v3",  # A1, A2
    core_version_lnc1="v3",  # neuron-tools.md 1.2
    core_version_lnc2="v3d",  # neuron-tools.md 1.2, A4: NC_v3d
    physical_cores=8,  # A1, N1: 8 x NeuronCore-v3
    tensor_hz=2.4e9,  # N1: Tensor 2.4 GHz
    vector_hz=0.96e9,  # N1: Vector 0.96 GHz
    scalar_hz=1.2e9,  # N1: Scalar 1.2 GHz
    gpsimd_hz=1.2e9,  # N1: GpSimd 1.2 GHz
    base_hz=1.2e9,  # P1: profiler NeuronCore base clock 1.2 GHz
    pe_rows=128,  # N1: 128x128 systolic array
    pe_cols=128,  # N1
    moving_free_max=512,  # N1, N2: one PSUM bank holds 512 FP32 per partition
    psum_banks=8,  # N1: 8 banks x 512 FP32
    fp8_speedup=2.0,  # N1, N8: FP8 double_row contracts 256 per instruction
    mx_speedup=0.0,  # A1: no MX formats before Trn3
    fp32_slowdown=4.0,  # N2, N8': FP32 matmul costs 4x
    vector_bf16_copy_speedup=4.0,  # N1: BF16 perf mode, tensor_copy/tensor_scalar 4x
    vector_bf16_tt_speedup=2.0,  # N1: BF16 perf mode, tensor_tensor 2x
    scalar_bf16_speedup=1.0,  # N1: ScalarE 128 elements/cycle
    sbuf_bytes=28 * MiB,  # N1: 128 partitions x 224 KiB
    psum_bytes=2 * MiB,  # N1: 128 partitions x 16 KiB
    hbm_bytes=96 * GiB,  # A1: 96 GiB (neuron-monitor reports 103079215104)
    hbm_stacks=4,  # A1, N1: four 24 GB HBM banks
    hbm_bw=2.9e12,  # A1: 2.9 TB/s (N1 HEAD says 3 TB/s)
    dma_engines_per_core=16,  # N1: 128 DMA engines per chip, 16 per core
    dma_engine_bw=23 * GB,  # N5: 23 B/ns per engine (27.2 GB/s "theoretical")
    cc_cores=16,  # A1, C4: two per physical core (N1 says 20)
    neuronlink_bw=1280 * GB,  # A1, N1: NeuronLink-v3 1.28 TB/s per chip
    neuronlink_links=4,  # N1, A3: 4 links per chip
    efa_bw=200 * GBPS,  # C1: 200 Gbps per chip
    tdp_watts=500.0,  # assumption: third-party estimate ~500 W (SemiAnalysis, trn2-arch.md 1)
    idle_watts=125.0,  # assumption: ~25% of TDP
    thermal_resistance_c_per_w=0.1,  # assumption: ~85 C at TDP with 35 C inlet
    ambient_c=35.0,  # assumption: server inlet air
    marketing_tflops=_frozen({
        "fp32": 181.0,  # A1
        "tf32": 667.0,  # A1: 667 BF16/FP16/TF32
        "bf16": 667.0,  # A1
        "fp16": 667.0,  # A1
        "fp8": 1299.0,  # A1
    }),
    dtypes=("fp32", "tf32", "bf16", "fp16", "fp8"),  # A1
    lnc_options=(1, 2),  # A4
    default_lnc=2,  # A4: LNC=2 is the default on Trn2
)

TRAINIUM3 = DeviceSpec(
    name="trainium3",
    device_type="trainium3",  # assumption: by analogy with "trainium2"
    device_version="v5",  # assumption: next after trn2's "v4"
    core_arch="NeuronCore-v4",  # A6
    core_version_lnc1="v4",  # assumption: by analogy with trn2's "v3"
    core_version_lnc2="v4d",  # assumption: by analogy with trn2's "v3d"
    physical_cores=8,  # A6: 8 x NeuronCore-v4
    tensor_hz=2.4e9,  # N3: TensorE 2.4 GHz
    vector_hz=1.2e9,  # N3: Vector 1.2 GHz
    scalar_hz=1.2e9,  # N3: Scalar 1.2 GHz
    gpsimd_hz=1.2e9,  # N3: GpSimd 1.2 GHz
    base_hz=1.2e9,  # assumption: as Trn2 (P1 gives Trn1 and Trn2 only)
    pe_rows=128,  # N3
    pe_cols=128,  # N3
    moving_free_max=4096,  # N3: moving free up to 4096 FP32
    psum_banks=8,  # assumption: as NC-v3
    fp8_speedup=2.0,  # assumption: FP8 double_row as on NC-v3 (N1)
    mx_speedup=4.0,  # N3: nc_matmul_mx at 4x BF16 (315 vs 79 TF per core)
    fp32_slowdown=4.0,  # N3: 79 BF16 vs 20 FP32 TF per core
    vector_bf16_copy_speedup=4.0,  # N3: Vector 512 BF16 elements/cycle
    vector_bf16_tt_speedup=2.0,  # assumption: as NC-v3 (N1)
    scalar_bf16_speedup=2.0,  # N3: Scalar 256 BF16 elements/cycle vs 128
    sbuf_bytes=32 * MiB,  # N3: 128 partitions x 256 KiB
    psum_bytes=2 * MiB,  # N3
    hbm_bytes=144 * GiB,  # A6
    hbm_stacks=4,  # A6
    hbm_bw=4.9e12,  # A6: 4.9 TB/s (N3 says 4.7)
    dma_engines_per_core=16,  # A6: 128 engines per chip / 8 cores (derived)
    dma_engine_bw=33 * GB,  # N5: 33 B/ns per engine on Trn3
    cc_cores=16,  # A6 (N3 says 20)
    neuronlink_bw=2560 * GB,  # A6: NeuronLink-v4 2,560 GB/s per chip
    neuronlink_links=4,  # assumption: as Trn2 (A6 gives bandwidth only)
    efa_bw=12800 * GBPS / 64,  # derived: A6 12,800 Gbps per 64-chip UltraServer
    tdp_watts=1000.0,  # assumption: no published figure
    idle_watts=250.0,  # assumption: ~25% of TDP
    thermal_resistance_c_per_w=0.05,  # assumption: ~85 C at TDP with 35 C inlet
    ambient_c=35.0,  # assumption: server inlet air
    marketing_tflops=_frozen({
        "fp32": 183.0,  # A6
        "tf32": 671.0,  # assumption: TF32 at the BF16 rate as on Trn2 (A1)
        "bf16": 671.0,  # A6
        "fp16": 671.0,  # assumption: FP16 at the BF16 rate as on Trn2 (A1)
        "mxfp8": 2517.0,  # A6: 2,517 MXFP8/MXFP4
    }),
    dtypes=("fp32", "tf32", "bf16", "fp16", "fp8", "mxfp8", "mxfp4"),  # A6, N3: adds MX
    lnc_options=(1, 2),  # assumption: as Trn2 (A4)
    default_lnc=2,  # assumption: as Trn2 (A4)
)

# --------------------------------------------------------------------------------------------
# Instances (trn2-arch.md section 3)
# --------------------------------------------------------------------------------------------

_INSTANCE_LIST = (
    InstanceSpec(
        name="trn1.2xlarge",
        device=replace(TRAINIUM1, efa_bw=25 * GBPS),  # A5; its one chip has all 25 Gbps
        devices=1,  # A5
        vcpus=8,  # A5
        host_memory_bytes=32 * GiB,  # A5
        efa_bw=25 * GBPS,  # A5: up to 25 Gbps
        topology="single",  # A5: one chip
        torus_dims=(),  # A5: no chip-to-chip links
        numa_nodes=1,  # assumption
        nodes=1,  # A5: one server
        is_ultraserver=False,  # A5: one server
    ),
    InstanceSpec(
        name="trn1.32xlarge",
        device=TRAINIUM1,  # A5
        devices=16,  # A5
        vcpus=128,  # A5
        host_memory_bytes=512 * GiB,  # A5
        efa_bw=800 * GBPS,  # A5
        topology="torus2d",  # A5: 2D torus
        torus_dims=(4, 4),  # A5: 4x4 (neuron-ls example)
        numa_nodes=2,  # assumption: two sockets
        nodes=1,  # A5: one server
        is_ultraserver=False,  # A5: one server
    ),
    InstanceSpec(
        name="trn1n.32xlarge",
        device=replace(TRAINIUM1, neuronlink_bw=768 * GB,
                       efa_bw=1600 * GBPS / 16),  # A5: NeuronLink 768 per device; EFA over 16
        devices=16,  # A5
        vcpus=128,  # A5
        host_memory_bytes=512 * GiB,  # A5
        efa_bw=1600 * GBPS,  # A5
        topology="torus2d",  # A5: 2D torus
        torus_dims=(4, 4),  # A5
        numa_nodes=2,  # assumption: two sockets
        nodes=1,  # A5: one server
        is_ultraserver=False,  # A5: one server
    ),
    InstanceSpec(
        name="trn2.48xlarge",
        device=TRAINIUM2,  # A3
        devices=16,  # A3
        vcpus=192,  # A3
        host_memory_bytes=2048 * GiB,  # A3
        efa_bw=3200 * GBPS,  # A3: 3,200 Gbps EFAv3
        topology="torus2d",  # A3: 4x4 2D torus
        torus_dims=(4, 4),  # A3
        numa_nodes=2,  # derived: neuron-ls example affinity 48-95,144-191 on node 1
        nodes=1,  # A3: one server
        is_ultraserver=False,  # A3: one server
    ),
    InstanceSpec(
        name="trn2u.48xlarge",
        device=TRAINIUM2,  # A3
        devices=16,  # A3
        vcpus=192,  # A3
        host_memory_bytes=2048 * GiB,  # A3
        efa_bw=3200 * GBPS,  # A3
        topology="torus2d",  # A3: 4x4 2D torus within the instance
        torus_dims=(4, 4),  # A3
        numa_nodes=2,  # derived: as trn2.48xlarge
        nodes=1,  # A3: one server
        is_ultraserver=False,  # A3: one server
    ),
    InstanceSpec(
        name="trn2u-ultraserver",
        device=TRAINIUM2,  # A3
        devices=64,  # A3: 4 x trn2u.48xlarge
        vcpus=768,  # A3
        host_memory_bytes=8192 * GiB,  # A3
        efa_bw=4 * 3200 * GBPS,  # A3: 4 x 3,200 Gbps
        topology="torus3d",  # A3, C1: same-coordinate chips joined in a ring across servers
        torus_dims=(4, 4, 4),  # A3: servers x rows x cols
        numa_nodes=8,  # derived: 2 per server
        nodes=4,  # A3
        is_ultraserver=True,  # A3
    ),
    InstanceSpec(
        name="trn3-ultraserver",
        device=TRAINIUM3,  # A6
        devices=64,  # A6: Trn3 Gen1 UltraServer, 4 servers x 16
        vcpus=768,  # A6
        host_memory_bytes=8192 * GiB,  # A6
        efa_bw=12800 * GBPS,  # A6
        topology="switch",  # A6: NeuronSwitch-v1 all-to-all
        torus_dims=(),  # A6: a switch, not a torus
        numa_nodes=8,  # assumption: 2 per server as Trn2
        nodes=4,  # A6
        is_ultraserver=True,  # A6
    ),
)

DEVICES: Mapping[str, DeviceSpec] = MappingProxyType(
    {d.name: validate_device(d) for d in (TRAINIUM1, TRAINIUM2, TRAINIUM3)})
INSTANCES: Mapping[str, InstanceSpec] = MappingProxyType(
    {i.name: validate_instance(i) for i in _INSTANCE_LIST})

# A server that exists only as a part of an UltraServer, and that UltraServer (A3): its
# servers are joined by NeuronLink, which `--nodes` of the part (joined by EFA) does not model.
ULTRASERVER_OF: Mapping[str, str] = MappingProxyType({"trn2u.48xlarge": "trn2u-ultraserver"})

# Names AWS material uses for the same shapes (neuron-tools.md: "trn2n.48xlarge" in the
# neuron-monitor and neuron-ls examples; "trn2-16.48xlarge"/"u-trn2x64" in older trn2 docs).
INSTANCE_ALIASES: Mapping[str, str] = MappingProxyType({
    "trn2n.48xlarge": "trn2.48xlarge",
    "trn2-16.48xlarge": "trn2.48xlarge",
    "u-trn2x64": "trn2u-ultraserver",
})


# what a command line runs on when it names no instance
DEFAULT_INSTANCE = "trn2.48xlarge"


def instance_names() -> tuple[str, ...]:
    return tuple(INSTANCES)


def get_device(name: str) -> DeviceSpec:
    key = name.strip().lower() if isinstance(name, str) else ""
    if key not in DEVICES:
        raise unknown_name("device", name, DEVICES)
    return DEVICES[key]


def canonical_instance_name(name: str) -> str:
    """The catalog name for `name` or one of its aliases; SpecError if unknown."""
    key = name.strip().lower() if isinstance(name, str) else ""
    key = INSTANCE_ALIASES.get(key, key)
    if key not in INSTANCES:
        raise unknown_name("instance", name, INSTANCES)
    return key


def get_instance(name: str) -> InstanceSpec:
    return INSTANCES[canonical_instance_name(name)]
