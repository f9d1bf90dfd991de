"""Where a capture's profile goes: the destination checked before anything runs, and a
recording kept, not lost, when the destination fails at the end.

`check_destination` makes and removes a file in the target folder, so a missing folder, a
read-only one or a full disk is one line (exit 2) before a script trains for an hour. Should the
write still fail later (the disk filled meanwhile), `save_or_keep` writes the profile into the
capture's private folder instead (0700, kept), names it, and the capture exits non-zero with the
script's exit code kept.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .. import console
from ..errors import ProfilerUsageError


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
    from .child_process import CaptureFolder
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
