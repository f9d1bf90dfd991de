"""Well-formed profile files with bad values, and decompression bombs: `neuron-profile
view/diff/advise` answer with one line and exit 2, never a traceback; a column that inflates past
its declared size is refused without holding more than that in memory."""
from __future__ import annotations

import contextlib
import io
import math
import struct
import tempfile
import tracemalloc
import zlib
from pathlib import Path

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from device_model import instance
from device_model.workloads import Placement
from profiler import cli
from profiler.capture.builtin import capture_workload
from profiler.model import fileformat
from profiler.model.profile import SCHEMA, Profile, ProfileError

COMMANDS = ([["view", "--output-format", f] for f in ("summary-text", "summary-json", "json")]
            + [["view", "--output-format", "chrome", "--output-file", "{out}.json"],
               ["view", "--output-format", "perfetto", "--output-file", "{out}.pftrace"],
               ["advise"]])


@pytest.fixture(scope="module")
def small():
    inst = instance("trn2.48xlarge")
    one = capture_workload("matmul:m=128,k=128,n=128", inst, num_exec=2, nth_exec=2)
    two = capture_workload("mlp:tokens=128,hidden=128,layers=2,microbatches=1", inst,
                           Placement(pp=2), num_exec=2)
    return one, two


def _run(args: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    out = io.TextIOWrapper(io.BytesIO())
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            code = cli.main(args)
        except SystemExit as e:      # argparse
            code = e.code
    return code, err.getvalue()


def _assert_clean(profile: Profile) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "p.nsprof"
        path.write_bytes(fileformat.encode(profile))
        for args in COMMANDS + [["diff"]]:
            argv = [args[0]] + (["-s", str(path)] if args[0] != "diff" else [str(path), str(path)]) + \
                [a.format(out=Path(tmp) / "out") for a in args[1:]]
            code, err = _run(argv)
            assert code in (0, 2), (argv, err)
            if code == 2:
                assert err.count("\n") == 1 and err.startswith("neuron-profile: error: "), err


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1) | st.floats(allow_nan=True) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(which=st.integers(0, 1), key=st.sampled_from(
    ["lane_rows", "lane_engines", "opcodes", "queues", "queue_rows", "phases", "instance", "device",
     "lnc", "clocks_hz", "tensor_peak_flops_bf16", "hbm_bw_per_stack", "ranks", "placement", "rank",
     "created_unix_s", "workload", "source", "exec_overhead_s", "host_pid"]),
    value=JSON_VALUES, delete=st.booleans())
# a start time whose nanoseconds overflow 64 bits (a trace's base time) once raised in the export
@example(which=0, key="created_unix_s", value=18446744074.0, delete=False)
# a queue list without the queues the summary names (another recorder's set) once raised in it
@example(which=0, key="queues", value=[""], delete=False)
def test_bad_header_values_are_one_line_never_a_traceback(small, which, key, value, delete):
    p = small[which]
    meta = dict(p.meta)
    if delete:
        meta.pop(key, None)
    else:
        meta[key] = value
    _assert_clean(Profile(meta, p.strings, p.tables))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(which=st.integers(0, 1), data=st.data(),
       value=st.sampled_from([math.nan, math.inf, -math.inf, -1, -2**31, 2**31 - 1, 255, 1e300, 0, 7,
                              2e19]),
       retype=st.booleans())
def test_bad_column_values_are_one_line_never_a_traceback(small, which, data, value, retype):
    p = small[which]
    name = data.draw(st.sampled_from(sorted(SCHEMA)))
    col = data.draw(st.sampled_from(sorted(SCHEMA[name])))
    _with_value(p, name, col, value, retype, data)


def test_a_count_past_int64_is_written_not_a_traceback(small):
    """An instruction's FLOPs of 2e19 (float32 holds it) made the JSON views raise: the summary
    rounded the total to an integer orjson cannot write."""
    _with_value(small[0], "instructions", "flops", 2e19, False, None)


