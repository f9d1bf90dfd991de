"""`neuron-monitor-prometheus` as a process: flags, bad input through a real pipe, EOF, signals."""
from __future__ import annotations

import pathlib
import signal
import socket
import subprocess
import sys

import orjson
import pytest

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
sys.path.insert(0, str(FIXTURES / "exporter"))
from harness import ExporterProcess, console_script  # noqa: E402
from stream_gen import StreamGen  # noqa: E402

AWS_EXAMPLE = (FIXTURES / "neuron_monitor_aws_example.json").read_bytes().strip() + b"\n"


def run_cli(*args: str, timeout: float = 20) -> subprocess.CompletedProcess:
    return subprocess.run([console_script("neuron-monitor-prometheus"), *args], input=b"",
                          capture_output=True, timeout=timeout)


def test_help_and_version():
    out = run_cli("--help")
    assert out.returncode == 0 and b"--cert-file" in out.stdout and b"--collect" in out.stdout
    out = run_cli("--version")
    assert out.returncode == 0 and out.stdout.startswith(b"neuron-monitor-prometheus ")


@pytest.mark.parametrize("args, message", [
    (["--port", "70000"], "must be between 0 and 65535"),
    (["--cert-file", "x.pem"], "--cert-file and --key-file go together"),
    (["-c", "conf.json"], "applies to --collect only"),
    (["--port", "eighty"], "invalid int value"),
    (["--no-such-flag"], "unrecognized arguments"),
    (["--stale-after", "0"], "--stale-after must be > 0"),
    (["--stale-after", "inf"], "--stale-after must be > 0 seconds and finite, got inf"),
    (["--collect", "--keep-serving"], "--keep-serving applies to stdin input"),
    (["--root", "some/dir"], "--root applies to --collect only"),
    (["--collect", "--root", "/nonexistent/neuron-sim"], "no simulated instance at"),
    (["--cert-file", "/nonexistent.pem", "--key-file", "/nonexistent.key"], "cannot load"),
])
def test_usage_errors_exit_2_with_one_line(args, message):
    out = run_cli(*args)
    err = out.stderr.decode()
    assert out.returncode == 2
    assert message in err and "Traceback" not in err
    assert len([line for line in err.splitlines() if "error:" in line]) == 1


def test_port_in_use_is_one_line_and_exit_1():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        out = run_cli("--port", str(taken.getsockname()[1]))
    assert out.returncode == 1
    assert "cannot listen on 127.0.0.1" in out.stderr.decode()
    assert len(out.stderr.decode().strip().splitlines()) == 1


def _with(doc_bytes: bytes, mutate) -> bytes:
    doc = orjson.loads(doc_bytes)
    mutate(doc)
    return orjson.dumps(doc) + b"\n"


