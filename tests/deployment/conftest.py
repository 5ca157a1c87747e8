"""The deployment as an operator meets it: ``airflow standalone`` with the project's DAGs and plugin,
a local cluster of its own, and Debian's Chromium driven by Selenium (Debian's chromedriver; Selenium
Manager downloads nothing).

Everything started here runs in a process group of its own and is ended with it; the cluster goes
through ``provision.temporary_cluster`` (stopped through the role, stragglers killed). Airflow's output
goes to ``airflow.log`` among the artifacts, and a failed test shows its tail. Screenshots and that
log stay in ``$KAFKAOPS_ARTIFACTS`` (default ``.cache/artifacts/browser``), listed at the end.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from kafkaops.cli import datagen
from kafkaops.platform import admin, provision
from kafkaops.platform.paths import JARS
from tests.conftest import TEST_BROKER_CONFIG, RunningCluster

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
CHROMIUM = os.environ.get("KAFKAOPS_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = os.environ.get("KAFKAOPS_CHROMEDRIVER") or shutil.which("chromedriver") or "/usr/bin/chromedriver"
CHROME_FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage", "--window-size=1600,1000")
USER, PASSWORD = "operator", "kafkaops-browser-test"
TOPIC = "orders"


def artifacts_root() -> Path:
    return Path(os.environ.get("KAFKAOPS_ARTIFACTS") or REPO / ".cache" / "artifacts" / "browser")


# -- the cluster ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SpecCluster(RunningCluster):
    """A running local cluster and a kafkaops cache folder (``$KAFKAOPS_CACHE`` of the Airflow under
    test) whose ``local-cluster.json`` is its spec, as ``make cluster-up`` leaves it: the DAGs'
    inventory when their ``inventory`` param is empty. A scale-out grows the file."""

    cache: Path = Path()

    @property
    def spec_file(self) -> Path:
        return self.cache / "local-cluster.json"


@pytest.fixture(scope="module")
def deployment_cluster(artifacts: Path) -> Iterator[SpecCluster]:
    """Three brokers on free loopback ports with ``orders`` (3 partitions, RF 3, about 2.5 MB of
    keyed records), so a fourth broker has replicas to receive."""
    with provision.temporary_cluster("kafkaops-browser-", brokers=3, extra_config=TEST_BROKER_CONFIG) as spec:
        cache = spec.base_dir / "kafkaops-cache"
        cache.mkdir()
        (cache / "jars").symlink_to(JARS, target_is_directory=True)  # the brokers' classpath, as in .cache/
        cluster = SpecCluster(spec, cache=cache)
        spec.save(cluster.spec_file)
        with cluster.connect() as conn:
            admin.create_topic(conn, TOPIC, 3, 3)
        datagen.produce(cluster.config, TOPIC, datagen.DatagenSpec(records=20_000, keys=200, skew="zipf",
                                                                   record_bytes=128, seed=13))
        yield cluster


# -- Airflow -------------------------------------------------------------------------------------------------

@dataclass
class AirflowServer:
    """``airflow standalone`` on ``url``, signed in as ``USER`` through its REST API."""

    url: str
    home: Path
    log: Path
    process: subprocess.Popen[bytes]
    started_in: float = 0.0
    _token: str | None = field(default=None, repr=False)

    def log_tail(self, lines: int = 80) -> str:
        try:  # the api-server's access lines say little about a failure
            kept = [line for line in self.log.read_text(errors="replace").splitlines() if "[http.access]" not in line]
            return "\n".join(kept[-lines:])
        except OSError as err:
            return f"(no Airflow log at {self.log}: {err})"

    def token(self) -> str:
        if self._token is None:
            answer = httpx.post(f"{self.url}/auth/token", json={"username": USER, "password": PASSWORD}, timeout=30)
            answer.raise_for_status()
            self._token = answer.json()["access_token"]
        return self._token

    def api(self, method: str, path: str, **kwargs: Any) -> Any:
        """Call ``/api/v2{path}``; fail naming the call and Airflow's answer unless it is a success."""
        answer = httpx.request(method, f"{self.url}/api/v2{path}", timeout=30,
                               headers={"Authorization": f"Bearer {self.token()}"}, **kwargs)
        if answer.status_code >= 400:
            pytest.fail(f"{method} /api/v2{path} answered {answer.status_code}: {answer.text[:1000]}")
        return answer.json() if answer.content else None

    def alive(self) -> bool:
        return self.process.poll() is None


def _free_port() -> int:
    return provision.free_ports(1)[0]


def _airflow_env(home: Path, port: int, cluster: SpecCluster) -> dict[str, str]:
    passwords = home / "passwords.json"
    passwords.write_text(json.dumps({USER: PASSWORD}))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW_", "AIRFLOW__", "PYTEST_"))}
    env.update({
        "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": f"{REPO / 'plugins'}{os.pathsep}{REPO}",
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{USER}:admin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
        "AIRFLOW__API__WORKERS": "1",
        # Two cores shared with the rest of the suite: few task processes at a time, and patience with
        # an api-server that answers a task's first call (PATCH .../run) slowly under that load.
        "AIRFLOW__CORE__PARALLELISM": "4",
        "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "30",
        # The DAG files do not change during the test: parse them once, with time to spare, not every 30 s.
        "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "3600",
        "AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES": "1",
        "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "120",
        "AIRFLOW__DAG_PROCESSOR__DAG_FILE_PROCESSOR_TIMEOUT": "180",
        "AIRFLOW_CONN_KAFKA_DEFAULT": json.dumps({"conn_type": "kafka",
                                                  "extra": {"bootstrap.servers": cluster.bootstrap}}),
        # Its local-cluster.json is the cluster's spec: what the DAGs' empty inventory param resolves to.
        "KAFKAOPS_CACHE": str(cluster.cache),
        "GX_ANALYTICS_ENABLED": "false",
    })
    return env


