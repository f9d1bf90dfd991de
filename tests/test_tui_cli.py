"""neuron-top's command line: usage errors exit 2 with one line, and the real binary runs in tmux."""
from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import time

import pytest

from tests.test_tui_support import AWS_EXAMPLE
from monitor.lines import source_lines as fd_lines
from monitor.sources import ReplaySource, StreamSource

ROOT = pathlib.Path(__file__).resolve().parent.parent
BIN = pathlib.Path(sys.executable).parent / "neuron-top"


def run_cli(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tui.cli", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=60, **kwargs)


def test_version_and_help():
    assert run_cli("--version").stdout.startswith("neuron-top ")
    out = run_cli("--help").stdout
    for flag in ("--input", "--replay", "--speed", "--demo", "--stale-after"):
        assert flag in out


@pytest.mark.parametrize("args, message", [
    (["--input", "/nonexistent/stream.jsonl"], "no such file"),
    (["--replay", "/"], "is a directory"),
    (["--replay", str(AWS_EXAMPLE), "--speed", "0"], "--speed must be > 0"),
    (["--stale-after=-1"], "--stale-after must be > 0"),
    # a negative value after its flag: argparse took it for an option ("expected one argument")
    (["--replay", str(AWS_EXAMPLE), "--speed", "-1"], "--speed must be > 0 and finite, got -1"),
    (["--stale-after", "-0.5"], "--stale-after must be > 0 and finite, got -0.5"),
    (["--prometheus", "http://127.0.0.1:1", "--window", "-3"], "--window must be > 0"),
    (["--replay", str(AWS_EXAMPLE), "--speed=inf"], "--speed must be > 0 and finite, got inf"),
    (["--replay", str(AWS_EXAMPLE), "--speed=nan"], "--speed must be > 0 and finite, got nan"),
    (["--stale-after=nan"], "--stale-after must be > 0 and finite, got nan"),
    (["--stale-after=inf"], "--stale-after must be > 0 and finite, got inf"),
    (["--prometheus", "http://127.0.0.1:1", "--refresh=inf"], "--refresh must be > 0 and finite"),
    (["--prometheus", "http://127.0.0.1:1", "--window=inf"], "--window must be > 0 and finite"),
    (["--prometheus", "http://127.0.0.1:1", "--scrape-interval=nan"],
     "--scrape-interval must be > 0 and finite"),
    # finite but huge: overflowed the clock, the socket's timeout or the query text (tracebacks)
    (["--prometheus", "http://127.0.0.1:1", "--window=1e308"], "--window must be between"),
    (["--prometheus", "http://127.0.0.1:1", "--refresh=1e308"], "--refresh must be between"),
    (["--prometheus", "http://127.0.0.1:1", "--query-timeout=1e308"],
     "--query-timeout must be between"),
    (["--prometheus", "http://127.0.0.1:1", "--window=1e-5"], "--window must be between 0.001"),
    (["stream.jsonl"], "unexpected argument"),
    (["--input", ""], "--input: an empty path"),          # read as '.': "is a directory"
    # another mode's flag was silently ignored
    (["--input", str(AWS_EXAMPLE), "--window", "10"], "--window is a fleet view flag"),
    (["--input", str(AWS_EXAMPLE), "--selector", "a=\"b\""], "--selector is a fleet view flag"),
    (["--input", str(AWS_EXAMPLE), "--loop"], "--loop applies to --replay FILE only"),
    (["--input", str(AWS_EXAMPLE), "--speed", "2"], "--speed applies to --replay FILE only"),
    (["-"], "stdin is a terminal"),
])
def test_usage_errors_are_one_line_exit_2(args, message):
    stdin = None
    if args == ["-"]:
        if not os.path.exists("/dev/tty") or not sys.stdin.isatty():
            pytest.skip("needs a terminal on stdin")
        stdin = sys.stdin
    result = run_cli(*args, stdin=stdin)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and message in result.stderr
    assert "Traceback" not in result.stderr


def test_a_stream_piped_into_the_screen_without_the_dash_is_read_as_the_stream(monkeypatch):
    """`neuron-monitor | neuron-top` (no `-`) started the simulated instance and took the
    stream's text for key presses; the screen reads it as with `-`, and it counts as a named
    source ($NEURONSCOPE_PROMETHEUS yields to it). `-1` and `--json` still need the `-`: a
    script's or ssh's stdin is often a pipe that is no stream."""
    from tui import cli, fleet_cli
    parse = cli.build_parser().parse_args
    monkeypatch.setattr(cli, "piped_stdin", lambda: True)
    monkeypatch.setenv(fleet_cli.ENV, "http://127.0.0.1:1")
    for argv, stream in (([], "-"), (["--readonly"], "-"), (["-1"], None), (["--json"], None),
                         (["--demo"], None), (["--input", "f.jsonl"], None),
                         (["--prometheus", "http://127.0.0.1:1"], None)):
        args = parse(argv)
        cli.imply_stdin(args)
        assert args.stream == stream, argv
        if argv in ([], ["--readonly"]):
            assert fleet_cli.wanted(args) is None
    monkeypatch.setattr(cli, "piped_stdin", lambda: False)
    args = parse([])
    cli.imply_stdin(args)
    assert args.stream is None


def test_a_core_no_runtime_reports_reads_0_percent_in_the_snapshot(tmp_path):
    """`-1` showed such a core as "-", the screen and the average as 0.00%."""
    import json
    stream = tmp_path / "one.jsonl"
    stream.write_text(json.dumps(json.loads(AWS_EXAMPLE.read_text())) + "\n")
    with stream.open() as fh:
        out = run_cli("-1", "-", stdin=fh)
    assert out.returncode == 0 and "i-0011223344556677a" in out.stdout
    assert "ND1    [  0.00%]" in out.stdout and "[      -]" not in out.stdout


def test_the_screen_takes_no_keys_from_a_piped_stream_without_a_terminal(tmp_path):
    """Without /dev/tty the screen is refused in one line rather than reading its keys from the
    piped text, for a replay as for a stream: stdout a terminal (a pty), but in a new session
    that has no controlling terminal."""
    import pty
    junk = tmp_path / "keys.txt"
    junk.write_text("qqqq\n")
    for args in (["--replay", str(AWS_EXAMPLE)], []):
        master, slave = pty.openpty()
        try:
            with junk.open() as fh:
                out = subprocess.run([sys.executable, "-m", "tui.cli", *args], stdin=fh,
                                     stdout=slave, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                                     timeout=60, start_new_session=True)
        finally:
            os.close(slave)
            os.close(master)
        assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
        assert "no terminal for keyboard input" in out.stderr


@pytest.mark.parametrize("args,message", [
    (["--bogus"], "unrecognized arguments: --bogus"),
    (["--speed", "fast"], "argument --speed: invalid float value: 'fast'"),
    (["--input", "a", "--replay", "b"], "not allowed with argument"),
])
def test_argparse_errors_are_one_line_exit_2(args, message):
    """argparse printed its eight lines of usage before the error; the docs promise one line."""
    result = run_cli(*args)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1 and message in result.stderr, result.stderr
    assert result.stderr.startswith("neuron-top: ") and "usage:" not in result.stderr


def test_fd_lines_splits_a_pipe_as_it_arrives():
    read_fd, write_fd = os.pipe()
    os.write(write_fd, b'{"a": 1}\n{"b"')
    os.write(write_fd, b": 2}\nlast")
    os.close(write_fd)
    import threading
    assert list(fd_lines(read_fd, threading.Event())) == [b'{"a": 1}', b'{"b": 2}', b"last"]
    os.close(read_fd)


def test_stream_source_counts_malformed_kinds(tmp_path):
    path = tmp_path / "s.jsonl"
    good = AWS_EXAMPLE.read_bytes().strip()
    path.write_bytes(good + b"\n{oops\n42\n\n" + good + b"\n")
    source = StreamSource(os.open(path, os.O_RDONLY), "s.jsonl")
    reports = list(source.reports())
    assert len(reports) == 2
    assert source.malformed == {"not_json": 1, "not_object": 1}
    assert "skipped line 2" in source.diagnostics.getvalue()


def test_replay_paces_by_period_and_speed(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_bytes((AWS_EXAMPLE.read_bytes().strip() + b"\n") * 3)
    started = time.monotonic()
    reports = list(ReplaySource(path, speed=20.0).reports())
    elapsed = time.monotonic() - started
    assert len(reports) == 3
    assert elapsed >= 2 * 1.0 / 20.0 * 0.9  # two gaps of one ~1 s period at 20x
    looped = ReplaySource(path, speed=1000.0, loop=True)
    count = 0
    for _ in looped.reports():
        count += 1
        if count == 7:
            looped.close()
    assert count == 7


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_real_binary_in_tmux_starts_shows_cores_and_quits(tmp_path):
    session = f"neuron-top-test-{os.getpid()}"
    exe = str(BIN) if BIN.exists() else f"{sys.executable} -m tui.cli"
    marker = tmp_path / "exit-code"
    # COLUMNS/LINES inherited from a test runner would override the pane size.
    command = f"unset COLUMNS LINES; cd {ROOT} && {exe} --demo; echo $? > {marker}"
    tmux = ["tmux", "-L", session, "-f", "/dev/null"]  # a private server: no user config or sessions
    subprocess.run([*tmux, "new-session", "-d", "-s", session, "-x", "160", "-y", "50", command],
                   check=True, timeout=30)
    try:
        screen = ""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and "ND15" not in screen:
            time.sleep(0.5)
            screen = subprocess.run([*tmux, "capture-pane", "-p", "-t", session],
                                    capture_output=True, text=True, timeout=10).stdout
        # --demo starts a real simulated instance (runtime processes, shared memory, collector)
        assert "neuron-top" in screen and "running on i-" in screen and "(trn2.48xlarge)" in screen
        assert "NeuronCore v3d Utilization (Avg:" in screen and "ND15" in screen and "NC3" in screen
        subprocess.run([*tmux, "send-keys", "-t", session, "q"], check=True, timeout=10)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and not marker.exists():
            time.sleep(0.2)
        assert marker.read_text().strip() == "0"
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True, timeout=10)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_real_binary_shows_why_a_rejected_stream_shows_nothing_and_exits_1(tmp_path):
    session = f"neuron-top-bad-{os.getpid()}"
    exe = str(BIN) if BIN.exists() else f"{sys.executable} -m tui.cli"
    marker = tmp_path / "exit-code"
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b"FATA[0000] Failed to discover neuron devices\n[1, 2]\n")
    command = (f"unset COLUMNS LINES; cd {ROOT} && cat {bad} | {exe} -; "
               f"echo $? > {marker}")
    tmux = ["tmux", "-L", session, "-f", "/dev/null"]
    subprocess.run([*tmux, "new-session", "-d", "-s", session, "-x", "120", "-y", "40", command],
                   check=True, timeout=30)
    try:
        screen = ""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and "without a single valid report" not in screen:
            time.sleep(0.5)
            screen = subprocess.run([*tmux, "capture-pane", "-p", "-t", session],
                                    capture_output=True, text=True, timeout=10).stdout
        assert "without a single valid report (2 lines rejected)" in screen
        assert "line 1 (not_json): 'FATA[0000] Failed to discover neuron devices'" in screen
        subprocess.run([*tmux, "send-keys", "-t", session, "q"], check=True, timeout=10)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and not marker.exists():
            time.sleep(0.2)
        assert marker.read_text().strip() == "1"
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True, timeout=10)
