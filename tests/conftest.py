"""Shared fixtures. ``kafka_cluster`` is a real 3-broker KRaft cluster started through the
project's Ansible role on free loopback ports, in a temp dir, once per test session."""
from __future__ import annotations

import os
import re
import shutil
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kafkaops.testing import dag_runs

# Airflow reads its configuration when first imported: point it at a throw-away home before any
# test module imports it, so tests never touch a developer's ~/airflow. The plugin comes through the
# package's entry point. The jars and the local cluster's spec are the checkout's (.cache/, as under
# make) unless KAFKAOPS_CACHE says otherwise; child processes (Spark apps, airflow) run this
# checkout's code, as pytest itself does (pyproject's pythonpath).
_REPO = Path(__file__).resolve().parents[1]
_AIRFLOW_HOME = dag_runs.use_throwaway_home(_REPO)
# An xdist worker runs from execnet's bootstrap: a __main__ with neither __file__ nor __spec__, which
# pyspark.sql.connect (Great Expectations imports it) takes for a doctest run and leaves with sys.exit(0).
# An empty file as __main__'s: harmless for multiprocessing's spawn too, which runs it in a child.
if os.environ.get("PYTEST_XDIST_WORKER") and not hasattr(sys.modules["__main__"], "__file__"):
    sys.modules["__main__"].__file__ = str(Path(__file__).with_name("__init__.py"))

from kafkaops.platform.kafka import connection, records  # noqa: E402
from kafkaops.platform import provision  # noqa: E402
from kafkaops.platform import store as store_  # noqa: E402
from kafkaops.testing import clusters, jvm, postgres, spark, watchdog  # noqa: E402
from tests import secured, sessions  # noqa: E402
from tests.sshd import remote_cluster, remote_sshd  # noqa: E402,F401  (one sshd, one remote cluster per session)

# Every test: no librdkafka client left alive or freed by the garbage collector (tests/clients.py), and a warning
# naming a test that leaves SIGINT ignored or blocked (tests/signal_state.py).
pytest_plugins = ["tests.clients", "tests.signal_state"]

# Should this process die before its teardowns ran (kill -9 too), its watchdog stops every temporary
# cluster's brokers and removes the temp folders (kafkaops.testing.watchdog).
if watchdog.kafka_folder not in clusters.TEMPORARY_CLUSTER_GUARDS:  # imported once, but cheap to be sure
    clusters.TEMPORARY_CLUSTER_GUARDS.append(watchdog.kafka_folder)
watchdog.guard(watchdog.rmtree(_AIRFLOW_HOME), name="AIRFLOW_HOME")

# Lean JVMs (quick compiler, serial collector, a class-data archive when `make test` made one): the tests'
# brokers, and every spark-submit's driver (a local session's too), start and idle on less of the two
# cores (kafkaops.testing.jvm). A test's own kafka_broker_jvm_opts wins; SPARK_SUBMIT_OPTS set outside wins.
jvm.use_lean_jvms()


@dataclass(frozen=True)
class RunningCluster:
    spec: provision.ClusterSpec

    @property
    def bootstrap(self) -> str:
        return self.spec.bootstrap

    @property
    def config(self) -> dict[str, str]:
        return {"bootstrap.servers": self.bootstrap}

    def connect(self, timeout_s: float = 15.0) -> connection.KafkaConnection:
        return connection.connect(self.config, timeout_s=timeout_s)