def _stop_group(process: subprocess.Popen[Any], timeout: float = 30.0) -> None:
    """SIGTERM the process group ``process`` leads, then SIGKILL what is left after ``timeout`` s."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(process.pid, 0)
        except ProcessLookupError:
            break
        process.poll()  # reap the leader, so the group can empty
        time.sleep(0.3)
    else:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    process.wait(timeout=10)


def _wait_until_healthy(server: AirflowServer, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        if not server.alive():
            pytest.fail(f"airflow standalone exited with {server.process.returncode} before it was healthy; "
                        f"log {server.log}:\n{server.log_tail()}")
        try:
            last = httpx.get(f"{server.url}/api/v2/monitor/health", timeout=5).json()
            if all((last.get(part) or {}).get("status") == "healthy"
                   for part in ("metadatabase", "scheduler", "triggerer", "dag_processor")):
                return
        except (httpx.HTTPError, ValueError) as err:
            last = repr(err)
        time.sleep(1.0)
    pytest.fail(f"airflow standalone at {server.url} not healthy after {timeout:.0f} s (last: {last}); "
                f"log {server.log}:\n{server.log_tail()}")


def _wait_for_dags(server: AirflowServer, dag_ids: set[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        errors = server.api("GET", "/importErrors")["import_errors"]
        if errors:
            pytest.fail("the DAG processor could not import: " +
                        "; ".join(f"{e['filename']}: {e['stack_trace'][-800:]}" for e in errors))
        found = {d["dag_id"] for d in server.api("GET", "/dags", params={"limit": 100})["dags"]}
        if dag_ids <= found:
            return
        time.sleep(1.0)
    pytest.fail(f"DAGs {sorted(dag_ids - found)} not parsed after {timeout:.0f} s; log:\n{server.log_tail()}")


_ARTIFACTS_USED: list[Path] = []


@pytest.fixture(scope="session")
def artifacts() -> Path:
    """This session's artifact folder (emptied first), listed at the end of the run."""
    root = artifacts_root()
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    _ARTIFACTS_USED.append(root)
    return root


@pytest.fixture(scope="module")
def airflow(deployment_cluster: SpecCluster, artifacts: Path) -> Iterator[AirflowServer]:
    """``airflow standalone`` (scheduler, DAG processor, triggerer, api-server) in a temp AIRFLOW_HOME
    with the kafkaops DAGs and plugin, ``kafka_default`` on the deployment cluster, the store in
    ``$AIRFLOW_HOME/kafkaops.db``, and one admin user ``USER``."""
    home = Path(tempfile.mkdtemp(prefix="kafkaops-standalone-"))
    port = _free_port()
    log = artifacts / "airflow.log"
    with log.open("wb") as out:
        process = subprocess.Popen([str(VENV_BIN / "airflow"), "standalone"], cwd=home, stdout=out,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   env=_airflow_env(home, port, deployment_cluster), start_new_session=True)
    server = AirflowServer(url=f"http://127.0.0.1:{port}", home=home, log=log, process=process)
    began = time.monotonic()
    try:
        _wait_until_healthy(server, timeout=240)
        _wait_for_dags(server, {"kafka_scale_out", "kafka_reassign", "kafka_capacity_review"}, timeout=180)
        server.started_in = time.monotonic() - began
        yield server
    finally:
        _stop_group(process)
        shutil.rmtree(home, ignore_errors=True)


# -- the browser ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def chrome(artifacts: Path) -> Iterator[Any]:
    """Headless Chromium through Debian's chromedriver, in a fresh profile, in a process group of its own."""
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not Path(p).exists()]
    if missing:
        message = (f"{' and '.join(missing)} not found: the browser test needs Debian's chromium and "
                   "chromium-driver (apt-get install chromium chromium-driver; make test installs them as root)")
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = Path(tempfile.mkdtemp(prefix="kafkaops-chromium-"))
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*CHROME_FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    service = Service(executable_path=CHROMEDRIVER, log_output=str(artifacts / "chromedriver.log"),
                      popen_kw={"start_new_session": True})
    driver = webdriver.Chrome(service=service, options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        try:
            driver.quit()
        finally:
            _stop_group(service.process, timeout=10)
            shutil.rmtree(profile, ignore_errors=True)


# -- reports -------------------------------------------------------------------------------------------------

@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.failed:
        server = getattr(item, "funcargs", {}).get("airflow")
        if isinstance(server, AirflowServer):
            report.sections.append(("airflow standalone (log tail)", server.log_tail(120)))
        driver = getattr(item, "funcargs", {}).get("chrome")
        if driver is not None:
            shot = artifacts_root() / f"failed-{report.when}.png"
            try:
                driver.save_screenshot(str(shot))
                report.sections.append(("browser", f"at {driver.current_url}; screenshot {shot}"))
            except Exception as err:  # the browser may be what failed
                report.sections.append(("browser", f"no screenshot: {err}"))
    return report


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _ARTIFACTS_USED or not _ARTIFACTS_USED[0].is_dir():
        return
    terminalreporter.section("browser test artifacts")
    for path in sorted(_ARTIFACTS_USED[0].iterdir()):
        terminalreporter.write_line(f"{path}  ({path.stat().st_size} bytes)")
