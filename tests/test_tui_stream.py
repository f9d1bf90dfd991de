"""neuron-top on real streams: -1 and --json for scripts, refusing a non-terminal stdout, why
nothing shows, exit status at the end of input, escaped input text, bounded lines and loops."""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import threading
import tracemalloc

import orjson

from monitor.report import Report
from monitor.sources import ListSource, ReplaySource, StreamSource
from monitor.stream import DEFAULT_MAX_LINE_BYTES
from tests.test_tui_support import FIXED_NOW, run_async, settle
from tui.app import NeuronTopApp
from tui.status import exit_status
from tui.widgets.panels import Banner
from tui.widgets.processes import ProcessTable

ROOT = pathlib.Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
INF1 = (FIXTURES / "neuron_monitor_sdk_inf1.json").read_bytes()
K8S = (FIXTURES / "neuron_monitor_sdk_k8s.json").read_bytes()
AWS = (FIXTURES / "neuron_monitor_aws_example.json").read_bytes().strip() + b"\n"
GARBAGE = b"FATA[0000] Failed to discover neuron devices\n[1, 2]\n"
ESC_DOC = orjson.loads(AWS)
ESC_DOC["neuron_runtime_data"][0].update(error="died \x1b]0;owned\x07\x1b[2J",
                                         neuron_runtime_tag="app\x1b[31m")
ESC = orjson.dumps(ESC_DOC) + b"\n"
PID0_DOC = orjson.loads(AWS)
PID0_DOC["neuron_runtime_data"][0]["pid"] = 0   # the source does not know the process
PID0 = orjson.dumps(PID0_DOC) + b"\n"


def top(*args: str, stdin: bytes = b"", columns: int = 80) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": str(columns), "LINES": "24"}
    return subprocess.run([sys.executable, "-m", "tui.cli", *args], input=stdin,
                          capture_output=True, cwd=ROOT, timeout=60, env=env)


def test_dash_1_prints_one_overview_of_an_inf1_stream_within_80_columns():
    out = top("-1", "-", stdin=INF1)
    text = out.stdout.decode()
    assert out.returncode == 0, out.stderr
    assert "running on i-0011223344556677a (inf1.6xlarge)" in text
    assert "stream lacks: flops, neuron_device_type" in text
    assert "ND3" in text and "NC3" in text and "[ 32.50%]" in text
    assert "Tensors N/A" in text  # host breakdown absent: N/A, never 0
    assert all(len(line) <= 80 for line in text.splitlines())
    assert b"\x1b" not in out.stdout


def test_dash_1_of_a_file_shows_its_last_report(tmp_path):
    second = orjson.loads(AWS)
    second["instance_info"]["instance_id"] = "i-second"
    path = tmp_path / "capture.jsonl"
    path.write_bytes(AWS + orjson.dumps(second) + b"\n")
    out = top("-1", "--input", str(path))
    assert out.returncode == 0 and "running on i-second" in out.stdout.decode()


def test_json_prints_one_report_as_one_line():
    out = top("--json", "-", stdin=AWS + AWS)
    assert out.returncode == 0
    assert out.stdout.count(b"\n") == 1
    assert Report.from_json(out.stdout).to_json() == Report.from_json(AWS).to_json()


def test_screen_mode_refuses_a_stdout_that_is_not_a_terminal():
    out = top("--input", str(FIXTURES / "neuron_monitor_aws_example.json"))
    err = out.stderr.decode()
    assert out.returncode == 2 and err.count("\n") == 1
    assert "stdout is not a terminal; use -1" in err and out.stdout == b""


def test_no_valid_report_exits_1_and_names_the_first_reasons():
    out = top("-1", "-", stdin=GARBAGE)
    err = out.stderr.decode()
    assert out.returncode == 1 and out.stdout == b""
    assert "no valid report from stdin (2 line(s) rejected)" in err
    assert "line 1 (not_json): 'FATA[0000] Failed to discover neuron devices' is not JSON" in err
    assert "line 2 (not_object)" in err and "Traceback" not in err


def test_a_snapshot_says_how_many_malformed_lines_it_skipped():
    """Lines rejected before a valid report are counted on stderr, as the interactive status
    line counts them (they were dropped without a word)."""
    out = top("-1", "-", stdin=GARBAGE + AWS)
    err = out.stderr.decode()
    assert out.returncode == 0 and b"ND" in out.stdout
    assert err == "neuron-top: malformed lines skipped: 2 (not_json:1,not_object:1)\n"


