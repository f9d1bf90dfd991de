"""What a script's own interpreter imports to record itself, without neuronscope installed there.

A capture copies the modules its child processes run (the script child, the torchrun worker,
the recorders and the part writer: standard library, numpy and torch only) into a private
folder of its own (0700, made by `tempfile.mkdtemp`) and puts only that folder on the child's
PYTHONPATH. Nothing else of neuronscope (and nothing of neuron-profile's own environment) is
visible to the script, and nothing is imported from a place another user could write.

The folder holds one package, `_neuronscope_capture` (PACKAGE), with the copies under it
(`_neuronscope_capture/profiler/...`, `_neuronscope_capture/device_model/...`) and their
absolute imports of `profiler`/`device_model` rewritten to it. So the only top-level name the
capture adds is its own: a script's `profiler` or `device_model` (beside it, on PYTHONPATH or
installed) stays the script's, in the child, its subprocesses and torchrun's workers alike.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "_neuronscope_capture"
# the child side's import closure (tests/test_capture_interpreter.py runs it in a bare venv)
CHILD_FILES = (
    "device_model/fileio.py",
    "profiler/console.py",
    "profiler/capture/__init__.py",
    "profiler/capture/aten_args.py",
    "profiler/capture/aten_kernels.py",
    "profiler/capture/aten_layers.py",
    "profiler/capture/aten_map.py",
    "profiler/capture/aten_names.py",
    "profiler/capture/hooks.py",
    "profiler/capture/native/__init__.py",
    "profiler/capture/native/build.py",
    "profiler/capture/native/recorder.cpp",
    "profiler/capture/native_recorder.py",
    "profiler/capture/options.py",
    "profiler/capture/phases.py",
    "profiler/capture/python_recorder.py",
    "profiler/capture/rank_part.py",
    "profiler/capture/recorders.py",
    "profiler/capture/recording.py",
    "profiler/capture/script_child.py",
    "profiler/capture/torchrun_worker.py",
)
# the top-level packages the copies come from, which the copies must never import by name
ROOTS = frozenset(rel.split("/")[0] for rel in CHILD_FILES)
# Inside the package, so it adds no top-level name of its own. Started as a script file, so
# Python puts the package's folder first on the path: the entry takes it off before importing
# anything (its subfolders are `profiler` and `device_model`), which also leaves sys.path[0]
# for the target, as `python SCRIPT` or `python -m MODULE` would set it.
ENTRY = f"{PACKAGE}/neuronscope_record.py"
ENTRY_TEXT = f'''"""A recording child of `neuron-profile capture`; `--worker`: a torchrun worker."""
import os
import sys

if __name__ == "__main__":
    here = os.path.dirname(os.path.realpath(__file__))
    boot = os.path.dirname(here)
    if sys.path and os.path.realpath(sys.path[0]) == here:     # Python resolves symlinks there
        del sys.path[0]
    if boot not in [os.path.realpath(p) for p in sys.path]:     # PYTHONPATH has it, normally
        sys.path.append(boot)
    if sys.argv[1:2] == ["--worker"]:
        from {PACKAGE}.profiler.capture.torchrun_worker import worker_main as main
        args = sys.argv[2:]
    else:
        from {PACKAGE}.profiler.capture.script_child import child_main as main
        args = sys.argv[1:]
    sys.exit(main(args))
'''
STUBS = {
    f"{PACKAGE}/__init__.py": '"""What a recording child of `neuron-profile capture` runs."""\n',
    f"{PACKAGE}/device_model/__init__.py":
        '"""The part of the chip model a recording child needs: the atomic writer."""\n',
    f"{PACKAGE}/profiler/__init__.py":
        '"""The part of neuron-profile a recording child needs."""\n',
}
_FROM_ROOT = re.compile(rb"(from\s+)(" + b"|".join(map(str.encode, sorted(ROOTS))) + rb")\b")


def _ours(module: str | None) -> bool:
    return module is not None and module.split(".")[0] in ROOTS


def privatized(source: bytes, name: str) -> bytes:
    """`source` (the module `name`) with every `from profiler...`/`from device_model...` made
    the same import from PACKAGE's copy. A plain `import profiler...` is refused: it binds the
    top-level name itself, which no rewrite of the copy could keep."""
    tree = ast.parse(source, name)
    lines = source.splitlines(keepends=True)
    nodes = [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
    # last first: two imports on one line keep their offsets
    for node in sorted(nodes, key=lambda n: (n.lineno, n.col_offset), reverse=True):
        if isinstance(node, ast.Import) and any(_ours(a.name) for a in node.names):
            raise ValueError(f"{name}:{node.lineno}: the recording child's modules import "
                             f"{' and '.join(sorted(ROOTS))} only as `from X import Y`")
        if isinstance(node, ast.ImportFrom) and node.level == 0 and _ours(node.module):
            row = node.lineno - 1       # col_offset counts UTF-8 bytes, as `lines` holds them
            head, tail = lines[row][:node.col_offset], lines[row][node.col_offset:]
            tail, found = _FROM_ROOT.subn(rb"\1" + PACKAGE.encode() + rb".\2", tail, count=1)
            if not found:
                raise ValueError(f"{name}:{node.lineno}: cannot rewrite this import")
            lines[row] = head + tail
    return b"".join(lines)


def _private_dirs(folder: Path, rel: Path) -> None:
    """`folder/rel` and each folder between, made 0700 (mkdir's `parents` gives those between
    the umask's default)."""
    for part in reversed(rel.parents[:-1]):
        (folder / part).mkdir(mode=0o700, exist_ok=True)
    (folder / rel).mkdir(mode=0o700, exist_ok=True)


def _copy(rel: str, target: Path) -> None:
    data = (ROOT / rel).read_bytes()
    if rel.endswith(".py"):
        data = privatized(data, rel)
    target.write_bytes(data)


def make_bootstrap(folder: str | Path) -> Path:
    """Copy the child's modules into `folder` (a private folder of this capture's) and return
    it, for the front of the child's PYTHONPATH; the child runs `folder/ENTRY`."""
    folder = Path(folder)
    folder.mkdir(mode=0o700, exist_ok=True)
    for rel in CHILD_FILES:
        _private_dirs(folder, Path(PACKAGE, rel).parent)
        _copy(rel, folder / PACKAGE / rel)
    for rel, text in STUBS.items():
        (folder / rel).write_text(text)
    (folder / ENTRY).write_text(ENTRY_TEXT)
    return folder
