"""The monitor-side tools started with stdin or stdout closed (`<&-`, `>&-`, as a broken
service unit or a shell script can), or writing to a full disk: one line naming the problem
and a non-zero exit, never a traceback. Real processes; /dev/full is opened, never replaced."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from collector_sim import console_script, start_instance, stop_instance

FIXTURES = Path(__file__).parent / "fixtures"
AWS_EXAMPLE = FIXTURES / "neuron_monitor_aws_example.json"


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("sim") / "rt"
    root.mkdir(mode=0o700)
    start_instance(root, "a=matmul:m=512,k=512,n=512@0-1")
    yield root
    stop_instance(root)


def _run(argv: list[str], stdin=None, stdout=None) -> subprocess.CompletedProcess:
    return subprocess.run(argv, stdin=stdin, stdout=stdout, stderr=subprocess.PIPE, timeout=60,
                          close_fds=True)


def _closed(fd: int, argv: list[str], **kw) -> subprocess.CompletedProcess:
    """`argv` started with descriptor `fd` closed (the shell's `<&-` / `>&-`)."""
    shell = f'exec "$@" {fd}>&-' if fd else 'exec "$@" <&-'
    return _run(["sh", "-c", shell, "sh", *argv], **kw)


def _one_error_line(out: subprocess.CompletedProcess, says: str, status: int) -> None:
    err = out.stderr.decode()
    assert out.returncode == status, err
    assert "Traceback" not in err and says in err
    assert [line for line in err.splitlines() if "error:" in line] == [err.splitlines()[-1]]


@pytest.mark.parametrize("tool", ["neuron-monitor-prometheus", "neuron-monitor-cloudwatch"])
def test_a_closed_stdin_is_said_in_one_line(tool):
    args = ["-p", "0"] if tool == "neuron-monitor-prometheus" else ["--emf"]
    _one_error_line(_closed(0, [*console_script(tool), *args]), "stdin is closed", 2)


def test_a_closed_stdout_is_said_in_one_line(root):
    with open(AWS_EXAMPLE, "rb") as stdin:
        out = _closed(1, [*console_script("neuron-monitor-cloudwatch"), "--emf"], stdin=stdin)
    _one_error_line(out, "stdout is closed", 2)
    _one_error_line(_closed(1, [*console_script("neuron-ls"), "--root", str(root)]),
                    "stdout is closed", 2)
    _one_error_line(_closed(1, [*console_script("neuron-monitor"), "--root", str(root),
                                "--count", "1"]), "stdout is closed", 2)


def test_a_full_disk_on_stdout_is_said_in_one_line(root, tmp_path):
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    with open("/dev/full", "wb") as full:
        for flags in ([], ["-j"], ["-t"]):
            _one_error_line(_run([*console_script("neuron-ls"), "--root", str(root), *flags],
                                 stdout=full), "No space left on device", 1)
        with open(AWS_EXAMPLE, "rb") as stdin:
            _one_error_line(_run([*console_script("neuron-monitor-cloudwatch"), "--emf"],
                                 stdin=stdin, stdout=full), "cannot write to stdout", 1)
    with open(AWS_EXAMPLE, "rb") as stdin:
        _one_error_line(_run([*console_script("neuron-monitor-cloudwatch"), "--emf", "--output",
                              "/dev/full"], stdin=stdin), "cannot write to --output", 1)
    assert Path("/dev/full").is_char_device()


def test_a_file_given_as_the_runtime_directory_is_said_to_be_one(tmp_path):
    plain = tmp_path / "plain"
    plain.write_text("")
    for tool in ("neuron-ls", "neuron-monitor"):
        _one_error_line(_run([*console_script(tool), "--root", str(plain)]),
                        "is not a directory", 2)


@pytest.mark.parametrize("tool, args, stdin", [
    ("neuron-monitor", ["-c", "/nonexistent/monitor.json"], None),
    ("neuron-monitor-cloudwatch", ["--emf"], FIXTURES / "neuron_monitor_group_error.json"),
    ("neuron-profile", ["view", "-s", "/nonexistent.nsprof"], None),
    ("neuron-sim", ["estimate", "-w", "no-such-workload"], None),
])
def test_a_closed_stderr_keeps_diagnostics_out_of_stdout(tool, args, stdin):
    """Started with stderr closed, Python's print(file=sys.stderr) writes to stdout: an error
    or a notice landed in the data stream the tool writes there."""
    with open(stdin if stdin else os.devnull, "rb") as source:
        out = subprocess.run(["sh", "-c", 'exec "$@" 2>&-', "sh", *console_script(tool), *args],
                             stdin=source, stdout=subprocess.PIPE, timeout=60)
    lines = out.stdout.decode().splitlines()
    assert not [line for line in lines if line.startswith(tool)], lines
