"""The device and instance catalog against the arithmetic of its sources (trn2-arch.md)."""
from __future__ import annotations

import dataclasses
import re

import pytest

from device_model.errors import SpecError
from device_model.catalog.overrides import DEVICE_FIELDS, INSTANCE_FIELDS, constant_sources
from device_model.catalog.specs import (DEVICES, INSTANCES, GiB, check_dtype, check_lnc, get_device,
                                get_instance, instance_names, validate_device, validate_instance)

TRN1, TRN2, TRN3 = (get_device(n) for n in ("trainium1", "trainium2", "trainium3"))


def close(a: float, b: float, rel: float = 1e-3) -> bool:
    return abs(a - b) <= rel * abs(b)


def test_device_fields_are_the_agreed_contract():
    names = [f.name for f in dataclasses.fields(TRN2)]
    assert names == [
        "name", "device_type", "device_version", "core_arch", "core_version_lnc1",
        "core_version_lnc2", "physical_cores", "tensor_hz", "vector_hz", "scalar_hz", "gpsimd_hz",
        "base_hz", "pe_rows", "pe_cols", "moving_free_max", "psum_banks", "fp8_speedup",
        "mx_speedup", "fp32_slowdown", "vector_bf16_copy_speedup", "vector_bf16_tt_speedup",
        "scalar_bf16_speedup", "sbuf_bytes", "psum_bytes", "hbm_bytes", "hbm_stacks", "hbm_bw",
        "dma_engines_per_core", "dma_engine_bw", "cc_cores", "neuronlink_bw", "neuronlink_links",
        "efa_bw", "tdp_watts", "idle_watts", "thermal_resistance_c_per_w", "ambient_c",
        "marketing_tflops", "dtypes", "lnc_options", "default_lnc"]


def test_trn2_tensor_peaks_follow_array_size_and_clock():
    bf16 = 2 * 128 * 128 * 2.4e9                        # N1: 128x128 PEs at 2.4 GHz
    assert close(TRN2.peak_flops("bf16"), bf16)
    assert close(TRN2.peak_flops("bf16") / 1e12, 79, rel=0.01)   # A2: 79 TF per core
    assert close(TRN2.peak_flops("fp8"), 2 * bf16)      # double_row
    assert close(TRN2.peak_flops("fp32"), bf16 / 4)
    assert TRN2.peak_flops("tf32") == TRN2.peak_flops("fp16") == TRN2.peak_flops("bf16")


def test_trn1_and_trn3_tensor_peaks():
    assert close(TRN1.peak_flops("bf16") / 1e12, 92, rel=0.01)   # N2: 92 TF at 2.8 GHz
    assert TRN1.peak_flops("fp8") == TRN1.peak_flops("bf16")     # no double_row on NC-v2
    assert close(TRN3.peak_flops("mxfp8") / 1e12, 315, rel=0.005)  # N3
    assert TRN3.peak_flops("mxfp4") == TRN3.peak_flops("mxfp8") == 4 * TRN3.peak_flops("bf16")


@pytest.mark.parametrize("dev", DEVICES.values(), ids=list(DEVICES))
def test_model_peak_is_within_ten_percent_below_the_datasheet(dev):
    # trn2-arch.md section 1: 8 x 78.6 = 629 < 667 marketing; the model keeps clock x array.
    chip = dev.physical_cores * dev.peak_flops("bf16") / 1e12
    assert 0.9 * dev.marketing_tflops["bf16"] <= chip <= dev.marketing_tflops["bf16"]


def test_memory_and_dma_derivations():
    assert close(TRN2.hbm_bw_per_stack, 725e9)          # 2.9 TB/s over 4 stacks
    assert TRN2.cores_per_stack == 2 and TRN1.cores_per_stack == 1
    assert close(TRN2.dma_bw_per_core, 368e9)           # 16 x 23 B/ns
    assert TRN2.hbm_bytes == 103079215104               # neuron-monitor neuron_device_memory_size
    assert TRN2.sbuf_bytes == 128 * 224 * 1024 and TRN2.psum_bytes == 128 * 16 * 1024


