"""`neuron-sim estimate`'s figures agree with each other and with docs/estimate.md: bytes counted
once, a decode's parts adding up to its step, job-wide FLOPs, coherent one-token decodes,
collectives refused where they mean nothing, one rule for ratios without a divisor, the mlp's
optimizer time, and every JSON key documented."""
from __future__ import annotations

import re
from pathlib import Path

import orjson
import pytest

from device_model import Program, instance
from device_model.cli import main
from device_model.core import lower_collective
from device_model.engine.collectives import collective_cost
from device_model.workloads import Placement, estimate
from device_model.workloads.micro import place_ranks
from device_model.workloads.report import format_model, ratio_text

DOCS = Path(__file__).resolve().parent.parent / "docs" / "estimate.md"
GiB = 1 << 30
TRN2 = instance("trn2.48xlarge")
LLAMA = "llama3-8b:mode=decode,batch=1"
TP8 = Placement(cores=8, tp=8)


def _json(capsys, argv):
    assert main(["estimate", *argv, "--json"]) == 0
    return orjson.loads(capsys.readouterr().out)


def _fails(capsys, argv) -> str:
    """The one line of stderr of a refused estimate (exit 2, nothing on stdout)."""
    assert main(["estimate", *argv]) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err.count("\n") == 1
    return out.err


def _parts(r: dict) -> float:
    return sum(v for k, v in r["breakdown"].items() if k != "collective_hidden_s")


# --- 1: a collective's HBM bytes once at LNC=2 -----------------------------------------------

@pytest.mark.parametrize("kind", ["allreduce", "allgather", "reducescatter", "alltoall"])
def test_a_collectives_hbm_bytes_are_the_same_at_lnc_1_and_2(kind, capsys):
    """A rank moves its bytes once whichever LNC it runs at; at LNC=2 they were counted once
    per physical core (2 GiB read for a 1 GiB all-reduce, MBU 118%)."""
    one, two = (_json(capsys, ["-w", f"{kind}:ranks=2,bytes=1G", "-i", "trn2.48xlarge",
                               "--lnc", lnc]) for lnc in ("1", "2"))
    for key in ("hbm_read_bytes", "hbm_write_bytes"):
        assert two[key] == one[key] > 0
    assert 0 < two["mbu"] <= 1 and 0 < one["mbu"] <= 1
    if kind == "allreduce":
        assert two["hbm_read_bytes"] == two["hbm_write_bytes"] == GiB    # 2(n-1)/n of 1 GiB


def test_a_runs_collective_bytes_are_the_ranks_bytes_moved_and_its_dma_claim_is_unchanged():
    """The timeline (one physical core's) holds 1/LNC of the rank's bytes and metrics() scales
    them back; the DMA share it claims, which times it, is the documented ~2 x cc_dma_fraction_v3
    at both."""
    share = 2 * TRN2.costs.cc_dma_fraction_v3
    shares = {}
    for lnc in (1, 2):
        inst = instance("trn2.48xlarge", lnc=lnc)
        group = place_ranks(inst, 2)
        prog = Program()
        prog.collective("all_reduce", GiB, group, dtype="fp32")
        moved = collective_cost("all_reduce", GiB, group, inst.device, inst.costs,
                                lnc=lnc).bytes_moved
        m = inst.run(prog).metrics()
        assert m["hbm_read_bytes"] == m["hbm_write_bytes"] == pytest.approx(moved)
        assert m["mbu"] <= 1
        shares[lnc] = lower_collective(prog.ops[0], inst.context())[0].dma_share
    assert shares[1] == pytest.approx(share, rel=0.02) and shares[2] == pytest.approx(share, rel=0.02)


def test_lnc_2_training_counts_its_tensor_parallel_collectives_bytes_once():
    """Every LNC=2 model with TP/DP collectives had their bytes twice in its MBU; the times
    are the collectives' cost, not their bytes, and stay. MBU x step is the bytes (in seconds
    of one stack's bandwidth) whatever the collectives' speed: 1.21 here, 1.43 when doubled."""
    r = estimate("llama3-8b:seq=2048,gbs=16", TRN2, Placement(cores=8, tp=8))
    assert 0 < r["mbu"] * r["step_time_s"] < 1.32


# --- 2: a decode's breakdown and ratios are its mean token's ---------------------------------

