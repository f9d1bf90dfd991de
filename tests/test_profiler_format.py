"""The profile file: round trip, atomic write, and every kind of damage caught as ProfileError."""
from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from device_model import instance
from device_model.workloads import Placement
from profiler.model import fileformat
from profiler.capture.builtin import capture_workload
from profiler.model.profile import SCHEMA, ProfileError


@pytest.fixture(scope="module")
def prof():
    return capture_workload("mlp:tokens=256,hidden=256,layers=2", instance("trn2.48xlarge"),
                            Placement(dp=2), num_exec=2, nth_exec=2)


@pytest.fixture(scope="module")
def blob(prof):
    return fileformat.encode(prof)


def test_round_trip_keeps_every_column_and_the_metadata(prof, blob):
    back = fileformat.decode(blob)
    assert back.meta == prof.meta
    assert back.strings == prof.strings
    for table, cols in SCHEMA.items():
        for col, dtype in cols.items():
            np.testing.assert_array_equal(back.tables[table][col], prof.tables[table][col])
            assert back.tables[table][col].dtype == np.dtype(dtype)


def test_file_is_self_describing(blob):
    assert blob[:8] == fileformat.MAGIC
    (hlen,) = struct.unpack("<I", blob[8:12])
    import orjson
    header = orjson.loads(blob[12:12 + hlen])
    assert header["schema_version"] == fileformat.SCHEMA_VERSION
    assert header["meta"]["instance"] == "trn2.48xlarge"
    assert {"lane_rows", "opcodes", "queue_rows", "clocks_hz"} <= set(header["meta"])
    cols = header["tables"]["instructions"]["columns"]
    assert {c["name"] for c in cols} == set(SCHEMA["instructions"])
    assert all(c["codec"] in ("raw", "zlib") for c in cols)


def test_compact_compared_with_raw_columns():
    big = capture_workload("matmul:m=4096,k=4096,n=4096", instance("trn2.48xlarge"))
    assert big.rows("instructions") > 4000
    raw = sum(a.nbytes for t in big.tables.values() for a in t.values())
    as_float64 = big.rows("instructions") * len(SCHEMA["instructions"]) * 8
    assert len(fileformat.encode(big)) < 0.5 * raw < as_float64


def test_save_is_atomic_and_leaves_no_temporary(tmp_path, prof):
    path = fileformat.save(prof, tmp_path / "p.nsprof")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.nsprof"]
    assert fileformat.load(path).rows("ops") == prof.rows("ops")


def test_operator_level_for_all_steps_instruction_level_for_chosen(prof):
    steps = prof.table("steps")
    assert steps["step"].tolist() == [1, 2]
    assert steps["detailed"].tolist() == [0, 1]
    ops = prof.table("ops")
    assert set(ops["step"].tolist()) == {1, 2}
    assert set(ops["step"][prof.table("instructions")["op"]].tolist()) == {2}


@pytest.mark.parametrize("damage, message", [
    (lambda b: b[: len(b) // 2], "truncated"),
    (lambda b: b[:-1], "truncated"),
    (lambda b: b"XXXXXXXX" + b[8:], "bad magic"),
    (lambda b: b"NSPROFv9" + b[8:], "not supported"),
    (lambda b: b"", "bad magic"),
    (lambda b: b + b"extra", "truncated"),
    # cut just after the magic: it said "format b'v1' is not supported (this tool reads v1)"
    (lambda b: b[:8], "truncated profile \\(8 bytes: no header\\)"),
    (lambda b: b[:9], "truncated profile"),
])
def test_damaged_files_are_rejected_with_one_line(blob, damage, message):
    with pytest.raises(ProfileError, match=message) as info:
        fileformat.decode(damage(blob))
    assert "\n" not in str(info.value)


def test_flipped_byte_in_a_column_fails_the_checksum(blob):
    data = bytearray(blob)
    data[-200] ^= 0xFF
    with pytest.raises(ProfileError, match="corrupt|checksum|truncated"):
        fileformat.decode(bytes(data))


@settings(max_examples=150, deadline=None)
@given(cut=st.integers(min_value=0, max_value=10_000), pos=st.integers(min_value=0), value=st.integers(0, 255))
def test_any_truncation_or_byte_change_is_an_error_or_a_valid_profile(blob, cut, pos, value):
    """Damage never escapes as anything but ProfileError (no IndexError, zlib.error, ...)."""
    for data in (blob[: cut % len(blob)], _poke(blob, pos % len(blob), value)):
        try:
            p = fileformat.decode(data)
        except ProfileError as e:
            assert "\n" not in str(e)
        else:
            p.validate()


def _poke(data: bytes, pos: int, value: int) -> bytes:
    b = bytearray(data)
    b[pos] = value
    return bytes(b)


def test_missing_and_directory_paths(tmp_path):
    with pytest.raises(ProfileError, match="no such profile"):
        fileformat.load(tmp_path / "nope.nsprof")
    with pytest.raises(ProfileError, match="directory"):
        fileformat.load(tmp_path)