def test_a_runtime_of_unknown_pid_shows_n_a_in_the_text_snapshot():
    """pid 0: the source does not know the process (it was a TypeError traceback)."""
    out = top("-1", "-", stdin=PID0, columns=120)
    text = out.stdout.decode()
    assert out.returncode == 0, out.stderr.decode()
    row = next(line for line in text.splitlines() if "my_app_1" in line)
    assert row.split()[0] == "N/A"


@run_async
async def test_a_runtime_of_unknown_pid_on_every_screen():
    from tui.ptree import lineage
    for local in (None, lineage):   # a stream's runtimes, and as if they were on this host
        app = NeuronTopApp(ListSource([Report.from_json(PID0)], hold_open=True),
                           clock=lambda: FIXED_NOW, lineage=local)
        async with app.run_test(size=(120, 40)) as pilot:
            await settle(pilot, app, 1)
            await pilot.press("e", "p")
            table = "\n".join(s.text for s in app.query_one(ProcessTable).lines_for(118))
            assert table.splitlines()[1].split()[0] == "N/A"
            await pilot.press("t")   # the tree: no parents looked up for an unknown pid
            await pilot.pause(0.05)
            assert app.lineages == {}
            await pilot.press("t", "enter")
            await pilot.pause(0.05)
            assert "(pid unknown)" in str(app.screen.query_one("#detail").border_title)
            await pilot.press("T")   # no signal for it, and no confirmation asked
            await pilot.pause(0.05)
            assert type(app.screen).__name__ == "ProcessScreen"
            await pilot.press("escape", "o")


def test_the_source_is_named_as_given():
    out = top("-1", "--input", "/dev/null")
    assert out.returncode == 1
    assert out.stderr.decode().startswith("neuron-top: no valid report from /dev/null\n")


def test_an_object_without_neuron_monitors_structure_is_no_valid_report(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b'{"a":1}\n')
    out = top("--json", "--input", str(path))
    assert out.returncode == 1 and out.stdout == b""
    assert f"no valid report from {path} (1 line(s) rejected)" in out.stderr.decode()


def test_k8s_pod_is_a_process_column():
    text = top("-1", "-", stdin=K8S, columns=160).stdout.decode()
    header = next(line for line in text.splitlines() if line.lstrip().startswith("PID"))
    assert "POD" in header
    assert "ml/trainer-0" in text and "serving/server-7f9c" in text


def test_text_from_the_stream_is_escaped_on_stdout_and_stderr():
    out = top("-1", "-", stdin=ESC, columns=200)
    assert out.returncode == 0 and b"\x1b" not in out.stdout and b"\x07" not in out.stdout
    assert "died \\x1b]0;owned\\x07" in out.stdout.decode()
    exporter = subprocess.run([sys.executable, "-m", "exporters.prometheus_cli", "-p", "0"],
                              input=ESC, capture_output=True, cwd=ROOT, timeout=30)
    assert b"\x1b" not in exporter.stderr and b"\x07" not in exporter.stderr
    assert "Runtime app\\x1b[31m error: died \\x1b]0;owned" in exporter.stderr.decode()


def test_exit_status_at_the_end_of_input():
    class Ended:
        error = ""
    failed = Ended()
    failed.error = "read error"
    assert exit_status(None, 0, True) == 0           # quit while the stream flows
    assert exit_status(Ended(), 0, False) == 1       # no valid report
    assert exit_status(failed, 3, False) == 1        # the source failed
    assert exit_status(Ended(), 3, True) == 1        # neuron-monitor's stream stopped
    assert exit_status(Ended(), 3, False) == 0       # a file read to its end


