"""Weight-only quantization in inference (`weights=int8` / `weights=fp8`): the layers' linear
weights are stored narrower and read at that width, each loaded weight tile is dequantized on
ScalarE/VectorE before its BF16 matmul, and the norms, embedding and head keep their dtype."""
from __future__ import annotations

import pytest

from device_model import Program, instance
from device_model.catalog.costs import DEFAULT_COSTS
from device_model.errors import SpecError
from device_model.workloads import Placement, estimate
from device_model.workloads.inference import QUANT_SCALE_BYTES
from device_model.workloads.presets import get_preset
from device_model.workloads.transformer import make_shard, shard_linear_params

ONE_CORE = instance("trn1.2xlarge")
TRN1 = instance("trn1.32xlarge")
DECODE = "llama3-8b:mode=decode,batch=1,in=128,out=128"


def _busy(metrics: dict, engine: str) -> float:
    """Seconds an engine was active."""
    return metrics["engine_active"][engine] * metrics["time_s"]


def _weight_matmul(stored: str, inst=ONE_CORE):
    """A decode-shaped matmul: one token against a 4096 x 4096 weight."""
    p = Program()
    p.matmul(1, 4096, 4096, "bf16", right_dtype=stored)
    return inst.run(p).metrics()


def test_quantized_weights_are_read_at_their_width_and_dequantized_once_per_element():
    bf16, int8 = _weight_matmul("bf16"), _weight_matmul("int8")
    weight = 4096 * 4096
    assert bf16["hbm_read_bytes"] - int8["hbm_read_bytes"] == pytest.approx(weight, rel=0.01)
    # the dequantizing passes are ScalarE and VectorE work the BF16 matmul does not have
    assert int8["engine_active"]["scalar"] > bf16["engine_active"]["scalar"]
    assert int8["engine_active"]["vector"] > bf16["engine_active"]["vector"]
    # one pass over each weight element, the transfers alternating between the two engines:
    # half the weight's elements over 128 partitions on each, one element per cycle
    dev = ONE_CORE.device
    for engine, hz in (("scalar", dev.scalar_hz), ("vector", dev.vector_hz)):
        assert _busy(int8, engine) - _busy(bf16, engine) == pytest.approx(weight / 2 / 128 / hz,
                                                                          rel=0.02)


def test_dequantizing_costs_time_and_can_be_switched_off():
    free = instance("trn1.2xlarge", costs=DEFAULT_COSTS.with_overrides(
        {"weight_dequant_passes": 0}))
    twice = instance("trn1.2xlarge", costs=DEFAULT_COSTS.with_overrides(
        {"weight_dequant_passes": 2}))
    t = {name: _weight_matmul("int8", inst)["time_s"]
         for name, inst in (("free", free), ("once", ONE_CORE), ("twice", twice))}
    assert t["free"] < t["once"] < t["twice"]
    assert _busy(_weight_matmul("int8", free), "scalar") \
        == pytest.approx(_busy(_weight_matmul("bf16"), "scalar"), rel=0.01)


def test_a_wider_stored_weight_converts_as_it_loads_without_a_pass():
    """An FP32 model's weights under neuronx-cc's matmul auto-cast are wider than the matmul:
    no dequantizing pass (the scales of quantization are what needs the engines)."""
    p = Program()
    p.matmul(1, 4096, 4096, "bf16", right_dtype="fp32")
    wide = ONE_CORE.run(p).metrics()
    assert _busy(wide, "vector") == pytest.approx(_busy(_weight_matmul("bf16"), "vector"),
                                                  rel=0.01)


def test_int8_layers_halve_the_layer_weights_held_and_keep_the_rest():
    cfg = get_preset("llama3-8b")
    bf16 = estimate(DECODE, TRN1, Placement(tp=32))
    int8 = estimate(DECODE + ",weights=int8", TRN1, Placement(tp=32))
    linear, outs = shard_linear_params(cfg, make_shard(cfg, 32, False, pad=True))
    saved = cfg.layers * (linear * 1 - outs * QUANT_SCALE_BYTES)
    assert bf16["memory"]["weights_bytes"] - int8["memory"]["weights_bytes"] == pytest.approx(saved)
    # the embedding and the 128k-entry head stay BF16: well over a byte per parameter overall
    assert int8["memory"]["weights_bytes"] > 1.05 * cfg.params() / 32
    assert int8["weights"] == "int8" and bf16["weights"] == "bf16"


def test_int8_decode_streams_fewer_bytes_and_prefill_barely_changes():
    bf16 = estimate(DECODE, TRN1, Placement(tp=32))
    int8 = estimate(DECODE + ",weights=int8", TRN1, Placement(tp=32))
    assert int8["tpot_s"] < bf16["tpot_s"]
    # a 128-token prefill reuses each dequantized tile over its tokens
    assert int8["ttft_s"] == pytest.approx(bf16["ttft_s"], rel=0.05)


@pytest.mark.parametrize("spec, says", [
    ("llama3-8b:mode=train,weights=int8", "does not apply to mode=train"),
    ("llama3-8b:mode=decode,dtype=fp8,weights=bf16", "weights=bf16 is not narrower"),
    ("llama3-8b:mode=decode,dtype=fp8,weights=int8", "weights=int8 is not narrower"),
    ("llama3-8b:mode=decode,weights=int4", "weights"),
])
def test_weight_storage_that_cannot_apply_is_refused_in_one_line(spec, says):
    with pytest.raises(SpecError, match=says) as err:
        estimate(spec, TRN1, Placement(tp=32))
    assert "\n" not in str(err.value)


def test_storage_as_wide_as_the_matmul_is_no_quantization():
    plain = estimate(DECODE, TRN1, Placement(tp=32))
    same = estimate(DECODE + ",weights=bf16", TRN1, Placement(tp=32))
    assert same["tpot_s"] == plain["tpot_s"] and same["memory"] == plain["memory"]


def test_a_model_too_big_for_its_cores_in_bf16_is_told_of_int8_and_fits_with_it():
    """Llama-3-70B on 8 trn1 cores: 17.6 GB of BF16 weights a core against 16 GiB of HBM."""
    spec = "llama3-70b:mode=decode,batch=1,in=128,out=128"
    with pytest.raises(SpecError, match="does not fit.*weights=int8") as err:
        estimate(spec, TRN1, Placement(tp=8))
    assert "\n" not in str(err.value)
    fits = estimate(spec + ",weights=int8", TRN1, Placement(tp=8))
    assert fits["memory"]["fits"] and fits["memory"]["weights_bytes"] < 10e9