def test_a_decode_over_several_buckets_reports_its_mean_token_which_adds_up():
    """in=128, out=256 generates 128 tokens at KV bucket 256 and 127 at 512: the breakdown,
    FLOPs and engine time are those two steps weighted 128:127 (each step measured alone by a
    one-step decode in that bucket), and the parts add up to step_time_s = tpot_mean_s."""
    both = estimate(f"{LLAMA},in=128,out=256", TRN2, TP8)
    assert both["decode_buckets"] == {"256": 128, "512": 127}
    alone = {kv: estimate(f"{LLAMA},in={n_in},out=2", TRN2, TP8)
             for kv, n_in in ((256, 128), (512, 384))}
    assert {kv: list(r["decode_buckets"]) for kv, r in alone.items()} == {256: ["256"],
                                                                          512: ["512"]}

    def mean(get):
        return (128 * get(alone[256]) + 127 * get(alone[512])) / 255

    assert both["step_time_s"] == both["tpot_mean_s"]
    assert _parts(both) == pytest.approx(both["step_time_s"], rel=1e-12)
    for key in ("compute_s", "dma_s", "collective_exposed_s"):
        assert both["breakdown"][key] == pytest.approx(mean(lambda r: r["breakdown"][key]))
    assert both["model_flops"] == pytest.approx(mean(lambda r: r["model_flops"]))
    busy = mean(lambda r: r["engine_active"]["tensor"] * r["step_time_s"])
    assert both["engine_active"]["tensor"] == pytest.approx(busy / both["step_time_s"])


def test_the_audited_long_decodes_parts_add_up_to_its_step(capsys):
    r = _json(capsys, ["-w", f"{LLAMA},in=128,out=4096", "-i", "trn2.48xlarge", "--tp", "8",
                       "--cores", "8"])
    assert len(r["decode_buckets"]) > 1
    assert _parts(r) == pytest.approx(r["step_time_s"], rel=1e-12)    # was 4.5695 vs 4.4111 ms


# --- 3: a decode of one token ----------------------------------------------------------------

def test_a_decode_of_one_token_is_a_request_that_ends_at_its_first_token(capsys):
    argv = ["-w", f"{LLAMA},in=128,out=1", "-i", "trn2.48xlarge", "--tp", "8", "--cores", "8"]
    r = _json(capsys, argv)
    assert r["mode"] == "decode" and r["output_tokens"] == 1
    assert r["e2e_latency_s"] == r["step_time_s"] == r["time_s"] == r["ttft_s"]
    assert not {"tpot_s", "tpot_mean_s", "decode_buckets", "latency_s"} & set(r)
    # one generated token per sequence, not the prompt's 128 (11,569 tokens/s before)
    assert r["tokens_per_s"] == r["sequences_per_s"] == pytest.approx(1 / r["ttft_s"])
    assert _parts(r) == pytest.approx(r["step_time_s"], rel=1e-12)
    assert main(["estimate", *argv]) == 0
    out = capsys.readouterr().out
    assert "TTFT" in out and "time/output token" not in out
    assert "time per output token" not in out and "TTFT, prompt up to 512" in out


# --- 4: inference FLOPs of the whole job -----------------------------------------------------

@pytest.mark.parametrize("spec", [f"{LLAMA},in=128,out=64", "llama3-8b:mode=prefill,in=512"])
def test_inference_flops_are_the_whole_jobs_and_mfu_does_not_change(spec, capsys):
    one, eight = (estimate(spec, TRN2, Placement(cores=cores, tp=8)) for cores in (8, 64))
    assert eight["parallel"]["dp"] == 8
    for key in ("model_flops", "hardware_flops", "tokens_per_s"):
        assert eight[key] == pytest.approx(8 * one[key])
    assert eight["mfu"] == pytest.approx(one["mfu"], rel=1e-12)
    dev = TRN2.device
    peak = 2.0 * dev.pe_rows * dev.pe_cols * dev.tensor_hz * TRN2.lnc
    ranks = eight["parallel"]["ranks"]
    assert eight["mfu"] == pytest.approx(eight["model_flops"] / (peak * eight["step_time_s"]
                                                                  * ranks))


# --- 5: collectives that mean nothing ---------------------------------------------------------

def test_a_collective_with_more_ranks_than_its_nodes_hold_is_refused_naming_the_nodes(capsys):
    err = _fails(capsys, ["-w", "allreduce:ranks=64,bytes=1G", "-i", "trn1.32xlarge",
                          "--nodes", "1"])
    assert "64 ranks need 2 nodes" in err and "--nodes 2" in err
    # beyond what --nodes takes, no --nodes to suggest
    err = _fails(capsys, ["-w", "allgather:ranks=600000,bytes=1G", "-i", "trn1.32xlarge"])
    assert "more than the 4,096 a job may have (131,072 ranks at most" in err
    assert "pass --nodes" not in err
    r = _json(capsys, ["-w", "allreduce:ranks=64,bytes=1G", "-i", "trn1.32xlarge",
                       "--nodes", "2"])
    assert r["nodes"] == 2