def wait_for(predicate: Callable[[], object], *, timeout: float, what: str, interval: float = 0.5) -> object:
    """Poll until ``predicate()`` is truthy; fail the test naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")


def _loadgroup(config: pytest.Config) -> bool:
    """Whether pytest-xdist hands out tests by xdist_group (``-n N --dist loadgroup``, as make runs them)."""
    # an xdist worker has dist "no" and loadgroup set (xdist.remote.setup_config)
    return getattr(config.option, "loadgroup", False) or getattr(config.option, "dist", "no") == "loadgroup"


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # the process that reports: pytest, or xdist's controller
        from tests.timing import Timing

        config.pluginmanager.register(Timing(config.rootpath), "kafkaops-timing")


# Session fixtures that keep servers running: their tests together, each stopped after its last test
# (tests/sessions.py). Under xdist's loadgroup, tests sharing an expensive fixture form one group (one
# worker), the heaviest groups handed out first.
@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[Any]) -> Any:
    if _loadgroup(config):
        sessions.mark_groups(items)  # before xdist appends each test's group to its node id
    result = yield
    if os.environ.get("KAFKAOPS_TEST_SHUFFLE"):  # a shuffled order, to find tests that depend on another
        items[:] = sessions.shuffled(items, os.environ["KAFKAOPS_TEST_SHUFFLE"])
    items[:] = sessions.ordered(items)  # after -k/-m deselection: the order that runs
    if _loadgroup(config):
        items[:] = sessions.by_weight(items, config.rootpath)
    return result


@pytest.hookimpl(trylast=True)  # after the test's own fixtures were torn down
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    sessions.stop_after(item)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # the in-process Spark sessions' JVM and its connections, closed here rather than by the interpreter's end
    spark.stop_local_gateway()


@pytest.fixture(scope="session")
def kafka_cluster() -> Iterator[RunningCluster]:
    with sessions.stops_early("kafka_cluster") as stack:
        yield RunningCluster(stack.enter_context(
            clusters.temporary_cluster("kafkaops-it-", brokers=3, extra_config=clusters.TEST_BROKER_CONFIG)))


@pytest.fixture(scope="session")
def secured_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[secured.SecuredCluster]:
    """Three SASL_SSL (SCRAM-SHA-512) nodes brought up by the role (``tests/secured.py``), once per
    session for tests/integration and tests/dags: its password is the canary the leak tests search."""
    with sessions.stops_early("secured_cluster") as stack:
        yield stack.enter_context(secured.secured_cluster(tmp_path_factory.mktemp("sasl-ssl-tls"),
                                                          extra_config=clusters.TEST_BROKER_CONFIG))


@pytest.fixture(scope="session")
def spark_standalone() -> Iterator[spark.StandaloneSpark]:
    """A Spark standalone Master and two Workers, each its own Unix user (kafkaops.testing.spark), once per
    session."""
    with sessions.stops_early("spark_standalone") as stack:
        yield stack.enter_context(spark.standalone_cluster(_REPO))


@pytest.fixture(scope="session")
def tls_nodes() -> Iterator[Any]:
    """Two nodes brought up by the role with a SASL_SSL and an mTLS listener
    (``tests/integration/platform/secured_node.py``), once per session: the role's listener tests, the
    CLI and lifecycle over mTLS (tests/integration) and the DAGs over mTLS (tests/dags) share them."""
    from tests.integration.platform.secured_node import secured_nodes

    with sessions.stops_early("tls_nodes") as stack:
        yield stack.enter_context(secured_nodes())


@pytest.fixture
def kafka_conn(kafka_cluster: RunningCluster) -> Iterator[connection.KafkaConnection]:
    with kafka_cluster.connect() as conn:
        yield conn


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    """A topic name unique to this test."""
    return f"{re.sub(r'[^a-zA-Z0-9._-]', '-', request.node.name)[:40]}-{uuid.uuid4().hex[:6]}"


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A throw-away PostgreSQL server for the session (``kafkaops.testing.postgres``): the URL of its empty
    database ``kafkaops``."""
    with postgres.temporary_postgres() as url:
        yield url


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A new empty database for this test, once per store backend: a SQLite file in ``tmp_path``, or
    a database of its own on the session's PostgreSQL server (dropped afterwards)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'kafkaops.db'}"
        return
    with postgres.scratch_database(request.getfixturevalue("postgres_url")) as url:
        yield url


@pytest.fixture
def store(store_url: str) -> store_.Store:
    """The kafkaops store on ``store_url``, at the current schema."""
    return store_.open_store(store_url)


# -- Airflow: one migrated metadata DB and one DagBag for every test that runs a DAG ---------------------------

@pytest.fixture(scope="session")
def airflow_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The session's throw-away AIRFLOW_HOME with its SQLite metadata DB migrated: one for every DAG test.
    Each xdist worker has a home of its own; the first to get here migrates, the others copy its fresh DB
    (``airflow db migrate`` takes half a minute of CPU)."""
    import fcntl

    home = Path(os.environ["AIRFLOW_HOME"])
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        dag_runs.migrate_db()
        return home
    shared = tmp_path_factory.getbasetemp().parent  # the run's, above each worker's own basetemp
    template = shared / "airflow-metadata-template.db"
    with open(shared / "airflow-metadata-template.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if template.exists():
            shutil.copyfile(template, home / "airflow.db")
        else:
            dag_runs.migrate_db()
            shutil.copyfile(home / "airflow.db", template)
    return home


@pytest.fixture(scope="session")
def dagbag():
    """The DAGs of dags/, parsed once for the session; their params as loaded are kept for
    :func:`kafkaops.testing.dag_runs.run_dag`."""
    return dag_runs.load_dagbag(_REPO / "dags")


def committed_copy(config: Any, topic: str) -> tuple[list[records.Record], dict[int, int]]:
    """What a consumer sees of a backfill's target (read_committed, librdkafka's default): its records,
    and per partition the offset after its last record (the transactional sink's commit markers take
    offsets too, so this is not the end offset; it is where a consumer that read everything resumes)."""
    ends = records.end_offsets(config, topic)
    read = list(records.read_ranges(config, topic, {p: (0, e) for p, (_, e) in ends.items()}))
    after = {p: 0 for p in ends}
    for r in read:
        after[r.partition] = max(after[r.partition], r.offset + 1)
    return read, after
