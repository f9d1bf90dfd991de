"""8 concurrent scrapers for 30 s while reports stream in at 5 Hz: no scrape fails."""
from __future__ import annotations

import gzip
import http.client
import pathlib
import subprocess
import sys
import threading
import time

import pytest

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
sys.path.insert(0, str(FIXTURES / "exporter"))
from harness import ExporterProcess, stream_gen_command  # noqa: E402

SCRAPERS = 8
DURATION_S = 30.0
ACCEPTS = [({}, False), ({"Accept-Encoding": "gzip"}, False),
           ({"Accept": "application/openmetrics-text;version=1.0.0",
             "Accept-Encoding": "gzip"}, True),
           ({"Accept": "application/openmetrics-text;version=1.0.0"}, True)]


def scraper(port: int, n: int, stop: threading.Event, results: list, failures: list) -> None:
    headers, openmetrics = ACCEPTS[n % len(ACCEPTS)]
    conn = None
    while not stop.is_set():
        try:
            if conn is None:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request("GET", "/metrics", headers=headers)
            resp = conn.getresponse()
            body = resp.read()
            if resp.getheader("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            complete = body.endswith(b"# EOF\n") if openmetrics else body.endswith(b"} 1.0\n")
            if resp.status != 200 or not complete:
                failures.append((resp.status, body[-80:]))
            results.append(len(body))
            if n % 2:  # half the scrapers reconnect every time, like a Prometheus restart would
                conn.close()
                conn = None
        except Exception as exc:  # noqa: BLE001 - every failure counts
            failures.append(repr(exc))
            conn = None


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_eight_scrapers_for_30_seconds_while_reports_stream_in():
    source = subprocess.Popen(stream_gen_command("--interval", "0.2", "--runtimes", "4",
                                                 "--devices", "16", "--churn-every", "10"),
                              stdout=subprocess.PIPE)
    with ExporterProcess(stdin=source.stdout) as exp:
        source.stdout.close()
        exp.wait_for(lambda: (exp.value("neuron_exporter_reports_total") or 0) >= 1)
        stop, results, failures = threading.Event(), [], []
        threads = [threading.Thread(target=scraper, args=(exp.port, n, stop, results, failures))
                   for n in range(SCRAPERS)]
        for t in threads:
            t.start()
        time.sleep(DURATION_S)
        stop.set()
        for t in threads:
            t.join(20)
        reports = exp.value("neuron_exporter_reports_total")
        source.terminate()
        source.wait(10)
    assert failures == []
    assert len(results) > 100
    assert reports > 0.5 * DURATION_S * 5  # reports kept flowing during the load