def test_a_collective_that_no_job_could_run_is_refused(capsys):
    """Ranks that do not split evenly over --nodes (placed as if they did, 64 over 3 nodes took
    the time of 64 over 2) and a buffer larger than a core's HBM (1 PiB a rank ran, in 38,000 s)
    are refused, as a model's uneven cores and memory are."""
    err = _fails(capsys, ["-w", "allreduce:ranks=64,bytes=1M", "-i", "trn1.32xlarge",
                          "--nodes", "3"])
    assert "ranks=64 does not split evenly over --nodes 3" in err
    err = _fails(capsys, ["-w", "allreduce:ranks=32,bytes=1125899906842624", "-i",
                          "trn1.32xlarge"])
    assert "does not fit a logical core's HBM: 16 GiB at LNC=1" in err
    # the largest buffer that fits runs
    r = _json(capsys, ["-w", f"allgather:ranks=8,bytes={15 * GiB}", "-i", "trn1.32xlarge"])
    assert r["time_s"] > 0


def test_an_ultraserver_is_one_node_to_a_collective_as_to_a_model(capsys):
    """Its servers share NeuronLink (trn2u) or a NeuronSwitch (trn3): a collective over all its
    cores runs on one UltraServer, as a model's TP group over them does, and `--nodes 2` means
    two UltraServers joined by EFA for both."""
    r = _json(capsys, ["-w", "allreduce:ranks=256,bytes=64M", "-i", "trn3-ultraserver"])
    assert r["nodes"] == 1 and r["devices"] == 64
    model = _json(capsys, ["-w", "llama3-8b:mode=train,seq=2048", "-i", "trn3-ultraserver", "--tp", "8"])
    assert model["parallel"]["ranks"] == 256 and model["parallel"]["nodes"] == 1
    r = _json(capsys, ["-w", "allreduce:ranks=64,bytes=64M", "-i", "trn2u-ultraserver", "--nodes", "2"])
    assert r["nodes"] == 2 and r["algorithm"] == "hierarchical"
    err = _fails(capsys, ["-w", "allreduce:ranks=512,bytes=64M", "-i", "trn3-ultraserver"])
    assert "512 ranks need 2 nodes of trn3-ultraserver (256 logical cores each" in err


def test_servers_of_an_ultraserver_on_nodes_say_that_efa_joins_them_here():
    """`-i trn2u.48xlarge --nodes 4` costed TP256 over EFA, nearly twice the time per token of
    the UltraServer those four servers make, without a word: the part's --nodes now point to
    the whole."""
    spec = "llama3.1-405b:mode=decode"
    parts = estimate(spec, instance("trn2u.48xlarge"), Placement(nodes=4, tp=256))
    whole = estimate(spec, instance("trn2u-ultraserver"), Placement(tp=256))
    assert parts["tpot_s"] > 1.5 * whole["tpot_s"]
    said = [w for w in parts["warnings"] if "-i trn2u-ultraserver" in w]
    assert said == ["trn2u.48xlarge servers are joined here by EFA, as separate instances; the "
                    "4 of one UltraServer share NeuronLink: -i trn2u-ultraserver models them "
                    "as one"]
    # a collective's nodes as a model's; one server, or a standalone trn2, says nothing
    cc = estimate("allreduce:bytes=1M,ranks=128", instance("trn2u.48xlarge"),
                  Placement(nodes=2))
    assert cc["nodes"] == 2 and len(cc["warnings"]) == 1
    for inst, nodes in (("trn2u.48xlarge", 1), ("trn2.48xlarge", 4)):
        r = estimate(spec, instance(inst), Placement(nodes=nodes, tp=64 * nodes))
        assert not [w for w in r.get("warnings", ()) if "UltraServer" in w]


@pytest.mark.parametrize("argv, named", [
    (["-w", "allreduce:bytes=64M", "--tp", "2"], "--tp"),
    (["-w", "allgather:bytes=64M", "--cores", "4"], "--cores"),
    (["-w", "matmul:m=64,k=64,n=64", "--dp", "2"], "--dp"),
    (["-w", "matmul:m=64,k=64,n=64", "--nodes", "2"], "--nodes")])
def test_a_microbenchmark_refuses_placement_flags_it_would_ignore(argv, named, capsys):
    err = _fails(capsys, [*argv, "-i", "trn2.48xlarge"])
    assert f"takes no {named}" in err


def test_matmul_cores_are_at_most_the_instances(capsys):
    """`--cores 5` on a two-core trn1.2xlarge claimed twice the chip's peak throughput."""
    err = _fails(capsys, ["-w", "matmul:m=4096,k=4096,n=4096", "-i", "trn1.2xlarge", "--cores", "5"])
    assert "trn1.2xlarge has 2 logical cores" in err
    two = _json(capsys, ["-w", "matmul:m=4096,k=4096,n=4096", "-i", "trn1.2xlarge", "--cores", "2"])
    assert two["tflops"] * 1e12 <= instance("trn1.2xlarge").spec.peak_flops("bf16")


