"""A small real fleet for tests: simulated instances, an exporter each, Prometheus, VictoriaMetrics.

    from fleet_env import fleet, fleet_prometheus, fleet_victoria, fleet_server  # noqa: F401

    def test_something(fleet, fleet_prometheus):
        fleet_prometheus.wait_for('up == 1', lambda r: len(r) == len(fleet.targets), 30)

What runs (all on 127.0.0.1, free ports, temporary 0700 directories):
- ``FLEET_INSTANCES`` simulated instances, ``neuron-sim start --root DIR -i TYPE --seed N``:
  distinct instance ids, types and availability zones;
- one ``neuron-monitor-prometheus --collect -c CONFIG`` per instance (every group, 1 s period). The
  exporter has no ``--root`` flag: it finds the instance through ``$XDG_RUNTIME_DIR/neuronscope``,
  so each exporter gets its own ``XDG_RUNTIME_DIR`` whose ``neuronscope`` folder is the sim's root;
- a real Prometheus (Debian's ``prometheus``) scraping every exporter each second, loading
  ``dashboards/fleet-rules.yml`` when it exists;
- a real VictoriaMetrics single-node (Debian's ``victoria-metrics``) scraping the same targets.

The fixtures are session-scoped and shared: importing them into several test modules still starts
one fleet and one of each server (a process-wide cache with a reference count), stopped when the
last user is done, and at interpreter exit if pytest is interrupted. A missing binary skips the
test with the reason. ``Fleet.kill_exporter(i)`` / ``restart_exporter(i)`` (same port, so the same
target) and the ``exporter_down(i)`` context manager take a target down and bring it back.
Every wait is bounded and fails with what it was waiting for.

Readings move: the simulated jobs' utilization changes by up to ~30 % from one report to the next
(more just after a start or an exporter restart), and a recorded series of fleet-rules.yml trails
the raw query by up to one evaluation (1 s here). Compare recorded and raw values at one instant
(``query(expr, time=T)`` for both), not from two fetches made at different moments.
"""
from __future__ import annotations

import atexit
import contextlib
import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
DASHBOARDS = ROOT / "dashboards"
FLEET_RULES = DASHBOARDS / "fleet-rules.yml"
sys.path.insert(0, str(ROOT / "tests" / "fixtures" / "exporter"))
from harness import MONITOR_CONFIG, ExporterProcess, console_script  # noqa: E402

# (instance type, seed): distinct ids (from the seed), device generations and zones.
FLEET_INSTANCES: tuple[tuple[str, int], ...] = (("trn2.48xlarge", 1), ("trn1.32xlarge", 2))
SCRAPE_INTERVAL_S = 1.0
JOB = "neuron"
START_TIMEOUT_S = 60.0
VICTORIA_METRICS = "/usr/bin/victoria-metrics"



# ------------------------------------------------------------------------------ HTTP helpers
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def api(base_url: str, path: str, timeout: float = 10.0, **params: str) -> dict[str, Any]:
    """GET a Prometheus-API path; returns the decoded body (also for 4xx error bodies)."""
    url = f"{base_url}{path}?{urllib.parse.urlencode(params)}" if params else f"{base_url}{path}"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return json.load(resp)
    except urllib.error.HTTPError as exc:  # Prometheus answers bad queries with 400 + a JSON body
        with exc:
            return json.load(exc)


def query(base_url: str, expr: str, **params: str) -> list[dict[str, Any]]:
    """An instant query's result list; AssertionError with the server's message on error."""
    body = api(base_url, "/api/v1/query", query=expr, **params)
    assert body.get("status") == "success", (expr, body)
    return body["data"]["result"]


def query_range(base_url: str, expr: str, seconds: float, step: float) -> list[dict[str, Any]]:
    end = time.time()
    body = api(base_url, "/api/v1/query_range", query=expr, start=f"{end - seconds:.3f}",
               end=f"{end:.3f}", step=f"{step:g}")
    assert body.get("status") == "success", (expr, body)
    return body["data"]["result"]


