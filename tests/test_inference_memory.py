"""What inference keeps on chip, when its weights arrive and what it returns: token-tile
residency, weights streamed ahead of the matmul before them, an FP32 model's matmul weights
compiled to BF16, and an encoder's outputs copied to the host."""
from __future__ import annotations

import pytest

from device_model import Program, instance
from device_model.catalog.costs import DEFAULT_COSTS
from device_model.engine.isa import L_DMA
from device_model.errors import SpecError
from device_model.workloads import Placement, build_step, estimate
from device_model.workloads.inference import keep_in_sbuf

TRN1 = instance("trn1.32xlarge")
ONE_CORE = instance("trn1.2xlarge")
BUDGET = 10e6        # bytes of SBUF left for activations (about what trn1's share is)


def _resident(program: Program) -> dict[str, bool]:
    return {op.name: bool(op.get("resident")) for op in program.ops}


def test_row_wise_ops_stay_on_chip_by_token_tile_not_whole_tensor():
    """A norm over 8192 tokens of width 8192 (128 MiB in BF16) runs tile by tile: resident.
    One whose single tile of 128 rows is larger than the budget is not, and neither is the op
    that reads a collective's result (the CC-cores write it to HBM)."""
    p = Program()
    p.layernorm(8192, 8192, rms=True, name="long_norm")
    p.layernorm(256, 1 << 20, name="wide_norm")        # 128 x 1M x 2 B x 2 = 512 MiB a tile
    p.binary("add", 8192 * 8192, name="long_add")
    kept = _resident(keep_in_sbuf(p, BUDGET, DEFAULT_COSTS.tile_free_elems))
    assert kept == {"long_norm": True, "wide_norm": False, "long_add": True}
    plan = build_step("llama2-70b:mode=prefill,in=4096", TRN1, Placement(tp=32))
    ops = plan.stages[0][0].program.ops
    kept = {op.name: bool(op.get("resident")) for op in ops}
    after = [b.name for a, b in zip(ops, ops[1:]) if a.kind == "collective"]
    assert "layer0.attn_residual" in after and not any(kept[name] for name in after)
    assert kept["layer1.attn_norm"] and kept["layer0.mlp_norm"] and kept["layer0.gate_mul"]


def test_prefill_activation_traffic_per_token_does_not_jump_with_length():
    """A 70B prefill's norms and residuals used to go to HBM once a whole [tokens, hidden]
    tensor outgrew the SBUF share (1024 tokens and up): the HBM bytes per token beyond the
    weights jumped by 40%. By token tile only the collectives and their consumers touch HBM,
    the same bytes per token at any length."""
    def activation_bytes_per_token(n):
        r = estimate(f"llama2-70b:mode=prefill,in={n}", TRN1, Placement(tp=32))
        hbm = r["mbu"] * r["ttft_s"] * TRN1.device.hbm_bw_per_stack
        return (hbm - r["memory"]["weights_bytes"]) / n
    assert activation_bytes_per_token(1024) == pytest.approx(activation_bytes_per_token(256),
                                                             rel=0.05)


def test_weights_stream_in_behind_the_matmul_before_them():
    """Two weight matmuls with on-chip elementwise work between them: the second one's weights
    start loading while the first computes (double buffering), before the elementwise ops
    start; with `weight_prefetch_ops = 0` only when the op just before it starts."""
    def run(depth):
        inst = instance("trn1.2xlarge", costs=DEFAULT_COSTS.with_overrides(
            {"weight_prefetch_ops": depth}))
        p = Program()
        p.matmul(128, 4096, 4096, name="first")
        p.activation("gelu", 128 * 4096, name="gelu")
        p.binary("add", 128 * 4096, name="bias")
        p.matmul(128, 4096, 4096, name="second")
        program = keep_in_sbuf(p, BUDGET, DEFAULT_COSTS.tile_free_elems)
        assert all(op.get("resident") for op in program.ops)
        tl = inst.run(program).timeline
        at = {name: i for i, name in enumerate(tl.op_names)}
        loads = (tl.columns["op"] == at["second"]) & (tl.columns["lane"] == L_DMA)
        return float(tl.columns["start"][loads].min()), tl.op_start[at["gelu"]], \
            tl.op_start[at["bias"]], tl.wall
    first_load, gelu, _, wall = run(1)
    assert first_load < gelu
    first_load0, _, bias0, wall0 = run(0)
    assert first_load0 == pytest.approx(bias0)
    assert wall < wall0