@pytest.mark.parametrize("kind", ["allreduce", "allgather", "reducescatter", "alltoall"])
def test_a_one_rank_collective_is_refused(kind, capsys):
    """It moves nothing: its 'bandwidth' was 1 GiB over the 50 us launch, 21,475 GB/s."""
    err = _fails(capsys, ["-w", f"{kind}:ranks=1,bytes=1G", "-i", "trn2.48xlarge"])
    assert "ranks >= 2" in err


def test_all_to_all_costs_as_all_gather_and_the_docs_say_so(capsys):
    a2a, ag = (_json(capsys, ["-w", f"{k}:ranks=8,bytes=64M", "-i", "trn2.48xlarge"])
               for k in ("alltoall", "allgather"))
    assert {k: v for k, v in a2a.items() if k != "workload"} == \
        {k: v for k, v in ag.items() if k != "workload"}
    text = " ".join(DOCS.read_text().split())
    assert "An all-to-all is costed as an all-gather of the same buffer (`assumption`" in text


# --- 6: ratios without a divisor ----------------------------------------------------------------

def test_ratio_text_has_one_rule_for_a_zero_a():
    assert ratio_text(0.0, 0.0) == "\u2013" and ratio_text(0, 0.08) == "\u221e"
    # a zero B is none left, not a ratio rounded away ("0.00x")
    assert ratio_text(2.0, 1.0) == "0.50x" and ratio_text(1.0, 0.0) == "0x"
    assert ratio_text(1.97e-3, 1e-9, "1.97 ms", "0.0 us") == "0x"
    assert ratio_text(67.3, 0.3) == "0.0045x"      # a 200-fold drop does not read as nothing
    # a figure that prints as zero counts as zero: no digits of rounding noise
    assert ratio_text(1e-19, 0.08, "0.0 us", "80.00 ms") == "\u221e"
    assert ratio_text(1e-19, 2e-19, "0.0 us", "0.0 us") == "\u2013"


def test_vs_a_bubble_from_nothing_is_infinite_in_text_and_null_in_json(capsys):
    argv = ["-w", "llama3-8b:seq=2048,gbs=64", "-i", "trn2.48xlarge", "--tp", "8",
            "--vs", "pp=2"]
    assert main(["estimate", *argv]) == 0
    bubble = next(line for line in capsys.readouterr().out.splitlines()
                  if line.strip().startswith("bubble"))
    assert bubble.split()[1:3] == ["0.0", "us"] and bubble.rstrip().endswith("\u221e")
    r = _json(capsys, argv)
    assert r["a"]["breakdown"]["bubble_s"] == 0 < r["b"]["breakdown"]["bubble_s"]
    assert r["ratio"]["breakdown"]["bubble_s"] is None          # was left out
    assert r["ratio"]["breakdown"]["optimizer_s"] == pytest.approx(
        r["b"]["breakdown"]["optimizer_s"] / r["a"]["breakdown"]["optimizer_s"])


def test_vs_json_gives_null_for_two_zeros(capsys):
    r = _json(capsys, ["-w", "mlp:hidden=512,layers=1,batch=64", "--vs", "batch=128"])
    assert r["a"]["breakdown"]["bubble_s"] == r["b"]["breakdown"]["bubble_s"] == 0
    assert r["ratio"]["breakdown"]["bubble_s"] is None


# --- 7: the mlp's optimizer ---------------------------------------------------------------------

def test_mlp_training_reports_its_adamw_as_optimizer_time(capsys):
    train = _json(capsys, ["-w", "mlp:hidden=1024,layers=2,batch=256", "--cores", "8"])
    b = train["breakdown"]
    assert 0 < b["optimizer_s"] < train["step_time_s"] and b["compute_s"] >= 0 <= b["dma_s"]
    assert _parts(train) == pytest.approx(train["step_time_s"], rel=1e-12)
    infer = _json(capsys, ["-w", "mlp:hidden=1024,layers=2,batch=256,mode=infer"])
    assert infer["breakdown"]["optimizer_s"] == 0


# --- 8: every JSON key documented, byte counts whole ---------------------------------------------

_PROSE = re.sub(r"```.*?```", "", DOCS.read_text(), flags=re.S)     # code blocks aside
_DOCUMENTED = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*",
                             " ".join(re.findall(r"`([^`]+)`", _PROSE))))


def _leaves(d: dict) -> set[str]:
    keys = set()
    for k, v in d.items():
        keys.add(k)
        if isinstance(v, dict) and k != "decode_buckets":       # its keys are bucket sizes
            keys |= _leaves(v)
    return keys


