"""A script's own `profiler` or `device_model` (names neuronscope's packages have too) is the one
it imports under `neuron-profile capture`, as without it: beside the script, in the working
directory of `python -m`, on PYTHONPATH or installed in the script's virtualenv; in the script,
in the processes it starts and in torchrun's workers. The recording modules the capture copies
for its child take one top-level name only, a private one."""
from __future__ import annotations

import ast
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

pytest.importorskip("torch")

from profiler.capture import bootstrap  # noqa: E402

BIN = Path(sys.executable).parent
NEURON_PROFILE = BIN / "neuron-profile"      # installed, so any working directory will do
pytestmark = pytest.mark.skipif(not NEURON_PROFILE.exists(), reason="neuron-profile not installed")

USER_PROFILER = 'def timer():\n    return "user profiler"\n'
# what a script reports of the modules it got, in lines that start with REPORT; one write each,
# as torchrun's workers share one stdout
USES_PROFILER = 'import os, profiler\nos.write(1, f"REPORT {profiler.timer()}\\n".encode())\n'
USES_DEVICE_MODEL = '''
import os, subprocess, sys
import device_model.fileio
os.write(1, f"REPORT {device_model.MARK} {device_model.fileio.MARK}\\n".encode())
child = "import os, device_model; os.write(1, f'REPORT child {device_model.MARK}\\\\n'.encode())"
subprocess.run([sys.executable, "-c", child], check=True)
'''
REPORTS_SELF = '''
import json, os, sys
theirs = [p for p in sys.path if "neuronscope-capture-" in p]
print("REPORT", json.dumps({
    "ours": sorted(n for n in sys.modules if n.split(".")[0] in ("profiler", "device_model")),
    "private": any(n.split(".")[0] == "_neuronscope_capture" for n in sys.modules),
    "top_level": [sorted(os.listdir(p)) for p in theirs],
    "path0": sys.path[0],
}))
'''


def _env(**extra: str) -> dict[str, str]:
    """The user's environment, nothing of neuronscope on PYTHONPATH, and `extra`."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return {**env, **extra}


def _reports(res: subprocess.CompletedProcess) -> list[str]:
    return sorted(ln for ln in res.stdout.splitlines() if ln.startswith("REPORT"))


def run_plain(folder: Path, command: list[str], env: dict[str, str]) -> list[str]:
    res = subprocess.run(command, capture_output=True, text=True, cwd=folder, env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    return _reports(res)


def run_captured(folder: Path, command: list[str], env: dict[str, str]) -> list[str]:
    # -I: neuron-profile's own imports left alone by the PYTHONPATH meant for the script
    cmd = [sys.executable, "-I", str(NEURON_PROFILE), "capture", "-s", str(folder / "out.nsprof"),
           "--recorder", "python", "--", *command]
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=folder, env=env, timeout=300)
    assert res.returncode == 0, res.stderr
    assert (folder / "out.nsprof").exists()
    return _reports(res)


def _user_device_model(lib: Path) -> None:
    (lib / "device_model").mkdir(parents=True)
    (lib / "device_model" / "__init__.py").write_text('MARK = "user device_model"\n')
    (lib / "device_model" / "fileio.py").write_text('MARK = "user fileio"\n')


@pytest.mark.parametrize("command", [["train.py"], ["-m", "train"]])
def test_a_profiler_module_beside_the_script_is_the_scripts(tmp_path, command):
    (tmp_path / "profiler.py").write_text(USER_PROFILER)
    (tmp_path / "train.py").write_text(USES_PROFILER)
    command = [sys.executable, *command]
    assert run_plain(tmp_path, command, _env()) == ["REPORT user profiler"]
    assert run_captured(tmp_path, command, _env()) == ["REPORT user profiler"]


def test_a_device_model_package_on_pythonpath_is_the_scripts_and_its_childs(tmp_path):
    _user_device_model(tmp_path / "lib")
    app = tmp_path / "app"
    app.mkdir()
    (app / "train.py").write_text(USES_DEVICE_MODEL)
    env = _env(PYTHONPATH=str(tmp_path / "lib"))
    expected = ["REPORT child user device_model", "REPORT user device_model user fileio"]
    assert run_plain(app, [sys.executable, "train.py"], env) == expected
    assert run_captured(app, [sys.executable, "train.py"], env) == expected


@pytest.fixture(scope="module")
def venv_with_own_profiler(tmp_path_factory) -> Path:
    """A virtualenv without neuronscope, with a `profiler` package installed in its own
    site-packages and this environment's packages (torch) reachable after it: its python."""
    root = tmp_path_factory.mktemp("user-env") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True,
                   timeout=120)
    python = root / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; "
                                "print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "profiler").mkdir()
    (site / "profiler" / "__init__.py").write_text(USER_PROFILER)
    (site / "linked.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


def test_a_profiler_package_installed_in_the_scripts_venv_is_the_scripts(venv_with_own_profiler,
                                                                          tmp_path):
    python = venv_with_own_profiler
    (tmp_path / "train.py").write_text(USES_PROFILER)
    assert run_plain(tmp_path, [str(python), "train.py"], _env()) == ["REPORT user profiler"]
    assert run_captured(tmp_path, [str(python), "train.py"], _env()) == ["REPORT user profiler"]


@pytest.mark.parametrize("linked", [False, True])
def test_the_recorder_takes_no_top_level_name_but_its_private_one(tmp_path, linked):
    """`linked`: the capture's folder reached through a symlink, which Python resolves in the
    sys.path[0] it gives a script file."""
    import json
    (tmp_path / "train.py").write_text(REPORTS_SELF)
    env = _env()
    if linked:
        (tmp_path / "real").mkdir()
        (tmp_path / "link").symlink_to(tmp_path / "real")
        env["TMPDIR"] = str(tmp_path / "link")
    report = json.loads(run_captured(tmp_path, [sys.executable, "train.py"], env)[0][7:])
    assert report["ours"] == [] and report["private"]
    assert report["top_level"] == [[bootstrap.PACKAGE]]
    assert report["path0"] == str(tmp_path)


def _imports_of_neuronscope(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_bytes(), str(path))):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else []
        found += [f"{path}:{node.lineno}" for n in names
                  if n.split(".")[0] in ("profiler", "device_model")]
    return found


