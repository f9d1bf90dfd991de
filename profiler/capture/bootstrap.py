"""What a script's own interpreter imports to record itself, without neuronscope installed there.

A capture copies the modules its child processes run (the script child, the torchrun worker,
the recorders and the part writer: standard library, numpy and torch only) into a private
folder of its own (0700, made by `tempfile.mkdtemp`), under their package names, with empty
package `__init__`s, and puts only that folder on the child's PYTHONPATH. Nothing else of
neuronscope (and nothing of neuron-profile's own environment) is visible to the script, and
nothing is imported from a place another user could write.
"""
from __future__ import annotations

import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# the child side's import closure (tests/test_capture_interpreter.py runs it in a bare venv)
CHILD_FILES = (
    "device_model/fileio.py",
    "profiler/console.py",
    "profiler/capture/__init__.py",
    "profiler/capture/aten_map.py",
    "profiler/capture/native/__init__.py",
    "profiler/capture/native/build.py",
    "profiler/capture/native/recorder.cpp",
    "profiler/capture/native_recorder.py",
    "profiler/capture/options.py",
    "profiler/capture/python_recorder.py",
    "profiler/capture/rank_part.py",
    "profiler/capture/recorders.py",
    "profiler/capture/recording.py",
    "profiler/capture/script_child.py",
    "profiler/capture/torchrun_worker.py",
)
STUBS = {
    "device_model/__init__.py": '"""The part of the chip model a recording child needs: the atomic writer."""\n',
    "profiler/__init__.py": '"""The part of neuron-profile a recording child needs."""\n',
}


def make_bootstrap(folder: str | Path) -> Path:
    """Copy the child's modules into `folder` (a private folder of this capture's) and return
    it, for the front of the child's PYTHONPATH."""
    folder = Path(folder)
    for rel in CHILD_FILES:
        target = folder / rel
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        shutil.copyfile(ROOT / rel, target)
    for rel, text in STUBS.items():
        (folder / rel).write_text(text)
    return folder