def test_fp32_model_weights_are_bf16_in_traced_inference_fp32_in_training():
    """torch-neuronx's trace inlines the weights as constants (`inline_weights_to_neff=True` by
    default) and neuronx-cc casts FP32 matmuls to BF16 by default: the cast of a constant is
    folded, so an FP32 model's weights sit in HBM at BF16 in inference under the auto-cast
    (at FP32 without it); training keeps its FP32 parameters and casts them as each matmul
    loads them."""
    def weights(spec, inst, placement):
        return estimate(spec, inst, placement)["memory"]["weights_bytes"]
    infer = "bert-large:mode=infer,batch=1,seq=128"
    one = Placement(cores=1)
    bf16 = weights(infer, ONE_CORE, one)
    assert weights(infer + ",dtype=fp32,autocast=matmul", ONE_CORE, one) == bf16
    assert weights(infer + ",dtype=fp32", ONE_CORE, one) == 2 * bf16
    train = "bert-large:seq=128,mbs=8,gbs=256"
    dp = Placement(dp=32)
    assert weights(train + ",dtype=fp32,autocast=matmul", TRN1, dp) == 2 * weights(train, TRN1, dp)
    # and the weight stream an inference reads is the BF16 one: half the FP32 model's bytes
    def hbm(spec):
        r = estimate(spec, ONE_CORE, one)
        return r["mbu"] * r["latency_s"] * ONE_CORE.device.hbm_bw_per_stack
    assert hbm(infer + ",dtype=fp32,autocast=matmul") < 0.55 * hbm(infer + ",dtype=fp32")


def test_fp32_autocast_inference_costs_little_more_than_bf16():
    """AWS publishes these encoders as FP32 models with matmuls auto-cast; what stays FP32 is
    the elementwise work and the activations, not the weight stream: at batch 1 (bound by the
    weights) the two are within a few percent, at batch 16 the FP32 activations cost more."""
    def latency(batch, extra):
        return estimate(f"bert-base:mode=infer,batch={batch},seq=128{extra}", ONE_CORE,
                        Placement(cores=1))["latency_s"]
    for batch, lo, hi in ((1, 0.95, 1.10), (16, 1.05, 1.40)):
        ratio = latency(batch, ",dtype=fp32,autocast=matmul") / latency(batch, "")
        assert lo < ratio < hi, (batch, ratio)


@pytest.mark.parametrize("spec, inst, placement", [
    ("bert-base:mode=infer,batch=1,seq=128,dtype=fp32,autocast=matmul", ONE_CORE,
     Placement(cores=1)),
    ("llama2-7b:mode=prefill,in=256", TRN1, Placement(tp=32)),
])
def test_time_to_first_token_equals_the_whole_prefill_program(spec, inst, placement):
    """The estimate simulates the ends, a first layer and a second one, and scales the second
    to the rest; identical layers after the first run in the same steady state, so that is the
    whole unrolled program's time, not an approximation of it."""
    from device_model.workloads.cost import measure
    r = estimate(spec, inst, placement)
    prefill = build_step(spec, inst, placement).stages[0][0].program
    whole = measure(inst, prefill).time + inst.costs.exec_overhead_s
    if spec.startswith("llama"):   # a decoder's first token also waits for its request's start
        whole += inst.costs.generation_start_s
    else:                          # an encoder's forward for its hidden state's return
        whole += 128 * 768 * 4 / inst.costs.host_copy_bytes_per_s
    assert r["ttft_s"] == pytest.approx(whole, rel=1e-3)


