"""CloudWatch EMF from the inputs real hosts give: names CloudWatch would refuse as dimension
values, runtimes sharing a tag, a first report without instance or hardware information, and the
CLI's namespace, `--exclude` and SIGHUP rotation."""
from __future__ import annotations

import copy
import json
import os
import signal
import socket
import struct
import subprocess
import time

import orjson
import pytest

from exporters.cloudwatch import EmfEncoder
from exporters.exporter import PrometheusExporter
from exporters.extract import Problem
from monitor.report import Report
from test_cloudwatch import FIXTURES, check_emf, console_script

BASE = json.loads((FIXTURES / "neuron_monitor_extensions.json").read_text())


def emf(*docs: dict) -> tuple[list[list[dict]], list[Problem]]:
    """Each document's records, through one encoder, and every problem said."""
    enc, problems, out = EmfEncoder("NS", clock=lambda: 1764476000.0), [], []
    for doc in docs:
        lines = enc.lines(Report.from_json(orjson.dumps(doc)), problems).splitlines()
        out.append([orjson.loads(line) for line in lines])
    for records in out:
        for r in records:
            check_emf(r, "NS")
    return out, problems


def metric(records: list[dict], name: str) -> list:
    return [r[name] for r in records if name in r]


def test_a_tag_and_model_name_cloudwatch_refuses_are_escaped_or_cut_and_said():
    doc = copy.deepcopy(BASE)
    runtime = doc["neuron_runtime_data"][0]
    runtime["neuron_runtime_tag"] = "trainér 🚀"
    runtime["report"]["memory_used"]["loaded_models"][0]["name"] = "/m/" + "x" * 1100 + "\\n.neff"
    (records,), problems = emf(doc)
    tags = {r["runtime_tag"] for r in records if "runtime_tag" in r}
    assert tags == {"train\\xe9r \\U0001f680"}
    names = {r["model_name"] for r in records if "model_name" in r}
    assert len(names) == 1 and len(names.pop()) == 1024
    assert any(p.kind == "dimension_value" and "trainér" in p.message for p in problems)


def test_blank_and_empty_values_are_no_dimension():
    doc = copy.deepcopy(BASE)
    doc["neuron_runtime_data"][0]["report"]["memory_used"]["loaded_models"][0]["name"] = "  "
    (records,), _ = emf(doc)
    model_records = [r for r in records if "neuron_runtime_model_memory_used_bytes" in r]
    assert model_records and all("model_name" not in r for r in model_records)


def test_two_runtimes_under_one_tag_add_their_counts_memory_and_vcpu_and_keep_other_gauges():
    """Memory and vCPU of a shared tag add up to the tag's, as in the Prometheus exporter (an
    array of them gave one process's as the Average, and Sum over a minute added reports too);
    a core's utilization keeps both processes' readings."""
    one, _ = emf(BASE)
    doc = copy.deepcopy(BASE)
    twin = copy.deepcopy(doc["neuron_runtime_data"][0])
    twin["pid"] += 1
    doc["neuron_runtime_data"].append(twin)
    (records,), _ = emf(doc)
    single = one[0]
    completed = lambda rs: [r["execution_status_total"] for r in rs  # noqa: E731
                            if r.get("status_type") == "completed"]
    assert completed(records) == [2 * v for v in completed(single)] and completed(single)[0] > 0
    host = lambda rs: [r["neuron_runtime_memory_used_bytes"] for r in rs  # noqa: E731
                       if r.get("memory_location") == "host"]
    assert host(records) == [2 * v for v in host(single)] and host(single)[0] > 0
    vcpu = "neuron_runtime_vcpu_usage_ratio"
    assert sorted(metric(records, vcpu)) == pytest.approx(
        sorted(2 * v for v in metric(single, vcpu)))
    assert any(isinstance(v, list) and len(v) == 2
               for v in metric(records, "neuroncore_utilization_ratio"))


def test_a_first_report_without_instance_info_is_completed_by_the_next():
    first = copy.deepcopy(BASE)
    first["instance_info"] = {"error": "IMDS unreachable"}
    (before, after), problems = emf(first, BASE)
    assert before and not any("instance_id" in r for r in before)
    assert any(p.kind == "instance_info" and "IMDS unreachable" in p.message for p in problems)
    assert after and all(r["instance_id"] == BASE["instance_info"]["instance_id"] for r in after)


def test_a_first_report_without_hardware_info_leaves_the_device_out_until_one_has_it():
    first = copy.deepcopy(BASE)
    first["neuron_hardware_info"] = {"error": "driver not loaded"}
    (before, after), _ = emf(first, BASE)
    engine = "neuron_core_engine_utilization_ratio"
    assert metric(before, engine) and not any("neuron_device_index" in r for r in before if engine in r)
    assert metric(after, engine) and all("neuron_device_index" in r for r in after if engine in r)
    assert metric(after, "neuron_core_model_flops_utilization_ratio") and not metric(before, "neuron_core_model_flops_utilization_ratio")


def test_the_prometheus_exporter_takes_the_device_layout_from_the_first_report_that_has_it():
    first = copy.deepcopy(BASE)
    first["neuron_hardware_info"] = {"error": "driver not loaded"}
    exporter = PrometheusExporter(clock=lambda: 1764476000.0)
    text = exporter.ingest(Report.from_json(orjson.dumps(first))).text.decode()
    assert 'neuron_device_index=""' in text
    text = exporter.ingest(Report.from_json(orjson.dumps(BASE))).text.decode()
    assert 'neuron_device_index=""' not in text
    assert "neuron_core_model_flops_utilization_ratio{" in text and 'neuron_device_index="0"' in text