BAD_INPUTS = {
    "not_json": b"hello, this is not JSON\n",
    "truncated": AWS_EXAMPLE[: len(AWS_EXAMPLE) // 2] + b"\n",
    "wrong_type": _with(AWS_EXAMPLE, lambda d: d["neuron_runtime_data"][0].update(pid="twelve")),
    "not_object": b"[1, 2, 3]\n",
    "unknown_group": _with(AWS_EXAMPLE, lambda d: d["system_data"].update(
        gpu_counters={"period": 1.0, "error": ""})),
    "group_error": _with(AWS_EXAMPLE, lambda d: d["neuron_runtime_data"][0]["report"][
        "neuroncore_counters"].update(error="device busy")),
    "runtime_error": _with(AWS_EXAMPLE, lambda d: d["neuron_runtime_data"][0].update(
        error="runtime died")),
    # an optional field with a bad value: left out of the report, counted and named
    "malformed_field": _with(AWS_EXAMPLE, lambda d: d["neuron_runtime_data"][0]["report"][
        "execution_stats"]["execution_summary"].update(completed=-5)),
}


def test_bad_input_is_counted_reported_once_per_kind_and_last_good_state_kept():
    with ExporterProcess("--keep-serving") as exp:
        exp.feed(AWS_EXAMPLE)
        exp.wait_for(lambda: exp.value("neuron_exporter_reports_total") == 1.0)
        good = exp.value("neuroncore_utilization_ratio", neuroncore="0")
        assert good == pytest.approx(0.4201)
        for _ in range(2):  # each kind twice: counted twice, reported once
            for line in BAD_INPUTS.values():
                exp.feed(line)
        exp.close_input()  # EOF
        exp.wait_for(lambda: exp.value("neuron_exporter_input_errors_total", kind="eof") == 1.0)
        for kind in BAD_INPUTS:
            assert exp.value("neuron_exporter_input_errors_total", kind=kind) == 2.0, kind
        # The reports with a group error, a runtime error or a malformed field still count.
        assert exp.value("neuron_exporter_reports_total") == 9.0
        assert exp.value("neuroncore_utilization_ratio", neuroncore="0") == good
        assert exp.proc.poll() is None  # --keep-serving: EOF keeps serving the last state
        for kind in BAD_INPUTS:
            assert sum(f"({kind})" in line or f"{kind} problems" in line
                       for line in exp.stderr_lines) == 1, (kind, exp.stderr_lines)
        # the input ends once: its line says so, with no "further eof problems"
        assert sum("input ended (EOF)" in line for line in exp.stderr_lines) == 1
        assert not any("eof problems" in line for line in exp.stderr_lines)
        assert not any("Traceback" in line for line in exp.stderr_lines)
        exp.proc.send_signal(signal.SIGTERM)
        assert exp.proc.wait(10) == 0


def test_end_of_input_exits_1_so_a_supervisor_restarts_the_pipeline():
    with ExporterProcess() as exp:
        exp.feed(AWS_EXAMPLE)
        exp.wait_for(lambda: exp.value("neuron_exporter_reports_total") == 1.0)
        exp.close_input()
        assert exp.proc.wait(15) == 1
        assert any(line.endswith("input ended (EOF); exiting with status 1")   # no "further"
                   for line in exp.stderr_lines), exp.stderr_lines
        assert not any("Traceback" in line for line in exp.stderr_lines)


def test_input_with_no_valid_report_exits_1_and_says_so():
    out = subprocess.run([console_script("neuron-monitor-prometheus"), "-p", "0"],
                         input=b"not json\n[1]\n", capture_output=True, timeout=20)
    err = out.stderr.decode()
    assert out.returncode == 1 and "without a single valid report" in err
    assert "skipped line 1 (not_json)" in err and "Traceback" not in err


def test_name_filter_over_http_serves_only_those_samples():
    """`?name[]=` as prometheus_client's server takes it (it was ignored: every series came)."""
    import gzip
    with ExporterProcess() as exp:
        exp.feed(AWS_EXAMPLE)
        exp.wait_for(lambda: exp.value("neuron_exporter_reports_total") == 1.0)
        path = "/metrics?name[]=instance_info&name[]=neuroncore_utilization_ratio"
        status, headers, body = exp.get(path, headers={"Accept-Encoding": "gzip"})
        assert status == 200 and headers["content-encoding"] == "gzip"
        samples = {line.split("{")[0] for line in gzip.decompress(body).decode().splitlines()
                   if not line.startswith("#")}
        assert samples == {"instance_info", "neuroncore_utilization_ratio"}
        _, _, om = exp.get(path, headers={"Accept": "application/openmetrics-text"})
        assert om.endswith(b"# EOF\n") and b"neuron_hardware_info" not in om


def test_health_turns_503_when_no_report_arrives_for_stale_after_and_recovers():
    with ExporterProcess("--stale-after", "1.5") as exp:
        exp.feed(AWS_EXAMPLE)
        exp.wait_for(lambda: exp.value("neuron_exporter_reports_total") == 1.0)
        status, _, body = exp.get("/-/healthy")
        assert (status, body) == (200, b"OK\n")
        exp.wait_for(lambda: exp.get("/-/healthy")[0] == 503, timeout=10)
        assert exp.get("/-/healthy")[2].startswith(b"stale: no report for ")
        assert exp.get("/metrics")[0] == 200  # metrics are still served
        exp.feed(AWS_EXAMPLE)
        exp.wait_for(lambda: exp.get("/-/healthy")[0] == 200, timeout=10)


def test_health_default_is_three_periods_of_the_stream():
    # The example's first group period is ~1 s: three periods without a report -> 503.
    with ExporterProcess() as exp:
        exp.feed(AWS_EXAMPLE)
        exp.wait_for(lambda: exp.value("neuron_exporter_reports_total") == 1.0)
        assert exp.get("/-/healthy")[0] == 200
        exp.wait_for(lambda: exp.get("/-/healthy")[0] == 503, timeout=10)


def test_enable_k8s_info_adds_pod_labels_to_core_and_device_series():
    k8s = (FIXTURES / "neuron_monitor_sdk_k8s.json").read_bytes()
    with ExporterProcess("--enable-k8s-info") as exp:
        exp.feed(k8s)
        exp.wait_for(lambda: exp.value("neuron_exporter_reports_total") == 1.0)
        assert exp.value("neuroncore_utilization_ratio", neuroncore="4", pod_name="server-7f9c",
                         namespace="serving", container_name="main") == pytest.approx(0.05)
        assert exp.value("hardware_ecc_events_total", neuron_device_index="0",
                         pod_name="trainer-0") == 0.0
    with ExporterProcess() as exp:
        exp.feed(k8s)
        exp.wait_for(lambda: exp.value("neuron_exporter_reports_total") == 1.0)
        assert "pod_name" not in exp.text()


def test_counters_add_each_period_and_defunct_runtimes_disappear():
    gen = StreamGen(seed=3, runtimes=2, devices=2)
    docs = [gen.document() for _ in range(3)]
    completed = sum(d["neuron_runtime_data"][0]["report"]["execution_stats"]["execution_summary"][
        "completed"] for d in docs)
    with ExporterProcess() as exp:
        for d in docs:
            exp.feed(orjson.dumps(d) + b"\n")
        exp.wait_for(lambda: exp.value("neuron_exporter_reports_total") == 3.0)
        assert exp.value("execution_status_total", runtime_tag="app_0",
                         status_type="completed") == completed
        assert exp.value("neuron_core_engine_utilization_ratio", runtime_tag="app_1") is not None
        last = docs[-1]
        last["neuron_runtime_data"] = last["neuron_runtime_data"][:1]  # app_1 exits
        exp.feed(orjson.dumps(last) + b"\n")
        exp.wait_for(lambda: exp.value("neuron_exporter_reports_total") == 4.0)
        assert exp.value("neuroncore_utilization_ratio", runtime_tag="app_1") is None
        assert exp.value("neuron_core_engine_utilization_ratio", runtime_tag="app_1") is None
        assert exp.value("execution_status_total", runtime_tag="app_1") is None
        assert exp.value("neuroncore_utilization_ratio", runtime_tag="app_0") is not None
        assert exp.value("hardware_ecc_events_total", neuron_device_index="1") is not None


def test_sigint_stops_cleanly():
    with ExporterProcess() as exp:
        exp.proc.send_signal(signal.SIGINT)
        assert exp.proc.wait(10) == 0


def test_collect_runs_the_collector_in_process(tmp_path):
    config = tmp_path / "monitor.json"
    config.write_text('{"period": "1s"}')
    with ExporterProcess("--collect", "-c", str(config), stdin=subprocess.DEVNULL) as exp:
        assert any("in-process collector" in line for line in exp.stderr_lines)
        exp.wait_for(lambda: (exp.value("neuron_exporter_reports_total") or 0) >= 2, timeout=20)
        assert exp.value("instance_info") == 1.0
        assert exp.get("/-/healthy")[0] == 200 and exp.proc.poll() is None  # keeps collecting


def test_collect_reads_the_instance_started_with_root(tmp_path):
    """`neuron-sim start --root DIR` is read with `--collect --root DIR`, as neuron-monitor,
    neuron-ls and neuron-top read it."""
    from collector_sim import start_instance, stop_instance
    root = tmp_path / "sim"
    config = tmp_path / "monitor.json"
    config.write_text('{"period": "1s", "neuron_runtimes": [{"tag_filter": ".*", '
                      '"metrics": [{"type": "neuroncore_counters"}]}]}')
    start_instance(root, "svc=matmul:m=512,k=512,n=512@0-1")
    try:
        with ExporterProcess("--collect", "--root", str(root), "-c", str(config),
                             stdin=subprocess.DEVNULL) as exp:
            exp.wait_for(lambda: exp.value("neuroncore_utilization_ratio", runtime_tag="svc")
                         is not None, timeout=30)
    finally:
        stop_instance(root)


def test_collect_with_a_bad_config_is_a_usage_error(tmp_path):
    config = tmp_path / "monitor.json"
    config.write_text('{"period": "soon"}')
    out = run_cli("--collect", "-c", str(config))
    assert out.returncode == 2 and "--collect:" in out.stderr.decode()
    assert "Traceback" not in out.stderr.decode()
