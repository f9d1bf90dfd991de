"""Alert rules and scrape config pass promtool's checks and the rules' unit tests."""
from __future__ import annotations

import pathlib
import shutil
import subprocess

import pytest

DASHBOARDS = pathlib.Path(__file__).resolve().parent.parent / "dashboards"
pytestmark = pytest.mark.skipif(shutil.which("promtool") is None,
                                reason="needs promtool (Debian's prometheus package)")


def promtool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["promtool", *args], cwd=DASHBOARDS, capture_output=True, text=True,
                          timeout=120)


def test_check_config():
    out = promtool("check", "config", "prometheus.yml")
    assert out.returncode == 0, out.stdout + out.stderr


def test_check_rules():
    out = promtool("check", "rules", "alerts.yml")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS: 6 rules found" in out.stdout


def test_rule_unit_tests_pass():
    out = promtool("test", "rules", "alerts_test.yml")
    assert out.returncode == 0, out.stdout + out.stderr


def test_rule_unit_tests_can_fail(tmp_path):
    """A broken threshold makes promtool's unit tests fail: they really check the rules."""
    broken = (DASHBOARDS / "alerts.yml").read_text().replace("> 0.9", "> 0.99")
    (tmp_path / "alerts.yml").write_text(broken)
    shutil.copy(DASHBOARDS / "alerts_test.yml", tmp_path)
    out = subprocess.run(["promtool", "test", "rules", "alerts_test.yml"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "NeuronDeviceMemoryNearlyFull" in out.stdout + out.stderr


def test_every_alert_has_a_unit_test():
    rules = (DASHBOARDS / "alerts.yml").read_text()
    tests = (DASHBOARDS / "alerts_test.yml").read_text()
    names = [line.split(":", 1)[1].strip() for line in rules.splitlines()
             if line.strip().startswith("- alert:")]
    assert len(names) == 6
    for name in names:
        assert f"alertname: {name}" in tests, name
