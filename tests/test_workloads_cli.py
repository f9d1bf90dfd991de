"""`neuron-sim estimate` for models: options, JSON keys, --vs, and one-line errors (exit 2)."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import orjson
import pytest

from device_model.cli import main

LLAMA_DECODE = ["estimate", "-w", "llama2-7b:mode=decode,batch=1,in=128,out=32",
                "-i", "trn1.32xlarge", "--tp", "32"]
JSON_KEYS = {"workload", "instance", "lnc", "nodes", "mode", "model", "parallel", "dtype",
             "time_s", "step_time_s", "sequences_per_s", "tokens_per_s", "mfu", "hfu", "mbu",
             "engine_active", "collective_active", "model_flops", "hardware_flops", "breakdown",
             "memory"}


def _json(capsys, argv):
    assert main(argv + ["--json"]) == 0
    return orjson.loads(capsys.readouterr().out)


def test_training_json_has_the_documented_keys(capsys):
    r = _json(capsys, ["estimate", "-w", "llama3-8b:seq=2048,gbs=32,ckpt=full", "-i",
                       "trn1.32xlarge", "--tp", "8", "--pp", "2"])
    assert JSON_KEYS <= set(r)
    assert set(r["breakdown"]) == {"compute_s", "dma_s", "collective_exposed_s",
                                   "collective_hidden_s", "bubble_s", "optimizer_s", "overhead_s"}
    assert r["parallel"]["dp"] == 2 and r["nodes"] == 1
    assert r["memory"]["fits"] is True


def test_inference_json_has_ttft_and_tpot(capsys):
    r = _json(capsys, LLAMA_DECODE)
    assert {"ttft_s", "tpot_s", "e2e_latency_s", "padded_input_tokens"} <= set(r)
    assert r["tokens_per_s"] == pytest.approx(1 / r["tpot_s"])


def test_text_output_names_the_figures(capsys):
    assert main(LLAMA_DECODE) == 0
    out = capsys.readouterr().out
    for label in ("TTFT", "time/output token", "MFU", "MBU", "tensor active", "memory/core"):
        assert label in out


def test_vs_prints_both_configurations_with_ratios(capsys):
    assert main(LLAMA_DECODE + ["--vs", "instance=trn2.48xlarge"]) == 0
    out = capsys.readouterr().out
    assert "A: llama2-7b" in out and "on 1 x trn2.48xlarge (LNC=2)" in out and "B/A" in out
    r = _json(capsys, LLAMA_DECODE + ["--vs", "dtype=fp8,out=64"])
    assert r["b"]["workload"].endswith("dtype=fp8")
    assert r["b"]["output_tokens"] == 64
    assert r["ratio"]["tpot_s"] == pytest.approx(r["b"]["tpot_s"] / r["a"]["tpot_s"])
    assert r["ratio"]["memory"]["weights_bytes"] == pytest.approx(0.5)


def test_vs_shows_no_ratio_between_two_figures_that_print_as_zero(capsys):
    """An engine a few instructions wide reads 0.0% on both sides: a ratio beside two zeros
    (it is the inverse of the step times) would mislead."""
    assert main(LLAMA_DECODE + ["--vs", "weights=int8"]) == 0
    rows = {line[2:22].strip(): line.split() for line in capsys.readouterr().out.splitlines()
            if line.startswith("  ") and len(line) > 22}
    assert rows["gpsimd active"][-3:] == ["0.0%", "0.0%", "\u2013"]
    assert rows["time/output token"][-1].endswith("x")


def test_a_rate_under_one_keeps_three_significant_digits(capsys):
    """A 405B request on two trn1 nodes completes 0.0017 sequences/s: it printed "0.00", and
    beside the run with half the output tokens "0.00  0.00  –", though B does twice as many."""
    argv = ["estimate", "-w", "llama3.1-405b:mode=decode,out=2000", "-i", "trn1.32xlarge",
            "--nodes", "2", "--tp", "64"]
    r = _json(capsys, argv)
    assert main(argv) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if "sequences/s" in line)
    assert row.split()[-1] == f"{r['sequences_per_s']:.3g}" and 0.001 < r["sequences_per_s"] < 0.01
    assert main(argv + ["--vs", "out=1000"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if "sequences/s" in line)
    a, b, ratio = row.split()[-3:]
    assert float(b) / float(a) == pytest.approx(2.0, rel=0.01) and ratio == "2.00x"


def test_one_pass_over_a_prompt_shows_the_figures_its_json_has(capsys):
    """A decode of one token is a request that ends with it: the text left out its end-to-end
    latency and sequences/s (the JSON had both), and a prefill its sequences/s. The decode's
    tokens/s counts generated tokens, a prefill's prompt tokens: no ratio between the two."""
    base = ["-i", "trn2.48xlarge", "--tp", "8"]
    one = ["estimate", "-w", "llama3-8b:mode=decode,out=1,in=1000", *base]
    prefill = ["estimate", "-w", "llama3-8b:mode=prefill,in=1000", *base]
    for argv, labels in ((one, {"e2e latency", "sequences/s", "tokens/s (decode)"}),
                         (prefill, {"sequences/s", "tokens/s"})):
        assert main(argv) == 0
        shown = {line[2:22].strip() for line in capsys.readouterr().out.splitlines()}
        assert labels <= shown, labels - shown
        r = _json(capsys, argv)
        assert {"sequences_per_s", "tokens_per_s"} <= set(r)
    ratio = _json(capsys, prefill + ["--vs", "mode=decode,out=1"])["ratio"]
    assert "tokens_per_s" not in ratio and ratio["ttft_s"] == pytest.approx(1.0)


