"""Decode reads the KV cache position-major ([positions, batch, KV heads, head_dim]): each
partition of a cache load gets one position's batch x KV heads x head_dim run, so the read runs
at eta() of that run (trn2-arch.md §6: >= 2 KiB per partition to approach peak), not of the whole
transfer. Prefill does not read the cache."""
from __future__ import annotations

from dataclasses import replace

from device_model import instance
from device_model.catalog.costs import DEFAULT_COSTS
from device_model.workloads import Placement, estimate
from device_model.workloads.inference import InferencePlan, InferSpec
from device_model.workloads.parallel import resolve_layout
from device_model.workloads.presets import PRESETS
from device_model.workloads.transformer import precision

SPEC = "llama2-13b:mode=decode,batch=1,in=4096,out=256"
TRN1 = instance("trn1.32xlarge")


def _run(position_major: float, spec: str = SPEC) -> dict:
    costs = replace(DEFAULT_COSTS, kv_cache_position_major=position_major)
    return estimate(spec, instance("trn1.32xlarge", costs=costs), Placement(tp=32))


def test_decode_attention_marks_its_cache_reads_with_the_run_per_position():
    cfg = PRESETS["llama2-13b"]
    lay = resolve_layout(TRN1, 1, None, 32, None, None, heads=cfg.heads, training=False)
    plan = InferencePlan(TRN1, InferSpec(cfg, 1, 4096, 256, 0, precision("bf16", False), lay))
    ops = {op.name: op for op in plan.decode_program(4096, layers=1).ops}
    # 64 padded heads on 32 ranks: 2 KV heads of 128 BF16 per position and rank
    assert ops["layer0.scores"].get("run_bytes") == 2 * 128 * 2
    assert ops["layer0.context"].get("run_bytes") == 2 * 128 * 2
    batched = InferencePlan(TRN1, InferSpec(cfg, 8, 4096, 256, 0, precision("bf16", False), lay))
    ops = {op.name: op for op in batched.decode_program(4096, layers=1).ops}
    assert ops["layer0.scores"].get("run_bytes") == 8 * 2 * 128 * 2     # the batch is contiguous
    prefill = {op.name: op for op in plan.prefill_program(layers=1).ops}
    assert all(not op.get("run_bytes") for op in prefill.values())


def test_cache_reads_in_runs_cost_more_and_grow_with_the_cache():
    runs, flat = _run(1.0), _run(0.0)
    assert runs["tpot_s"] > flat["tpot_s"] * 1.05
    assert runs["ttft_s"] == flat["ttft_s"]                  # prefill reads no cache
    long_runs = _run(1.0, SPEC.replace("in=4096", "in=8192"))
    long_flat = _run(0.0, SPEC.replace("in=4096", "in=8192"))
    # the extra cost is per cached position: doubling the cache roughly doubles it
    extra, long_extra = runs["tpot_s"] - flat["tpot_s"], long_runs["tpot_s"] - long_flat["tpot_s"]
    assert 1.7 < long_extra / extra < 2.3


def test_a_batch_reads_its_caches_in_longer_runs_so_each_sequence_costs_less():
    """AWS's batched decoder table (batch 8 beside batch 1, same models and caches): the cache
    of each extra sequence streams at near full DMA efficiency, because a position's row holds
    the whole batch. Per sequence, the cache cost at batch 8 is well under that at batch 1."""
    def cache_cost(batch):
        spec = SPEC.replace("batch=1", f"batch={batch}")
        long, short = (_run(1.0, spec.replace("in=4096", f"in={n}")) for n in (8192, 1024))
        return (long["tpot_s"] - short["tpot_s"]) / batch
    assert cache_cost(8) < 0.5 * cache_cost(1)
