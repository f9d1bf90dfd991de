"""CloudWatch Embedded Metric Format output: structure, values, limits, CLI."""
from __future__ import annotations

import math
import os
import pathlib
import stat
import subprocess
import sys

import orjson
import pytest

from exporters import metrics_table as mt
from exporters.cloudwatch import EmfEncoder
from monitor.report import Report

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
sys.path.insert(0, str(FIXTURES / "exporter"))
from harness import console_script  # noqa: E402
from stream_gen import StreamGen  # noqa: E402

UNITS = {"Seconds", "Microseconds", "Milliseconds", "Bytes", "Kilobytes", "Megabytes", "Gigabytes",
         "Terabytes", "Bits", "Percent", "Count", "Bytes/Second", "Count/Second", "None"}


def check_emf(record: dict, namespace: str) -> None:
    """The EMF specification's rules for one record."""
    aws = record["_aws"]
    assert isinstance(aws["Timestamp"], int) and aws["Timestamp"] > 1_000_000_000_000
    (directive,) = aws["CloudWatchMetrics"]
    assert directive["Namespace"] == namespace
    for dimension_set in directive["Dimensions"]:
        assert len(dimension_set) <= 30
        for name in dimension_set:     # CloudWatch's dimension values: 1-1024 printable ASCII
            value = record[name]
            assert isinstance(value, str) and value.strip() and len(value) <= 1024
            assert value.isascii() and value.isprintable()
    assert 1 <= len(directive["Metrics"]) <= 100
    names = [m["Name"] for m in directive["Metrics"]]
    assert len(names) == len(set(names))
    for metric in directive["Metrics"]:
        assert metric["Unit"] in UNITS
        value = record[metric["Name"]]
        values = value if isinstance(value, list) else [value]
        assert 1 <= len(values) <= 100
        assert all(isinstance(v, (int, float)) and math.isfinite(v) for v in values)


def encode(doc: bytes, namespace: str = "NeuronMonitor") -> list[dict]:
    enc = EmfEncoder(namespace, clock=lambda: 1764476000.0)
    lines = enc.lines(Report.from_json(doc, received_at=1764476000.5), []).splitlines()
    return [orjson.loads(line) for line in lines]


def test_records_follow_the_emf_structure():
    records = encode((FIXTURES / "neuron_monitor_extensions.json").read_bytes())
    assert len(records) > 5
    for r in records:
        check_emf(r, "NeuronMonitor")
        assert r["_aws"]["Timestamp"] == 1764476000500
        assert r["instance_id"] == "i-0011223344556677a"
    names = {m["Name"] for r in records for m in r["_aws"]["CloudWatchMetrics"][0]["Metrics"]}
    expected = {s.name for s in mt.ALL_METRICS if s.kind != "info"
                and s.group not in (mt.EXPORTER_GROUP, mt.RUNTIME_GROUP)}
    assert expected - names == set()
    # neuron_runtime_info (always 1, the pid a dimension) would be a new billed metric per
    # process in CloudWatch: like the other info metrics, it is not written
    assert "neuron_runtime_info" not in names and not any("pid" in r for r in records)


def test_counters_are_the_period_count_not_a_running_total():
    doc = (FIXTURES / "neuron_monitor_aws_example.json").read_bytes()
    enc = EmfEncoder("NS", clock=lambda: 0.0)
    for _ in range(3):
        records = [orjson.loads(x) for x in enc.lines(Report.from_json(doc), []).splitlines()]
    completed = [r for r in records if r.get("status_type") == "completed"]
    assert [r["execution_status_total"] for r in completed] == [123.0]
    core = next(r for r in records if "neuroncore_memory_usage_tensors" in r)
    assert "memory_location" not in core  # AWS's "None" placeholder is not a dimension


def test_many_metrics_are_split_at_100_per_record():
    gen = StreamGen(seed=2, runtimes=1, devices=16)
    records = [orjson.loads(x) for x in EmfEncoder("NS", lambda: 1764476000.0).lines(
        Report.from_json(gen.line()), []).splitlines()]
    assert any(len(r["_aws"]["CloudWatchMetrics"][0]["Metrics"]) > 1 for r in records)
    for r in records:
        check_emf(r, "NS")


