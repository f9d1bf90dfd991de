"""Chunked fixed-width JSON records (exact values across chunk boundaries and signs) and the
write-behind atomic writer (errors on either side leave no file)."""
from __future__ import annotations

import gzip

import numpy as np
import orjson
import pytest
from hypothesis import given, settings, strategies as st

from device_model import instance
from device_model.workloads import Placement
from profiler.export import jsonenc
from profiler.capture.builtin import capture_workload
from profiler.export.chrome import chrome_chunks
from profiler.export.jsonenc import Int, IntOf, Micros, Text, iter_records
from profiler.export.traceio import write_atomic

TABLE = ("a", "bb\"q", "ccc\\", "é", "Memcpy DMA_X")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(-10**12, 10**12), st.integers(-10**15, 10**15),
                          st.integers(0, 4), st.integers(0, 2)), min_size=1, max_size=40),
       st.integers(1, 9))
def test_chunked_records_parse_back_exactly(rows, chunk):
    ints = np.array([r[0] for r in rows], dtype=np.int64)
    ns = np.array([r[1] for r in rows], dtype=np.int64)
    idx = np.array([r[2] for r in rows])
    pick = np.array([r[3] for r in rows])
    table = np.array([7, -1048577, 123456789012])
    again = Int(ints)
    parts = [b'{"i":', again, b',"t":', Micros(ns), b',"s":', Text(idx, TABLE),
             b',"c":', IntOf(pick, table), b',"j":', again, b'},']
    chunks = list(iter_records(parts, len(rows), rows=chunk))
    assert len(chunks) == -(-len(rows) // chunk)
    back = orjson.loads(b"[" + b"".join(chunks)[:-1] + b"]")
    assert [b["i"] for b in back] == [b["j"] for b in back] == ints.tolist()
    assert [round(b["t"] * 1000) for b in back] == ns.tolist()
    assert [b["s"] for b in back] == [TABLE[i] for i in idx]
    assert [b["c"] for b in back] == table[pick].tolist()


def test_each_chunk_is_as_wide_as_its_own_values():
    parts = [b'{"i":', Int(np.array([1, 123456789])), b',"s":', Text(np.array([0, 4]), TABLE), b'}']
    small, large = iter_records(parts, 2, rows=1)
    assert small == b'{"i":1,"s":"a"}'
    assert large == b'{"i":123456789,"s":"Memcpy DMA_X"}'


def test_chrome_trace_is_the_same_in_any_chunk_size(monkeypatch):
    prof = capture_workload("mlp:tokens=512,hidden=512,layers=2,microbatches=2",
                            instance("trn2.48xlarge"), Placement(dp=2))
    whole = b"".join(chrome_chunks(prof)[0])
    monkeypatch.setattr(jsonenc, "CHUNK_ROWS", 7)
    chunks, count = chrome_chunks(prof)
    small = b"".join(chunks)
    assert small != whole                        # narrower columns in most chunks
    assert orjson.loads(small) == orjson.loads(whole)
    assert len(orjson.loads(small)["traceEvents"]) == count


def test_write_atomic_streams_chunks_and_gzips(tmp_path):
    chunks = [bytes([65 + i % 26]) * 1000 for i in range(100)]
    write_atomic(tmp_path / "t.bin", iter(chunks))
    write_atomic(tmp_path / "t.bin.gz", iter(chunks))
    assert (tmp_path / "t.bin").read_bytes() == b"".join(chunks)
    assert gzip.decompress((tmp_path / "t.bin.gz").read_bytes()) == b"".join(chunks)


def test_a_failing_producer_leaves_no_file(tmp_path):
    def chunks():
        yield b"x" * 100
        raise RuntimeError("encoder broke")

    with pytest.raises(RuntimeError, match="encoder broke"):
        write_atomic(tmp_path / "t.json", chunks())
    assert list(tmp_path.iterdir()) == []


def test_a_failing_write_is_raised_in_the_caller_and_leaves_no_file(tmp_path):
    with pytest.raises(TypeError):
        write_atomic(tmp_path / "t.json", iter([b"ok", 12345, b"never"]))
    assert list(tmp_path.iterdir()) == []
