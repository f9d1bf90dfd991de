"""The one atomic writer: whole file or old file, the asked-for mode, nothing left behind."""
from __future__ import annotations

import os
import signal
import stat

import pytest

from device_model.fileio import current_umask, replacing, write_atomic


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_bytes_and_chunks_land_whole_with_private_mode_by_default(tmp_path):
    target = tmp_path / "out.bin"
    assert write_atomic(target, b"abc") == target
    assert target.read_bytes() == b"abc" and _mode(target) == 0o600
    write_atomic(target, iter([b"x", b"yz"]), fsync=True)
    assert target.read_bytes() == b"xyz"
    assert [p.name for p in tmp_path.iterdir()] == ["out.bin"]


def test_umask_applies_only_when_asked(tmp_path):
    old = os.umask(0o027)
    try:
        write_atomic(tmp_path / "a", b"", mode=0o666, apply_umask=True)
        write_atomic(tmp_path / "b", b"", mode=0o644)
    finally:
        os.umask(old)
    assert _mode(tmp_path / "a") == 0o640 and _mode(tmp_path / "b") == 0o644
    assert current_umask() == old


def test_an_error_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "keep.txt"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError):
        with replacing(target, prefix=".tmp-", suffix=".x") as fh:
            fh.write(b"new, half written")
            assert os.path.basename(fh.name).startswith(".tmp-") and fh.name.endswith(".x")
            raise RuntimeError("interrupted")
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["keep.txt"]


def test_keep_open_hands_back_a_descriptor_on_the_renamed_file(tmp_path):
    target = tmp_path / "mapped.ctr"
    with replacing(target, keep_open=True) as fh:
        fd = fh.fileno()
        fh.write(b"1234")
    try:
        os.pwrite(fd, b"9", 0)                     # still open, and it is the file now in place
        assert target.read_bytes() == b"9234"
    finally:
        os.close(fd)


def test_a_relative_name_is_written_in_the_working_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_atomic("plain", b"ok")
    assert (tmp_path / "plain").read_bytes() == b"ok"


@pytest.mark.parametrize("folder", ["missing", "a-file"])
def test_an_unusable_folder_is_named_not_the_temporary(tmp_path, folder):
    (tmp_path / "a-file").write_bytes(b"")
    target = tmp_path / folder / "out.json"
    with pytest.raises(OSError) as caught:
        write_atomic(target, b"{}")
    assert caught.value.filename == str(target.parent)
    assert ".tmp" not in str(caught.value)


def test_a_symlink_is_followed_and_kept(tmp_path):
    """`--output-file link.json` where link.json points elsewhere: the file it points to gets
    the data, the link stays a link (a rename would have replaced the link itself)."""
    real = tmp_path / "real"
    real.mkdir()
    (real / "target.json").write_bytes(b"old")
    link = tmp_path / "link.json"
    link.symlink_to(os.path.join("real", "target.json"))
    write_atomic(link, b"new")
    assert link.is_symlink() and (real / "target.json").read_bytes() == b"new"
    assert sorted(p.name for p in real.iterdir()) == ["target.json"]
    dangling = tmp_path / "dangling.json"
    dangling.symlink_to(real / "absent.json")
    write_atomic(dangling, b"made")
    assert dangling.is_symlink() and (real / "absent.json").read_bytes() == b"made"


def test_a_fifo_is_written_in_place_not_replaced(tmp_path):
    """A FIFO (or /dev/null, a terminal) is a stream a reader waits on: renaming a file onto it
    would destroy it and leave the reader blocked forever. It is written in place."""
    import threading
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    write_atomic(fifo, [b"a" * 100_000, b"b"])
    reader.join(10)
    assert got == [b"a" * 100_000 + b"b"]
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert [p.name for p in tmp_path.iterdir()] == ["pipe"]      # no temporary beside it


@pytest.mark.parametrize("stop", ["SIGINT", "SIGTERM"])
def test_a_stop_signal_as_the_temporary_appears_leaves_nothing_behind(tmp_path, monkeypatch,
                                                                       stop):
    """A stop whose handler raised just after the temporary was made, before its clean-up was
    armed, left the temporary in the target's folder (a trace export stopped at its start)."""
    signum = getattr(signal, stop)

    def raise_stop(number, frame):
        raise KeyboardInterrupt

    real = os.open

    def stopped_as_made(path, *args, **kwargs):
        made = real(path, *args, **kwargs)
        if str(path).endswith(".tmp"):
            os.kill(os.getpid(), signum)      # arrives the instant the temporary exists
        return made

    previous = signal.signal(signum, raise_stop)
    monkeypatch.setattr(os, "open", stopped_as_made)
    try:
        with pytest.raises(KeyboardInterrupt):
            with replacing(tmp_path / "trace.json") as fh:
                fh.write(b"never")
    finally:
        signal.signal(signum, previous)
    assert list(tmp_path.iterdir()) == []