def test_records_are_split_when_over_the_metric_limit(monkeypatch):
    import exporters.cloudwatch as cw
    doc = (FIXTURES / "neuron_monitor_extensions.json").read_bytes()
    whole = encode(doc)
    monkeypatch.setattr(cw, "MAX_METRICS_PER_RECORD", 2)
    split = encode(doc)
    assert len(split) > len(whole)
    assert all(len(r["_aws"]["CloudWatchMetrics"][0]["Metrics"]) <= 2 for r in split)
    count = lambda records: sum(len(r["_aws"]["CloudWatchMetrics"][0]["Metrics"]) for r in records)  # noqa: E731
    assert count(split) == count(whole)


def run_cli(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess:
    return subprocess.run([console_script("neuron-monitor-cloudwatch"), *args], input=stdin,
                          capture_output=True, timeout=30)


def test_cli_appends_to_a_private_file(tmp_path):
    gen = StreamGen(seed=4, runtimes=2, devices=2)
    data = gen.line() + b"not json\n" + gen.line()
    out = tmp_path / "neuron.emf"
    first = run_cli("--emf", "--namespace", "Team/Neuron", "--output", str(out), stdin=data)
    assert first.returncode == 0, first.stderr
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o600
    n = len(out.read_bytes().splitlines())
    assert run_cli("--emf", "--output", str(out), stdin=gen.line()).returncode == 0
    lines = out.read_bytes().splitlines()
    assert len(lines) > n
    for line in lines[:n]:
        check_emf(orjson.loads(line), "Team/Neuron")
    assert len(first.stderr.decode().splitlines()) == 1 and "(not_json)" in first.stderr.decode()


@pytest.mark.parametrize("args, message", [
    ([], "--emf"), (["--emf", "--namespace", ""], "--namespace"),
    (["--emf", "-c", "x.json"], "--collect only"),
    (["--emf", "--output", "/nonexistent/dir/f"], "cannot open --output")])
def test_cli_usage_errors(args, message):
    out = run_cli(*args)
    assert out.returncode == 2 and message in out.stderr.decode()
    assert "Traceback" not in out.stderr.decode()


def test_aws_command_line_is_taken_with_emf_and_explained_without(tmp_path):
    """AWS's script runs as `--namespace NS --region R` and publishes through the API: the same
    line with --emf writes EMF; without it, one line says why --emf is needed."""
    gen = StreamGen(seed=5, runtimes=1, devices=1)
    out = run_cli("--namespace", "Team/Neuron", "--region", "us-west-2", "--emf",
                  stdin=gen.line())
    assert out.returncode == 0, out.stderr
    check_emf(orjson.loads(out.stdout.splitlines()[0]), "Team/Neuron")
    out = run_cli("--namespace", "Team/Neuron", "--region", "us-west-2")
    err = out.stderr.decode()
    assert out.returncode == 2 and "required: --emf" in err and "CloudWatch agent" in err
    assert "unrecognized" not in err


@pytest.mark.parametrize("args", [["--bogus"], ["--emf", "--bogus"], ["--bogus", "--namespace", "x"]])
def test_cli_names_an_unknown_flag(args):
    out = run_cli(*args)
    err = out.stderr.decode()
    assert out.returncode == 2 and "unrecognized arguments: --bogus" in err
    assert "required" not in err


@pytest.mark.parametrize("stdin", [b"", b"not json\n", b'{"neuron_runtime_data": 5}\n'])
def test_cli_input_with_no_valid_report_exits_non_zero(stdin):
    out = run_cli("--emf", stdin=stdin)
    assert out.returncode == 1 and out.stdout == b""
    assert "no valid neuron-monitor report" in out.stderr.decode()


def test_cli_collect_errors_are_quoted_as_the_other_tools_quote_them(tmp_path):
    missing = tmp_path / "missing.json"
    out = run_cli("--emf", "--collect", "-c", str(missing))
    err = out.stderr.decode().strip()
    assert out.returncode == 2
    assert err == f"neuron-monitor-cloudwatch: error: --collect: {missing}: cannot read config " \
                  "(No such file or directory)"
