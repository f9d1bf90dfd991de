"""Published configurations that need more than an even split: attention heads padded to a
multiple of tp for inference (NxD Inference, transformers-neuronx), and the encoder and decoder
presets the published benchmark tables use (sizes from their config.json files)."""
from __future__ import annotations

import pytest

from device_model import instance
from device_model.errors import SpecError
from device_model.workloads import Placement, estimate
from device_model.workloads.presets import PRESETS
from device_model.workloads.transformer import make_shard, padded_heads

TRN1 = instance("trn1.32xlarge")


def test_heads_that_tp_does_not_divide_are_padded_for_inference():
    cfg = PRESETS["llama2-13b"]                       # 40 heads, multi-head attention
    assert padded_heads(cfg, 32) == (64, 64)
    assert padded_heads(cfg, 8) == (40, 40)           # an even split is left alone
    assert padded_heads(PRESETS["llama2-70b"], 32) == (64, 8)
    sh = make_shard(cfg, 32, False, pad=True)
    assert (sh.heads, sh.kv_heads) == (2, 2)
    with pytest.raises(SpecError, match="not divisible"):
        make_shard(cfg, 32, False)                    # training's parallel layers refuse


def test_padded_decode_runs_warns_and_charges_the_zero_heads():
    spec = "llama2-13b:mode=decode,batch=1,in=64,out=192"
    r = estimate(spec, TRN1, Placement(tp=32))
    assert any("padded to 64" in w for w in r["warnings"])
    assert r["tpot_s"] > 0 and r["ttft_s"] > 0
    even = estimate(spec, TRN1, Placement(tp=8, dp=4))        # 5 heads per rank: no padding
    assert "warnings" not in even or not any("padded" in w for w in even["warnings"])


def test_padding_costs_more_than_the_real_heads_would():
    """The same rank count with and without the zero heads: a 40-head model padded to 64
    reads more weights per rank than 40/32 of a head would (1.6x the attention projections)."""
    cfg = PRESETS["llama2-13b"]
    padded = make_shard(cfg, 32, False, pad=True)
    from device_model.workloads.transformer import shard_layer_params
    real_attn = 4 * cfg.hidden * cfg.hidden / 32
    padded_attn = 4 * cfg.hidden * padded.heads * padded.head_dim
    assert padded_attn == pytest.approx(1.6 * real_attn)
    assert shard_layer_params(cfg, padded) > 3 * cfg.hidden * cfg.ffn / 32 + real_attn


def test_training_at_a_tp_that_does_not_divide_the_heads_is_still_refused():
    with pytest.raises(SpecError, match="not divisible"):
        estimate("llama2-13b:seq=4096", TRN1, Placement(tp=32))


@pytest.mark.parametrize("name,params", [("roberta-base", 124.6e6), ("roberta-large", 355e6),
                                         ("distilbert-base", 66e6), ("electra-base", 110e6),
                                         ("albert-base", 110e6), ("mistral-7b", 7.24e9),
                                         ("codellama-13b", 13.0e9)])
def test_new_presets_match_published_sizes(name, params):
    # ALBERT shares one layer's weights (12M parameters published); the preset keeps one copy
    # per layer, as the compiled graph reads them, so it is counted like BERT-base
    assert PRESETS[name].params() == pytest.approx(params, rel=0.03)


@pytest.mark.parametrize("name", ["roberta-base", "distilbert-base", "electra-base", "albert-base"])
def test_encoder_presets_run_single_core_inference(name):
    r = estimate(f"{name}:mode=infer,batch=1,seq=128", instance("trn1.2xlarge"), Placement(cores=1))
    assert 0 < r["latency_s"] < 5e-3


def test_fp32_with_the_compilers_default_matmul_autocast():
    """neuronx-cc casts FP32 matmuls to BF16 by default; `autocast=matmul` models that: faster
    than pure FP32 (a quarter-rate TensorE on NC-v2), slower than BF16 (FP32 elementwise work,
    weights, gradients), and refused where it means nothing."""
    spec = "bert-large:seq=128,mbs=8,gbs=8192,dtype={}"
    pl = Placement(dp=32)
    pure = estimate(spec.format("fp32"), TRN1, pl)["sequences_per_s"]
    cast = estimate(spec.format("fp32,autocast=matmul"), TRN1, pl)["sequences_per_s"]
    bf16 = estimate(spec.format("bf16"), TRN1, pl)["sequences_per_s"]
    assert pure < cast < bf16
    assert estimate(spec.format("fp32,autocast=none"), TRN1, pl)["sequences_per_s"] == pure
    with pytest.raises(SpecError, match="autocast"):
        estimate(spec.format("bf16,autocast=matmul"), TRN1, pl)


def test_a_bucket_past_the_models_positions_is_compiled_at_them_and_says_so():
    """bert-large's `bucket=1024` for 500 tokens ran at 512 (its learned positions) without a
    word: the figures were of another length than asked for."""
    one = instance("trn1.2xlarge")
    r = estimate("bert-large:mode=infer,batch=1,seq=500,bucket=1024", one, Placement(cores=1))
    assert r["padded_input_tokens"] == 512
    assert [w for w in r["warnings"] if w.startswith("bucket 1,024 for 500 tokens is past "
                                                     "bert-large's 512-token learned positions")]
    within = estimate("bert-large:mode=infer,batch=1,seq=500,bucket=512", one, Placement(cores=1))
    assert within["padded_input_tokens"] == 512 and "warnings" not in within


def test_a_token_generation_bucket_past_the_models_context_says_so_once():
    """`tkg_bucket=12800` on llama3-8b (8,192 trained positions) ran its decode at 8,192
    without a word, where `bucket=12800` warned; a `bucket` past it in both passes warns once."""
    trn2 = instance("trn2.48xlarge")
    spec = "llama3-8b:mode=decode,in=128,out=128,{}"
    r = estimate(spec.format("tkg_bucket=12800"), trn2, Placement(tp=8))
    assert r["decode_buckets"] == {"8192": 127}
    assert r["warnings"] == ["tkg_bucket 12,800 for 255 positions is past llama3-8b's "
                             "8,192-token trained context: compiled at 8,192"]
    both = estimate(spec.format("bucket=12800"), trn2, Placement(tp=8))["warnings"]
    assert len([w for w in both if "12,800" in w]) == 1
    # a bucket the prompt fits but the generation outgrows: the decode's warning
    later = estimate("llama3-8b:mode=decode,in=128,out=8000,bucket=5000", trn2,
                     Placement(tp=8))["warnings"]
    assert [w for w in later if w.startswith("bucket 10,000 for 8,127 positions is past")]
    assert "warnings" not in estimate(spec.format("tkg_bucket=8192"), trn2, Placement(tp=8))
