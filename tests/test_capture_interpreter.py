"""`neuron-profile capture -- PYTHON script.py` runs the interpreter the user named, as users
have it: a virtualenv of their own with torch and numpy and no neuronscope (made here with
`python -m venv`, torch made importable through a .pth file naming a folder that links torch
and its own dependencies only), one with no torch at all, one with a torch too old; and
torchrun from such a virtualenv."""
from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

pytest.importorskip("torch")

from profiler.model import fileformat  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "profiler.cli"]
# what `import torch` and a training loop load from site-packages (no orjson, no rich, no neuronscope)
TORCH_ONLY = ("torch", "torchgen", "functorch", "numpy", "numpy.libs", "typing_extensions.py", "sympy",
              "mpmath", "filelock", "fsspec", "jinja2", "markupsafe", "networkx")
SCRIPT = '''
import json, sys, torch
report = {"executable": sys.executable, "prefix": sys.prefix}
for name in ("orjson", "rich", "monitor", "device_model.catalog"):
    try:
        __import__(name)
        report[name] = "importable"
    except ImportError:
        report[name] = "missing"
# one write of the whole line: torchrun's workers share this stdout, unbuffered
sys.stdout.write("REPORT " + json.dumps(report) + "\\n")
sys.stdout.flush()
model = torch.nn.Linear(8, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(2):
    loss = model(torch.randn(16, 8)).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
sys.exit(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
'''


def _venv(path: Path, site_links: tuple[str, ...] = (), fake_torch: str | None = None) -> Path:
    """A virtualenv at `path` without neuronscope; `site_links`: entries of this environment's
    site-packages made importable there; `fake_torch`: a stand-in torch of that version."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, timeout=120)
    python = path / "bin" / "python"
    extra = path / "linked"
    extra.mkdir()
    site = Path(sysconfig.get_paths()["purelib"])
    for name in site_links:
        if (site / name).exists():
            (extra / name).symlink_to(site / name)
        for info in site.glob(f"{name}-*.dist-info"):
            (extra / info.name).symlink_to(info)
    if fake_torch:
        (extra / "torch").mkdir()
        (extra / "torch" / "__init__.py").write_text(f"__version__ = {fake_torch!r}\n")
    own_site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                              capture_output=True, text=True, check=True).stdout.strip()
    Path(own_site, "linked.pth").write_text(str(extra) + "\n")
    return python


@pytest.fixture(scope="module")
def torch_venv(tmp_path_factory) -> Path:
    return _venv(tmp_path_factory.mktemp("user-env") / "venv", TORCH_ONLY)


def _env() -> dict[str, str]:
    """The user's environment: nothing of neuronscope on PYTHONPATH (neuron-profile itself runs
    from the source tree as its cwd)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return env


def capture(tmp_path: Path, command: list[str], *extra: str) -> subprocess.CompletedProcess:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    cmd = [*CLI, "capture", "-s", str(tmp_path / "out.nsprof"), *extra, "--",
           *[str(script) if c == "SCRIPT" else c for c in command]]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=_env(), timeout=300)


def _report(stdout: str) -> dict:
    import json
    return json.loads(next(ln for ln in stdout.splitlines() if ln.startswith("REPORT "))[7:])


def test_the_venv_really_lacks_neuronscope(torch_venv):
    res = subprocess.run([str(torch_venv), "-c", "import torch, numpy; import profiler"], capture_output=True,
                         text=True, env=_env(), cwd="/")
    assert "No module named 'profiler'" in res.stderr


def test_script_runs_under_the_named_interpreter_without_neuronscope(torch_venv, tmp_path):
    res = capture(tmp_path, [str(torch_venv), "SCRIPT", "3"], "--recorder", "python")
    assert res.returncode == 3, res.stderr                 # the script's own exit code
    report = _report(res.stdout)
    assert report["prefix"] == str(torch_venv.parent.parent)
    assert report["orjson"] == report["rich"] == "missing"           # not neuron-profile's environment
    assert report["monitor"] == report["device_model.catalog"] == "missing"   # only the recorder is there
    prof = fileformat.load(tmp_path / "out.nsprof")
    assert prof.rows("steps") == 2 and prof.meta["recorder"] == "python"
    assert "wrote" in res.stderr.splitlines()[-1] and "script exit code 3" in res.stderr


