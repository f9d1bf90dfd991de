"""neuron-top --prometheus: bad input is one line and exit 2 before the screen starts; the
installed binary in tmux against a real Prometheus (slow)."""
from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import time

import pytest

from tests.http_stub import Quiet, serving


ROOT = pathlib.Path(__file__).resolve().parent.parent
BIN = pathlib.Path(sys.executable).parent / "neuron-top"


def run_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tui.cli", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=60, env=env)


class _Plain(Quiet):
    """An exporter-like server: text on every path, whatever the method."""

    def _text(self) -> None:
        self.answer(200, b"# HELP up fake\nup 1\n", "text/plain")

    do_GET = do_POST = _text


@pytest.fixture
def plain_server():
    with serving(_Plain) as url:
        yield url


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_line_exit_2(result: subprocess.CompletedProcess, *fragments: str) -> None:
    assert result.returncode == 2, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("neuron-top: "), result.stderr
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def test_help_lists_the_fleet_flags():
    out = run_cli("--help").stdout
    for flag in ("--prometheus", "--selector", "--window", "--refresh", "--query-timeout",
                 "--scrape-interval", "NEURONSCOPE_PROMETHEUS"):
        assert flag in out


def test_unreachable_url():
    one_line_exit_2(run_cli("--prometheus", f"http://127.0.0.1:{free_port()}"),
                    "cannot reach Prometheus at http://127.0.0.1:", "refused")


def test_not_a_prometheus_url(plain_server):
    one_line_exit_2(run_cli("--prometheus", plain_server),
                    f"{plain_server} does not serve the Prometheus HTTP API")


@pytest.mark.parametrize("url, fragment", [("ftp://host", "not an http:// or https:// URL"),
                                           ("http://", "has no host"),
                                           ("http://h:99999", "bad port"),
                                           ("http://h/?q=1", "without ?query")])
def test_malformed_url(url, fragment):
    one_line_exit_2(run_cli("--prometheus", url), "--prometheus: ", fragment)


@pytest.mark.parametrize("selector, fragment", [
    ("instance_type=trn2", "values in quotes"),
    ('instance_type="a" zone="b"', "bad label matcher"),
    ('az=~"(unclosed"', "bad regular expression for az"),
    ('__name__="up"', "cannot match metric names"),
    ('9x="a"', "bad label matcher"),
])
def test_bad_selector(selector, fragment):
    one_line_exit_2(run_cli("--prometheus", "http://127.0.0.1:1", "--selector", selector),
                    "--selector: ", fragment)


@pytest.mark.parametrize("flag", ["--window", "--refresh", "--query-timeout", "--scrape-interval"])
def test_non_positive_durations(flag):
    one_line_exit_2(run_cli("--prometheus", "http://127.0.0.1:1", flag, "0"), f"{flag} must be > 0")


def test_environment_names_the_server_and_a_named_source_wins():
    env = dict(os.environ, NEURONSCOPE_PROMETHEUS=f"http://127.0.0.1:{free_port()}")
    one_line_exit_2(run_cli(env=env), "cannot reach Prometheus")
    one_line_exit_2(run_cli("--input", "/nonexistent", env=env), "no such file")


class _Refusing(_Plain):
    """A Prometheus API that answers every query with its JSON error (as a failing backend)."""

    def _text(self) -> None:
        self.answer(422, b'{"status":"error","errorType":"execution",'
                         b'"error":"query processing would load too many samples"}')

    do_GET = do_POST = _text


def test_a_query_error_at_start_is_one_line():
    with serving(_Refusing) as url:
        one_line_exit_2(run_cli("--prometheus", url),
                        "query failed (execution): query processing would load too many samples")


class _Answering(_Plain):
    """A Prometheus API whose every query has an empty answer: enough to pass the start-up
    check, so what follows it is what is tested."""

    def _text(self) -> None:
        self.answer(200, b'{"status":"success","data":{"resultType":"vector","result":[]}}')

    do_GET = do_POST = _text


@pytest.mark.parametrize("flag", ["-1", "--json"])
def test_one_shot_output_is_refused_for_the_fleet_view(flag):
    """-1/--json print one host's report; the fleet view used to ignore them and draw the
    full screen into the pipe."""
    with serving(_Answering) as url:
        one_line_exit_2(run_cli("--prometheus", url, flag), "no one-shot output")


def test_the_fleet_view_refuses_a_stdout_that_is_not_a_terminal():
    with serving(_Answering) as url:
        result = run_cli("--prometheus", url)   # stdout is a pipe here
        one_line_exit_2(result, "stdout is not a terminal")
        assert result.stdout == ""


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_installed_binary_in_tmux_shows_the_fleet_drills_down_and_quits(tmp_path):
    from fleet_env import _acquire, _in_tempdir, _make_fleet, _release, _stop_fleet, \
        _stop_server, start_prometheus, wait_fleet_up
    if shutil.which("prometheus") is None:
        pytest.skip("needs Debian's prometheus package")
    fleet = _acquire("fleet", _make_fleet, _stop_fleet)
    try:
        prom = _acquire("prometheus", lambda: _in_tempdir(
            "neuronscope-prom-", lambda d: start_prometheus(fleet.targets, d)), _stop_server)
        try:
            wait_fleet_up(fleet, prom)
            _drive_tmux(tmp_path, prom.base_url, fleet.instance_ids)
        finally:
            _release("prometheus")
    finally:
        _release("fleet")


def _drive_tmux(tmp_path, url: str, instance_ids: list[str]) -> None:
    session = f"neuron-top-fleet-{os.getpid()}"
    exe = str(BIN) if BIN.exists() else f"{sys.executable} -m tui.cli"
    marker = tmp_path / "exit-code"
    command = f"unset COLUMNS LINES; cd {ROOT} && {exe} --prometheus {url} --refresh 1; " \
              f"echo $? > {marker}"
    tmux = ["tmux", "-L", session, "-f", "/dev/null"]

    def screen() -> str:
        return subprocess.run([*tmux, "capture-pane", "-p", "-t", session], capture_output=True,
                              text=True, timeout=10).stdout

    def wait_for(*texts: str, timeout: float = 30.0, absent: tuple[str, ...] = ()) -> str:
        deadline = time.monotonic() + timeout
        shown = ""
        while time.monotonic() < deadline:
            shown = screen()
            if all(t in shown for t in texts) and not any(t in shown for t in absent):
                return shown
            time.sleep(0.3)
        raise AssertionError(f"{texts} not on screen:\n{shown}")

    def keys(*names: str) -> None:
        subprocess.run([*tmux, "send-keys", "-t", session, *names], check=True, timeout=10)

    subprocess.run([*tmux, "new-session", "-d", "-s", session, "-x", "160", "-y", "50", command],
                   check=True, timeout=30)
    try:
        shown = wait_for(*instance_ids, "2 up, 0 down", "NeuronCores busy")
        assert "Traceback" not in shown and f"prometheus {url}" in shown
        keys("/")
        wait_for("enter applies, esc clears")   # the filter box has the focus
        keys("trn1", "Enter")
        wait_for(instance_ids[1], absent=(instance_ids[0],))
        keys("Escape")
        wait_for(*instance_ids)
        # the cursor stays on the instance it was on while filtered (the rows are sorted by
        # instance id, so where that row is depends on the ids)
        keys("Enter")
        wait_for(f"running on {instance_ids[1]}", "NeuronCore", "Neuron Apps")
        keys("Escape")
        wait_for("2 up, 0 down")
        keys("q")
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and not marker.exists():
            time.sleep(0.2)
        assert marker.read_text().strip() == "0"
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True, timeout=10)