def test_instance_totals_match_the_instance_tables():
    trn2 = get_instance("trn2.48xlarge")
    assert trn2.hbm_bytes == 1536 * GiB and close(trn2.hbm_bw, 46.4e12)   # A3
    ultra = get_instance("trn2u-ultraserver")
    assert ultra.hbm_bytes == 6144 * GiB and close(ultra.hbm_bw, 185.6e12)
    assert ultra.physical_cores == 512 and ultra.nodes == 4 and ultra.is_ultraserver
    trn3 = get_instance("trn3-ultraserver")
    assert trn3.hbm_bytes == 9216 * GiB and close(trn3.hbm_bw, 313.6e12)  # A6
    assert close(get_instance("trn1.32xlarge").hbm_bw, 13_120e9)           # A5
    assert close(get_instance("trn2.48xlarge").efa_bw * 8, 3200e9)          # 3,200 Gbps
    assert close(get_instance("trn1n.32xlarge").device.neuronlink_bw, 768e9)


def test_logical_cores_and_core_versions():
    trn2 = get_instance("trn2.48xlarge")
    assert trn2.logical_cores(2) == 64 and trn2.logical_cores(1) == 128
    assert trn2.device.logical_cores(trn2.device.default_lnc) == 4   # neuroncore_per_device_count
    assert TRN2.core_version(2) == "v3d" and TRN2.core_version(1) == "v3"
    assert TRN1.core_version(1) == "v2" and TRN1.default_lnc == 1


@pytest.mark.parametrize("call", [
    lambda: check_lnc(get_instance("trn1.32xlarge"), 2),
    lambda: TRN1.logical_cores(2),
    lambda: TRN1.core_version(2),
    lambda: check_lnc(TRN2, 4),
    lambda: check_lnc(TRN2, True),
])
def test_unsupported_lnc_is_rejected_with_allowed_values(call):
    with pytest.raises(SpecError, match=r"is not supported on .*; allowed: 1"):
        call()


def test_dtypes():
    assert check_dtype(TRN2, "BF16") == "bf16"
    assert check_dtype(get_instance("trn3-ultraserver"), "mxfp4") == "mxfp4"
    with pytest.raises(SpecError, match="'mxfp8' is not supported on trainium2; allowed: fp32"):
        TRN2.peak_flops("mxfp8")
    with pytest.raises(SpecError, match="int4"):
        check_dtype(TRN3, "int4")


def test_lookups_and_errors():
    assert instance_names() == ("trn1.2xlarge", "trn1.32xlarge", "trn1n.32xlarge",
                                "trn2.48xlarge", "trn2u.48xlarge", "trn2u-ultraserver",
                                "trn3-ultraserver")
    assert get_instance("trn2n.48xlarge") is get_instance("trn2.48xlarge")   # AWS example name
    assert get_instance(" TRN2.48XLARGE ").name == "trn2.48xlarge"
    with pytest.raises(SpecError) as err:
        get_instance("trn9.large")
    assert str(err.value).startswith("unknown instance 'trn9.large'; ")
    assert str(err.value).endswith("allowed: " + ", ".join(INSTANCES))   # after any "did you mean"
    with pytest.raises(SpecError, match="unknown device 'inferentia2'; allowed: trainium1, "
                                        "trainium2, trainium3"):
        get_device("inferentia2")
    with pytest.raises(SpecError):
        get_instance(None)  # type: ignore[arg-type]
    assert issubclass(SpecError, ValueError)


def test_specs_are_frozen_hashable_and_valid():
    for dev in DEVICES.values():
        assert validate_device(dev) is dev
        with pytest.raises(TypeError):
            dev.marketing_tflops["bf16"] = 1.0   # type: ignore[index]
    for inst in INSTANCES.values():
        assert validate_instance(inst) is inst
        assert inst.devices == inst.nodes * inst.devices_per_node
    with pytest.raises(dataclasses.FrozenInstanceError):
        TRN2.tensor_hz = 1.0   # type: ignore[misc]
    assert len({*DEVICES.values(), *INSTANCES.values()}) == len(DEVICES) + len(INSTANCES)


LABEL = re.compile(r"^(A[1-6]|N[1-9]'?|P[1-3]|C[1-4]|derived|assumption)\b")


def test_every_numeric_constant_names_its_source():
    sources = constant_sources()
    numeric = [(dev, f) for dev in DEVICES for f in DEVICE_FIELDS]
    numeric += [(inst, f) for inst in INSTANCES for f in INSTANCE_FIELDS]
    numeric += [(dev, f"marketing_tflops.{k}") for dev, spec in DEVICES.items()
                for k in spec.marketing_tflops]
    missing = [key for key in numeric if not LABEL.match(sources.get(key, ""))]
    assert missing == []
