"""`neuron-profile` end to end through its console entry: capture, view in every format, diff,
advise, and bad input (one line on stderr, exit 2, never a traceback)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from profiler.cli import main

ROOT = Path(__file__).resolve().parent.parent


def run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "profiler.cli", *argv], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)


@pytest.fixture(scope="module")
def profiles(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cli")
    a, b = tmp / "trn1.nsprof", tmp / "trn2.nsprof"
    for path, inst in ((a, "trn1.32xlarge"), (b, "trn2.48xlarge")):
        assert main(["capture", "--workload", "mlp:tokens=512,hidden=1024,layers=2", "--instance", inst,
                     "--dp", "8", "--num-exec", "2", "--profile-nth-exec", "2", "-s", str(path)]) == 0
    return a, b


def test_view_formats(profiles, tmp_path, capsys):
    a, _ = profiles
    assert main(["view", "-s", str(a)]) == 0
    text = capsys.readouterr().out
    assert text.startswith("instance trn1.32xlarge\n") and "top operators" in text
    assert main(["view", "-s", str(a), "--output-format", "summary-json"]) == 0
    assert orjson.loads(capsys.readouterr().out)["summary"][0]["lnc"] == 1
    assert main(["view", "-s", str(a), "--output-format", "json", "--output-file", str(tmp_path / "a.json")]) == 0
    doc = orjson.loads((tmp_path / "a.json").read_bytes())
    first = doc["instruction"][0]
    assert {"timestamp", "duration", "label", "opcode", "hlo_name"} <= set(first)
    for fmt, name in (("chrome", "t.json.gz"), ("perfetto", "t.pftrace")):
        assert main(["view", "-s", str(a), "--output-format", fmt, "--output-file", str(tmp_path / name)]) == 0
        assert (tmp_path / name).stat().st_size > 1000


def test_json_labels_are_the_trace_rows_of_the_same_instructions_by_aws_track_names(profiles,
                                                                                   tmp_path):
    """`view --output-format json` labels each instruction with the row the Chrome and Perfetto
    traces put it on: a DMA transfer with its queue (`qSyncIO0`, ...), not a lane called DMA; an
    engine's row by the name AWS's JSON and Neuron Explorer give it (`TensorMatrix`, where the
    web timeline says `TensorMatrixE`). Operator records are timed in ns as instructions are."""
    from profiler.export.tracks import instruction_tids
    from profiler.model import fileformat
    a, _ = profiles
    assert main(["view", "-s", str(a), "--output-format", "json", "--output-file", str(tmp_path / "a.json")]) == 0
    labels = [r["label"] for r in orjson.loads((tmp_path / "a.json").read_bytes())["instruction"]]
    tids, threads = instruction_tids(fileformat.load(a))
    named = {t.tid: t.name for t in threads}
    assert labels == [named[t].removesuffix("E") if named[t].endswith("E") else named[t]
                      for t in tids.tolist()]
    assert {"qSyncIO0", "TensorMatrix", "Tensor", "Vector", "Scalar"} <= set(labels)
    assert "DMA" not in labels and "TensorMatrixE" not in labels
    doc = orjson.loads((tmp_path / "a.json").read_bytes())
    op, ins = doc["operator"][0], doc["instruction"][0]
    assert {"timestamp", "duration"} <= set(op) and not {"start", "end"} & set(op)
    for record in (op, ins):
        assert all(isinstance(record[k], int) for k in ("timestamp", "duration"))
    profile = fileformat.load(a)
    ops = profile.table("ops")
    assert op["timestamp"] == round(ops["start"][0] * 1e9)
    assert op["duration"] == round(ops["end"][0] * 1e9) - round(ops["start"][0] * 1e9)


def test_default_trace_file_names(profiles, tmp_path):
    a, _ = profiles
    copy = tmp_path / "x.nsprof"
    copy.write_bytes(a.read_bytes())
    assert main(["view", "-s", str(copy), "--output-format", "perfetto"]) == 0
    assert (tmp_path / "x.pftrace").exists()


def test_diff_trn1_vs_trn2(profiles, capsys):
    a, b = profiles
    assert main(["diff", str(a), str(b), "--json"]) == 0
    doc = orjson.loads(capsys.readouterr().out)
    total = next(r for r in doc["engines"] if r["name"] == "total")
    assert 0 < total["ratio"] < 1                      # trn2 is faster
    up = next(r for r in doc["operators"] if r["name"] == "layers.0.up")
    assert up["a"]["count"] == up["b"]["count"] == 1
    assert main(["diff", str(a), str(b)]) == 0
    assert "per step, per operator" in capsys.readouterr().out


def test_diff_bf16_vs_fp8(tmp_path, capsys):
    paths = []
    for dtype in ("bf16", "fp8"):
        p = tmp_path / f"{dtype}.nsprof"
        assert main(["capture", "-w", f"matmul:m=4096,k=4096,n=4096,dtype={dtype}", "-s", str(p)]) == 0
        paths.append(str(p))
    capsys.readouterr()
    assert main(["diff", *paths, "--json"]) == 0
    doc = orjson.loads(capsys.readouterr().out)
    assert next(r for r in doc["engines"] if r["name"] == "TensorE")["ratio"] < 0.8


def test_advise_ranks_findings(profiles, capsys):
    _, b = profiles
    assert main(["advise", "-s", str(b), "--json"]) == 0
    findings = orjson.loads(capsys.readouterr().out)["findings"]
    rules = [f["rule"] for f in findings]
    assert "exposed-collectives" in rules
    seconds = [f["seconds"] for f in findings]        # time at stake per step, most first
    assert seconds == sorted(seconds, reverse=True)
    assert all(f["evidence"] and f["fix"] for f in findings)


def test_advise_pipeline_bubbles_and_small_batches(tmp_path, capsys):
    p = tmp_path / "pp.nsprof"
    assert main(["capture", "-w", "mlp:tokens=100,hidden=1024,layers=4,microbatches=2", "--pp", "4",
                 "-s", str(p)]) == 0
    capsys.readouterr()
    assert main(["advise", "-s", str(p)]) == 0
    out = capsys.readouterr().out
    assert "Pipeline bubbles" in out and "Matmul rows (batch x tokens) not a multiple of 8" in out


def _idle_gaps_per_step(profile) -> list[float]:
    """Reference: each instruction-level step's idle stretches, one step at a time."""
    import numpy as np
    steps, ins = profile.table("steps"), profile.table("instructions")
    gaps = []
    for s, e, detailed in zip(steps["start"], steps["end"], steps["detailed"]):
        sel = (ins["end"] > s) & (ins["start"] < e) if detailed else np.zeros(0, bool)
        reach = s
        clipped = zip(np.clip(ins["start"][sel], s, e), np.clip(ins["end"][sel], s, e))
        for start, end in sorted(clipped):
            gaps.append(max(start - reach, 0.0))
            reach = max(reach, end)
        gaps.append(max(e - reach, 0.0) if detailed else 0.0)
    return gaps


