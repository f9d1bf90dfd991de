"""Collective pipelining in context encoding (`cc_tiles=N`, docs/fidelity.md "Mechanisms"):
the token-parallel ops around a tensor-parallel collective run in N tiles of tokens, so a tile's
all-reduce overlaps the next tile's compute. The tiles conserve the work, attention waits for
every tile, and decode (a handful of rows) never tiles."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from device_model import instance
from device_model.errors import SpecError
from device_model.program import CollectiveGroup, Program
from device_model.workloads import Placement, estimate, resolve
from device_model.workloads.cost import measure
from device_model.workloads.estimate_model import _prepare
from device_model.workloads.inference import keep_in_sbuf
from device_model.workloads.pipelining import MAX_TILES, TILE_ROWS, pipeline_tiles
from device_model.workloads.presets import PRESETS

TRN1 = instance("trn1.32xlarge")
GROUP = CollectiveGroup(32, 2, 16)
PREFILL = "llama3-8b:mode=prefill,batch=1,in=4096,weights=int8,attn=unfused"
TOKEN_PARAM = {"matmul": "m", "binary": "elements", "rmsnorm": "rows", "collective": "bytes",
               "dma": "bytes"}


def _layer_like(tokens: int = 1024, hidden: int = 512) -> Program:
    """embed, a token-parallel run with an all-reduce, attention (a barrier), another run."""
    p = Program()
    p.embedding(tokens, hidden, name="embed")
    p.layernorm(tokens, hidden, rms=True, name="norm")
    p.matmul(tokens, hidden, 256, name="qkv")
    p.dma(tokens * 256, direction="store", name="kv_write")
    p.matmul(tokens, 64, tokens, batch=4, weights=False, name="scores")
    p.matmul(tokens, tokens, 64, batch=4, weights=False, name="context")
    p.matmul(tokens, 256, hidden, name="o_proj")
    p.collective("all_reduce", tokens * hidden * 2, GROUP, name="o_proj.all_reduce")
    p.binary("add", tokens * hidden, name="residual")
    p.matmul(tokens, hidden, 64, name="head")
    return p


def _with_output_head(p: Program, hidden: int = 512) -> Program:
    """The output head after the last layer: the final norm and the vocab projection on each
    sequence's last token (one row)."""
    p.layernorm(1, hidden, rms=True, name="final_norm")
    p.matmul(1, hidden, 4096, name="lm_head")
    p.reduce(1, 4096, func="max", name="argmax")
    return p


def _by_name(program: Program) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for i, op in enumerate(program.ops):
        out.setdefault(op.name.split(".tile")[0], []).append(i)
    return out


def test_a_run_with_a_collective_splits_into_chains_and_attention_waits_for_all_of_them():
    tiled = pipeline_tiles(_layer_like(), 2)
    where = _by_name(tiled)
    ops = tiled.ops
    # the run after attention holds the all-reduce: split, every op in two
    for name in ("o_proj", "o_proj.all_reduce", "residual", "head"):
        assert len(where[name]) == 2, name
    # the run before attention holds no collective: left whole
    for name in ("embed", "norm", "qkv", "kv_write", "scores", "context"):
        assert len(where[name]) == 1, name
    # a tile waits on its own tile of the op before, the first op on the op before the run
    first, second = where["o_proj.all_reduce"]
    assert ops[first].deps == (where["o_proj"][0],) and ops[second].deps == (where["o_proj"][1],)
    assert all(ops[i].deps == (where["context"][0],) for i in where["o_proj"])


def test_the_last_layer_pipelines_although_the_output_head_runs_on_one_row():
    """The head's one-row linear cannot be split, so it ends the run before it rather than
    keeping the last layer's collectives whole."""
    tiled = pipeline_tiles(_with_output_head(_layer_like()), 2)
    where = _by_name(tiled)
    for name in ("o_proj.all_reduce", "residual", "head"):
        assert len(where[name]) == 2, name
    for name in ("final_norm", "lm_head", "argmax"):
        assert len(where[name]) == 1, name
    assert tiled.ops[where["final_norm"][0]].deps == tuple(where["head"])


def test_the_op_after_a_tiled_run_waits_on_every_tile():
    p = _layer_like()
    p.matmul(1024, 64, 1024, batch=4, weights=False, name="next_scores")
    tiled = pipeline_tiles(p, 4)
    where = _by_name(tiled)
    assert tiled.ops[where["next_scores"][0]].deps == tuple(where["head"])


@settings(max_examples=60, deadline=None)
@given(tokens=st.integers(1, 5000), tiles=st.integers(1, 12))
def test_tiles_conserve_every_ops_work(tokens, tiles):
    p = _layer_like(tokens)
    tiled = pipeline_tiles(p, tiles)
    totals: dict[str, int] = {}
    for op in tiled.ops:
        key = TOKEN_PARAM.get(op.kind)
        if key:
            name = op.name.split(".tile")[0]
            totals[name] = totals.get(name, 0) + op.get(key)
            assert op.get(key) >= 1
    for op in p.ops:
        key = TOKEN_PARAM.get(op.kind)
        if key:
            assert totals[op.name] == op.get(key)
    # tiled only where each tile keeps a full matmul tile of tokens
    split = len(tiled.ops) > len(p.ops)
    assert split == (tiles > 1 and tokens >= tiles * TILE_ROWS)