@run_async
async def test_a_stream_of_rejected_lines_says_why_on_screen(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(GARBAGE)
    source = StreamSource(os.open(path, os.O_RDONLY), path.name)
    app = NeuronTopApp(source, clock=lambda: FIXED_NOW)
    async with app.run_test(size=(120, 40)) as pilot:
        for _ in range(200):
            if app.ended is not None:
                break
            await pilot.pause(0.01)
        await pilot.pause(0.05)
        banner = app.query_one(Banner)
        lines = "\n".join(s.text for s in banner.lines_for(120))
        assert "without a single valid report (2 lines rejected)" in lines
        assert "line 1 (not_json)" in lines and "FATA[0000]" in lines
    assert exit_status(app.ended, app.reports_seen, source.live) == 1


@run_async
async def test_banner_names_the_groups_an_inf1_stream_lacks(tmp_path):
    path = tmp_path / "inf1.jsonl"
    path.write_bytes(INF1)
    source = StreamSource(os.open(path, os.O_RDONLY), path.name)
    app = NeuronTopApp(source, clock=lambda: FIXED_NOW)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, app, 1)
        await pilot.press("f")
        lines = "\n".join(s.text for s in app.query_one(Banner).lines_for(120))
        assert "stream lacks: flops, neuron_device_type" in lines
        from tui.widgets.grid import CoreGridView
        grid = "\n".join(s.text for s in app.query_one(CoreGridView).lines_for(118))
        assert "N/A" in grid
        await pilot.press("p")
        table = "\n".join(s.text for s in app.query_one(ProcessTable).lines_for(118))
        assert "POD" not in table  # no neuron_k8s_info: no pod column


def test_replay_loop_of_a_file_without_a_valid_line_stops(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(GARBAGE * 3)
    source = ReplaySource(path, speed=1000.0, loop=True)
    done = []
    worker = threading.Thread(target=lambda: done.append(list(source.reports())), daemon=True)
    worker.start()
    worker.join(10)
    try:
        assert done == [[]], "looping a file with no valid report must stop"
        assert source.malformed == {"not_json": 3, "not_object": 3}
    finally:
        source.close()


def test_a_line_without_newline_is_capped_counted_and_the_stream_goes_on():
    read_fd, write_fd = os.pipe()
    cap = 1 << 20
    source = StreamSource(read_fd, "pipe", max_line_bytes=cap)

    def write():
        chunk = b"x" * (1 << 20)
        for _ in range(48):  # a 48 MiB line, 48 times the cap
            os.write(write_fd, chunk)
        os.write(write_fd, b"\n" + AWS)
        os.close(write_fd)
    threading.Thread(target=write, daemon=True).start()
    tracemalloc.start()
    try:
        reports = list(source.reports())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        os.close(read_fd)
    assert len(reports) == 1 and source.malformed == {"too_long": 1}
    assert peak < 8 * cap, f"peak {peak} bytes for a {cap}-byte cap"
    assert source.rejections[0].startswith("line 1 (too_long)")


def test_neuron_top_caps_lines_as_the_exporter_does():
    read_fd, write_fd = os.pipe()
    os.close(write_fd)
    try:
        assert StreamSource(read_fd, "x")._max == DEFAULT_MAX_LINE_BYTES
    finally:
        os.close(read_fd)


MEMORY_PROBE = """
import os, resource, subprocess, sys
proc = subprocess.Popen([sys.executable, "-m", "tui.cli", "--json", "-"], stdin=subprocess.PIPE,
                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
chunk = b"x" * (1 << 20)
try:
    for _ in range(400):  # 400 MiB without a newline
        proc.stdin.write(chunk)
    proc.stdin.close()
except BrokenPipeError:
    pass
err = proc.stderr.read().decode()
print(proc.wait(), resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, repr(err))
"""


def test_a_400_mib_line_piped_into_neuron_top_keeps_memory_bounded():
    out = subprocess.run([sys.executable, "-c", MEMORY_PROBE], capture_output=True, text=True,
                         cwd=ROOT, timeout=120)
    status, max_rss_kib, err = out.stdout.split(" ", 2)
    assert int(status) == 1 and "too_long" in err
    assert int(max_rss_kib) < 300 * 1024, f"neuron-top grew to {int(max_rss_kib) // 1024} MiB"


@run_async
async def test_control_characters_from_the_stream_never_reach_the_screen(tmp_path):
    path = tmp_path / "esc.jsonl"
    path.write_bytes(ESC)
    source = StreamSource(os.open(path, os.O_RDONLY), path.name)
    app = NeuronTopApp(source, clock=lambda: FIXED_NOW)
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot, app, 1)
        await pilot.press("p")
        await pilot.pause(0.05)
        shown = []
        for widget in app.query("*"):
            if hasattr(widget, "lines_for") and widget.size.width:
                shown += [s.text for s in widget.lines_for(widget.size.width)]
        screen = "\n".join(shown)
        assert "app\\x1b[31m" in screen and "died \\x1b]0;owned" in screen
        assert "\x1b" not in screen and "\x07" not in screen