def test_advise_measures_idle_gaps_inside_steps_only(tmp_path, capsys):
    """Three 2.5 us matmul steps, 50 us of launch overhead between them: the largest idle gap is
    inside a step, not the host time between steps (it used to say 50 us)."""
    from profiler.model.fileformat import load
    p = tmp_path / "mm.nsprof"
    assert main(["capture", "-w", "matmul:m=128,k=128,n=128", "--num-exec", "3", "-s", str(p)]) == 0
    capsys.readouterr()
    profile = load(p)
    steps = profile.table("steps")
    longest = float((steps["end"] - steps["start"]).max())
    assert float((steps["start"][1:] - steps["end"][:-1]).min()) > 10 * longest
    assert main(["advise", "-s", str(p), "--json"]) == 0
    findings = orjson.loads(capsys.readouterr().out)["findings"]
    idle = next(f for f in findings if f["rule"] == "device-idle")
    gap = next(e for e in idle["evidence"] if e.startswith("largest idle gap "))
    value, unit = gap.removeprefix("largest idle gap ").split()
    seconds = float(value) * {"s": 1, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}[unit]
    assert seconds <= longest
    assert seconds == pytest.approx(max(_idle_gaps_per_step(profile)), abs=1e-9)
    # every gap is far under a launch: the device waits on latencies, and says so (it advised
    # looking at host launches)
    assert idle["title"] == "Device idle inside steps, in short waits"
    assert "not on the host" in idle["fix"]


def test_truncated_profile_is_one_line_exit_2(profiles, tmp_path):
    a, _ = profiles
    bad = tmp_path / "bad.nsprof"
    bad.write_bytes(a.read_bytes()[:5000])
    res = run("view", "-s", str(bad))
    assert res.returncode == 2
    assert res.stderr.count("\n") == 1 and "truncated" in res.stderr and "Traceback" not in res.stderr


@pytest.mark.parametrize("argv, needle", [
    (["view", "-s", "/nonexistent.nsprof"], "no such profile"),
    (["view", "-s", "README.md"], "not a neuron-profile file"),
    (["view", "-s", "x", "--output-format", "db"], "Neuron Explorer are not part of this tool"),
    (["capture", "--workload", "nosuch"], "unknown workload"),
    (["capture", "--workload", "matmul:m=0,k=1,n=1"], "bad value"),
    (["capture", "--workload", "matmul:m=64,k=64,n=64", "--instance", "trn9.large"], "unknown instance"),
    (["capture", "--workload", "matmul:m=64,k=64,n=64", "--num-exec", "1", "--profile-nth-exec", "2"],
     "larger than --num-exec"),
    (["capture"], "nothing to capture"),
    (["diff", "/nonexistent"], "required"),
    # an empty path fell back to the default name
    (["view", "-s", "x", "--output-format", "chrome", "--output-file", ""], "an empty path"),
    (["capture", "-s", "", "--workload", "matmul:m=64,k=64,n=64"], "an empty path"),
    (["capture", "--detail-steps", "-1", "--workload", "matmul"], "'-1' must be 0 or more"),
])
def test_bad_input_exit_2(argv, needle):
    res = run(*argv)
    assert res.returncode == 2, res.stderr
    assert needle in res.stderr and "Traceback" not in res.stderr


