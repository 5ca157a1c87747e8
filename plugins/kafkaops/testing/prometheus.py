"""A throw-away Prometheus server and node exporter for the tests: Debian's ``prometheus`` and
``prometheus-node-exporter`` binaries, nothing mocked.

:func:`temporary_prometheus` writes a scrape config for the given ``host:port`` targets (the brokers' JMX
exporters, :attr:`kafkaops.platform.provision.ClusterSpec.metrics_targets`, job :data:`JOB`; node exporters,
job :data:`NODE_JOB`) with a short scrape interval into a new temp dir, starts the server there on a free
loopback port (its TSDB in the same dir), waits until it is ready and yields a :class:`TestPrometheus`;
afterwards it stops the server and removes the dir, also when the block fails. :func:`temporary_node_exporter`
does the same for a node exporter (the host's CPU, network, memory, load and file systems) on a free loopback
port. Should the test process die first (``kill -9`` too), the session's watchdog (kafkaops.testing.watchdog)
kills the processes and removes the dirs.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from kafkaops.platform.prometheus import PrometheusClient
from kafkaops.platform.provision import free_ports
from kafkaops.testing import watchdog

log = logging.getLogger(__name__)

INSTALL_HINT = ("run 'make prometheus' (as root it installs Debian's: apt-get install -y --no-install-recommends "
                "prometheus prometheus-node-exporter)")
#: The job name of the brokers' exporters in the scrape config: their series carry job="kafka".
JOB = "kafka"
#: The job name of the node exporters in the scrape config: their series carry job="node".
NODE_JOB = "node"
#: Debian's node exporter.
NODE_EXPORTER = "/usr/bin/prometheus-node-exporter"
#: The node exporter's collectors the tests turn on (every other one is off): the host's load as a capacity
#: review reads it.
NODE_COLLECTORS = ("cpu", "netdev", "meminfo", "loadavg", "filesystem")


class PrometheusNotFound(RuntimeError):
    """No ``prometheus`` (or ``prometheus-node-exporter``) binary on this machine."""


@dataclass(frozen=True)
class TestPrometheus:
    """A running test server: its base URL, its folder (config, TSDB, log) and what it scrapes."""

    __test__ = False  # not a pytest test class

    url: str
    root: Path
    targets: tuple[str, ...]
    scrape_interval_s: float
    node_targets: tuple[str, ...] = ()

    def client(self, timeout_s: float = 10.0) -> PrometheusClient:
        """A client of this server; the caller closes it."""
        return PrometheusClient(self.url, timeout_s=timeout_s)

    def log_tail(self, chars: int = 2000) -> str:
        try:
            return (self.root / "prometheus.log").read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def wait_until_scraped(self, timeout_s: float = 30.0) -> None:
        """Wait until every target (the brokers' and the nodes') has been scraped successfully (``up == 1``);
        RuntimeError naming the targets that are not after ``timeout_s`` s."""
        deadline = time.monotonic() + timeout_s
        wanted = {(JOB, t) for t in self.targets} | {(NODE_JOB, t) for t in self.node_targets}
        up: set[tuple[str, str]] = set()
        with self.client(timeout_s=5.0) as prometheus:
            while True:
                up = {(s.labels.get("job", ""), s.labels.get("instance", "")) for s in prometheus.query("up == 1")}
                if wanted <= up:
                    return
                if time.monotonic() > deadline:
                    missing = [f"{job} {instance}" for job, instance in sorted(wanted - up)]
                    raise RuntimeError(
                        f"Prometheus {self.url} has not scraped {missing} after {timeout_s:.0f} s (up: "
                        f"{sorted(up)}); are the brokers' JMX exporters (and the node exporters) on? Its log: "
                        f"{self.log_tail(1000)}")
                time.sleep(0.25)


@dataclass(frozen=True)
class TestNodeExporter:
    """A running test node exporter: ``target`` (``host:port``, what Prometheus scrapes and its ``instance``
    label), its metrics URL and its folder (its log)."""

    __test__ = False  # not a pytest test class

    target: str
    root: Path

    @property
    def url(self) -> str:
        return f"http://{self.target}/metrics"

    def log_tail(self, chars: int = 2000) -> str:
        try:
            return (self.root / "node-exporter.log").read_text(errors="replace")[-chars:]
        except OSError:
            return ""


def find_binary() -> str:
    """The ``prometheus`` binary: on PATH, else Debian's /usr/bin/prometheus."""
    found = shutil.which("prometheus") or "/usr/bin/prometheus"
    if not os.access(found, os.X_OK):
        raise PrometheusNotFound(f"the prometheus server binary is neither on PATH nor at /usr/bin/prometheus; "
                                 f"the Prometheus tests need it: {INSTALL_HINT}")
    return found


def find_node_exporter() -> str:
    """Debian's node exporter binary, /usr/bin/prometheus-node-exporter (else ``node_exporter`` on PATH)."""
    found = NODE_EXPORTER if os.access(NODE_EXPORTER, os.X_OK) else shutil.which("node_exporter")
    if found is None:
        raise PrometheusNotFound(f"the node exporter is neither at {NODE_EXPORTER} nor on PATH (node_exporter); "
                                 f"the Prometheus tests need it: {INSTALL_HINT}")
    return found