def wait_for(base_url: str, expr: str, predicate: Callable[[list], Any] = bool,
             timeout: float = 30.0, interval: float = 0.5) -> list[dict[str, Any]]:
    """Polls an instant query until ``predicate(result)`` is true; returns that result."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            last = query(base_url, expr)
            if predicate(last):
                return last
        except (OSError, AssertionError, ValueError) as exc:
            last = exc
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {expr!r} at "
                                 f"{base_url}; last answer: {str(last)[:500]}")
        time.sleep(interval)


def _wait_http_ok(url: str, timeout: float, proc: subprocess.Popen, log: pathlib.Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[0]} exited with {proc.returncode}: "
                               f"{log.read_text(errors='replace')[-2000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.25)
    raise RuntimeError(f"{url} not ready after {timeout:g} s: "
                       f"{log.read_text(errors='replace')[-2000:]}")


def _stop(proc: subprocess.Popen | None, timeout: float = 15.0) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


# ------------------------------------------------------------------------------ the fleet
@dataclass
class SimInstance:
    """One `neuron-sim start` instance; ``home`` is the exporter's XDG_RUNTIME_DIR."""
    instance_type: str
    seed: int
    home: pathlib.Path
    instance_id: str = ""
    availability_zone: str = ""

    @property
    def root(self) -> pathlib.Path:
        return self.home / "neuronscope"

    def start(self) -> None:
        self.home.mkdir(mode=0o700)
        self.root.mkdir(mode=0o700)
        subprocess.run([console_script("neuron-sim"), "start", "--root", str(self.root),
                        "-i", self.instance_type, "--seed", str(self.seed)],
                       check=True, capture_output=True, timeout=120)
        info = json.loads((self.root / "instance.json").read_text())
        self.instance_id, self.availability_zone = info["instance_id"], info["availability_zone"]

    def stop(self) -> None:
        subprocess.run([console_script("neuron-sim"), "stop", "--root", str(self.root)],
                       capture_output=True, timeout=60)


@dataclass
class Fleet:
    """Simulated instances and their exporters; ``targets[i]`` is ``exporters[i]``'s host:port."""
    workdir: pathlib.Path
    instances: list[SimInstance] = field(default_factory=list)
    exporters: list[ExporterProcess | None] = field(default_factory=list)
    ports: list[int] = field(default_factory=list)

    @property
    def config(self) -> pathlib.Path:
        return self.workdir / "monitor.json"

    @property
    def targets(self) -> list[str]:
        return [f"127.0.0.1:{p}" for p in self.ports]

    @property
    def instance_ids(self) -> list[str]:
        return [i.instance_id for i in self.instances]

    def _exporter(self, i: int, port: int) -> ExporterProcess:
        env = dict(os.environ, XDG_RUNTIME_DIR=str(self.instances[i].home))
        return ExporterProcess("--collect", "-c", str(self.config), "-p", str(port),
                               stdin=subprocess.DEVNULL, env=env)

    def start(self, spec: tuple[tuple[str, int], ...]) -> None:
        self.config.write_text(json.dumps(MONITOR_CONFIG))
        for n, (itype, seed) in enumerate(spec):
            inst = SimInstance(itype, seed, self.workdir / f"instance-{n}")
            self.instances.append(inst)
            inst.start()
        for n in range(len(spec)):
            exporter = self._exporter(n, 0)
            self.exporters.append(exporter)
            self.ports.append(exporter.port)

    def kill_exporter(self, i: int) -> None:
        """SIGKILL exporter ``i`` (its target goes down; the simulated instance keeps running)."""
        exporter = self.exporters[i]
        if exporter is not None:
            exporter.proc.kill()
            exporter.proc.wait(10)
            exporter.close()
            self.exporters[i] = None

    def restart_exporter(self, i: int, settle_reports: int = 3) -> None:
        """Starts exporter ``i`` again on its old port (the same Prometheus target) and returns
        once it has served ``settle_reports`` reports: a fresh collector's first report covers
        a different span than the steady ones, so its values are not the instance's usual."""
        if self.exporters[i] is None:
            deadline = time.monotonic() + 20
            while True:  # the killed listener's port may take a moment to be free again
                try:
                    self.exporters[i] = self._exporter(i, self.ports[i])
                    break
                except RuntimeError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
        exporter = self.exporters[i]
        exporter.wait_for(lambda: (exporter.value("neuron_exporter_reports_total") or 0)
                          >= settle_reports, timeout=20, interval=0.25)

    @contextlib.contextmanager
    def exporter_down(self, i: int) -> Iterator[None]:
        self.kill_exporter(i)
        try:
            yield
        finally:
            self.restart_exporter(i)

    def stop(self) -> None:
        for exporter in self.exporters:
            if exporter is not None:
                exporter.close()
        for inst in self.instances:
            if inst.root.exists():
                inst.stop()