def test_a_data_parallel_degree_given_alone_is_not_a_pipeline(capsys):
    """`--dp 2` on 64 ranks ran a 32-stage pipeline nobody asked for (TP1 PP32 DP2, and a
    micro-batch warning); `mlp --dp 2` ran on one core, its --dp ignored."""
    assert main(["estimate", "-w", "llama3-8b", "-i", "trn2.48xlarge", "--dp", "2"]) == 2
    err = capsys.readouterr().err
    assert "does not equal the 64 ranks" in err and "or --cores 2" in err
    assert err.count("\n") == 1
    r = _json(capsys, ["estimate", "-w", "llama3-8b", "-i", "trn2.48xlarge", "--tp", "8",
                       "--dp", "2"])                  # one degree left out takes the rest
    assert (r["parallel"]["tp"], r["parallel"]["pp"], r["parallel"]["dp"]) == (8, 4, 2)
    mlp = _json(capsys, ["estimate", "-w", "mlp", "-i", "trn2.48xlarge", "--dp", "2"])
    assert (mlp["parallel"]["dp"], mlp["parallel"]["ranks"]) == (2, 2)
    assert main(["estimate", "-w", "mlp", "-i", "trn2.48xlarge", "--dp", "2", "--cores", "4"]) == 2
    assert "does not equal the 4 ranks --cores gives" in capsys.readouterr().err


def test_vs_to_another_mode_leaves_out_the_options_it_does_not_take(capsys):
    """`--vs mode=prefill` beside a decode that gives `out` was refused ("option 'out' does not
    apply to mode=prefill"), and `out=` could not unset it: cross-mode comparison only worked
    for runs on default options."""
    decode = ["estimate", "-w", "llama3-8b:mode=decode,batch=4,in=512,out=256", "-i",
              "trn1.32xlarge", "--tp", "8"]
    assert main(decode + ["--vs", "mode=prefill"]) == 0
    out = capsys.readouterr()
    assert "B: llama3-8b:mode=prefill,batch=4,in=512 on" in out.out
    assert out.err == ("neuron-sim: warning: with --vs mode=prefill: out=256 left out: "
                       "mode=prefill takes no out\n")
    train = ["estimate", "-w", "llama3-8b:mode=train,seq=2048,gbs=64", "-i", "trn1.32xlarge",
             "--tp", "8"]
    both = _json(capsys, train + ["--vs", "mode=decode"])
    assert both["b"]["mode"] == "decode" and both["b"]["workload"] == "llama3-8b:mode=decode"
    # KEY= leaves one out; an option A does not give is named
    r = _json(capsys, decode + ["--vs", "out="])
    assert r["b"]["output_tokens"] == 128 and r["a"]["output_tokens"] == 256
    assert main(decode + ["--vs", "otu="]) == 2
    assert "A's workload gives no 'otu' to leave out" in capsys.readouterr().err
    # `mode=` (B at the default mode, training) leaves them out as `mode=train` does; it was
    # refused ("option 'in' does not apply to mode=train")
    assert main(decode + ["--vs", "mode="]) == 0
    out = capsys.readouterr()
    assert "B: llama3-8b on" in out.out
    assert out.err == ("neuron-sim: warning: with --vs mode=: batch=4, in=512, out=256 left "
                       "out: mode=train takes no batch or in or out\n")
    # an mlp's options are its own: a mode change keeps them
    mlp = _json(capsys, ["estimate", "-w", "mlp:batch=64", "--vs", "mode=train"])
    assert mlp["b"]["workload"] == "mlp:batch=64,mode=train"


def test_a_degree_of_one_has_no_link(capsys):
    """tp_link read "chip" for TP1 (text: "TP chip") where pp_link and dp_link of a degree of
    one are null: no TP group talks over anything."""
    argv = ["estimate", "-w", "bert-base:mode=infer,batch=1,seq=128", "-i", "trn1.32xlarge"]
    p = _json(capsys, argv)["parallel"]
    assert (p["tp"], p["tp_link"], p["pp_link"]) == (1, None, None) and p["dp_link"]
    assert main(argv) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "parallel" in x)
    assert "TP chip" not in line and f"({p['ranks']} ranks; DP {p['dp_link']})" in line
    one = ["estimate", "-w", "bert-base:mode=infer,batch=1,seq=128", "-i", "trn1.2xlarge",
           "--cores", "1"]
    assert main(one) == 0
    assert "TP1 PP1 DP1 (1 rank)" in capsys.readouterr().out