@pytest.mark.parametrize("argv", [
    ["-w", "llama3-8b:seq=2048,gbs=16,attn=unfused,softmax=fused", "--tp", "8", "--cores", "8"],
    ["-w", f"{LLAMA},in=128,out=64", "--tp", "8", "--cores", "8"],
    ["-w", f"{LLAMA},in=128,out=1", "--tp", "8", "--cores", "8"],
    ["-w", "llama3-8b:mode=prefill,in=512,weights=int8", "--tp", "8", "--cores", "8"],
    ["-w", "bert-base:mode=infer,seq=128", "--cores", "1"],
    ["-w", "mlp:hidden=512,layers=1,batch=64"],
    ["-w", "matmul:m=512,k=512,n=512"],
    ["-w", "allreduce:bytes=1M,ranks=4"],
])
def test_every_json_key_is_in_docs_estimate_md(argv, capsys):
    r = _json(capsys, [*argv, "-i", "trn2.48xlarge"])
    assert _leaves(r) - _DOCUMENTED == set()


@pytest.mark.parametrize("argv", [
    ["-w", "llama3-8b:seq=2048,gbs=16", "--tp", "8", "--cores", "8"],
    ["-w", f"{LLAMA},in=128,out=64", "--tp", "8", "--cores", "8"],
    ["-w", "mlp:hidden=512,layers=1,batch=64"],
])
def test_memory_byte_counts_are_integers_that_add_up(argv, capsys):
    m = _json(capsys, [*argv, "-i", "trn2.48xlarge"])["memory"]
    parts = [v for k, v in m.items() if k.endswith("_bytes") and k not in ("total_bytes",
                                                                            "capacity_bytes")]
    assert all(type(v) is int for k, v in m.items() if k.endswith("_bytes"))
    assert m["total_bytes"] == sum(parts) and isinstance(m["fits"], bool)


@pytest.mark.parametrize("spec", ["matmul:m=512,k=512,n=512", "allgather:bytes=1M,ranks=4"])
def test_microbenchmark_byte_counts_are_integers(spec, capsys):
    r = _json(capsys, ["-w", spec, "-i", "trn2.48xlarge"])
    assert type(r["hbm_read_bytes"]) is int and type(r["hbm_write_bytes"]) is int


def test_sequence_parallel_training_needs_seq_divisible_by_tp(capsys):
    err = _fails(capsys, ["-w", "llama3-8b:mode=train,seq=4097", "-i", "trn2.48xlarge", "--tp", "8"])
    assert "seq=4097 over tp=8" in err and "sp=off" in err
    assert _json(capsys, ["-w", "llama3-8b:mode=train,seq=4097,sp=off", "-i", "trn2.48xlarge",
                          "--tp", "8"])["parallel"]["sp"] is False


def test_tied_embeddings_are_one_table_in_inference_memory(capsys):
    """BERT's MLM decoder and GPT-3's output head are the embedding itself: inference held a
    second vocab x hidden table for them (62 MB on bert-large, served without its head)."""
    from device_model.workloads.presets import PRESETS
    for name, argv in (("bert-large", ["-w", "bert-large:mode=infer,batch=1,seq=128", "--cores", "1"]),
                       ("llama3-8b", ["-w", "llama3-8b:mode=decode,batch=1,in=128,out=128", "--tp", "1",
                                      "--cores", "1"])):
        cfg = PRESETS[name]
        weights = _json(capsys, [*argv, "-i", "trn2.48xlarge"])["memory"]["weights_bytes"]
        # BF16; bert-large is served without its head (the MLM transform is not loaded either)
        expected = (cfg.params() - (cfg.head_params() if name.startswith("bert") else 0)) * 2
        assert weights == pytest.approx(expected, rel=1e-6), name     # (the final norm: 8 KB)


def test_a_prompts_padding_is_hardware_work_not_model_work():
    """A 513-token prompt runs in the 1024 bucket: it takes the 1024-token time, but its model
    FLOPs are 513 tokens' (they were 1024's, so MFU credited the padding)."""
    short, padded, full = (estimate(f"llama3-8b:mode=prefill,batch=1,in={n}", TRN2, TP8)
                           for n in (512, 513, 1024))
    assert padded["padded_input_tokens"] == 1024
    assert padded["ttft_s"] == pytest.approx(full["ttft_s"])
    assert padded["hardware_flops"] == pytest.approx(full["hardware_flops"])
    # 513 tokens' work, not 1024's (the causal attention's tiles make it not quite linear)
    assert padded["model_flops"] == pytest.approx(short["model_flops"] * 513 / 512, rel=0.03)
    assert padded["model_flops"] < 0.55 * full["model_flops"]
    assert padded["mfu"] == pytest.approx(full["mfu"] * padded["model_flops"]
                                          / full["model_flops"])
    assert padded["hfu"] == pytest.approx(full["hfu"])


