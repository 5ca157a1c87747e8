"""The deployment as an operator meets it: Airflow as operators deploy it (kafkaops/testing/deployment.py: PostgreSQL,
Redis, each component a process of its own running the installed wheel, CeleryExecutor) on a local
cluster of its own whose brokers' JMX exporters and this host's node exporter a Prometheus server scrapes
(``prometheus_default``, where a capacity review reads the load), and Debian's Chromium driven by Selenium
(Debian's chromedriver; Selenium Manager downloads nothing).

Everything started here runs in a process group of its own and is ended with it; the cluster goes
through ``clusters.temporary_cluster`` (stopped through the role, stragglers killed). Each component's
output goes to ``components/<name>.log`` among the artifacts, and a failed test shows their tails.
Screenshots and those logs stay in ``$KAFKAOPS_ARTIFACTS`` (default ``.cache/artifacts/deployment``; under
pytest-xdist in its subfolder named after the worker, e.g. ``gw0``),
listed at the end.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kafkaops.cli import datagen
from kafkaops.testing import clusters, deployment as harness, jvm, prometheus, watchdog
from kafkaops.platform import provision
from kafkaops.platform.kafka import topics
from kafkaops.platform.paths import JARS
from kafkaops.testing.clusters import TEST_BROKER_CONFIG
from tests.conftest import RunningCluster

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("KAFKAOPS_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = os.environ.get("KAFKAOPS_CHROMEDRIVER") or shutil.which("chromedriver") or "/usr/bin/chromedriver"
CHROME_FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage", "--window-size=1600,1000")
TOPIC = "orders"
# How often the deployment's Prometheus scrapes: often enough for a review's rate windows, seldom enough that three
# brokers' JMX exporters cost little CPU beside Airflow's components through the scenarios' minutes.
SCRAPE_INTERVAL_S = 5.0
DAGS = {"kafka_scale_out", "kafka_partition_increase", "kafka_reassign", "kafka_capacity_review"}


def artifacts_root() -> Path:
    return Path(os.environ.get("KAFKAOPS_ARTIFACTS") or REPO / ".cache" / "artifacts" / "deployment")


# -- the cluster and the deployment -------------------------------------------------------------------------

@dataclass(frozen=True)
class SpecCluster(RunningCluster):
    """A running local cluster and the worker host's kafkaops cache folder (its ``$KAFKAOPS_CACHE``),
    whose ``local-cluster.json`` is the cluster's spec, as ``make cluster-up`` leaves it: the DAGs'
    inventory when their ``inventory`` param is empty. A scale-out grows the file."""

    cache: Path = Path()

    @property
    def spec_file(self) -> Path:
        return self.cache / "local-cluster.json"


@pytest.fixture(scope="package")
def deployment_cluster() -> Iterator[SpecCluster]:
    """Three brokers on free loopback ports, each with the Prometheus JMX exporter, with ``orders``
    (6 partitions, RF 3, about 8 MB of keyed records), so each broker a scale-out adds has replicas to receive.
    The brokers a scale-out adds get exporters too (the spec's), which :func:`deployment_prometheus` does not
    scrape: its targets are the cluster's at the start."""
    # the lean JVM in the spec itself: the brokers a scale-out adds are started by the deployment's Celery
    # worker, which reads this spec and knows nothing of the session's provision.INVENTORY_DEFAULTS
    with clusters.temporary_cluster("kafkaops-deploy-", brokers=3, extra_config=TEST_BROKER_CONFIG,
                                    inventory_vars=jvm.broker_vars(), metrics=True) as spec:
        cache = spec.base_dir / "worker-cache"
        cache.mkdir()
        cluster = SpecCluster(spec, cache=cache)
        spec.save(cluster.spec_file)
        with cluster.connect() as conn:
            topics.create_topic(conn, TOPIC, 6, 3)
        datagen.produce(cluster.config, TOPIC, datagen.DatagenSpec(records=32_000, keys=500, skew="zipf",
                                                                   record_bytes=256, seed=14))
        yield cluster


@pytest.fixture(scope="package")
def deployment_prometheus(deployment_cluster: SpecCluster) -> Iterator[prometheus.TestPrometheus]:
    """Prometheus (Debian's, on loopback) scraping the deployment cluster's JMX exporters (job ``kafka``) and a
    node exporter of this host (job ``node``) every :data:`SCRAPE_INTERVAL_S` s, as docker-compose.yml's does."""
    with prometheus.temporary_node_exporter() as node, \
            prometheus.temporary_prometheus(deployment_cluster.spec.metrics_targets, node_targets=[node.target],
                                            scrape_interval_s=SCRAPE_INTERVAL_S) as server:
        yield server


@pytest.fixture(scope="package")
def deployed(deployment_cluster: SpecCluster, deployment_prometheus: prometheus.TestPrometheus,
             artifacts: Path) -> Iterator[harness.Deployment]:
    """Airflow as operators deploy it (kafkaops/testing/deployment.py), on the deployment cluster and its
    Prometheus (``prometheus_default``), for this package: the
    scenarios (test_deployment.py) and the browser walk (test_operator_path.py) share it, and it
    stops when they are done (not at the end of the session, where its idle components would have
    slowed every later test)."""
    # inventories only from the worker's cache folder (the local cluster's spec lives there), as a deployment
    # that names its inventory folder (kafkaops.platform.provision.INVENTORY_DIRS_SETTING) has them
    with harness.deployment(checkout=REPO, kafka_bootstrap=deployment_cluster.bootstrap, worker_cache=deployment_cluster.cache,
                            jars=JARS, dag_ids=DAGS, logs=artifacts / "components",
                            prometheus_url=deployment_prometheus.url,
                            worker_env={provision.INVENTORY_DIRS_SETTING: str(deployment_cluster.cache)}) as deployment:
        print(f"\ndeployment up in {deployment.started_in:.0f} s at {deployment.url}")
        # scraped while Airflow started: by now every broker's exporter and the node exporter are up
        deployment_prometheus.wait_until_scraped(timeout_s=4 * SCRAPE_INTERVAL_S)
        yield deployment


_ARTIFACTS_USED: list[Path] = []


@pytest.fixture(scope="session")
def artifacts() -> Path:
    """This session's artifact folder (emptied first), listed at the end of the run. Under pytest-xdist each
    worker is a session of its own: it gets a subfolder named after it, so one worker's emptying does not
    delete another's screenshots."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    root = artifacts_root() / worker if worker else artifacts_root()
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    _ARTIFACTS_USED.append(root)
    return root


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
    # should this process die first: chromedriver's process group, Chromium (by its profile), the profile
    guard = watchdog.guard(watchdog.cmdline(f"--user-data-dir={profile}"), watchdog.rmtree(profile), name="chromium")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*CHROME_FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    service = Service(executable_path=CHROMEDRIVER, log_output=str(artifacts / "chromedriver.log"),
                      popen_kw={"start_new_session": True})
    try:
        driver = webdriver.Chrome(service=service, options=options)
    except BaseException:
        shutil.rmtree(profile, ignore_errors=True)
        guard.release()
        raise
    guard.update(watchdog.group(service.process), watchdog.cmdline(f"--user-data-dir={profile}"),
                 watchdog.rmtree(profile))
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        try:
            driver.quit()
        finally:
            harness.stop_group(service.process, timeout=10)
            shutil.rmtree(profile, ignore_errors=True)
            guard.release()


# -- reports -------------------------------------------------------------------------------------------------

@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.failed:
        deployment = getattr(item, "funcargs", {}).get("deployed")
        if isinstance(deployment, harness.Deployment):
            report.sections.append(("deployment (component log tails)", deployment.log_tails(40)))
        driver = getattr(item, "funcargs", {}).get("chrome")
        if driver is not None:
            folder = getattr(item, "funcargs", {}).get("artifacts") or artifacts_root()
            shot = Path(folder) / f"failed-{report.when}.png"
            try:
                driver.save_screenshot(str(shot))
                report.sections.append(("browser", f"at {driver.current_url}; screenshot {shot}"))
            except Exception as err:  # the browser may be what failed
                report.sections.append(("browser", f"no screenshot: {err}"))
    return report


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _ARTIFACTS_USED or not _ARTIFACTS_USED[0].is_dir():
        return
    terminalreporter.section("deployment test artifacts (component logs, screenshots)")
    for path in sorted(_ARTIFACTS_USED[0].iterdir()):
        terminalreporter.write_line(f"{path}  ({path.stat().st_size} bytes)")
