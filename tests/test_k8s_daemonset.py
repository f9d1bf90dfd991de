"""The DaemonSet's container command, run as a container runs it: as PID 1 of its own PID
namespace, where the kernel spares the shell every signal it does not trap."""
from __future__ import annotations

import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import psutil
import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent
DAEMONSET = ROOT / "dashboards" / "k8s" / "neuron-monitor-daemonset.yaml"


def _container() -> dict:
    docs = list(yaml.safe_load_all(DAEMONSET.read_text()))
    daemonset = next(d for d in docs if d["kind"] == "DaemonSet")
    return daemonset["spec"]["template"]["spec"]["containers"][0]


def _can_unshare_pid() -> bool:
    try:
        return subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "true"],
                              capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serving(port: int, deadline: float) -> bool:
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as resp:
                if resp.status == 200 and b"neuron_exporter" in resp.read():
                    return True
        except OSError:
            time.sleep(0.2)
    return False


@pytest.mark.skipif(not _can_unshare_pid(), reason="needs a PID namespace (unshare --pid, root)")
def test_a_pod_stop_ends_the_pipeline_cleanly_within_its_grace_period(tmp_path):
    """sh as PID 1 ignored SIGTERM (`exec a | exec b` leaves sh in place): every pod stop
    waited out the 30 s grace period and ended both processes with SIGKILL."""
    container = _container()
    port = _free_port()
    script = container["args"][0].replace("--bind 0.0.0.0 --port 8000",
                                          f"--bind 127.0.0.1 --port {port}")
    assert f"--port {port}" in script
    env = {**os.environ, "XDG_RUNTIME_DIR": str(tmp_path),   # no simulated instance: an idle host
           "PATH": f"{pathlib.Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.Popen(["unshare", "--pid", "--fork", "--mount-proc",
                             *container["command"], script],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)   # its `kill 0` is the container's group
    try:
        assert _serving(port, time.monotonic() + 60), "the exporter never served"
        pid_1 = psutil.Process(proc.pid).children()[0]    # the shell, PID 1 in its namespace
        started = time.monotonic()
        os.kill(pid_1.pid, signal.SIGTERM)
        status = proc.wait(timeout=20)
        assert status == 0, proc.stderr.read().decode()
        assert time.monotonic() - started < 10
    finally:
        if proc.poll() is None:
            for child in psutil.Process(proc.pid).children(recursive=True):
                child.kill()
            proc.kill()
            proc.wait()
        proc.stderr.close()


def test_the_container_restarts_when_neuron_monitor_ends(tmp_path):
    """The shell exits with the exporter's status: the exporter exits 1 when its input ends."""
    script = _container()["args"][0]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "neuron-monitor").write_text("#!/bin/sh\nexit 0\n")   # output that ends at once
    (bin_dir / "neuron-monitor").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{pathlib.Path(sys.executable).parent}"
                                 f"{os.pathsep}{os.environ['PATH']}"}
    result = subprocess.run([*_container()["command"], script.replace("0.0.0.0", "127.0.0.1")
                             .replace("--port 8000", f"--port {_free_port()}")],
                            env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1 and "input ended" in result.stderr, result.stderr


def _pipeline_serves(tmp_path, env: dict) -> str:
    """Runs the container's pipeline until the exporter has served a report; its /metrics."""
    port = _free_port()
    script = _container()["args"][0].replace("--bind 0.0.0.0 --port 8000",
                                             f"--bind 127.0.0.1 --port {port}")
    env = {**os.environ, **env,
           "PATH": f"{pathlib.Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.Popen([*_container()["command"], script], env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                    body = r.read().decode()
                if "instance_info{" in body:
                    return body
            except OSError:
                pass
            time.sleep(0.2)
        raise AssertionError("the exporter never served a report")
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)


def test_the_stream_comes_from_the_neuron_monitor_the_pod_names(tmp_path):
    """A bare `neuron-monitor` in the container was neuronscope's (AWS's lives off PATH, in
    /opt/aws/neuron/bin): on a real node the pod exported a simulated, idle host."""
    report = (ROOT / "tests" / "fixtures" / "neuron_monitor_aws_example.json").read_text()
    aws = tmp_path / "neuron-monitor"
    aws.write_text("#!/bin/sh\nwhile :; do echo '" + " ".join(report.split()) +
                   "'; sleep 1; done\n")
    aws.chmod(0o755)
    body = _pipeline_serves(tmp_path, {"NEURON_MONITOR": str(aws),
                                       "XDG_RUNTIME_DIR": str(tmp_path)})
    instance_id = json.loads(report)["instance_info"]["instance_id"]
    assert f'instance_id="{instance_id}"' in body
