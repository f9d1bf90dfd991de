"""One version source: pyproject.toml's, as installed. Every tool and the deployment manifest agree."""
from __future__ import annotations

import pathlib
import re
import subprocess
import sys
from importlib.metadata import version

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PYPROJECT_VERSION = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M)[1]
TOOLS = {
    "neuron-sim": "device_model.cli", "neuron-monitor": "monitor.cli", "neuron-ls": "monitor.ls_cli",
    "neuron-monitor-prometheus": "exporters.prometheus_cli",
    "neuron-monitor-cloudwatch": "exporters.cloudwatch_cli", "neuron-top": "tui.cli",
    "neuron-profile": "profiler.cli",
}


def test_installed_version_is_pyprojects():
    assert version("neuronscope") == PYPROJECT_VERSION


def test_packages_read_the_one_version():
    import device_model
    import exporters.exporter
    import monitor
    import profiler
    import tui
    assert {device_model.__version__, monitor.__version__, tui.__version__, profiler.__version__,
            exporters.exporter.package_version()} == {PYPROJECT_VERSION}


@pytest.mark.parametrize("tool", sorted(TOOLS))
def test_every_tool_reports_it(tool):
    out = subprocess.run([sys.executable, "-m", TOOLS[tool], "--version"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-1] == PYPROJECT_VERSION


def test_daemonset_image_is_tagged_with_it():
    manifest = (ROOT / "dashboards" / "k8s" / "neuron-monitor-daemonset.yaml").read_text()
    assert re.findall(r"image: neuronscope:(\S+)", manifest) == [PYPROJECT_VERSION]