def scrape_config(targets: list[str], interval_s: float = SCRAPE_INTERVAL_S,
                  rule_files: list[pathlib.Path] = (), evaluation: bool = True,
                  evaluation_s: float | None = None) -> str:
    """Prometheus's config (rules evaluated every ``evaluation_s``, by default every scrape
    interval); ``evaluation=False`` for VictoriaMetrics (its parser is strict)."""
    every = interval_s if evaluation_s is None else evaluation_s
    evaluate = f", evaluation_interval: {every:g}s" if evaluation else ""
    lines = [f"global: {{scrape_interval: {interval_s:g}s, scrape_timeout: {interval_s:g}s"
             f"{evaluate}}}"]
    if rule_files:
        lines.append("rule_files: [" + ", ".join(f"'{p}'" for p in rule_files) + "]")
    lines += ["scrape_configs:", f"  - job_name: {JOB}",
              "    static_configs: [{targets: [" + ", ".join(f"'{t}'" for t in targets) + "]}]"]
    return "\n".join(lines) + "\n"


@dataclass
class Server:
    """A running Prometheus-API server (Prometheus or VictoriaMetrics) on 127.0.0.1."""
    kind: str
    base_url: str
    proc: subprocess.Popen
    workdir: pathlib.Path
    log: pathlib.Path

    def query(self, expr: str, **params: str) -> list[dict[str, Any]]:
        return query(self.base_url, expr, **params)

    def query_range(self, expr: str, seconds: float, step: float) -> list[dict[str, Any]]:
        return query_range(self.base_url, expr, seconds, step)

    def wait_for(self, expr: str, predicate: Callable[[list], Any] = bool,
                 timeout: float = 30.0) -> list[dict[str, Any]]:
        return wait_for(self.base_url, expr, predicate, timeout)

    def stop(self) -> None:
        _stop(self.proc)


def start_prometheus(targets: list[str], workdir: pathlib.Path,
                     rule_files: list[pathlib.Path] | None = None,
                     interval_s: float = SCRAPE_INTERVAL_S,
                     extra_args: tuple[str, ...] = (),
                     evaluation_s: float | None = None) -> Server:
    """Debian's prometheus on a free loopback port, its TSDB in ``workdir``."""
    if rule_files is None:
        rule_files = [FLEET_RULES] if FLEET_RULES.exists() else []
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "prometheus.yml"
    config.write_text(scrape_config(targets, interval_s, rule_files, evaluation_s=evaluation_s))
    port = free_port()
    return _serve("prometheus", ["prometheus", f"--config.file={config}",
                                 f"--storage.tsdb.path={workdir / 'data'}",
                                 f"--web.listen-address=127.0.0.1:{port}", "--web.enable-lifecycle",
                                 "--log.level=warn", *extra_args], port, workdir, "/-/ready")


