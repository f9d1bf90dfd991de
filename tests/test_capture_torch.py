"""Capture of real PyTorch scripts: the shipped transformer example run for real under
`neuron-profile capture -- python ...`, the recorder's phases and modules, exit codes, an
exception and SIGINT mid-run, and the torch.profiler-shaped API."""
from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from profiler.model import fileformat  # noqa: E402
from profiler.model.profile import PHASES  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "train_transformer.py"
CLI = [sys.executable, "-m", "profiler.cli"]


def capture(tmp_path: Path, *script_args: str, extra: tuple[str, ...] = (), **kw) -> subprocess.CompletedProcess:
    out = tmp_path / "t.nsprof"
    return subprocess.run([*CLI, "capture", "-s", str(out), *extra, "--", sys.executable, str(EXAMPLE), *script_args],
                          capture_output=True, text=True, cwd=ROOT, timeout=300, **kw)


# What each recorder keeps of a linear layer and a layer norm: the native one sees the operator the
# script called (aten::linear), the Python one what reaches the dispatcher's Python key.
RECORDED = {"native": {"aten::linear", "aten::mm", "aten::layer_norm", "aten::embedding"},
            "python": {"aten::addmm", "aten::mm", "aten::native_layer_norm", "aten::embedding"}}


@pytest.fixture(scope="module", params=["native", "python"])
def captured(request, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cap")
    res = capture(tmp, "--steps", "8", extra=("--instance", "trn1.32xlarge", "--detail-steps", "2",
                                              "--recorder", request.param))
    return res, fileformat.load(tmp / "t.nsprof")


def test_script_runs_for_real_and_its_loss_falls(captured):
    res, _ = captured
    assert res.returncode == 0, res.stderr
    losses = [float(line.split()[3]) for line in res.stdout.splitlines() if line.startswith("step ")]
    assert len(losses) == 8 and losses[-1] < losses[0] * 0.8


def test_profile_has_steps_phases_modules_and_host_track(captured):
    _, prof = captured
    assert prof.meta["instance"] == "trn1.32xlarge" and prof.meta["source"] == "pytorch"
    recorder = prof.meta["recorder"]
    steps = prof.table("steps")
    assert steps["step"].tolist() == list(range(1, 9))
    assert steps["detailed"].tolist() == [0] * 6 + [1, 1]
    ops = prof.table("ops")
    phases = {PHASES[p] for p in ops["phase"].tolist()}
    assert phases == {"forward", "backward", "optimizer", "other"}
    # outside the forward pass: the parameters' init, and every step's batch built before it
    other = ops["phase"] == PHASES.index("other")
    assert "aten::uniform_" in prof.text(ops["name_s"][other & (ops["step"] == 1)])
    assert {int(s) for s, n in zip(ops["step"][other], prof.text(ops["name_s"][other]))
            if n == "aten::cat"} == set(range(1, 9))
    names = set(prof.text(ops["name_s"]))
    assert RECORDED[recorder] <= names
    modules = set(prof.text(ops["module_s"][ops["phase"] == PHASES.index("backward")]))
    assert "TinyGPT.layers.0.up" in modules           # backward ops find their forward module
    host = prof.table("host")
    cats = set(prof.text(host["cat_s"]))
    assert {"cpu_op", "python_function", "user_annotation"} <= cats
    host_names = prof.text(host["name_s"])
    assert sum(n.startswith("ProfilerStep#") for n in host_names) == 8
    assert any(n.startswith("Optimizer.step#AdamW") for n in host_names)
    # every device op came from a recorded host call, on the measured CPU timeline
    assert (ops["host"] >= 0).all()
    assert np.all(host["end"] >= host["start"])


def test_matmuls_map_to_tensor_engine_with_auto_cast(captured):
    _, prof = captured
    ops = prof.table("ops")
    kinds = np.array(prof.strings)[ops["kind_s"]]
    mm = kinds == "matmul"
    assert mm.any() and (ops["busy_tensor"][mm] > 0).all()
    assert set(np.array(prof.strings)[ops["dtype_s"][mm]]) == {"float32"}     # recorded dtype
    assert (ops["adj_flops"][mm] == ops["flops"][mm]).all()                   # run as BF16 (matmult)


@pytest.mark.parametrize("auto_cast, compute, stored", [
    ("matmult", "bf16", "fp32"),   # neuronx-cc's default: the matmul runs BF16 on FP32 tensors
    ("all", "bf16", "bf16"),       # every tensor cast: stored as computed
    ("none", "fp32", "fp32"),
])
def test_an_fp32_linear_reads_and_writes_its_tensors_at_their_width(auto_cast, compute, stored):
    from device_model.program import Program
    from profiler.capture.aten_map import AtenCall, add_call
    prog = Program()
    add_call(prog, AtenCall("linear", "aten", ((64, 512), (256, 512)), "torch.float32", 64 * 256),
             auto_cast, None)
    (op,) = prog.ops
    assert (op.kind, op.get("dtype"), op.get("out_dtype")) == ("matmul", compute, stored)
    assert (op.get("left_dtype") or compute, op.get("right_dtype") or compute) == (stored, stored)


@pytest.mark.parametrize("dtype, auto_cast, nbytes", [
    ("torch.float32", "matmult", 4096), ("torch.float32", "all", 2048),
    ("torch.int64", "all", 4096),        # integers are never auto-cast (int64 runs as int32)
    ("torch.float8_e4m3fn", "none", 1024), ("torch.bool", "none", 1024)])
def test_a_collective_moves_its_elements_at_their_width(dtype, auto_cast, nbytes):
    from device_model import instance
    from device_model.program import Program
    from device_model.workloads.micro import place_ranks
    from profiler.capture.aten_map import AtenCall, add_call
    prog = Program()
    add_call(prog, AtenCall("allreduce_", "c10d", ((1024,),), dtype, 0), auto_cast,
             place_ranks(instance("trn2.48xlarge"), 2))
    (op,) = prog.ops
    assert op.get("bytes") == nbytes


def test_softmax_backward_is_one_op_reading_the_output_and_its_gradient():
    """aten's _softmax_backward_data(grad_output, output) is one call: it maps to the chip's
    softmax backward (y and dy read, dx written), not to a second forward softmax."""
    from device_model.program import Program
    from profiler.capture.aten_map import AtenCall, add_call
    prog = Program()
    for name in ("_softmax", "_softmax_backward_data"):
        add_call(prog, AtenCall(name, "aten", ((8, 128, 128), (8, 128, 128)), "torch.bfloat16",
                                8 * 128 * 128), "none", None)
    fwd, bwd = prog.ops
    assert (fwd.kind, bwd.kind) == ("softmax", "softmax")
    assert not fwd.get("backward") and bwd.get("backward")
    assert (bwd.get("rows"), bwd.get("cols")) == (8 * 128, 128)


def test_script_exit_code_is_returned_and_profile_still_written(tmp_path):
    res = capture(tmp_path, "--steps", "3", "--fail-at", "3")
    assert res.returncode == 1
    assert "failing at step 3" in res.stderr
    # the script's traceback as `python SCRIPT` shows it: from its own first frame, none of ours
    frames = [line for line in res.stderr.splitlines() if line.startswith('  File "')]
    assert frames and frames[0].startswith(f'  File "{EXAMPLE}"'), res.stderr
    assert "script_child" not in res.stderr and "runpy" not in res.stderr
    prof = fileformat.load(tmp_path / "t.nsprof")
    assert prof.rows("ops") > 0 and set(prof.table("steps")["step"].tolist()) >= {1, 2}


def test_sigint_mid_run_leaves_a_valid_profile(tmp_path):
    out = tmp_path / "t.nsprof"
    proc = subprocess.Popen([*CLI, "capture", "-s", str(out), "--", sys.executable, str(EXAMPLE), "--steps", "100000"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            start_new_session=True)
    for line in proc.stdout:                       # wait until training is under way
        if line.startswith("step 3 "):
            break
    os.killpg(proc.pid, signal.SIGINT)             # like Ctrl-C at a terminal: the whole group
    proc.communicate(timeout=120)
    assert proc.returncode == 130
    prof = fileformat.load(out)
    assert prof.rows("steps") >= 3


def test_step_window_and_its_bad_values(tmp_path):
    res = capture(tmp_path, "--steps", "5", extra=("--steps", "2-3"))
    assert res.returncode == 0, res.stderr
    prof = fileformat.load(tmp_path / "t.nsprof")
    assert prof.table("steps")["step"].tolist() == [2, 3]
    # a window the script never reaches: an empty profile, and a warning saying why
    res = capture(tmp_path, "--steps", "3", extra=("--steps", "20-"))
    assert res.returncode == 0 and fileformat.load(tmp_path / "t.nsprof").rows("steps") == 0
    assert "--steps 20- was never reached: the script ended 3 steps" in res.stderr
    for bad in ("0", "4-2", "x"):
        res = capture(tmp_path, extra=("--steps", bad))
        assert res.returncode == 2 and "Traceback" not in res.stderr and "--steps" in res.stderr
    res = subprocess.run([*CLI, "capture", "--workload", "mlp", "--steps", "2"], capture_output=True,
                         text=True, cwd=ROOT)
    assert res.returncode == 2 and "--steps applies to scripts" in res.stderr


def test_missing_script_and_non_python_command(tmp_path):
    res = subprocess.run([*CLI, "capture", "-s", str(tmp_path / "x"), "--", "python", "nope.py"],
                         capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 2 and res.stderr.strip().count("\n") == 0
    assert "script not found: nope.py" in res.stderr
    res = subprocess.run([*CLI, "capture", "--", "ls", "-l"], capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 2 and "Traceback" not in res.stderr


def test_a_target_that_never_starts_writes_no_profile(tmp_path):
    """`-m` naming no module, or a script that does not compile: Python's own message, exit 2 and
    no profile (nothing ran), rather than a traceback of the capture and an empty profile."""
    out = tmp_path / "t.nsprof"
    (tmp_path / "broken.py").write_text("x = (\n")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")

    def run(*target: str) -> subprocess.CompletedProcess:
        return subprocess.run([*CLI, "capture", "-s", str(out), "--", sys.executable, *target],
                              capture_output=True, text=True, cwd=tmp_path,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    for module, says in (("no_such_module_here", "No module named no_such_module_here"),
                         ("pkg", "No module named pkg.__main__; 'pkg' is a package and cannot be "
                                 "directly executed")):
        res = run("-m", module)
        assert res.returncode == 2 and not out.exists()
        assert res.stderr == f"neuron-profile: error: python -m {module}: {says}\n"
    res = run("broken.py")
    assert res.returncode == 2 and not out.exists()
    assert "SyntaxError: '(' was never closed" in res.stderr and "Traceback" not in res.stderr
    assert res.stderr.endswith("error: the script did not start; no profile written\n")


@pytest.mark.parametrize("recorder", ["native", "python"])
def test_python_api_with_schedule(tmp_path, recorder):
    sys.path.insert(0, str(EXAMPLE.parent))
    try:
        from train_transformer import TinyGPT
    finally:
        sys.path.remove(str(EXAMPLE.parent))
    import torch.nn.functional as F
    import profiler
    model = TinyGPT(32, 32, 2, 1, 16)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    windows = []
    with profiler.profile(instance="trn2.48xlarge", schedule=profiler.schedule(wait=1, warmup=1, active=2, repeat=2),
                          on_trace_ready=lambda p: windows.append(p.profile), recorder=recorder) as prof:
        for _ in range(9):
            x = torch.randint(0, 32, (4, 16))
            loss = F.cross_entropy(model(x).reshape(-1, 32), x.reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            prof.step()
    # the steps recorded are torch's: step_num 2-3 and 6-7 (from 0)
    assert [sorted(set(w.table("steps")["step"].tolist())) for w in windows] == [[2, 3], [6, 7]]
    assert {w.meta["recorder"] for w in windows} == {recorder}
    assert prof.key_averages(limit=3)[0].self_time > 0
    prof.save(str(tmp_path / "api.nsprof"))
    assert fileformat.load(tmp_path / "api.nsprof").meta["source"] == "pytorch"


def test_schedule_matches_torch_profiler():
    from torch.profiler import schedule as torch_schedule
    import profiler
    for kw in (dict(wait=1, warmup=1, active=2), dict(wait=0, warmup=2, active=1, repeat=3, skip_first=2)):
        ours, theirs = profiler.schedule(**kw), torch_schedule(**kw)
        assert [ours(i).name for i in range(20)] == [theirs(i).name for i in range(20)]


def test_torch_profilers_own_schedule_handler_and_start_stop(tmp_path):
    """A script that keeps torch.profiler's schedule and TensorBoard handler, in the non-`with`
    form, with its own trace metadata: the windows torch's schedule picks are written where
    torch's handler writes them, gzip'ed, with the metadata at the trace's top level."""
    import gzip
    import json
    from torch.profiler import schedule, tensorboard_trace_handler
    import profiler
    lin = torch.nn.Linear(16, 16)
    prof = profiler.profile(instance="trn2.48xlarge", use_cuda=False, acc_events=False,
                            schedule=schedule(wait=1, warmup=1, active=1, repeat=2),
                            on_trace_ready=tensorboard_trace_handler(str(tmp_path), "w0", True))
    prof.add_metadata("run", "r7")
    prof.add_metadata_json("config", '{"lr": 0.5}')
    prof.add_metadata("traceName", "not ours to rename")
    prof.start()
    for _ in range(7):
        lin(torch.randn(4, 16)).sum().backward()
        prof.step()
    prof.stop()
    files = sorted(tmp_path.glob("w0.*.pt.trace.json.gz"))
    assert len(files) == 2                       # torch's schedule: steps 2 and 5 (from 0) record
    steps = []
    for f in files:
        doc = json.loads(gzip.decompress(f.read_bytes()))
        assert doc["run"] == "r7" and doc["config"] == {"lr": 0.5}
        assert doc["traceName"] == "profiler.profile"
        steps += [e["name"] for e in doc["traceEvents"]
                  if e.get("name", "").startswith("ProfilerStep#")]
    assert steps == ["ProfilerStep#2", "ProfilerStep#5"]      # named as torch names them
    prof.stop()                                  # stopped twice: nothing more to do


@pytest.mark.filterwarnings("ignore::UserWarning")      # torch's, on a schedule without warmup
def test_windows_delivered_as_torch_profiler_delivers_them(tmp_path):
    """on_trace_ready is called when torch's is: after each window, and for the window still
    open at the end even when it ran nothing (a block that ran nothing gets its empty trace)."""
    import json
    import torch.profiler as tp
    import profiler

    def delivered(make, active: int | None, steps: int) -> list[int]:
        calls = []
        kw = {"schedule": tp.schedule(wait=0, warmup=0, active=active)} if active else {}
        with make(on_trace_ready=lambda p: calls.append(p.step_num), **kw) as prof:
            for _ in range(steps):
                torch.ones(3).sum()
                prof.step()
        return calls

    ours = functools.partial(profiler.profile, instance="trn2.48xlarge")
    assert delivered(ours, 1, 3) == delivered(tp.profile, 1, 3) == [1, 2, 3, 3]
    assert delivered(ours, None, 0) == delivered(tp.profile, None, 0) == [0]
    with profiler.profile(instance="trn2.48xlarge") as prof:
        pass
    assert len(prof.key_averages()) == 0
    prof.export_chrome_trace(str(tmp_path / "empty.json"))
    assert not [e for e in json.loads((tmp_path / "empty.json").read_text())["traceEvents"]
                if e.get("ph") == "X"]


def test_steps_are_named_as_torch_names_them():
    """A window's `ProfilerStep#N` are torch's: N is the step_num the step began at, from 0."""
    import torch.profiler as tp
    import profiler

    def step_names(make) -> list[str]:
        lin, names = torch.nn.Linear(8, 2), []

        def ready(prof):
            names.extend((e.name, e.trace_name) for e in prof.events()
                         if e.trace_name.startswith("ProfilerStep"))
        with make(schedule=tp.schedule(wait=1, warmup=1, active=2), on_trace_ready=ready) as prof:
            for _ in range(5):
                lin(torch.randn(2, 8)).sum().backward()
                prof.step()
        return names

    ours = functools.partial(profiler.profile, instance="trn2.48xlarge")
    assert step_names(ours) == step_names(tp.profile) == [("ProfilerStep*", "ProfilerStep#2"),
                                                          ("ProfilerStep*", "ProfilerStep#3")]


def test_input_shapes_are_torch_s_for_tensor_only_operators():
    """group_by_input_shape lists every tensor input, as torch does (a linear's bias too)."""
    import torch.profiler as tp
    import profiler

    model, x = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU()), torch.randn(2, 8)

    def shapes(make) -> dict[str, list]:
        with make(record_shapes=True) as prof:
            model(x)
        return {e.key: e.input_shapes for e in prof.key_averages(group_by_input_shape=True)
                if e.key in ("aten::linear", "aten::relu")}

    ours = shapes(functools.partial(profiler.profile, instance="trn2.48xlarge"))
    assert ours == shapes(tp.profile) == {"aten::linear": [[2, 8], [4, 8], [4]],
                                          "aten::relu": [[2, 4]]}


def test_dataloader_waits_are_recorded_and_advised():
    import torch.nn.functional as F
    import profiler
    from profiler.analysis.advise import advise

    class Slow(torch.utils.data.Dataset):
        def __len__(self):
            return 64

        def __getitem__(self, i):
            time.sleep(0.004)                      # a slow loader: the host waits on data
            return torch.randint(0, 32, (16,))

    model = torch.nn.Sequential(torch.nn.Embedding(32, 32), torch.nn.Linear(32, 32))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = torch.utils.data.DataLoader(Slow(), batch_size=8)
    with profiler.profile(instance="trn2.48xlarge") as prof:
        for x in loader:
            loss = F.cross_entropy(model(x).reshape(-1, 32), x.reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            prof.step()
    host = prof.profile.table("host")
    assert "data_loading" in prof.profile.text(host["cat_s"])
    rules = [f.rule for f in advise(prof.profile)]
    assert "host-data-loading" in rules


def test_torch_profilers_call_site_runs_and_a_step_outside_the_window_is_one_clear_error():
    """torch.profiler's keyword arguments are taken (they had raised TypeError); prof.step()
    outside `with` raised "'NoneType' object has no attribute 'explicit_step'"."""
    import profiler
    prof = profiler.profile(activities=["cpu"], record_shapes=True, profile_memory=False,
                            with_stack=False, with_flops=True)
    with pytest.raises(RuntimeError, match="outside `with profiler.profile"):
        prof.step()
    with prof:
        (torch.randn(8, 8) @ torch.randn(8, 8)).sum()
        prof.step()
    assert prof.profile is not None
    with pytest.raises(RuntimeError, match="outside `with profiler.profile"):
        prof.step()
