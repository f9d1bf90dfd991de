"""`neuron-sim estimate` on hostile specs: every one is refused (or answered) with one line and
exit 2, never a traceback, and specs that would exhaust the machine are refused up front."""
from __future__ import annotations

import subprocess
import sys
import time

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from device_model.cli import main
ENV = "NEURONSCOPE_MAX_INSTRUCTIONS"
from device_model.workloads import REGISTRY

MICRO = ["matmul:m=512,k=512,n=512", "allreduce:bytes=1M", "allgather:bytes=1M",
         "reducescatter:bytes=1M", "alltoall:bytes=1M"]


def _run(argv, capsys):
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own usage errors
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("spec", MICRO)
def test_vs_on_a_microbenchmark_compares_side_by_side(spec, capsys):
    change = "m=1024" if spec.startswith("matmul") else "ranks=4"
    code, out, err = _run(["estimate", "-w", spec, "--vs", change], capsys)
    assert code == 0, err
    assert out.startswith("A: ") and "B/A" in out and "time" in out
    assert "gpsimd active" in out and "\u2013" in out     # two zeros: no ratio


def test_an_empty_vs_is_a_usage_error_not_no_comparison(capsys):
    code, out, err = _run(["estimate", "-w", "matmul:m=512,k=512,n=512", "--vs", ""], capsys)
    assert code == 2 and out == "" and "--vs '': expected KEY=VALUE" in err


def test_a_ratio_of_two_zeros_is_a_dash(capsys):
    code, out, _ = _run(["estimate", "-w", "mlp:hidden=512,layers=1,batch=64", "--vs", "batch=128"], capsys)
    assert code == 0
    bubble = next(line for line in out.splitlines() if line.strip().startswith("bubble"))
    assert bubble.rstrip().endswith("\u2013")


@pytest.mark.parametrize("spec", [
    "allreduce:bytes=inf", "allreduce:bytes=1e400", "allreduce:bytes=nan", "allreduce:bytes=-1M",
    "allreduce:bytes=2P", "allreduce:bytes=1M,ranks=99999999999", "matmul:m=1e400,k=1,n=1",
    "matmul:m=\u0663,k=1,n=1", "allreduce:bytes=\u0663M",
])
def test_out_of_range_spec_values_are_one_line_errors(spec, capsys):
    code, out, err = _run(["estimate", "-w", spec], capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "bad value" in err


@pytest.mark.parametrize("argv", [["--nodes", "99999999"], ["--cores", "99999999999"],
                                  ["--vs", "nodes=99999"], ["--vs", "cores=\u0663"]])
def test_absurd_placements_are_refused(argv, capsys):
    code, _, err = _run(["estimate", "-w", "bert-base", *argv], capsys)
    assert code == 2 and "Traceback" not in err


@pytest.mark.parametrize("spec", ["mlp:ffn=99999999", "matmul:m=20000000,k=20000000,n=20000000",
                                  "matmul:m=1,k=1,n=1,batch=1099511627776",
                                  "matmul:m=65536,k=65536,n=65536"])
def test_specs_too_large_to_simulate_are_refused_up_front_naming_the_limit(spec):
    """These took tens of GB and minutes (or would need terabytes) before they failed."""
    from device_model.limits import MAX_INSTRUCTIONS
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "device_model.cli", "estimate", "-w", spec],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "too large to simulate" in out.stderr and str(MAX_INSTRUCTIONS) in out.stderr and ENV in out.stderr
    assert time.monotonic() - t0 < 30


def test_the_limit_is_overridable(monkeypatch, capsys):
    monkeypatch.setenv(ENV, "100")
    code, _, err = _run(["estimate", "-w", "matmul:m=4096,k=4096,n=4096"], capsys)
    assert code == 2 and "limit 100" in err
    monkeypatch.setenv(ENV, "lots")
    code, _, err = _run(["estimate", "-w", "matmul:m=512,k=512,n=512"], capsys)
    assert code == 2 and ENV in err
    monkeypatch.delenv(ENV)
    assert _run(["estimate", "-w", "matmul:m=4096,k=4096,n=4096"], capsys)[0] == 0


def test_throttle_start_ratio_of_one_means_no_ramp(tmp_path, capsys):
    toml = tmp_path / "o.toml"
    toml.write_text("[costs]\nthrottle_start_ratio = 1\n")
    code, out, err = _run(["estimate", "-w", "matmul:m=512,k=512,n=512", "--overrides", str(toml),
                           "--json"], capsys)
    assert code == 0, err
    assert '"time_s"' in out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(sorted(REGISTRY)),
       key=st.sampled_from(["m", "k", "n", "batch", "bytes", "ranks", "hidden", "ffn", "layers",
                            "mbs", "gbs", "seq", "in", "out", "dtype", "mode", "tp"]),
       value=st.one_of(st.sampled_from(["inf", "-inf", "nan", "1e400", "0", "-1", "1e-9", "", "2P",
                                        "99999999999999999999", "\u0663", "true", "1.5", "4k"]),
                       st.integers(min_value=-2, max_value=1 << 45).map(str),
                       st.text(max_size=6)))
# a billion blocks were built one by one until the machine ran out of memory
@example(name="mlp", key="layers", value="1000000000")
def test_any_option_value_is_an_answer_or_one_line(name, key, value, capsys):
    spec = f"{name}:{key}={value}"
    code, out, err = _run(["estimate", "-w", spec], capsys)
    assert code in (0, 2), (spec, err)
    if code == 2:
        assert err.startswith("neuron-sim") and err.count("\n") == 1, (spec, err)


def test_an_mlp_of_more_blocks_than_a_program_holds_is_refused_before_it_is_built(capsys):
    from device_model.workloads.mlp import MAX_BLOCKS
    code, out, err = _run(["estimate", "-w", f"mlp:layers={MAX_BLOCKS + 1}"], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert f"at most {MAX_BLOCKS}" in err and "layers" in err
    assert _run(["estimate", "-w", "mlp:layers=64,hidden=256,batch=64"], capsys)[0] == 0