def test_the_copies_live_in_one_private_package_that_imports_only_itself(tmp_path):
    boot = bootstrap.make_bootstrap(tmp_path / "boot")
    assert sorted(os.listdir(boot)) == [bootstrap.PACKAGE]
    files = list(boot.rglob("*.py"))
    assert len(files) > 10
    assert [hit for f in files for hit in _imports_of_neuronscope(f)] == []
    folders = [boot, *(p for p in boot.rglob("*") if p.is_dir())]
    assert {oct(p.stat().st_mode & 0o777) for p in folders} == {"0o700"}


def test_a_copy_gets_its_imports_rewritten_and_a_plain_import_refused():
    privatized, package = bootstrap.privatized, bootstrap.PACKAGE
    source = ("x = 1; from device_model.fileio import a; from profiler.console import b\n"
              "def f():\n    from profiler_extra import c\n    from .x import d\n")
    assert privatized(source.encode(), "m.py").decode() == (
        f"x = 1; from {package}.device_model.fileio import a; "
        f"from {package}.profiler.console import b\n"
        "def f():\n    from profiler_extra import c\n    from .x import d\n")
    with pytest.raises(ValueError, match="m.py:2"):
        privatized(b"import os\nimport profiler.console\n", "m.py")


@pytest.mark.slow
def test_torchrun_workers_import_the_scripts_own_modules(tmp_path):
    (tmp_path / "profiler.py").write_text(USER_PROFILER)
    _user_device_model(tmp_path / "lib")
    (tmp_path / "train.py").write_text(USES_PROFILER + USES_DEVICE_MODEL)
    env = _env(PYTHONPATH=str(tmp_path / "lib"))
    command = [str(BIN / "torchrun"), "--standalone", "--nproc-per-node", "2", "train.py"]
    expected = sorted(["REPORT user profiler", "REPORT user device_model user fileio",
                       "REPORT child user device_model"] * 2)
    assert run_plain(tmp_path, command, env) == expected
    assert run_captured(tmp_path, command, env) == expected
