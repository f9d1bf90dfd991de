"""The native recorder's cache loads no code others could have planted: a cache folder that is
not this user's or is open to others, a library writable by others, or one whose bytes do not
match the digest recorded when it was built, is refused in one line; `auto` then records with
the Python recorder, `--recorder native` stops with exit 2. The planted library here is a real
shared object whose constructor would leave a marker file if it were ever loaded."""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from profiler.capture.native.build import digest_path, library_path  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "profiler.cli"]
START = ("from profiler.capture.recorders import start_recorder\n"
         "rec = start_recorder('auto'); print('KIND', rec.kind); rec.stop()\n")

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs a C compiler to plant a library")


def _plant(tmp_path: Path, monkeypatch, *, dir_mode: int = 0o700, lib_mode: int = 0o600,
           good_digest: bool = True, owner: int | None = None) -> tuple[dict, Path, Path]:
    """A cache at tmp_path/cache with a planted library where the recorder looks for its own:
    (environment for the child, the library, the marker its loading would write)."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("NEURONSCOPE_CACHE_DIR", str(cache))
    lib, _ = library_path(torch)
    lib.parent.mkdir(parents=True)
    marker = tmp_path / "planted-code-ran"
    src = tmp_path / "planted.c"
    src.write_text('#include <stdio.h>\n__attribute__((constructor)) static void run(void) '
                   f'{{ FILE *f = fopen("{marker}", "w"); if (f) fclose(f); }}\n')
    subprocess.run(["gcc", "-shared", "-fPIC", str(src), "-o", str(lib)], check=True)
    data = lib.read_bytes()
    digest_path(lib).write_text(hashlib.sha256(data if good_digest else b"other").hexdigest() + "\n")
    os.chmod(lib, lib_mode)
    os.chmod(digest_path(lib), 0o600)
    os.chmod(lib.parent, dir_mode)
    if owner is not None:
        os.chown(lib.parent, owner, owner)
    env = {**os.environ, "NEURONSCOPE_CACHE_DIR": str(cache), "NEURONSCOPE_RECORDER": "auto"}
    return env, lib, marker


def _start(env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", START], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=300)


@pytest.mark.parametrize("case, words", [
    ({"dir_mode": 0o777}, "has mode 0777"),
    ({"owner": 65534}, "is owned by uid 65534"),
    ({"lib_mode": 0o666}, "is writable by others"),
    ({"good_digest": False}, "does not match the digest recorded when it was built"),
])
def test_planted_library_is_refused_and_the_python_recorder_takes_over(tmp_path, monkeypatch, case, words):
    if "owner" in case and os.getuid() != 0:
        pytest.skip("needs root to give a folder to another user")
    env, lib, marker = _plant(tmp_path, monkeypatch, **case)
    res = _start(env)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "KIND python"
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and words in lines[0] and lines[0].endswith("; using the Python recorder (slower)")
    assert "refusing the native recorder" in lines[0]
    assert not marker.exists()                 # the planted code never ran


def test_recorder_native_with_a_shared_cache_is_one_line_and_exit_2(tmp_path, monkeypatch):
    env, lib, marker = _plant(tmp_path, monkeypatch, dir_mode=0o777)
    script = tmp_path / "s.py"
    script.write_text("import torch\ntorch.ones(2).sum()\n")
    res = subprocess.run([*CLI, "capture", "-s", str(tmp_path / "o.nsprof"), "--recorder", "native", "--",
                          sys.executable, str(script)], capture_output=True, text=True, env=env, cwd=ROOT,
                         timeout=300)
    assert res.returncode == 2
    assert res.stderr.count("\n") == 1 and "refusing the native recorder cache" in res.stderr
    assert not marker.exists() and not (tmp_path / "o.nsprof").exists()


def test_a_library_without_its_digest_is_rebuilt_not_loaded(tmp_path, monkeypatch):
    """A library left without a digest (an older build, or one put there) is compiled anew."""
    env, lib, marker = _plant(tmp_path, monkeypatch)
    digest_path(lib).unlink()
    res = _start(env)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "KIND native"
    assert "building the native recorder for torch" in res.stderr
    assert not marker.exists()
    assert digest_path(lib).read_text().strip() == hashlib.sha256(lib.read_bytes()).hexdigest()
    assert oct(lib.parent.stat().st_mode & 0o777) == "0o700" and oct(digest_path(lib).stat().st_mode & 0o777) == "0o600"