def test_a_generation_request_starts_once_before_its_first_token():
    """generation_start_s: a decoder's TTFT (and so its end-to-end latency) carries the
    request's fixed start once, whatever its length or batch; a decode step does not, nor an
    encoder's forward; 0 switches it off."""
    def run(spec, start, inst_name="trn1.32xlarge", placement=Placement(tp=32)):
        costs = DEFAULT_COSTS.with_overrides({"generation_start_s": start})
        inst = instance(inst_name, costs=costs)
        return estimate(spec, inst, placement)
    for spec in ("llama2-7b:mode=decode,batch=1,in=128,out=64",
                 "llama2-7b:mode=decode,batch=4,in=1024,out=64", "llama2-7b:mode=prefill,in=256"):
        off, on = run(spec, 0.0), run(spec, 0.004)
        assert on["ttft_s"] - off["ttft_s"] == pytest.approx(0.004, abs=1e-9), spec
        assert on.get("tpot_s") == off.get("tpot_s")
        if "e2e_latency_s" in on:
            assert on["e2e_latency_s"] - off["e2e_latency_s"] == pytest.approx(0.004, abs=1e-9)
    encoder = "bert-base:mode=infer,batch=1,seq=128"
    assert (run(encoder, 0.0, "trn1.2xlarge", Placement(cores=1))["latency_s"] ==
            run(encoder, 0.004, "trn1.2xlarge", Placement(cores=1))["latency_s"])


def _at_copy_rate(spec, rate, inst_name="trn1.2xlarge", placement=Placement(cores=1)):
    costs = DEFAULT_COSTS.with_overrides({"host_copy_bytes_per_s": rate})
    return estimate(spec, instance(inst_name, costs=costs), placement)


@pytest.mark.parametrize("spec, returned", [
    # the raw output: every token's last hidden state, in the model's activation dtype
    ("bert-base:mode=infer,batch=1,seq=128,dtype=fp32,autocast=matmul", 1 * 128 * 768 * 4),
    ("bert-base:mode=infer,batch=16,seq=128,dtype=fp32,autocast=matmul", 16 * 128 * 768 * 4),
    ("bert-large:mode=infer,batch=4,seq=128", 4 * 128 * 1024 * 2),
    ("distilbert-base:mode=infer,batch=2,seq=100", 2 * 100 * 768 * 2),  # the traced length
    ("distilbert-base:mode=infer,batch=2,seq=100,bucket=pow2", 2 * 128 * 768 * 2),  # padded
    # a classifier's labels, or the MLM head's logits (one position per sequence, as it runs)
    ("bert-base:mode=infer,batch=16,seq=128,head=cls", 16 * 2 * 2),
    ("bert-base:mode=infer,batch=2,seq=128,head=on", 2 * 30522 * 2),
])
def test_an_encoder_forward_returns_its_outputs_to_the_host(spec, returned):
    """host_copy_bytes_per_s: the latency carries the outputs' copy to the host, bytes over the
    rate, in the breakdown's overhead; nothing else moves with the rate."""
    slow, free = _at_copy_rate(spec, 1e9), _at_copy_rate(spec, 1e30)
    assert slow["latency_s"] - free["latency_s"] == pytest.approx(returned / 1e9, rel=1e-6)
    assert (slow["breakdown"]["overhead_s"] - free["breakdown"]["overhead_s"]
            == pytest.approx(returned / 1e9, rel=1e-6))
    assert slow["breakdown"]["compute_s"] == free["breakdown"]["compute_s"]


def test_a_decoder_pays_no_host_copy_beyond_its_request_start():
    spec = "llama2-7b:mode=decode,batch=4,in=1024,out=64"
    slow = _at_copy_rate(spec, 1e6, "trn1.32xlarge", Placement(tp=32))
    free = _at_copy_rate(spec, 1e30, "trn1.32xlarge", Placement(tp=32))
    assert (slow["ttft_s"], slow["tpot_s"]) == (free["ttft_s"], free["tpot_s"])


def test_a_sequence_classifier_runs_in_place_of_the_raw_output():
    """head=cls: the pooler and the labels' layer run on each sequence's first token; it costs
    a little compute and saves the hidden state's return (the tables' MRPC model against its
    base: faster)."""
    base = "bert-base:mode=infer,batch=16,seq=128,dtype=fp32,autocast=matmul"
    raw, cls = (estimate(s, ONE_CORE, Placement(cores=1)) for s in (base, base + ",head=cls"))
    ops = [op.name for op in build_step(base + ",head=cls", ONE_CORE,
                                        Placement(cores=1)).stages[0][0].program.ops]
    assert {"classifier.pooler", "classifier.pooler_tanh", "classifier.classifier"} <= set(ops)
    assert cls["model_flops"] > raw["model_flops"]
    assert cls["latency_s"] < raw["latency_s"]


