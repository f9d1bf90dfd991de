"""Real Prometheus scraping real-world stream shapes: an inf1 capture (no flops, no memory
size, older ECC counters) and a Kubernetes stream with --enable-k8s-info pod labels."""
from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
sys.path.insert(0, str(FIXTURES / "exporter"))
from harness import ExporterProcess  # noqa: E402
from tests.test_prometheus_integration import _ready, api, free_port, wait_until  # noqa: E402

pytestmark = [
    pytest.mark.skipif(shutil.which("prometheus") is None,
                       reason="needs Debian's prometheus package (scripts/ensure-prometheus.sh)"),
    pytest.mark.timeout(180),
]


@pytest.fixture(scope="module")
def prom(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("prom-shapes")
    inf1 = ExporterProcess("--keep-serving")
    k8s = ExporterProcess("--keep-serving", "--enable-k8s-info")
    inf1.feed((FIXTURES / "neuron_monitor_sdk_inf1.json").read_bytes())
    k8s.feed((FIXTURES / "neuron_monitor_sdk_k8s.json").read_bytes())
    port = free_port()
    config = tmp / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, scrape_timeout: 1s}\nscrape_configs:\n"
        f"  - job_name: inf1\n    static_configs: [{{targets: ['127.0.0.1:{inf1.port}']}}]\n"
        f"  - job_name: k8s\n    static_configs: [{{targets: ['127.0.0.1:{k8s.port}']}}]\n")
    server = subprocess.Popen(["prometheus", f"--config.file={config}",
                               f"--storage.tsdb.path={tmp / 'data'}",
                               f"--web.listen-address=127.0.0.1:{port}"],
                              stdout=subprocess.DEVNULL, stderr=(tmp / "prom.log").open("wb"))
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _ready(base), 60, "Prometheus ready")
        wait_until(lambda: len(series(base, 'up{job=~"inf1|k8s"} == 1')) == 2, 60, "both scraped")
        yield base
    finally:
        server.terminate()
        for exp in (inf1, k8s):
            exp.close()
        try:
            server.wait(15)
        except subprocess.TimeoutExpired:
            server.kill()


def series(base: str, expr: str) -> list[dict]:
    return api(base, "/api/v1/query", query=expr)["data"]["result"]


def test_inf1_stream_is_scraped_with_only_the_series_it_has(prom):
    assert len(series(prom, 'neuroncore_utilization_ratio{job="inf1"}')) == 4
    assert len(series(prom, 'hardware_ecc_events_total{job="inf1",event_type="mem_ecc_corrected"}')) == 1
    assert series(prom, 'hardware_ecc_events_total{job="inf1",event_type="sram_ecc_corrected"}') == []
    assert series(prom, 'neuron_device_memory_total_bytes{job="inf1"}') == []
    assert len(series(prom, 'execution_status_total{job="inf1",status_type="completed"}')) == 1


def test_k8s_pod_labels_reach_prometheus(prom):
    pods = series(prom, 'sum by (pod_name, namespace) (neuroncore_utilization_ratio{job="k8s"})')
    found = {(s["metric"]["namespace"], s["metric"]["pod_name"]): float(s["value"][1]) for s in pods}
    assert set(found) == {("ml", "trainer-0"), ("serving", "server-7f9c")}
    assert found[("serving", "server-7f9c")] == pytest.approx(0.10)
    assert series(prom, 'neuroncore_utilization_ratio{job="inf1",pod_name!=""}') == []