def run_cli(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess:
    return subprocess.run([console_script("neuron-monitor-cloudwatch"), *args], input=stdin,
                          capture_output=True, timeout=30)


def test_aws_namespaces_and_unknown_metrics_are_usage_errors():
    out = run_cli("--emf", "--namespace", "AWS/Neuron")
    assert out.returncode == 2 and "AWS/ namespaces" in out.stderr.decode()
    out = run_cli("--emf", "--exclude", "neuroncore_utilization_ratio,no_such_metric")
    assert out.returncode == 2 and "no metric named no_such_metric" in out.stderr.decode()


def test_exclude_leaves_those_metrics_out():
    line = orjson.dumps(BASE) + b"\n"
    whole = run_cli("--emf", stdin=line)
    cut = run_cli("--emf", "--exclude", "neuron_core_engine_utilization_ratio, neuron_core_dma_bytes_total",
                  stdin=line)
    assert whole.returncode == cut.returncode == 0
    names = lambda out: {m["Name"] for x in out.stdout.splitlines()  # noqa: E731
                         for m in orjson.loads(x)["_aws"]["CloudWatchMetrics"][0]["Metrics"]}
    assert names(whole) - names(cut) == {"neuron_core_engine_utilization_ratio",
                                         "neuron_core_dma_bytes_total"}
    # given twice, both lists are left out (the second had replaced the first)
    twice = run_cli("--emf", "--exclude", "neuron_core_engine_utilization_ratio",
                    "--exclude", "neuron_core_dma_bytes_total", stdin=line)
    assert names(twice) == names(cut)


def test_sighup_reopens_the_output_after_rotation(tmp_path):
    out, rotated = tmp_path / "neuron.emf", tmp_path / "neuron.emf.1"
    proc = subprocess.Popen([console_script("neuron-monitor-cloudwatch"), "--emf", "--output", str(out)],
                            stdin=subprocess.PIPE, stderr=subprocess.PIPE)
    line = orjson.dumps(BASE) + b"\n"
    try:
        proc.stdin.write(line)
        proc.stdin.flush()
        _wait_for(lambda: out.exists() and out.stat().st_size > 0)
        os.rename(out, rotated)
        proc.send_signal(signal.SIGHUP)
        time.sleep(0.2)
        proc.stdin.write(line)
        proc.stdin.close()
        assert proc.wait(timeout=30) == 0, proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert len(rotated.read_bytes().splitlines()) == len(out.read_bytes().splitlines()) > 0
    assert oct(out.stat().st_mode & 0o777) == "0o600"


def _wait_for(condition, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_the_prometheus_exporter_keeps_both_processes_of_a_shared_tag():
    """Two runtimes under one tag (torchrun workers inheriting NEURON_PROCESS_TAG): each pid's
    neuron_runtime_info stays (the second one's replaced the first's)."""
    doc = copy.deepcopy(BASE)
    twin = copy.deepcopy(doc["neuron_runtime_data"][0])
    twin["pid"] += 1
    doc["neuron_runtime_data"].append(twin)
    text = PrometheusExporter(clock=lambda: 1764476000.0).ingest(
        Report.from_json(orjson.dumps(doc))).text.decode()
    info = [line for line in text.splitlines() if line.startswith("neuron_runtime_info{")]
    pids = {twin["pid"] - 1, twin["pid"]}
    assert len(info) == 2 and all(any(f'pid="{p}"' in line for line in info) for p in pids)


def test_a_value_beyond_what_cloudwatch_takes_is_left_out_and_a_tiny_one_is_zero():
    doc = copy.deepcopy(BASE)
    devices = doc["system_data"]["neuron_device_counters"]["neuron_devices"]
    devices[0]["power_watts"] = 1e200          # PutMetricData refuses beyond 2^360
    devices[1]["power_watts"] = 1e-200         # and stores anything below 2^-360 as 0
    (records,), problems = emf(doc)
    powers = metric(records, "neuron_device_power_watts")
    assert 1e200 not in powers and 0.0 in powers
    assert any(p.kind == "value_range" and "neuron_device_power_watts" in p.message
               for p in problems)


def test_an_input_that_fails_is_said_to_be_the_input_not_the_output(tmp_path):
    """A reset connection on stdin was reported as "cannot write to --output", sending an
    operator to check the disk."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    client = socket.create_connection(server.getsockname())
    peer, _ = server.accept()
    out = tmp_path / "neuron.emf"
    proc = subprocess.Popen([console_script("neuron-monitor-cloudwatch"), "--emf", "--output",
                             str(out)], stdin=client.fileno(), stderr=subprocess.PIPE)
    client.close()
    try:
        peer.sendall(orjson.dumps(BASE) + b"\n")
        _wait_for(lambda: out.exists() and out.stat().st_size > 0)
        peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        peer.sendall(b'{"partial')
        peer.close()                    # with no linger: a reset, not an end of input
        err = proc.communicate(timeout=30)[1].decode()
    finally:
        server.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1, err
    assert "cannot read from stdin" in err and "write" not in err and "Traceback" not in err
