"""Which Python a script capture runs: the interpreter the user named (`-- python3 train.py`,
`-- .venv/bin/python -m pkg`), the one torchrun's own script starts (its shebang), or, for a bare
`-- train.py`, neuron-profile's own. The torch of that interpreter is what gets recorded; the
child checks it (`script_child.torch_problem`) before anything else and says in one line what
is missing.
"""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from ..errors import ProfilerUsageError

def looks_like_python(word: str) -> bool:
    return Path(word).name.startswith("python")


def resolve_program(word: str) -> str:
    """The absolute path of a program named on the command line, found as a shell would."""
    found = shutil.which(word) if os.sep not in word else (word if os.access(word, os.X_OK) else None)
    if found is None or not os.path.isfile(found):
        raise ProfilerUsageError(f"{word}: no such program" + ("" if os.sep in word else " on the PATH"))
    return os.path.abspath(found)


def torchrun_interpreter(torchrun: str) -> str:
    """The Python torchrun's own script starts (`#!/venv/bin/python`, or `#!/usr/bin/env
    python3`); neuron-profile's own when it cannot be read."""
    path = resolve_program(torchrun)
    try:
        with open(path, "rb") as fh:
            first = fh.readline(4096).decode("utf-8", "replace")
    except OSError:
        return sys.executable
    if not first.startswith("#!"):
        return sys.executable
    words = first[2:].split()
    if not words:
        return sys.executable
    if Path(words[0]).name == "env":
        words = [w for w in words[1:] if not w.startswith("-")]
        if not words:
            return sys.executable
        return resolve_program(words[0])
    return words[0] if os.access(words[0], os.X_OK) else sys.executable