def test_vs_between_modes_shows_each_sides_own_figures(capsys):
    """A prompt beside a decode: the prompt's tokens/s is not the decode's rate, and the
    breakdown's seconds are of the prompt against one output token: no ratio across them."""
    prefill = ["estimate", "-w", "llama2-7b:mode=prefill,batch=1,in=512", "-i", "trn1.32xlarge",
               "--tp", "32", "--vs", "mode=decode,out=32"]
    assert main(prefill) == 0
    rows = {line[2:22].strip(): line[22:].split() for line in capsys.readouterr().out.splitlines()
            if line.startswith("  ") and len(line) > 22}
    assert rows["tokens/s"][1:] == ["\u2013", "\u2013"]                # A's only
    assert rows["tokens/s (decode)"][0] == "\u2013" and rows["tokens/s (decode)"][-1] == "\u2013"
    assert rows["time/output token"][0] == "\u2013"
    assert rows["TTFT"][-1].endswith("x")                               # both have one
    assert rows["compute"][-1] == "\u2013" and rows["MFU"][-1].endswith("x")
    # sequences trained (or prompts run) against requests served: not one quantity
    assert rows["sequences/s"][-1] == "\u2013"
    r = _json(capsys, prefill)
    assert "tokens_per_s" not in r["ratio"] and "breakdown" not in r["ratio"]
    assert "sequences_per_s" not in r["ratio"]
    assert r["ratio"]["ttft_s"] == pytest.approx(1.0)
    assert main(["estimate", "-w", "mlp", "--vs", "mode=infer"]) == 0     # text as the JSON
    rows = {line[2:22].strip(): line[22:].split() for line in capsys.readouterr().out.splitlines()
            if line.startswith("  ") and len(line) > 22}
    assert rows["step time"][-1] == "\u2013"
    same = _json(capsys, LLAMA_DECODE + ["--vs", "out=64"])          # one kind of step
    assert {"tokens_per_s", "breakdown", "step_time_s", "sequences_per_s"} <= set(same["ratio"])


