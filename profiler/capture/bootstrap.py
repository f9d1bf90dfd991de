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
ENTRY = "neuronscope_record.py"
# Started as a script file, so the bootstrap folder, not the working directory, is first on the
# path while the recorder loads (`python -m` would put the working directory first); it then
# leaves sys.path[0] for the target, as `python SCRIPT` or `python -m MODULE` would set it.
ENTRY_TEXT = '''"""A recording child of `neuron-profile capture`: `--worker` for a torchrun worker."""
import os
import sys

if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    if sys.argv[1:2] == ["--worker"]:
        from profiler.capture.torchrun_worker import worker_main as main
        args = sys.argv[2:]
    else:
        from profiler.capture.script_child import child_main as main
        args = sys.argv[1:]
    if [os.path.abspath(p) for p in sys.path[:1]] == [here] and here in sys.path[1:]:
        del sys.path[0]             # this folder as the script's; it stays on PYTHONPATH
    sys.exit(main(args))
'''
STUBS = {
    "device_model/__init__.py": '"""The part of the chip model a recording child needs: the atomic writer."""\n',
    "profiler/__init__.py": '"""The part of neuron-profile a recording child needs."""\n',
}


def make_bootstrap(folder: str | Path) -> Path:
    """Copy the child's modules into `folder` (a private folder of this capture's) and return
    it, for the front of the child's PYTHONPATH; the child runs `folder/ENTRY`."""
    folder = Path(folder)
    for rel in CHILD_FILES:
        target = folder / rel
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        shutil.copyfile(ROOT / rel, target)
    for rel, text in STUBS.items():
        (folder / rel).write_text(text)
    (folder / ENTRY).write_text(ENTRY_TEXT)
    return folder