def start_victoria(targets: list[str], workdir: pathlib.Path,
                   interval_s: float = SCRAPE_INTERVAL_S) -> Server:
    """VictoriaMetrics single-node scraping ``targets`` itself (-promscrape.config).

    ``-search.latencyOffset=0s``: by default the newest 30 s are hidden from queries, which would
    make a freshly started fleet look empty and a killed target look up for 30 s.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "scrape.yml"
    config.write_text(scrape_config(targets, interval_s, evaluation=False))
    port = free_port()
    return _serve("victoria-metrics", [VICTORIA_METRICS, f"-promscrape.config={config}",
                                       f"-storageDataPath={workdir / 'data'}",
                                       f"-httpListenAddr=127.0.0.1:{port}", "-retentionPeriod=1d",
                                       "-search.latencyOffset=0s", "-search.disableCache",
                                       "-loggerLevel=WARN"], port, workdir, "/health")


def _serve(name: str, argv: list[str], port: int, workdir: pathlib.Path, ready: str) -> Server:
    """Start one server on 127.0.0.1:``port``, its log in ``workdir/<name>.log``, and wait until
    ``ready`` answers 200; stopped again if it does not."""
    log = workdir / f"{name}.log"
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=log.open("wb"))
    server = Server(name, f"http://127.0.0.1:{port}", proc, workdir, log)
    try:
        _wait_http_ok(server.base_url + ready, START_TIMEOUT_S, proc, log)
    except BaseException:
        server.stop()
        raise
    return server


# ------------------------------------------------------------------------------ shared lifetimes
_SHARED: dict[str, list[Any]] = {}  # name -> [object, users, stop]


def _acquire(name: str, make: Callable[[], Any], stop: Callable[[Any], None]) -> Any:
    if name not in _SHARED:
        _SHARED[name] = [make(), 0, stop]
    _SHARED[name][1] += 1
    return _SHARED[name][0]


def _release(name: str) -> None:
    entry = _SHARED.get(name)
    if entry is None:
        return
    entry[1] -= 1
    if entry[1] <= 0:
        del _SHARED[name]
        entry[2](entry[0])


@atexit.register
def _stop_everything() -> None:  # an interrupted run must not leave simulators behind
    for name in ("victoria", "prometheus", "fleet"):
        entry = _SHARED.pop(name, None)
        if entry is not None:
            with contextlib.suppress(Exception):
                entry[2](entry[0])


def _need(binary: str) -> None:
    if shutil.which(binary) is None and not pathlib.Path(binary).exists():
        package = "victoria-metrics" if "victoria" in binary else "prometheus"
        pytest.skip(f"needs {binary} (Debian's {package} package)")


def _make_fleet() -> Fleet:
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="neuronscope-fleet-"))
    workdir.chmod(0o700)
    fleet_ = Fleet(workdir)
    try:
        fleet_.start(FLEET_INSTANCES)
    except BaseException:
        _stop_fleet(fleet_)
        raise
    return fleet_


def _stop_fleet(fleet_: Fleet) -> None:
    try:
        fleet_.stop()
    finally:
        shutil.rmtree(fleet_.workdir, ignore_errors=True)


def _in_tempdir(prefix: str, start: Callable[[pathlib.Path], Server]) -> Server:
    workdir = pathlib.Path(tempfile.mkdtemp(prefix=prefix))
    try:
        return start(workdir)
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise


def _stop_server(server: Server) -> None:
    try:
        server.stop()
    finally:
        shutil.rmtree(server.workdir, ignore_errors=True)


@pytest.fixture(scope="session")
def fleet() -> Iterator[Fleet]:
    """The simulated instances and their exporters (``FLEET_INSTANCES``)."""
    yield _acquire("fleet", _make_fleet, _stop_fleet)
    _release("fleet")


@pytest.fixture(scope="session")
def fleet_prometheus(fleet: Fleet) -> Iterator[Server]:
    """A real Prometheus scraping every exporter of ``fleet`` each second, fleet rules loaded."""
    _need("prometheus")
    yield _acquire("prometheus", lambda: _in_tempdir(
        "neuronscope-prom-", lambda d: start_prometheus(fleet.targets, d)), _stop_server)
    _release("prometheus")


@pytest.fixture(scope="session")
def fleet_victoria(fleet: Fleet) -> Iterator[Server]:
    """A real VictoriaMetrics single-node scraping the same targets each second."""
    _need(VICTORIA_METRICS)
    yield _acquire("victoria", lambda: _in_tempdir(
        "neuronscope-vm-", lambda d: start_victoria(fleet.targets, d)), _stop_server)
    _release("victoria")


@pytest.fixture(params=["prometheus", "victoria-metrics"])
def fleet_server(request) -> Server:
    """Each of the two servers in turn (tests that must hold for both HTTP APIs)."""
    return request.getfixturevalue("fleet_prometheus" if request.param == "prometheus"
                                   else "fleet_victoria")


def wait_fleet_up(fleet_: Fleet, server: Server, timeout: float = 45.0) -> list[dict[str, Any]]:
    """Waits until every target is up and has been scraped with neuron metrics."""
    n = len(fleet_.targets)
    server.wait_for(f'up{{job="{JOB}"}} == 1', lambda r: len(r) == n, timeout)
    return server.wait_for("count by (instance_id) (neuroncore_utilization_ratio)",
                           lambda r: len(r) == n, timeout)