def scrape_config(targets: Sequence[str], scrape_interval_s: float,
                  node_targets: Sequence[str] = ()) -> dict[str, object]:
    """Prometheus' configuration: the targets in job :data:`JOB`, the node exporters in job :data:`NODE_JOB`
    (a job without targets left out), scraped every ``scrape_interval_s`` s."""
    interval = f"{int(scrape_interval_s * 1000)}ms"
    jobs = [{"job_name": job, "static_configs": [{"targets": list(scraped)}]}
            for job, scraped in ((JOB, targets), (NODE_JOB, node_targets)) if scraped]
    return {"global": {"scrape_interval": interval, "scrape_timeout": interval, "evaluation_interval": interval},
            "scrape_configs": jobs}


@contextmanager
def temporary_node_exporter(*, start_timeout_s: float = 15.0, prefix: str = "kafkaops-node-"
                            ) -> Iterator[TestNodeExporter]:
    """Debian's node exporter on a free loopback port for the ``with`` block, with the collectors of
    :data:`NODE_COLLECTORS` only (the network's of every device, loopback too); its log in a new temp dir."""
    binary = find_node_exporter()
    with _temporary_process("node exporter", prefix) as running:
        (port,) = free_ports(1)
        exporter = TestNodeExporter(target=f"127.0.0.1:{port}", root=running.root)
        # the listen address first: .ci/run finds strays by it
        process = running.start(
            [binary, f"--web.listen-address={exporter.target}", "--collector.disable-defaults",
             *(f"--collector.{name}" for name in NODE_COLLECTORS),
             # the tests' brokers and clients talk over loopback, which Debian's default leaves out
             "--collector.netdev.device-exclude=^$", "--log.level=warn"], log_name="node-exporter.log")
        _await_http(process, "prometheus-node-exporter", exporter.url, exporter.log_tail, start_timeout_s)
        log.info("test node exporter up on %s", exporter.url)
        yield exporter


@contextmanager
def temporary_prometheus(targets: Sequence[str], *, node_targets: Sequence[str] = (), scrape_interval_s: float = 1.0,
                         start_timeout_s: float = 30.0, prefix: str = "kafkaops-prom-") -> Iterator[TestPrometheus]:
    """A Prometheus server scraping ``targets`` (``host:port``, job :data:`JOB`) and ``node_targets`` (node
    exporters, job :data:`NODE_JOB`) for the ``with`` block."""
    binary = find_binary()
    with _temporary_process("prometheus", prefix) as running:
        root = running.root
        # JSON is YAML: the config needs no YAML writer
        (root / "prometheus.yml").write_text(json.dumps(scrape_config(targets, scrape_interval_s, node_targets),
                                                        indent=2))
        (port,) = free_ports(1)
        url = f"http://127.0.0.1:{port}"
        process = running.start(
            [binary, f"--config.file={root / 'prometheus.yml'}", f"--storage.tsdb.path={root / 'data'}",
             f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=1h", "--log.level=warn"],
            log_name="prometheus.log")
        server = TestPrometheus(url=url, root=root, targets=tuple(targets), scrape_interval_s=scrape_interval_s,
                                node_targets=tuple(node_targets))
        _await_http(process, "prometheus", f"{url}/-/ready", server.log_tail, start_timeout_s)
        log.info("test Prometheus up in %s on %s, scraping %s", root, url, ", ".join([*targets, *node_targets]))
        yield server


@dataclass
class _Running:
    """A process of :func:`_temporary_process`: its folder, its watchdog entry, the process once started."""

    root: Path
    guard: watchdog.Guard
    process: subprocess.Popen[bytes] | None = None

    def start(self, argv: list[str], *, log_name: str) -> subprocess.Popen[bytes]:
        """Start ``argv`` in the folder, in a process group of its own, its output to ``<folder>/<log_name>``."""
        with (self.root / log_name).open("wb") as out:
            self.process = subprocess.Popen(argv, cwd=self.root, stdout=out, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True)
        self.guard.update(watchdog.group(self.process), watchdog.rmtree(self.root))
        return self.process


@contextmanager
def _temporary_process(name: str, prefix: str) -> Iterator[_Running]:
    """A new temp dir for one process the block starts (:meth:`_Running.start`); afterwards the process is
    stopped and the dir removed, also when the block fails, and by the watchdog should this process die first."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    running = _Running(root, watchdog.guard(watchdog.rmtree(root), name=f"{name} {root.name}"))
    try:
        yield running
    finally:
        if running.process is not None:
            _stop(running.process)
        shutil.rmtree(root, ignore_errors=True)
        running.guard.release()


def _await_http(process: subprocess.Popen[bytes], name: str, url: str, log_tail: Callable[[], str],
                timeout_s: float) -> None:
    """Wait until ``url`` answers 200; RuntimeError with ``log_tail()`` if ``process`` exits or it does not
    within ``timeout_s`` s."""
    deadline = time.monotonic() + timeout_s
    last = "no answer yet"
    with httpx.Client(timeout=2.0) as http:
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"{name} exited with {process.returncode} before it was ready on {url}; "
                                   f"its log: {log_tail()}")
            try:
                response = http.get(url)
                if response.status_code == 200:
                    return
                last = f"HTTP {response.status_code}"
            except httpx.HTTPError as err:
                last = f"{type(err).__name__}: {err}"
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} on {url} not ready after {timeout_s:.0f} s ({last}); its log: {log_tail()}")
            time.sleep(0.1)


def _stop(process: subprocess.Popen[bytes], timeout_s: float = 10.0) -> None:
    """SIGTERM the process group, SIGKILL it after ``timeout_s`` s."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except ProcessLookupError:
        process.wait(timeout=timeout_s)
        return
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        log.warning("pid %s ignored SIGTERM for %.0f s; killing it", process.pid, timeout_s)
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=timeout_s)
