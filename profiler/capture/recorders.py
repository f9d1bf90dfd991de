"""Choosing and starting a recorder: the native one when it can be built, else the Python one."""
from __future__ import annotations

import os
from typing import Callable

from .options import RECORDER_KINDS
from .recording import RecorderBase


def start_recorder(kind: str | None = None, steps: tuple[int, int | None] | None = None,
                   note: Callable[[str], None] | None = None) -> RecorderBase:
    """A started recorder: `kind` "native", "python" or "auto" (default: $NEURONSCOPE_RECORDER,
    else auto — native when it can be built, else the Python one, with `note(reason)` called
    when it cannot). `steps`: keep only that window of steps (the native recorder is off outside
    it). ValueError for an unknown kind, or "native" when it cannot be built."""
    kind = kind or os.environ.get("NEURONSCOPE_RECORDER", "auto")
    if kind not in RECORDER_KINDS:
        raise ValueError(f"unknown recorder {kind!r} (choose auto, native or python)")
    if kind != "python":
        from .native.build import NativeUnavailable
        from .native_recorder import NativeRecorder
        try:
            return NativeRecorder(steps=steps, note=note or _stderr_note).start()
        except NativeUnavailable as e:
            if kind == "native":
                raise ValueError(str(e)) from None
            (note or _stderr_note)(f"{e}; using the Python recorder (slower)")
    from .python_recorder import Recorder
    return Recorder(steps=steps, note=note).start()


def _stderr_note(reason: str) -> None:
    import sys
    print(f"profiler: {reason}", file=sys.stderr)
