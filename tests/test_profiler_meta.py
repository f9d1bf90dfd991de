"""Hand-edited, checksum-valid profiles: every field of the header's metadata that the code reads,
removed or given a bad value, is either refused when the file is read (one line naming the
field, exit 2 from every command) or harmless to every view, export, diff and advice."""
from __future__ import annotations

import contextlib
import copy
import io
import tempfile
from pathlib import Path

import pytest

from device_model import instance
from device_model.workloads import Placement
from profiler import cli
from profiler.capture.builtin import capture_workload
from profiler.model import fileformat
from profiler.model.profile import Profile, ProfileError

# values a hand edit can leave (JSON the file's reader accepts; orjson reads a >64-bit integer
# as a float, so 1e308 stands for one too)
BAD_VALUES = (None, True, "x", -1, 0, 0.5, 1e308, -1e308, 2 ** 63 - 1, [], ["x"], {"x": 1})
COMMANDS = ([["view", "--output-format", f] for f in ("summary-text", "summary-json", "json")]
            + [["view", "--output-format", "chrome", "--output-file", "{out}.json"],
               ["view", "--output-format", "chrome", "--output-file", "{out}_trace"],
               ["view", "--output-format", "perfetto", "--output-file", "{out}.pftrace"],
               ["advise"], ["advise", "--json"], ["diff"]])


# written for the record, read by no view (summary-json copies the metadata as it is)
UNREAD = {"device_type", "neuroncore_version", "is_simulation", "model_version", "tool_version",
          "exec_overhead_s", "num_exec", "profile_nth_exec", "ranks_option"}
# read when present: a rank view's keys, a script capture's command line
OPTIONAL = {"rank": 0, "device_pid": 0, "host_pid": 7, "host_name": "Host", "rank_label": "rank 0",
            "pipeline_stage": 0, "pipeline_stages": 1, "world_size": 1, "command": "python t.py"}


@pytest.fixture(scope="module")
def profiles() -> tuple[Profile, Profile]:
    inst = instance("trn2.48xlarge")
    one = capture_workload("matmul:m=128,k=128,n=128", inst, num_exec=2, nth_exec=2)
    two = capture_workload("mlp:tokens=128,hidden=128,layers=2,microbatches=1", inst,
                           Placement(pp=2), num_exec=2)
    return Profile({**one.meta, **OPTIONAL}, one.strings, one.tables), two


def _paths(value, path=()) -> list[tuple]:
    """Every key and list element of the metadata the code reads (long lists: first, second
    and last element)."""
    if len(path) == 1 and path[0] in UNREAD:
        return []
    out = [path] if path else []
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, path + (k,))
    elif isinstance(value, list):
        picks = range(len(value)) if len(value) <= 3 else (0, 1, len(value) - 1)
        for i in picks:
            out += _paths(value[i], path + (i,))
    return out


def _edited(meta: dict, path: tuple, value, delete: bool) -> dict:
    meta = copy.deepcopy(meta)
    holder = meta
    for k in path[:-1]:
        holder = holder[k]
    if delete:
        del holder[path[-1]]
    else:
        holder[path[-1]] = value
    return meta


def _run(args: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    out = io.TextIOWrapper(io.BytesIO())
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            code = cli.main(args)
        except Exception as e:      # a traceback: reported with the case that caused it
            return -1, f"{type(e).__name__}: {e}"
    return code, err.getvalue()


def _argv(args: list[str], path: Path, out: Path) -> list[str]:
    files = [str(path), str(path)] if args[0] == "diff" else ["-s", str(path)]
    return [args[0], *files, *(a.format(out=out) for a in args[1:])]


def _every_command(path: Path, tmp: Path) -> list[tuple[list[str], int, str]]:
    """Each command's (argv, exit code, stderr), its outputs written into a fresh folder."""
    out = Path(tempfile.mkdtemp(dir=tmp)) / "out"
    return [(argv, *_run(argv)) for argv in (_argv(a, path, out) for a in COMMANDS)]


def _cases(profiles) -> list[tuple[int, tuple, object, bool]]:
    cases = []
    for which, p in enumerate(profiles):
        for path in _paths(p.meta):
            cases.append((which, path, None, True))
            cases += [(which, path, v, False) for v in BAD_VALUES]
    return cases


def test_every_meta_field_removed_or_corrupted_is_refused_on_reading_or_harmless(profiles,
                                                                                tmp_path):
    """Exhaustive over the metadata of a single-rank and a two-rank profile: reading refuses
    the file in one line naming the field, or every command runs (exit 0) on it."""
    refused = accepted = 0
    path = tmp_path / "p.nsprof"
    for which, where, value, delete in _cases(profiles):
        p = profiles[which]
        meta = _edited(p.meta, where, value, delete)
        blob = fileformat.encode(Profile(meta, p.strings, p.tables))
        case = (which, where, "deleted" if delete else value)
        try:
            fileformat.decode(blob, "p.nsprof")
        except ProfileError as e:
            message = str(e)
            assert "\n" not in message and message.startswith("p.nsprof: "), case
            assert repr(where[0]) in message, (case, message)      # names the field
            refused += 1
            continue
        accepted += 1
        path.write_bytes(blob)
        for argv, code, err in _every_command(path, tmp_path):
            assert code == 0, (case, argv, err)
    assert refused and accepted


@pytest.mark.parametrize("edit, field", [
    (lambda m: m["ranks"][0].pop("stage"), "'stage'"),
    (lambda m: m["lane_rows"].__setitem__(1, "x"), "'lane_rows'"),
    (lambda m: m["clocks_hz"].__setitem__("base", 1e308), "'clocks_hz'"),
])
def test_the_audited_edits_are_one_line_and_exit_2_from_every_command(profiles, tmp_path, edit,
                                                                       field):
    """Found by the audit: these crashed views, advise and diff with tracebacks."""
    p = profiles[1]
    meta = copy.deepcopy(p.meta)
    edit(meta)
    path = tmp_path / "p.nsprof"
    path.write_bytes(fileformat.encode(Profile(meta, p.strings, p.tables)))
    for argv, code, err in _every_command(path, tmp_path):
        assert code == 2, (argv, err)
        assert err.count("\n") == 1 and err.startswith(f"neuron-profile: error: {path}: "), err
        assert field in err, err
