"""A throw-away Prometheus server for the tests: Debian's ``prometheus`` binary, nothing mocked.

:func:`temporary_prometheus` writes a scrape config for the given ``host:port`` targets (the brokers' JMX
exporters, :attr:`kafkaops.platform.provision.ClusterSpec.metrics_targets`) with a short scrape interval into
a new temp dir, starts the server there on a free loopback port (its TSDB in the same dir), waits until it is
ready and yields a :class:`TestPrometheus`; afterwards it stops the server and removes the dir, also when the
block fails. Should the test process die first (``kill -9`` too), the session's watchdog
(kafkaops.testing.watchdog) kills the server and removes the dir.
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
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from kafkaops.platform.prometheus import PrometheusClient
from kafkaops.platform.provision import free_ports
from kafkaops.testing import watchdog

log = logging.getLogger(__name__)

INSTALL_HINT = ("run 'make prometheus' (as root it installs Debian's: apt-get install -y --no-install-recommends "
                "prometheus)")
#: The job name of the brokers' exporters in the scrape config: their series carry job="kafka".
JOB = "kafka"


class PrometheusNotFound(RuntimeError):
    """No ``prometheus`` binary on this machine."""


@dataclass(frozen=True)
class TestPrometheus:
    """A running test server: its base URL, its folder (config, TSDB, log) and what it scrapes."""

    __test__ = False  # not a pytest test class

    url: str
    root: Path
    targets: tuple[str, ...]
    scrape_interval_s: float

    def client(self, timeout_s: float = 10.0) -> PrometheusClient:
        """A client of this server; the caller closes it."""
        return PrometheusClient(self.url, timeout_s=timeout_s)

    def log_tail(self, chars: int = 2000) -> str:
        try:
            return (self.root / "prometheus.log").read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def wait_until_scraped(self, timeout_s: float = 30.0) -> None:
        """Wait until every target has been scraped successfully (``up == 1``); RuntimeError naming the
        targets that are not after ``timeout_s`` s."""
        deadline = time.monotonic() + timeout_s
        wanted = set(self.targets)
        up: set[str] = set()
        with self.client(timeout_s=5.0) as prometheus:
            while True:
                up = {s.labels.get("instance", "") for s in prometheus.query(f'up{{job="{JOB}"}} == 1')}
                if wanted <= up:
                    return
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"Prometheus {self.url} has not scraped {sorted(wanted - up)} after {timeout_s:.0f} s (up: "
                        f"{sorted(up)}); are the brokers' JMX exporters on? Its log: {self.log_tail(1000)}")
                time.sleep(0.25)


def find_binary() -> str:
    """The ``prometheus`` binary: on PATH, else Debian's /usr/bin/prometheus."""
    found = shutil.which("prometheus") or "/usr/bin/prometheus"
    if not os.access(found, os.X_OK):
        raise PrometheusNotFound(f"the prometheus server binary is neither on PATH nor at /usr/bin/prometheus; "
                                 f"the Prometheus tests need it: {INSTALL_HINT}")
    return found


def scrape_config(targets: Sequence[str], scrape_interval_s: float) -> dict[str, object]:
    """Prometheus' configuration: the targets in job :data:`JOB`, scraped every ``scrape_interval_s`` s."""
    interval = f"{int(scrape_interval_s * 1000)}ms"
    return {"global": {"scrape_interval": interval, "scrape_timeout": interval, "evaluation_interval": interval},
            "scrape_configs": [{"job_name": JOB, "static_configs": [{"targets": list(targets)}]}]}


@contextmanager
def temporary_prometheus(targets: Sequence[str], *, scrape_interval_s: float = 1.0, start_timeout_s: float = 30.0,
                         prefix: str = "kafkaops-prom-") -> Iterator[TestPrometheus]:
    """A Prometheus server scraping ``targets`` (``host:port``) for the ``with`` block."""
    binary = find_binary()
    root = Path(tempfile.mkdtemp(prefix=prefix))
    guard = watchdog.guard(watchdog.rmtree(root), name=f"prometheus {root.name}")  # until the server is up
    process: subprocess.Popen[bytes] | None = None
    try:
        # JSON is YAML: the config needs no YAML writer
        (root / "prometheus.yml").write_text(json.dumps(scrape_config(targets, scrape_interval_s), indent=2))
        (port,) = free_ports(1)
        url = f"http://127.0.0.1:{port}"
        with (root / "prometheus.log").open("wb") as out:
            process = subprocess.Popen(
                [binary, f"--config.file={root / 'prometheus.yml'}", f"--storage.tsdb.path={root / 'data'}",
                 f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=1h",
                 "--log.level=warn"],
                cwd=root, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        guard.update(watchdog.group(process), watchdog.rmtree(root))
        server = TestPrometheus(url=url, root=root, targets=tuple(targets), scrape_interval_s=scrape_interval_s)
        _await_ready(process, server, start_timeout_s)
        log.info("test Prometheus up in %s on %s, scraping %s", root, url, ", ".join(targets))
        yield server
    finally:
        if process is not None:
            _stop(process)
        shutil.rmtree(root, ignore_errors=True)
        guard.release()


def _await_ready(process: subprocess.Popen[bytes], server: TestPrometheus, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    last = "no answer yet"
    with httpx.Client(timeout=2.0) as http:
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"prometheus exited with {process.returncode} before it was ready on {server.url}; "
                                   f"its log: {server.log_tail()}")
            try:
                response = http.get(f"{server.url}/-/ready")
                if response.status_code == 200:
                    return
                last = f"HTTP {response.status_code}"
            except httpx.HTTPError as err:
                last = f"{type(err).__name__}: {err}"
            if time.monotonic() > deadline:
                raise RuntimeError(f"prometheus on {server.url} not ready after {timeout_s:.0f} s ({last}); "
                                   f"its log: {server.log_tail()}")
            time.sleep(0.1)


def _stop(process: subprocess.Popen[bytes], timeout_s: float = 10.0) -> None:
    """SIGTERM the server's process group, SIGKILL it after ``timeout_s`` s."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except ProcessLookupError:
        process.wait(timeout=timeout_s)
        return
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        log.warning("prometheus pid %s ignored SIGTERM for %.0f s; killing it", process.pid, timeout_s)
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=timeout_s)
