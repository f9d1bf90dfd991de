"""Where a capture's profile goes: the destination checked before anything runs, and a
recording kept, not lost, when the destination fails at the end.

`check_destination` makes and removes a file in the target folder, so a missing folder, a
read-only one or a full disk is one line (exit 2) before a script trains for an hour. Should the
write still fail later (the disk filled meanwhile), `save_or_keep` writes the profile into the
capture's private folder instead (0700, kept), names it, and the capture exits non-zero with the
script's exit code kept. `finish_capture` is the last step both launchers share: the recording
mapped and written with stop signals caught, and the capture's exit code from the child's.
"""
from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .. import console
from ..errors import ProfilerUsageError
from .child_process import CaptureFolder, Interrupted, stop_signals_raise


def _reason(e: OSError) -> str:
    return e.strerror.lower() if e.strerror else str(e)


def check_destination(session_file: str | os.PathLike) -> Path:
    """`session_file` if a profile can be written there; ProfilerUsageError (one line naming the
    folder or the file) otherwise."""
    target = Path(session_file)
    folder = target.parent if str(target.parent) else Path(".")
    if target.is_dir():
        raise ProfilerUsageError(f"cannot write the profile to {str(target)!r}: it is a folder")
    if not folder.exists():
        raise ProfilerUsageError(f"cannot write the profile to {str(target)!r}: "
                                 f"folder {str(folder)!r} does not exist")
    if not folder.is_dir():
        raise ProfilerUsageError(f"cannot write the profile to {str(target)!r}: {str(folder)!r} is not a folder")
    try:
        fd, probe = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".probe", dir=folder)
    except OSError as e:
        raise ProfilerUsageError(f"cannot write the profile to {str(target)!r}: folder {str(folder)!r}: "
                                 f"{_reason(e)}") from None
    os.close(fd)
    os.unlink(probe)
    if target.exists() and not os.access(target, os.W_OK) and not os.access(folder, os.W_OK):
        raise ProfilerUsageError(f"cannot replace {str(target)!r}: permission denied")
    return target


def save_or_keep(profile, session_file: str | os.PathLike, keep_in=None) -> Path | None:
    """Write `profile` to `session_file`; if that fails, write it into `keep_in` (the capture's
    CaptureFolder, or a new private one), which is then kept, and say where, in one line. The
    path written, or None when it went to the keeping place (or nowhere)."""
    from ..model.fileformat import save
    try:
        return save(profile, session_file)
    except OSError as e:
        failure = f"cannot write the profile to {str(session_file)!r}: {_reason(e)}"
    if keep_in is None:
        keep_in = CaptureFolder.create()
    try:
        kept = save(profile, keep_in.path / (Path(session_file).name or "profile.nsprof"))
    except OSError as e:
        keep_in.keep()
        console.error(f"{failure}; keeping it failed too ({_reason(e)}); the raw recording is kept in "
                      f"{keep_in.parts}")
        return None
    keep_in.keep()
    console.error(f"{failure}; the profile is kept at {kept}")
    return None


@dataclass(frozen=True, slots=True)
class ChildExit:
    """How the capture's child ended: its exit code, the first stop signal the capture received
    (or None), and what it was (`script`, `torchrun`) for the closing line."""
    code: int
    signum: int | None
    who: str

    @property
    def stopped(self) -> int | None:
        """128 + the stop signal, when one stopped the capture."""
        return 128 + self.signum if self.signum else None

    @property
    def final(self) -> int:
        """The capture's exit code: 128 + the stop signal, else the child's."""
        return self.stopped or self.code


def finish_capture(build: Callable[[], object], session_file: str | os.PathLike, work, child: ChildExit, *,
                   plural: bool = False, described: Callable[[object], str] = console.contents) -> int:
    """Map the recording(s) into a profile (`build`) and write it to `session_file`, stop signals
    raising meanwhile; the capture's exit code. An interruption, or a recording the chip model
    rejects, keeps the recording(s) in `work` and says so in one line; a profile that could not
    be written where asked is kept there too (save_or_keep), and the exit code is then non-zero.
    `described(profile)` is what the closing line says the profile holds."""
    from device_model.errors import SpecError
    noun, kept = ("the recordings", "they are") if plural else ("the recording", "it is")
    try:
        with stop_signals_raise():
            profile = build()
            written = save_or_keep(profile, session_file, work)
    except Interrupted as e:
        work.keep()
        console.error(f"{e} while simulating {noun}; {kept} kept in {work.parts}")
        return child.stopped or 128 + e.signum
    except (SpecError, ValueError) as e:
        work.keep()
        console.error(f"{e}; {noun} {'are' if plural else 'is'} kept in {work.parts}")
        return child.final or 2
    if written is None:
        console.note(f"{child.who} exit code {child.code}")
        return child.final or 1
    for line in getattr(profile, "meta", {}).get("notes", ()):
        console.note(f"warning: {line}")
    console.note(f"wrote {written} ({described(profile)}; {child.who} exit code {child.code})")
    return child.final          # the closing line stays the last, warnings or not