def _with_value(p, name: str, col: str, value, retype: bool, data) -> None:
    tables = {t: dict(cols) for t, cols in p.tables.items()}
    arr = tables[name][col].copy()
    if retype:      # a damaged file's column in another dtype: values may wrap, as on disk
        with np.errstate(all="ignore"):
            arr = arr.astype(data.draw(st.sampled_from(["<f8", "<i4", "|u1", "<i8"])))
    if arr.size:
        i = data.draw(st.integers(0, arr.size - 1)) if data is not None else 0
        with np.errstate(all="ignore"):
            arr[i] = np.array(value).astype(arr.dtype) if arr.dtype.kind != "f" else value
    tables[name][col] = arr
    _assert_clean(Profile(p.meta, p.strings, tables))


@pytest.mark.parametrize("col, value", [("bytes", 1e300), ("bytes", math.nan), ("bytes", -1),
                                        ("ranks", 1e300), ("ranks", math.inf)])
def test_a_collective_of_impossible_size_is_left_out_of_the_chrome_trace(small, col, value):
    """Found by the property test above: a collective of 1e300 bytes reached the Chrome trace's
    message size as an integer JSON cannot hold (a traceback)."""
    p = small[1]
    tables = {t: dict(cols) for t, cols in p.tables.items()}
    arr = tables["collectives"][col].astype("<f8")
    assert arr.size
    arr[0] = value
    tables["collectives"][col] = arr
    _assert_clean(Profile(p.meta, p.strings, tables))

@pytest.mark.parametrize("table, col, target", [("ops", "host", "host"), ("host", "op", "ops")])
def test_a_rank_pointing_at_another_ranks_rows_is_one_line(small, table, col, target):
    """Valid for the whole file, out of range for the rank's own view: rank 0's first row
    pointing at rank 1's last row of `target`."""
    p = small[1]
    tables = {t: dict(cols) for t, cols in p.tables.items()}
    ref = tables[table][col].copy()
    ref[0] = p.rows(target) - 1
    tables[table][col] = ref
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "p.nsprof"
        path.write_bytes(fileformat.encode(Profile(p.meta, p.strings, tables)))
        code, err = _run(["view", "-s", str(path), "--output-format", "chrome",
                          "--output-file", str(Path(tmp) / "t.json")])
    assert code == 2 and err.count("\n") == 1
    assert err.startswith(f"neuron-profile: error: {path}: metadata 'ranks': rank 0: ")
    assert "missing" in err and "of another rank" in err


@pytest.mark.parametrize("meta_change, message", [
    ({"lane_rows": True}, "'lane_rows' must be a non-empty list"),
    ({"lane_engines": None}, "'lane_engines' must be a non-empty list"),
    ({"ranks": 3}, "'ranks' must be a list"),
    ({"lnc": "2"}, "'lnc' must be 1 or 2"),
    ({"trace_metadata": ["run", "r7"]}, "'trace_metadata' must be an object"),
])
def test_named_bad_header_fields(small, tmp_path, meta_change, message):
    p = small[1]
    path = tmp_path / "p.nsprof"
    path.write_bytes(fileformat.encode(Profile({**p.meta, **meta_change}, p.strings, p.tables)))
    code, err = _run(["view", "-s", str(path)])
    assert code == 2 and message in err and err.count("\n") == 1


def test_nan_step_start_and_out_of_range_opcode_and_phase(small, tmp_path):
    p = small[0]
    for table, col, value, message in [("steps", "start", np.nan, "steps.start holds a value that is not finite"),
                                       # it gave dma_active_time_percent -104386
                                       ("instructions", "end", -1.0, "an instruction ends before it starts"),
                                       ("instructions", "opcode", 250, "instructions.opcode holds a value out of range"),
                                       ("ops", "phase", 9, "ops.phase holds a value out of range")]:
        tables = {t: dict(c) for t, c in p.tables.items()}
        arr = tables[table][col].copy()
        arr[0] = value
        tables[table][col] = arr
        path = tmp_path / f"{col}.nsprof"
        path.write_bytes(fileformat.encode(Profile(p.meta, p.strings, tables)))
        for args in (["view", "-s", str(path)], ["advise", "-s", str(path)], ["diff", str(path), str(path)]):
            code, err = _run(args)
            assert code == 2 and message in err and err.count("\n") == 1, (args, err)