@pytest.mark.parametrize("argv, message", [
    (["-w", "llama9-1b"], "unknown workload 'llama9-1b'"),
    # near misses are named: a dash too many, a swapped pair, a cut name, a placement key
    (["-w", "llama-3-8b"], "unknown workload 'llama-3-8b'; did you mean 'llama3-8b'?"),
    (["-w", "llama3-8b:mdoe=train"], "unknown option 'mdoe' for workload 'llama3-8b'; "
                                     "did you mean 'mode'?"),
    (["-w", "llama3-8b", "-i", "trn2.48xl"], "did you mean 'trn2.48xlarge'?"),
    (["-w", "llama3-8b", "--tp", "8", "--vs", "tpp=4"], "unknown key 'tpp'; did you mean 'tp'?"),
    (["-w", "llama3-8b:foo=1"], "unknown option 'foo'"),
    (["-w", "llama3-8b", "--tp", "8", "--pp", "2", "--dp", "3"], "does not equal the 32 ranks"),
    (["-w", "llama3-8b", "--tp", "3", "--cores", "30"], "heads are not divisible by tp=3"),
    (["-w", "gpt3-23b:seq=4096"], "longer than gpt3-23b allows (2048)"),
    (["-w", "llama3-70b"], "does not fit"),
    (["-w", "llama3-8b", "--tp", "8", "--vs", "tp=x"], "--vs tp='x'"),
    (["-w", "llama3-8b", "--tp", "8", "--vs", "bogus"], "not key=value"),
    # a second -w or --vs replaced the first without a word
    (["-w", "llama3-8b", "-w", "bert-large"], "-w given twice; give it once"),
    (["-w", "mlp", "--vs", "dtype=fp8", "--vs", "dtype=fp32"], "--vs given twice"),
    # and so did a second --tp or -i: every option once
    (["-w", "llama3-8b", "--tp", "8", "--tp", "16"], "--tp given twice; give it once"),
    (["-w", "mlp", "-i", "trn1.32xlarge", "--instance", "trn2.48xlarge"],
     "--instance given twice"),
    # a prefill is the prompt and its first token: a count of output tokens is a decode's
    (["-w", "llama3-8b:mode=prefill,out=5", "--tp", "32"], "'out' does not apply to mode=prefill"),
    # ASCII digits only: int() and float() also took these
    (["-w", "llama3-8b:mode=decode,in=1_000,out=5"], "bad value in='1_000'"),
    (["-w", "llama3-8b:mode=decode,in=100,out=+5"], "bad value out='+5'"),
    (["-w", "allreduce:bytes=1e3,ranks=2"], "bad value bytes='1e3'"),
    (["-w", "allreduce:bytes=1_024,ranks=2"], "bad value bytes='1_024'"),
    # a size that is no whole number of bytes says so; a buffer of no whole element is none
    (["-w", "allreduce:ranks=32,bytes=56.1M"], "a whole number of bytes from 1 to"),
    (["-w", "allreduce:ranks=2,bytes=3,dtype=fp32"],
     "bytes=3 is not a whole number of fp32 elements (4 bytes each)"),
    (["-w", "allgather:ranks=2,bytes=6,dtype=fp32"], "bytes=6 is not a whole number of fp32"),
    # autocast=matmul is for FP32 models only
    (["-w", "llama3-8b:seq=4096,autocast=matmul", "--tp", "8"],
     "option 'autocast' applies to dtype=fp32 only (dtype=bf16)"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, argv, message):
    own = {"-i", "--instance"} & set(argv)          # a case's own instance, given once
    assert main(["estimate"] + ([] if own else ["-i", "trn1.32xlarge"]) + argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_console_script_in_a_real_process():
    proc = subprocess.run([sys.executable, "-m", "device_model.cli", "estimate", "-w",
                           "bert-large:seq=99999", "-i", "trn2.48xlarge"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("neuron-sim: error: seq=99999 is longer")
    warn = subprocess.run([sys.executable, "-m", "device_model.cli", "estimate", "-w",
                           "llama2-7b:mode=prefill,in=8192", "-i", "trn1.32xlarge"],
                          capture_output=True, text=True, timeout=60)
    assert warn.returncode == 0 and "TTFT" in warn.stdout
    assert warn.stderr.startswith("neuron-sim: warning: a sequence of 8192 tokens is longer")
    ok = subprocess.run([sys.executable, "-m", "device_model.cli", "estimate", "-w",
                         "llama3-70b:seq=8192,gbs=1024,ckpt=selective", "-i", "trn1.32xlarge",
                         "--nodes", "32", "--tp", "32", "--pp", "8", "--dp", "4", "--json"],
                        capture_output=True, timeout=60)
    assert ok.returncode == 0
    r = orjson.loads(ok.stdout)
    assert r["parallel"]["ranks"] == 1024 and r["nodes"] == 32


def test_nodes_place_a_microbenchmarks_ranks(capsys):
    """64 ranks over 2 x trn1.32xlarge: 32 per instance, 32 devices, as nccom-test runs C3."""
    assert main(["estimate", "-w", "allreduce:bytes=1K,ranks=64", "-i", "trn1.32xlarge",
                 "--nodes", "2", "--json"]) == 0
    r = orjson.loads(capsys.readouterr().out)
    assert (r["ranks"], r["devices"], r["nodes"]) == (64, 32, 2)
    assert main(["estimate", "-w", "allreduce:bytes=1K,ranks=16", "-i", "trn1.32xlarge",
                 "--nodes", "4", "--json"]) == 0
    r = orjson.loads(capsys.readouterr().out)
    assert (r["devices"], r["nodes"]) == (8, 4)
    assert main(["estimate", "-w", "allreduce:bytes=1K,ranks=2", "-i", "trn1.32xlarge",
                 "--nodes", "4"]) == 2


@pytest.mark.parametrize("argv", [
    ["estimate", "-w", "llama3.1-70b:seq=8192,mbs=1,gbs=1024,ckpt=selective", "-i",
     "trn1.32xlarge", "--nodes", "32", "--tp", "32", "--pp", "8", "--dp", "4"],
    ["estimate", "-w", "llama3-8b:seq=4096,gbs=64", "-i", "trn2.48xlarge", "--tp", "8",
     "--vs", "tp=16"],
])
def test_model_reports_fit_an_80_column_terminal(capsys, argv):
    """Long rows (the layout of a multi-node job, the memory detail, a long spec) wrap under
    their label instead of running past 80 columns, and nothing of them is lost."""
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 80
    joined = " ".join(line.strip() for line in out.splitlines())
    assert "micro-batches" in joined
    if "--vs" not in argv:
        assert "reserved 1.0 GiB" in joined
        assert "TP32 PP8 DP4 (1024 ranks; TP neuronlink, PP efa, DP efa); SP, ZeRO-1, selective " \
               "checkpointing, 256 micro-batches" in joined
        assert "on 32 x trn1.32xlarge (LNC=1)" in joined


_LONG_SPEC = ("llama3.1-405b:mode=decode,batch=4,in=10000,out=1785,bucket=2048/4096/10240/12288,"
              "tkg_bucket=12800,sp=1,weights=fp8")


@pytest.mark.parametrize("argv", [
    ["-w", _LONG_SPEC, "-i", "trn2.48xlarge", "--tp", "64"],
    ["-w", _LONG_SPEC.removesuffix(",weights=fp8"), "-i", "trn2.48xlarge", "--tp", "64", "--vs",
     "weights=fp8"],
    ["-w", "llama3-8b:mode=decode,in=1000,out=100,bucket="
     + "/".join(str(128 * i) for i in range(1, 60)), "-i", "trn1.32xlarge", "--tp", "32"],
])
def test_a_long_workload_spec_wraps_in_the_title_and_loses_nothing(capsys, argv):
    """A spec with bucket lists is wider than a terminal: the title cuts it after its commas
    (a bucket list after its slashes), and the pieces join back into the spec."""
    assert main(["estimate", *argv]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in lines) <= 80
    spec = argv[1]
    title = lines[:next(i for i, line in enumerate(lines) if line.startswith("  on "))]
    joined = "".join(line.strip() for line in title).removeprefix("A: ")
    assert joined.startswith(spec)


def test_vs_ends_with_the_errors_of_both_sides_figures(capsys):
    """Under --vs the text still ends with how far to trust it; where B's figures are of
    another kind (here a long prompt against a short one), each side's are stated."""
    base = ["estimate", "-w", "llama3-8b:mode=decode,in=128", "-i", "trn1.32xlarge", "--tp", "32"]
    assert main(base + ["--vs", "in=4096"]) == 0
    out = capsys.readouterr().out
    assert "median error against published AWS measurements" in out
    a, b = out.index("A, by figure"), out.index("B, by figure")
    assert "TTFT, prompt up to 512" in out[a:b] and "TTFT, prompt over 512" in out[b:]
    assert main(base + ["--vs", "weights=int8"]) == 0      # the same kinds: stated once
    out = capsys.readouterr().out
    assert out.count("by figure") == 1 and "A, by figure" not in out
    assert main(["estimate", "-w", "allreduce:bytes=1M,ranks=64", "-i", "trn1.32xlarge",
                 "--nodes", "2", "--vs", "bytes=2M"]) == 0
    out = capsys.readouterr().out
    assert "all-reduce time" in out and max(len(line) for line in out.splitlines()) <= 80


def test_a_microbenchmarks_counts_read_as_english(capsys):
    assert main(["estimate", "-w", "reducescatter:bytes=1M", "-i", "trn1.2xlarge"]) == 0
    assert "(2 ranks, 1 device, 1 node)" in capsys.readouterr().out
    assert main(["estimate", "-w", "allreduce:bytes=1M,ranks=64", "-i", "trn1.32xlarge",
                 "--nodes", "2"]) == 0
    assert "(64 ranks, 32 devices, 2 nodes)" in capsys.readouterr().out


@pytest.mark.parametrize("spec, tp", [("bert-large:mode=infer,batch=4,seq=128", 1),
                                      ("roberta-base:mode=infer,batch=1,seq=128", 1),
                                      ("llama3-8b:mode=decode,batch=1,in=128,out=128", 32)])
def test_default_inference_placement_serves_encoders_one_per_core(spec, tp, capsys):
    """Without --tp an encoder runs one model per core (all cores replicas), as AWS serves
    encoders; splitting BERT over 16 cores bought no latency and cost 16x the throughput. A
    decoder keeps the largest tp that divides its heads within the node."""
    assert main(["estimate", "-w", spec, "-i", "trn1.32xlarge", "--json"]) == 0
    parallel = orjson.loads(capsys.readouterr().out)["parallel"]
    assert (parallel["tp"], parallel["dp"]) == (tp, 32 // tp)


def test_an_error_of_the_vs_side_says_it_is_that_side(capsys):
    """The first configuration runs; the second is refused: the line names `--vs`, or it reads
    as if the command as typed were wrong."""
    argv = ["estimate", "-w", "llama3-8b:seq=4096,gbs=64", "-i", "trn2.48xlarge", "--tp", "8",
            "--vs", "instance=trn1.2xlarge"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("neuron-sim: error: with --vs instance=trn1.2xlarge: --tp 8 does not "
                          "divide the 2 ranks")
    assert err.count("\n") == 1


def test_a_collective_comparison_names_the_nodes_and_algorithms_of_each_side(capsys):
    """A's two-instance flat ring and B's one-instance KangaRing read alike: the header had no
    node count and the comparison no algorithm row."""
    assert main(["estimate", "-w", "allreduce:bytes=1G,ranks=64", "-i", "trn1.32xlarge",
                 "--nodes", "2", "--vs", "ranks=32,nodes=1"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "A: allreduce:bytes=1G,ranks=64 on 2 x trn1.32xlarge (LNC=1)"
    assert out[1] == "B: allreduce:bytes=1G,ranks=32 on 1 x trn1.32xlarge (LNC=1)"
    assert out[4].split() == ["algorithm", "flat-ring", "kangaring"]


@pytest.mark.parametrize("vs", [[], ["--vs", "bytes=1G"]])
def test_a_collective_shows_no_flops_figures_and_its_time_in_its_unit(vs, capsys):
    """An all-reduce does no FLOPs: its MFU and HFU printed "0.0 %", and its time read
    "0.0764 ms" where a model's read "76.4 us". The JSON keeps every key."""
    argv = ["estimate", "-w", "allreduce:bytes=1M,ranks=2", "-i", "trn1.32xlarge", *vs]
    assert main(argv) == 0
    rows = {line.split()[0] for line in capsys.readouterr().out.splitlines() if line.strip()}
    assert "MBU" in rows and not {"MFU", "HFU"} & rows
    assert main(argv + ["--json"]) == 0
    doc = orjson.loads(capsys.readouterr().out)
    assert "mfu" in (doc["a"] if vs else doc)
    assert main(["estimate", "-w", "allreduce:bytes=1M,ranks=2", "-i", "trn1.32xlarge"]) == 0
    assert re.search(r"^  time {20}\d\d\.\d us$", capsys.readouterr().out, re.M)
    assert main(["estimate", "-w", "matmul:m=4096,k=8192,n=8192", "-i", "trn1.32xlarge"]) == 0
    out = capsys.readouterr().out      # numbers end in one column, their units after it
    assert re.search(r"^  MFU {21}\d\d\.\d%$", out, re.M)
    assert re.search(r"^  time {20}\d\.\d\d ms$", out, re.M)


@pytest.mark.parametrize("text", ["-1", "0"])
def test_a_count_below_one_says_what_is_wanted(text, capsys):
    """-1 and 0 alike: "must be 0 or more" had invited a 0 that was refused as well."""
    with pytest.raises(SystemExit) as stop:
        main(["estimate", "-w", "mlp", "--cores", text])
    assert stop.value.code == 2
    assert f"'{text}' must be a positive integer (1 or more)" in capsys.readouterr().err


def test_a_padded_prompt_is_judged_by_the_length_it_runs_at(capsys):
    """500 tokens padded to a 4096 bucket run the 4096-token pass; its error bar was the short
    prompts' (4% median) where the same pass given 4096 tokens got the long ones' (32%)."""
    base = ["estimate", "-i", "trn1.32xlarge", "--tp", "32"]
    lines = []
    for prompt in ("in=500,bucket=4096", "in=4096"):
        spec = f"llama3.1-70b:mode=prefill,{prompt}"
        assert main(base + ["-w", spec]) == 0
        lines.append([line for line in capsys.readouterr().out.splitlines() if "TTFT," in line])
    assert lines[0] == lines[1] and "prompt over 512" in lines[0][0]


def test_an_encoders_prompt_pass_is_not_judged_against_decoder_rows(capsys):
    argv = ["estimate", "-w", "bert-large:mode=prefill,in=128", "-i", "trn1.2xlarge",
            "--cores", "1"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "encoder prompt pass     none published: not checked" in captured.out
    assert "TTFT, prompt" not in captured.out
    assert "mode=infer is its forward pass" in captured.err and captured.err.count("\n") == 1


@pytest.mark.parametrize("spec, instance, says", [
    ("llama3.1-8b:seq=4096,dp_overlap=off", "trn1.32xlarge", "dp_overlap=off has no effect"),
    ("llama3.1-8b:seq=4096,dtype=fp8", "trn1.32xlarge", "runs FP8 at the BF16 rate"),
])
def test_an_option_that_cannot_act_here_says_so(spec, instance, says, capsys):
    assert main(["estimate", "-w", spec, "-i", instance, "--tp", "32"]) == 0
    assert says in capsys.readouterr().err


def test_the_mlp_block_says_what_fp8_does_on_trainium1_as_a_model_does(capsys):
    assert main(["estimate", "-w", "mlp:dtype=fp8", "-i", "trn1.32xlarge"]) == 0
    assert "runs FP8 at the BF16 rate" in capsys.readouterr().err
    assert main(["estimate", "-w", "mlp:dtype=fp8", "-i", "trn2.48xlarge"]) == 0
    assert capsys.readouterr().err == ""


def test_fp8_where_it_runs_faster_has_no_rate_warning(capsys):
    assert main(["estimate", "-w", "llama3.1-8b:seq=4096,dtype=fp8", "-i", "trn2.48xlarge",
                 "--tp", "32"]) == 0
    assert "BF16 rate" not in capsys.readouterr().err


def test_the_instance_option_says_its_default_and_the_types(capsys):
    with pytest.raises(SystemExit):
        main(["estimate", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "instance type (default: trn2.48xlarge): trn1.2xlarge, trn1.32xlarge" in text
    assert "logical NeuronCore config (default: the instance's" in text


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
@pytest.mark.parametrize("args", [[], ["--json"]])
def test_a_full_disk_on_stdout_is_one_line_and_exit_1(args):
    """It was a traceback (OSError: [Errno 28]) and exit 1."""
    argv = [sys.executable, "-m", "device_model.cli", "estimate", "-w", "matmul:m=64,k=64,n=64",
            *args]
    with open("/dev/full", "wb") as full:
        out = subprocess.run(argv, stdout=full, stderr=subprocess.PIPE, text=True, timeout=60)
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert out.stderr == "neuron-sim: error: cannot write the output: No space left on device\n"


def test_a_training_step_says_how_many_sequences_it_trains(capsys):
    """--vs tp=8 also made the default global batch mbs x dp four times larger: the text showed
    a step 1.55x slower without saying it trained 4x the sequences (only the JSON had gbs)."""
    assert main(["estimate", "-w", "llama3.1-8b:seq=4096", "-i", "trn1.32xlarge", "--tp", "32",
                 "--vs", "tp=8"]) == 0
    row = [line.split() for line in capsys.readouterr().out.splitlines()
           if line.startswith("  sequences/step")]
    assert row == [["sequences/step", "1", "4", "4.00x"]]
    assert main(["estimate", "-w", "llama3.1-8b:seq=4096,gbs=1024", "-i", "trn1.32xlarge",
                 "--tp", "8"]) == 0
    assert "  sequences/step       1,024\n" in capsys.readouterr().out


def test_a_microbenchmark_in_another_type_than_the_published_rows_is_not_judged_by_them(capsys):
    """The all-reduce rows are nccom-test runs at -d fp32 and M1 a BF16 kernel: a BF16
    all-reduce (2x the FP32 one's time per byte here) was shown beside their error bars, and
    its dtype nowhere, in the text or the JSON."""
    argv = ["estimate", "-w", "allreduce:bytes=64M,ranks=32", "-i", "trn1.32xlarge"]
    assert main(argv + ["--vs", "dtype=bf16"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[3].split() == ["dtype", "fp32", "bf16"]
    assert "all-reduce time, bf16   none published: not checked" in out
    assert re.search(r"^    all-reduce time +\S+ median", out, re.M)
    assert main(argv + ["--json"]) == 0
    assert orjson.loads(capsys.readouterr().out)["dtype"] == "fp32"
    assert main(["estimate", "-w", "matmul:m=4096,k=4096,n=4096,dtype=fp8"]) == 0
    assert "matmul time, fp8        none published: not checked" in capsys.readouterr().out


def test_what_vs_left_out_is_in_bs_json_warnings(capsys):
    argv = ["estimate", "-w", "llama3.1-8b:seq=4096", "-i", "trn1.32xlarge", "--tp", "32",
            "--vs", "mode=decode", "--json"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert orjson.loads(captured.out)["b"]["warnings"] == [
        "with --vs mode=decode: seq=4096 left out: mode=decode takes no seq"]
    assert "seq=4096 left out" in captured.err


def test_an_override_file_that_sets_nothing_reads_as_the_shipped_model(tmp_path, capsys):
    empty = tmp_path / "empty.toml"
    empty.write_text("# nothing set\n")
    argv = ["estimate", "-w", "matmul:m=64,k=64,n=64", "--overrides"]
    assert main(argv + [str(empty)]) == 0
    assert "errors under yours" not in capsys.readouterr().out
    one = tmp_path / "one.toml"
    one.write_text("[costs]\ncc_launch_s = 1e-5\n")
    assert main(argv + [str(one)]) == 0
    assert "errors under yours" in capsys.readouterr().out


@pytest.mark.parametrize("instance, lnc, ceiling", [("trn2.48xlarge", "1", 0.5),
                                                    ("trn2.48xlarge", "2", 1.0),
                                                    ("trn1.32xlarge", "1", 272 / 410)])
def test_mbu_says_the_most_a_core_can_reach(instance, lnc, ceiling, capsys):
    """MBU is of one HBM stack at every LNC, as neuron-profile takes it: a trn2 core at LNC=1
    shares its stack and a trn1 core's DMA moves 272 of its 410 GB/s, so a saturated GEMV read
    as half-idle. The ceiling is said beside it, and a weight stream comes near it."""
    argv = ["estimate", "-w", "matmul:m=1,k=16384,n=16384", "-i", instance, "--lnc", lnc]
    assert main(argv + ["--json"]) == 0
    r = orjson.loads(capsys.readouterr().out)
    assert r["mbu_ceiling"] == pytest.approx(ceiling)
    assert 0.85 * ceiling < r["mbu"] <= ceiling
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert ("MBU ceiling" in out) == (ceiling < 1)


def test_vs_with_an_empty_placement_key_takes_the_command_lines_default(capsys):
    """`--vs tp=` said "A's workload gives no 'tp' to leave out" although A passed --tp 32."""
    argv = ["estimate", "-w", "llama3.1-8b:mode=decode,in=128,out=8", "-i", "trn1.32xlarge",
            "--tp", "8", "--vs", "tp=", "--json"]
    assert main(argv) == 0
    doc = orjson.loads(capsys.readouterr().out)
    assert doc["a"]["parallel"]["tp"] == 8 and doc["b"]["parallel"]["tp"] == 32
    assert main(argv[:-3] + ["--vs", "instance=", "--json"]) == 0
    doc = orjson.loads(capsys.readouterr().out)
    assert (doc["a"]["instance"], doc["b"]["instance"]) == ("trn1.32xlarge", "trn2.48xlarge")


def test_an_ultraserver_says_its_servers_and_chips_in_the_title(capsys):
    """"on 1 x trn2u-ultraserver" read as one server: an UltraServer is four, 64 chips, and
    two of them eight and 128; a plain instance's title is unchanged."""
    argv = ["estimate", "-w", "allreduce:bytes=1M,ranks=512", "-i", "trn3-ultraserver"]
    assert main(argv + ["--nodes", "2"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == (
        "allreduce:bytes=1M,ranks=512 on 2 x trn3-ultraserver (8 servers, 128 chips, LNC=2)")
    assert main(["estimate", "-w", "llama3.1-8b:mode=decode", "-i", "trn2u-ultraserver",
                 "--tp", "8", "--vs", "instance=trn2.48xlarge"]) == 0
    out = capsys.readouterr().out
    assert "A: llama3.1-8b:mode=decode on 1 x trn2u-ultraserver (4 servers, 64 chips, LNC=2)" in out
    assert "B: llama3.1-8b:mode=decode on 1 x trn2.48xlarge (LNC=2)" in out


def test_autocast_none_the_default_is_accepted_with_any_dtype(capsys):
    """`autocast=none` restates the documented default; it was refused beside BF16."""
    base = ["estimate", "-i", "trn1.32xlarge", "--tp", "8", "-w"]
    plain = _json(capsys, base + ["llama3-8b:seq=4096"])
    stated = _json(capsys, base + ["llama3-8b:seq=4096,autocast=none"])
    assert stated["step_time_s"] == plain["step_time_s"]
    assert main(["estimate", "-i", "trn1.32xlarge", "-w",
                 "allreduce:ranks=2,bytes=6,dtype=bf16"]) == 0


def test_the_mlp_blocks_optimizer_is_its_own_execution_and_moves_no_other_part(capsys):
    """AdamW ran in the step's program, its loads queued ahead of the last gradient's stores:
    with a data-parallel all-reduce in between, `--vs cores=64` moved compute by 0.78x and the
    optimizer by 1.13x where only the collective is new. As a model's optimizer program it is
    an execution of its own."""
    both = _json(capsys, ["estimate", "-w", "mlp", "-i", "trn2.48xlarge", "--vs", "cores=64"])
    a, b = both["a"]["breakdown"], both["b"]["breakdown"]
    for part in ("compute_s", "dma_s", "optimizer_s", "overhead_s"):
        assert a[part] == b[part] > 0, part
    assert a["collective_exposed_s"] == 0 < b["collective_exposed_s"]
    assert a["overhead_s"] == pytest.approx(2 * 50e-6)
    infer = _json(capsys, ["estimate", "-w", "mlp:mode=infer", "-i", "trn2.48xlarge"])
    assert infer["breakdown"]["optimizer_s"] == 0
    assert infer["breakdown"]["overhead_s"] == pytest.approx(50e-6)


def test_a_named_value_is_taken_in_any_case_as_pow2_is(capsys):
    """`sp=ON` was accepted and `bucket=POW2` refused: every named value is case-blind."""
    base = ["estimate", "-i", "trn2.48xlarge", "--tp", "8", "-w"]
    lower = _json(capsys, base + ["llama3-8b:mode=decode,bucket=pow2,sp=on"])
    upper = _json(capsys, base + ["llama3-8b:mode=decode,bucket=POW2,tkg_bucket=Pow2,sp=ON"])
    assert upper["ttft_s"] == lower["ttft_s"] and upper["tpot_s"] == lower["tpot_s"]


def test_the_mlp_blocks_inference_holds_one_blocks_activations(capsys):
    """mode=infer counted every block's activations, as training keeps them for its backward
    pass; a forward pass holds the block it runs."""
    base = ["estimate", "-i", "trn2.48xlarge", "-w"]
    acts = {(mode, n): _json(capsys, base + [f"mlp:mode={mode},layers={n}"])["memory"][
        "activations_bytes"] for mode in ("train", "infer") for n in (1, 8)}
    assert acts["train", 8] == 8 * acts["train", 1]
    assert acts["infer", 8] == acts["infer", 1] > 0


def test_matmul_on_several_cores_says_how_many_alone_and_beside_one(capsys):
    """`--vs cores=4` printed two identical titles and no row naming the cores: B's four-fold
    throughput read as from nothing."""
    argv = ["estimate", "-w", "matmul:m=4096,k=4096,n=4096", "-i", "trn1.32xlarge"]
    assert main(argv + ["--vs", "cores=4"]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert [r.split() for r in rows if r.split()[:1] == ["cores"]] == [
        ["cores", "1", "4", "4.00x"]]
    assert main(argv + ["--cores", "4"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "  cores                      4 (one matmul each)" in out
    assert main(argv + ["--vs", "dtype=fp32"]) == 0           # one core on both sides: no row
    assert not [r for r in capsys.readouterr().out.splitlines() if r.startswith("  cores")]
    assert main(argv) == 0
    assert "cores" not in capsys.readouterr().out