@pytest.mark.parametrize("spec", ["llama2-7b:mode=prefill,head=cls",
                                  "bert-base:mode=train,head=cls",
                                  "bert-base:mode=prefill,head=cls"])
def test_a_sequence_classifier_is_an_encoders_inference_only(spec):
    from device_model.errors import SpecError
    inst = TRN1 if spec.startswith("llama") else ONE_CORE
    with pytest.raises(SpecError, match="head"):
        estimate(spec, inst, Placement(tp=32) if spec.startswith("llama") else Placement(cores=1))


def test_the_kv_cache_holds_the_prompts_bucket_where_it_outgrows_the_generation_buckets():
    """A 4096-token prompt bucket over 2048-token generation buckets sized the cache to 2048
    positions: the prompt's pass writes 4096 of them."""
    trn2 = instance("trn2.48xlarge")
    spec = "llama3-8b:mode=decode,batch=1,in=1100,out=300,bucket=4096,tkg_bucket={}"
    cached = {n: estimate(spec.format(n), trn2, Placement(tp=8))["memory"]["kv_cache_bytes"]
              for n in (2048, 4096)}
    assert cached[2048] == cached[4096] > 0
    # where the generation buckets are the longer, they size it
    longer = estimate("llama3-8b:mode=decode,batch=1,in=1100,out=300,bucket=2048,"
                      "tkg_bucket=4096", trn2, Placement(tp=8))["memory"]["kv_cache_bytes"]
    assert longer == cached[4096]


def test_sequence_parallelism_splits_the_prompts_residual_stream_among_the_ranks():
    """With sp=1 every rank holds tokens/tp of the residual stream and the norms' tensors; the
    memory model kept them whole, so a 100k-token Llama-3.1-405B prompt "did not fit" with it
    as without it, and the hint never named sp."""
    trn2 = instance("trn2.48xlarge")
    spec = "llama3.1-70b:mode=prefill,in=32768,sp={}"
    work = {sp: estimate(spec.format(sp), trn2, Placement(tp=64))["memory"]["activations_bytes"]
            for sp in (0, 1)}
    h, tokens, tp, act_bytes = 8192, 32768, 64, 2
    assert work[0] - work[1] == pytest.approx(tokens * 4 * h * act_bytes * (1 - 1 / tp))
    long = "llama3.1-405b:mode=decode,in=100000,out=28000,sp={}"
    with pytest.raises(SpecError, match=r"does not fit: .*try a larger --tp, sp=1, "):
        estimate(long.format(0), trn2, Placement(tp=64))
    assert estimate(long.format(1), trn2, Placement(tp=64))["memory"]["fits"]


def test_a_bucket_list_sizes_the_kv_cache_to_its_largest_size_used_or_not():
    """NxD allocates the cache for the longest bucket it compiles. `tkg_bucket=2048/131072` at
    128+128 tokens sized it to 2048 positions and said 16 sequences of Llama-3.1-8B fit on
    TP8, where the 131,072-position cache needs 32 GiB a core."""
    trn2 = instance("trn2.48xlarge")
    spec = "llama3.1-8b:mode=decode,batch=1,in=128,out=128,{}"

    def kv(buckets: str) -> float:
        return estimate(spec.format(buckets), trn2, Placement(tp=8))["memory"]["kv_cache_bytes"]

    assert kv("tkg_bucket=2048/16384") == kv("tkg_bucket=16384") == 8 * kv("tkg_bucket=2048")
    assert kv("bucket=256/16384,tkg_bucket=2048") == kv("tkg_bucket=16384")
    # a size past the model's context is compiled, and the cache sized, at the context
    assert kv("tkg_bucket=2048/200000") == kv("tkg_bucket=131072")
    with pytest.raises(SpecError, match=r"does not fit: .*KV cache 32\.0"):
        estimate("llama3.1-8b:mode=decode,batch=16,in=128,out=128,tkg_bucket=2048/131072",
                 trn2, Placement(tp=8))