def test_an_encoder_runs_at_its_traced_sequence_unless_bucketed():
    """torch-neuronx compiles a traced encoder for the shape it was traced with: seq=384 ran
    padded to 512 (and 16..128 all at 128), 34% slower than the shape a user traces."""
    trn1 = instance("trn1.2xlarge")
    one = Placement(cores=1)
    run = {seq: estimate(f"bert-large:mode=infer,batch=1,seq={seq}", trn1, one)
           for seq in (64, 128, 384, 512)}
    assert [run[s]["padded_input_tokens"] for s in run] == [64, 128, 384, 512]
    assert run[64]["latency_s"] < run[128]["latency_s"] < run[384]["latency_s"] \
        < run[512]["latency_s"]
    bucketed = estimate("bert-large:mode=infer,batch=1,seq=384,bucket=pow2", trn1, one)
    assert bucketed["padded_input_tokens"] == 512
    assert bucketed["latency_s"] == pytest.approx(run[512]["latency_s"])


def test_the_text_names_the_compiled_length_where_the_prompt_pads(capsys):
    """The TTFT of a 513-token prompt is the 1024 bucket's: the report says so."""
    assert main(["estimate", "-w", "llama3-8b:mode=prefill,batch=1,in=513", "-i",
                 "trn2.48xlarge", "--tp", "8"]) == 0
    assert "  compiled length      1,024 tokens\n" in capsys.readouterr().out
    assert main(["estimate", "-w", "llama3-8b:mode=prefill,batch=1,in=512", "-i",
                 "trn2.48xlarge", "--tp", "8"]) == 0
    assert "compiled length" not in capsys.readouterr().out


def test_a_decodes_text_gives_its_whole_requests_beside_its_decode_rate(capsys):
    """tokens/s of a decode leaves the prefill out: 360 tokens/s for a 120k-token prompt whose
    requests take 14 s. The text now gives the end-to-end latency and sequences/s too, and
    names the rate as the decode's."""
    spec = "llama3.1-8b:mode=decode,in=32000,out=10"     # 120,000 took 7 s to simulate
    assert main(["estimate", "-w", spec, "-i", "trn2.48xlarge", "--tp", "8", "--json"]) == 0
    r = orjson.loads(capsys.readouterr().out)
    assert main(["estimate", "-w", spec, "-i", "trn2.48xlarge", "--tp", "8"]) == 0
    rows = {line[2:22].strip(): line[23:].strip() for line in capsys.readouterr().out.splitlines()
            if line.startswith("  ") and not line.startswith("   ")}
    assert rows["e2e latency"] == f"{r['e2e_latency_s']:.3f} s"
    assert rows["sequences/s"] == f"{r['sequences_per_s']:,.2f}"
    assert rows["tokens/s (decode)"] == f"{r['tokens_per_s']:,.1f}" and "tokens/s" not in rows
    assert "bubble" not in rows and "optimizer" not in rows     # training's rows (always 0 here)
    assert r["sequences_per_s"] * 10 < r["tokens_per_s"] / 10      # the prefill dominates


def test_a_pipeline_with_fewer_micro_batches_than_stages_is_warned_about():
    """The default gbs (mbs*dp) gives a PP8 pipeline one micro-batch: a step of 2.6 s of which
    2.2 s is bubble, MFU 8%, and nothing said so."""
    lone = estimate("llama3-70b:ckpt=selective", TRN2, Placement(nodes=4, tp=16, pp=8))
    assert any("1 micro-batch for 8 pipeline stages" in w and "gbs of at least 16" in w
               for w in lone["warnings"])
    assert lone["breakdown"]["bubble_s"] > 0.5 * lone["step_time_s"]
    full = estimate("llama3-70b:ckpt=selective,gbs=16", TRN2, Placement(nodes=4, tp=16, pp=8))
    assert "warnings" not in full
    text = format_model(lone)
    assert "1 micro-batch" in text and "1 micro-batches" not in text


def test_an_fp8_comparison_says_how_mfu_counts_fp8(capsys):
    """--vs dtype=fp8 read as a regression: 1.3x the throughput at 0.76x the MFU, unexplained."""
    argv = ["estimate", "-w", "llama3-8b:seq=4096,gbs=256", "-i", "trn2.48xlarge", "--tp", "8"]
    assert main([*argv, "--vs", "dtype=fp8"]) == 0
    out = capsys.readouterr().out
    assert "MFU and HFU count FP8 FLOPs divided by FP8's speed-up over BF16" in out
    assert max(len(line) for line in out.splitlines()) <= 80
    assert main(argv) == 0
    assert "FP8 FLOPs" not in capsys.readouterr().out