def _with_column_blob(blob: bytes, table: str, column: str, payload: bytes, raw_nbytes: int) -> bytes:
    """`blob` with one column's data replaced by `payload` (zlib) declaring `raw_nbytes`."""
    hlen = struct.unpack("<I", blob[8:12])[0]
    header = orjson.loads(blob[12:12 + hlen])
    body = blob[12 + hlen:-(len(fileformat.TRAILER) + 8)]
    blobs, offset = [], 0
    for tname, t in header["tables"].items():
        for c in t["columns"]:
            data = body[c["offset"]:c["offset"] + c["nbytes"]]
            if tname == table and c["name"] == column:
                data = payload
                c.update(codec="zlib", raw_nbytes=raw_nbytes)
            c.update(offset=offset, nbytes=len(data))
            blobs.append(data)
            offset += len(data)
    head = orjson.dumps(header)
    out = b"".join([fileformat.MAGIC, struct.pack("<I", len(head)), head, *blobs])
    total = len(out) + len(fileformat.TRAILER) + 8
    return out + fileformat.TRAILER + struct.pack("<Q", total)


def test_decompression_bomb_is_capped_by_the_declared_size(small, tmp_path):
    p = small[0]
    rows = p.rows("steps")
    bomb = zlib.compress(bytes(256 << 20), 9)           # 256 MiB of zeros in ~250 KiB
    crafted = _with_column_blob(fileformat.encode(p), "steps", "start", bomb, rows * 8)
    assert len(crafted) < 1 << 20
    tracemalloc.start()
    try:
        with pytest.raises(ProfileError, match="decompresses to more"):
            fileformat.decode(crafted)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20                      # never near the 256 MiB it would inflate to


def test_declared_sizes_that_cannot_fit_are_refused_up_front(small):
    p = small[0]
    rows = p.rows("steps")
    payload = zlib.compress(bytes(rows * 8))
    base = fileformat.encode(p)
    lying = _with_column_blob(base, "steps", "start", payload, 1 << 40)   # rows do not match
    with pytest.raises(ProfileError, match="declares"):
        fileformat.decode(lying)
    hlen = struct.unpack("<I", base[8:12])[0]
    header = orjson.loads(base[12:12 + hlen])
    header["tables"]["steps"]["rows"] = 1 << 36                           # many rows, tiny blob
    for c in header["tables"]["steps"]["columns"]:
        c["raw_nbytes"] = (1 << 36) * np.dtype(c["dtype"]).itemsize
    head = orjson.dumps(header)
    body = base[12 + hlen:]
    forged = fileformat.MAGIC + struct.pack("<I", len(head)) + head + body[:-8]
    forged += struct.pack("<Q", len(forged) + 8)
    with pytest.raises(ProfileError):
        fileformat.decode(forged)


def test_a_damaged_count_in_a_perfetto_arg_is_clamped_not_wrapped():
    """A FLOP count of 2e19 (past int64) was cast to int64 for the Perfetto trace's `flops`
    arg: it wrapped to a negative number, with a RuntimeWarning."""
    from profiler.export.perfetto import _counts
    with np.errstate(all="raise"):
        out = _counts(np.array([2e19, math.nan, -5.0, 1.6, math.inf], dtype=np.float32))
    assert out.dtype == np.int64
    top = int(np.nextafter(2.0 ** 63, 0))
    assert out.tolist() == [top, 0, 0, 2, top]