def test_one_tile_or_short_prompts_leave_the_program_as_it_was():
    p = _layer_like(1024)
    assert pipeline_tiles(p, 1).ops == p.ops
    assert pipeline_tiles(p, 16).ops == p.ops      # 64 tokens a tile: under a matmul tile
    with pytest.raises(SpecError, match="at most"):
        pipeline_tiles(p, MAX_TILES + 1)


def test_an_op_fed_by_any_collective_tile_reads_hbm():
    """The CC-cores write a collective's result to HBM, so the op consuming each tile of it
    cannot keep its inputs in SBUF, even where the tiles interleave in program order."""
    tiled = keep_in_sbuf(pipeline_tiles(_layer_like(), 2), budget=1e12, free_elems=512)
    fed = [op for op in tiled.ops
           if op.deps and any(tiled.ops[d].kind == "collective" for d in op.deps)]
    assert len(fed) == 2
    assert not any(op.get("resident") for op in fed)


def test_pipelining_hides_collectives_behind_the_next_tiles_compute():
    one = estimate(PREFILL, TRN1, Placement(tp=32))
    two = estimate(PREFILL + ",cc_tiles=2", TRN1, Placement(tp=32))
    assert two["ttft_s"] < 0.95 * one["ttft_s"]
    # the same model work; the hardware does the same FLOPs
    assert two["model_flops"] == pytest.approx(one["model_flops"], rel=1e-9)
    assert two["hardware_flops"] == pytest.approx(one["hardware_flops"], rel=1e-9)
    # what ran off the critical path is reported as hidden, and the tiling is named
    assert one["breakdown"]["collective_hidden_s"] == 0.0
    assert two["breakdown"]["collective_hidden_s"] > 0.002
    assert two["parallel"]["cc_tiles"] == 2 and "cc_tiles" not in one["parallel"]


def test_the_prompts_split_adds_up_as_the_whole_program_runs():
    """The estimate composes a prompt from runs of one and two layers; with tiles its
    compute, DMA, exposed and hidden collective time still match a run of every layer."""
    _, opts = resolve(PREFILL.replace("weights=int8,", "") + ",cc_tiles=2")
    plan = _prepare(PRESETS["llama3-8b"], TRN1, opts, Placement(tp=32))
    composed, whole = plan.prefill, measure(TRN1, plan.prefill_program())
    assert composed.time == pytest.approx(whole.time, rel=1e-6)
    for part in ("compute", "dma", "collective"):
        assert getattr(composed, part) == pytest.approx(getattr(whole, part), rel=0.05), part
    hidden = composed.collective_active - composed.collective
    assert hidden == pytest.approx(whole.collective_active - whole.collective, rel=0.05)
    assert hidden > 0.002


def test_nothing_pipelined_is_said_and_hides_nothing():
    """A prompt whose tiles would be under a matmul tile, or a layout with no tensor-parallel
    collective, runs as with one tile: no tiling named, no hidden collective time, a warning."""
    for spec, placement in (("llama3-8b:mode=prefill,in=128,cc_tiles=2", Placement(tp=32)),
                            ("bert-large:mode=infer,batch=16,seq=512,cc_tiles=2",
                             Placement(cores=1))):
        result = estimate(spec, TRN1, placement)
        assert "cc_tiles" not in result["parallel"]
        assert result["breakdown"]["collective_hidden_s"] == 0.0
        assert any("pipelines nothing" in w for w in result["warnings"])
    # an untiled prompt whose layers do run collectives reports none hidden either
    bert = estimate("bert-large:mode=infer,batch=256,seq=128,head=cls", TRN1, Placement(tp=2))
    assert bert["breakdown"]["collective_hidden_s"] == 0.0


def test_decode_steps_and_one_tile_prompts_do_not_change():
    spec = "llama3-8b:mode=decode,batch=1,in=128,out=64,attn=unfused"
    one = estimate(spec, TRN1, Placement(tp=32))
    two = estimate(spec + ",cc_tiles=2", TRN1, Placement(tp=32))
    assert two["tpot_s"] == one["tpot_s"]
    assert two["ttft_s"] == one["ttft_s"]          # 128 tokens: one tile


@pytest.mark.parametrize("spec, message", [
    (PREFILL + ",cc_tiles=0", "cc_tiles"),
    (PREFILL + f",cc_tiles={MAX_TILES + 1}", f"1 to {MAX_TILES}"),
    ("llama3-8b:seq=4096,cc_tiles=2", "does not apply to mode=train"),
])
def test_bad_tile_counts_are_refused_by_name(spec, message):
    with pytest.raises(SpecError, match=message):
        estimate(spec, TRN1, Placement(tp=32))