def test_an_fp32_run_says_how_mfu_counts_its_matmuls(capsys):
    """--vs dtype=fp32 read as a gain: 0.36x the throughput at 1.33x the MFU, unexplained (FP32
    matmul FLOPs count four times against the BF16 peak). An FP32 model whose matmuls are
    auto-cast to BF16 runs none, and says nothing."""
    argv = ["estimate", "-w", "llama3-8b:seq=4096,gbs=256", "-i", "trn2.48xlarge", "--tp", "8"]
    assert main([*argv, "--vs", "dtype=fp32"]) == 0
    out = capsys.readouterr().out
    assert "MFU and HFU count FP32 matmul FLOPs four times" in out
    assert max(len(line) for line in out.splitlines()) <= 80
    cast = ["estimate", "-w", "llama3-8b:seq=4096,gbs=256,dtype=fp32,autocast=matmul",
            *argv[3:]]
    assert main(cast) == 0
    assert "FP32 matmul FLOPs" not in capsys.readouterr().out
    assert _json(capsys, cast[1:])["matmul_dtype"] == "bf16"
    assert _json(capsys, [*argv[1:], "--vs", "dtype=fp32"])["b"]["matmul_dtype"] == "fp32"


def _flops_per_sequence(spec: str, tp: int, sequences_of) -> tuple[float, float]:
    r = estimate(spec, TRN2, Placement(tp=tp))
    n = sequences_of(r)
    return r["model_flops"] / n, r["hardware_flops"] / n


@pytest.mark.parametrize("spec, sequences_of", [
    ("llama3-8b:mode=prefill,in=2048,batch=1", lambda r: r["parallel"]["dp"]),
    ("llama3-8b:seq=2048,mbs=1,gbs=64", lambda r: 64),
])
def test_a_models_flops_do_not_grow_with_tp(spec, sequences_of):
    """Llama-3-8B has 8 KV heads: at tp 32 each is computed on 4 ranks (and a rank's single
    (sequence, KV head) pair is split over LNC=2's two cores). That is the chip's work (HFU),
    not the model's: its FLOPs a sequence are those of tp 8."""
    base_model, base_hw = _flops_per_sequence(spec, 8, sequences_of)
    for tp in (16, 32):
        model, hw = _flops_per_sequence(spec, tp, sequences_of)
        assert model == pytest.approx(base_model, rel=1e-6), tp
        assert hw > base_hw                   # the replicated KV projection is still run


def test_cores_given_over_several_nodes_are_spread_over_them(capsys):
    """`--nodes 2 --cores 64`: 32 ranks on each node, so the replicas meet over EFA; before, all
    64 sat on the first node while the title said two."""
    spec = "llama3-8b:seq=4096,gbs=64"
    one = estimate(spec, TRN2, Placement(cores=64, tp=8))
    two = estimate(spec, TRN2, Placement(cores=64, nodes=2, tp=8))
    assert one["parallel"]["dp_link"] == "neuronlink" and two["parallel"]["dp_link"] == "efa"
    assert two["step_time_s"] > one["step_time_s"]
    decode = estimate("llama3-8b:mode=decode", TRN2, Placement(cores=8, nodes=2))
    assert decode["parallel"]["tp_link"] != "efa"       # the default tp stays within a node
    assert "does not split evenly over --nodes 3" in _fails(
        capsys, ["-w", spec, "-i", "trn2.48xlarge", "--nodes", "3", "--cores", "64"])
    # 24 ranks a node: the default tp divides them (16 would put a group across EFA)
    trn1 = instance("trn1.32xlarge")
    spread = estimate("llama3-8b:mode=prefill", trn1, Placement(cores=48, nodes=2))
    assert 24 % spread["parallel"]["tp"] == 0 and spread["parallel"]["tp_link"] != "efa"
    assert "splits TP groups across nodes" in _fails(
        capsys, ["-w", "llama3-8b:mode=prefill", "-i", "trn1.32xlarge", "--nodes", "2",
                 "--cores", "48", "--tp", "16"])
    # mlp's one core a node by default, not a --cores 1 nobody gave
    mlp = estimate("mlp", TRN2, Placement(nodes=2))
    assert mlp["parallel"]["dp"] == 2 and mlp["parallel"]["dp_link"] == "efa"


def test_zero1_asked_for_without_data_parallelism_is_warned_about():
    r = estimate("llama3-8b:seq=4096,gbs=8,zero1=on", TRN2, Placement(cores=8, tp=8, dp=1))
    assert r["parallel"]["zero1"] is False
    assert any("zero1=on has no effect with dp=1" in w for w in r["warnings"])
    quiet = estimate("llama3-8b:seq=4096,gbs=8", TRN2, Placement(cores=8, tp=8, dp=1))
    assert "warnings" not in quiet