def test_version_and_help():
    assert run("--version").stdout.startswith("neuron-profile ")
    assert "--profile-nth-exec" in run("capture", "--help").stdout


def test_capture_a_model_preset_from_the_workload_registry(tmp_path, capsys):
    path = tmp_path / "bert.nsprof"
    assert main(["capture", "-w", "bert-base", "--cores", "4", "--tp", "1", "--pp", "1", "-s", str(path)]) == 0
    from profiler.model import fileformat
    prof = fileformat.load(path)
    assert prof.meta["workload"] == "bert-base" and "bert" in prof.meta["description"]
    phases = set(prof.table("ops")["phase"].tolist())
    assert len(phases) >= 2                       # forward and backward at least
    assert prof.rows("instructions") > 0


def _handles(pid: int, sig: int) -> bool:
    """Whether process `pid` has a handler installed for `sig` (its SigCgt mask)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
    return False


def test_ctrl_c_during_a_builtin_capture_keeps_the_executions_simulated(tmp_path):
    import signal
    import time
    out = tmp_path / "b.nsprof"
    proc = subprocess.Popen([sys.executable, "-m", "profiler.cli", "capture", "--workload",
                             "mlp:layers=8,hidden=4096,tokens=4096", "--num-exec", "500", "--profile-nth-exec",
                             "500", "-s", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=ROOT)
    deadline = time.monotonic() + 120
    while not _handles(proc.pid, signal.SIGHUP) and time.monotonic() < deadline:   # running the workload
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err
    assert "SIGINT: stopping after this round of executions" in err
    assert "wrote" in err.splitlines()[-1]
    prof = fileformat_load(out)
    steps = prof.rows("steps")
    assert 1 <= steps < 500 and prof.meta["num_exec"] == steps and prof.meta["num_exec_requested"] == 500


def fileformat_load(path):
    from profiler.model.fileformat import load
    return load(path)


def test_capture_progress_gets_its_total_with_the_first_tick():
    from device_model import instance
    from device_model.workloads import Placement
    from profiler.capture.builtin import capture_workload
    ticks = []
    capture_workload("mlp:tokens=256,hidden=256,layers=2", instance("trn2.48xlarge"), Placement(pp=2, tp=1, dp=1),
                     num_exec=3, progress=lambda done, of: ticks.append((done, of)))
    assert ticks[0] == (0, 6) and ticks[-1] == (6, 6)          # 2 ranks x 3 executions, known from the start
    assert {of for _, of in ticks} == {6}


def test_counts_are_singular_or_plural_and_an_unwritable_folder_is_named(tmp_path):
    res = run("capture", "--workload", "matmul:m=128,k=128,n=128", "-s", str(tmp_path / "one.nsprof"))
    assert res.returncode == 0
    assert "(1 step, 2 operators, " in res.stderr            # not "1 steps"
    res = run("capture", "--workload", "matmul:m=128,k=128,n=128", "-s", "/sys/one.nsprof")
    assert res.returncode == 2
    assert res.stderr == ("neuron-profile: error: cannot write the profile to '/sys/one.nsprof': "
                          "folder '/sys': permission denied\n")


def test_exposed_collectives_evidence_is_per_step(tmp_path, capsys):
    """The evidence said 'per profiled step' of the total over every summarised step."""
    from profiler.analysis.advise import advise
    from profiler.analysis.summary import summarize
    from profiler.analysis.render import human_time
    from profiler.model import fileformat
    path = tmp_path / "dp.nsprof"
    assert main(["capture", "--workload", "mlp:tokens=512,hidden=1024,layers=2", "--instance",
                 "trn2.48xlarge", "--dp", "8", "--num-exec", "3", "--detail-steps", "3", "-s", str(path)]) == 0
    capsys.readouterr()
    prof = fileformat.load(path)
    s = summarize(prof)
    assert s["step_count"] == 3
    finding = next(f for f in advise(prof) if f.rule == "exposed-collectives")
    assert f"collectives run {human_time(s['cc_op_time'] / 3)} per step" in finding.evidence[0]
    assert finding.evidence[1].endswith("over 3 steps")


@pytest.mark.parametrize("args", [["--output-format", "db"], ["--output-format", "parquet"],
                                  ["--db-endpoint", "http://localhost:8086"], ["--ingest-only"]])
def test_aws_web_ui_formats_and_options_are_named_in_one_line(profiles, args, capsys):
    a, _ = profiles
    with pytest.raises(SystemExit) as exit_:
        main(["view", "-s", str(a), *args])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "Neuron Explorer are not part of this tool" in err
    assert "perfetto" in err.splitlines()[-1]