@pytest.mark.slow
def test_native_recorder_is_built_for_that_interpreters_torch(torch_venv, tmp_path):
    """Its torch lives at another path, so the cache key differs: built once, said once."""
    env_cache = tmp_path / "cache"
    cmd = [*CLI, "capture", "-s", str(tmp_path / "n.nsprof"), "--recorder", "native", "--",
           str(torch_venv), str(tmp_path / "train.py")]
    (tmp_path / "train.py").write_text(SCRIPT)
    env = {**_env(), "NEURONSCOPE_CACHE_DIR": str(env_cache)}
    first = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    assert first.returncode == 0, first.stderr
    assert "building the native recorder for torch 2." in first.stderr and "(once)" in first.stderr
    assert fileformat.load(tmp_path / "n.nsprof").meta["recorder"] == "native"
    again = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    assert again.returncode == 0 and "building" not in again.stderr


def test_interpreter_without_torch_is_one_line_and_exit_2(tmp_path):
    python = _venv(tmp_path / "bare")
    res = capture(tmp_path, [str(python), "SCRIPT"])
    assert res.returncode == 2
    assert res.stderr.count("\n") == 1 and res.stderr.startswith("neuron-profile: error: ")
    assert f"{python} has no torch to record" in res.stderr
    assert not (tmp_path / "out.nsprof").exists() and "REPORT" not in res.stdout


def test_torch_too_old_is_one_line_and_exit_2(tmp_path):
    python = _venv(tmp_path / "old", ("numpy",), fake_torch="1.13.1")
    res = capture(tmp_path, [str(python), "SCRIPT"])
    assert res.returncode == 2
    assert res.stderr == (f"neuron-profile: error: {python} has torch 1.13.1; recording needs torch 2.0 "
                          "or later\n")


def test_an_interpreter_that_does_not_exist_is_one_line(tmp_path):
    res = capture(tmp_path, ["python9.9", "SCRIPT"])
    assert res.returncode == 2
    assert res.stderr == "neuron-profile: error: python9.9: no such program on the PATH\n"


@pytest.mark.slow
def test_torchrun_from_its_own_venv_runs_its_workers_there(torch_venv, tmp_path):
    torchrun = torch_venv.parent / "torchrun"
    torchrun.write_text(f"#!{torch_venv}\nimport sys\nfrom torch.distributed.run import main\n"
                        "sys.exit(main())\n")
    torchrun.chmod(0o755)
    res = capture(tmp_path, [str(torchrun), "--standalone", "--nproc-per-node", "2", "SCRIPT"],
                  "--recorder", "python")
    assert res.returncode == 0, res.stderr
    reports = [_report(line) for line in res.stdout.splitlines() if line.startswith("REPORT ")]
    assert len(reports) == 2
    assert all(r["prefix"] == str(torch_venv.parent.parent) and r["orjson"] == "missing" for r in reports)
    prof = fileformat.load(tmp_path / "out.nsprof")
    assert [e["rank"] for e in prof.meta["ranks"]] == [0, 1]


MAIN_MODULE = '''
import pickle, sys
class Point:
    x: int = 0          # evaluated, not a string: the capture's own __future__ flags stay its own
names = {k: type(v).__name__ if k == "__loader__" else repr(v)
         for k, v in dict(globals()).items() if k.startswith("__") and k != "__builtins__"}
print("REPORT", sys.argv, sys.path[0], sorted(names.items()), type(__builtins__).__name__,
      type(pickle.loads(pickle.dumps(Point()))).__module__, Point.__annotations__)
'''


def test_a_script_sees_what_python_script_gives_it(tmp_path):
    """sys.argv[0] as typed (relative), __file__ absolute, the __main__ module's names, and
    classes that pickle by __main__: as `python main.py` itself has them."""
    (tmp_path / "main.py").write_text(MAIN_MODULE)
    own = subprocess.run([sys.executable, "main.py", "a"], capture_output=True, text=True,
                         cwd=tmp_path, env=_env(), timeout=60)
    env = {**_env(), "PYTHONPATH": str(ROOT)}
    captured = subprocess.run([*CLI, "capture", "-s", "out.nsprof", "--", sys.executable,
                               "main.py", "a"], capture_output=True, text=True, cwd=tmp_path,
                              env=env, timeout=300)
    line = [ln for ln in own.stdout.splitlines() if ln.startswith("REPORT ")]
    assert line and line[0].startswith("REPORT ['main.py', 'a']"), own.stdout + own.stderr
    assert [ln for ln in captured.stdout.splitlines() if ln.startswith("REPORT ")] == line, \
        captured.stderr