def test_inference_says_whether_its_prompt_runs_sequence_parallel(capsys):
    """An inference estimate's `parallel` said nothing of `sp`: the text line and the JSON were
    the same with and without it, though the prompt's time differs."""
    spec = "llama2-7b:mode=decode,in=1024,out=4"
    on = _json(capsys, ["-w", spec + ",sp=1", "-i", "trn1.32xlarge", "--tp", "32"])
    off = _json(capsys, ["-w", spec, "-i", "trn1.32xlarge", "--tp", "32"])
    assert on["parallel"]["sp"] is True and off["parallel"]["sp"] is False
    assert on["ttft_s"] != off["ttft_s"] and "warnings" not in on
    assert main(["estimate", "-w", spec + ",sp=1", "-i", "trn1.32xlarge", "--tp", "32"]) == 0
    assert "; SP in the prompt" in capsys.readouterr().out


@pytest.mark.parametrize("spec, where", [
    ("llama2-7b:mode=decode,in=128,out=4,weights=int8,sp=on", "the prompt's norms"),
    ("bert-base:mode=train,seq=128,sp=1", "its norms"),
])
def test_sequence_parallelism_without_tensor_parallel_ranks_is_warned_about(spec, where):
    r = estimate(spec, instance("trn1.2xlarge"), Placement(cores=1, tp=1))
    assert r["parallel"]["sp"] is False
    sp = spec.rsplit("sp=", 1)[1]
    assert [w for w in r["warnings"] if w.startswith(f"sp={sp} has no effect with tp=1")
            and where in w]
    quiet = estimate(spec.rsplit(",sp=", 1)[0], instance("trn1.2xlarge"), Placement(cores=1, tp=1))
    assert not [w for w in quiet.get("warnings", ()) if w.startswith("sp=")]


def test_a_decoders_traced_forward_pays_no_generation_start():
    """`mode=infer` is one traced forward pass: its host side is the outputs' copy back, as an
    encoder's; the request start (sampling, the program switch) is a generation's, prefill's."""
    infer = estimate("llama3-8b:mode=infer,seq=512", TRN2, TP8)
    prefill = estimate("llama3-8b:mode=prefill,in=512", TRN2, TP8)
    start = TRN2.costs.generation_start_s
    assert prefill["breakdown"]["overhead_s"] >= start
    assert infer["breakdown"]["overhead_s"] < start / 10
    assert infer["latency_s"] < prefill["latency_s"] - 0.9 * start


@pytest.mark.parametrize("name", ["trn1.32xlarge", "trn2.48xlarge"])
@pytest.mark.parametrize("cores", [2, 4])
def test_a_data_parallel_reduction_costs_what_the_same_all_reduce_costs_alone(name, cores):
    """A job that leaves most of each chip idle (`--cores` over `--nodes`) shares a chip's links
    and EFA among the ranks it runs, not among every core: its gradient all-reduce took 2-4x the
    same all-reduce run alone (one rank a node: 382 ms in the mlp, 95 ms alone on trn2)."""
    inst = instance(name)
    job = estimate("mlp", inst, Placement(cores=cores, nodes=2))
    reduce = job["breakdown"]["collective_exposed_s"] + job["breakdown"]["collective_hidden_s"]
    alone = estimate(f"allreduce:bytes={job['params'] * 4},ranks={cores}", inst,
                     Placement(nodes=2))
    assert reduce == pytest.approx(alone["time_s"], rel=0.02)


def test_long_times_and_large_rates_read_in_their_units():
    from device_model.workloads.report import _per_s, time_text
    assert time_text(36308156287.567) == "1,150.5 years" and time_text(380000) == "4.4 days"
    assert time_text(9000) == "2.5 h" and time_text(3599) == "3599.000 s"
    assert _per_s(1)(1381055.81) == "1,381,056" and _per_s(1)(158.04) == "158.0"


def test_the_int8_decode_figures_docs_estimate_md_quotes_are_the_models():
    """The Precision section quoted trn2's int8 Llama-3-70B decode at 12.7 ms a token after the
    model had moved to 12.9: each quoted pair is what the model gives now (to 0.1 ms)."""
    text = " ".join(DOCS.read_text().split())
    quoted = {chip: tuple(map(float, m.groups())) for chip, pattern in (
        ("trn1.32xlarge", r"Llama-3-70B TP32: ([\d.]+) → ([\d.]+) ms a token"),
        ("trn2.48xlarge", r"the bytes save \(TP32: ([\d.]+) → ([\d.]+) ms\)"))
        for m in [re.search(pattern, text)]}
    for chip, (bf16, int8) in quoted.items():
        got = [estimate(f"llama3-70b:mode=decode{w}", instance(chip), Placement(tp=32))["tpot_s"]
               for w in ("", ",weights=int8")]
        assert [round(t * 1e3, 1) for t in got] == [bf16, int8], chip
