"""Throw-away local Kafka clusters for tests and benchmarks: up for a ``with`` block, then gone with every
process and file they had, also when the block fails; and the settings of the tests' brokers.

Production clusters are the operator's (an inventory) or the one ``make cluster-up`` keeps; nothing here
is on their path: the product's provisioning is :mod:`kafkaops.platform.provision`, which this module
only calls.
"""
from __future__ import annotations

import atexit
import logging
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager
from pathlib import Path
from typing import Any

from kafkaops.errors import ProvisionError
from kafkaops.platform.paths import jar_dir
from kafkaops.platform.provision import ClusterSpec, cluster_down, cluster_up, local_cluster_spec
from kafkaops.testing import jvm

log = logging.getLogger(__name__)

#: Fast failure detection for tests that stop brokers: fenced after 3 s without heartbeats. With the idle
#: settings of :data:`kafkaops.testing.jvm.BROKER_CONFIG` in it too: a spec carries them to the brokers
#: other processes add.
TEST_BROKER_CONFIG: dict[str, int] = {
    **jvm.BROKER_CONFIG,
    "broker.heartbeat.interval.ms": 500,
    "broker.session.timeout.ms": 3000,
    "replica.lag.time.max.ms": 5000,
    "log.segment.bytes": 8 * 1024 * 1024,
}

#: Context managers entered around each :func:`temporary_cluster`'s life, each given the cluster's new
#: folder before anything starts in it, left after the cluster is gone: a test suite registers there what
#: stops the cluster should its own process be killed before its teardown runs
#: (:func:`kafkaops.testing.watchdog.kafka_folder`, registered by tests/conftest.py).
TEMPORARY_CLUSTER_GUARDS: list[Callable[[Path], AbstractContextManager[Any]]] = []


@contextmanager
def temporary_cluster(prefix: str = "kafkaops-", *, client_config: Mapping[str, Any] | None = None,
                      **spec_args: Any) -> Iterator[ClusterSpec]:
    """A throw-away local cluster (``local_cluster_spec`` arguments) in a new temp dir, up for the
    ``with`` block and gone afterwards: stopped through the role, any straggler killed (also at
    interpreter exit), the folder removed. Tests and benchmarks start their clusters with it.
    ``client_config``: how the registration check connects to a secured cluster
    (:func:`kafkaops.platform.provision.cluster_up`)."""
    base = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(kill_strays, base)
    spec = local_cluster_spec(base, **spec_args)
    with ExitStack() as guards:
        for guard in TEMPORARY_CLUSTER_GUARDS:
            guards.enter_context(guard(base))
        try:
            try:
                cluster_up(spec, client_config=client_config)
            except ProvisionError:
                log_node_tails(base)  # the folder goes below: what the nodes said is kept in the test's log
                raise
            yield spec
        finally:
            try:
                cluster_down(spec, purge=True)
            except ProvisionError as err:
                log.warning("cluster_down of %s failed (%s); killing its processes", base, err)
            finally:
                kill_strays(base)  # also nodes added to the cluster after it started
                shutil.rmtree(base, ignore_errors=True)


@contextmanager
def authorizer_cluster(prefix: str = "kafkaops-acl-", *, admin: str, users: Sequence[str] = (), **spec_args: Any
                       ) -> Iterator[tuple[ClusterSpec, dict[str, dict[str, str]]]]:
    """A :func:`temporary_cluster` with an authorizer (StandardAuthorizer) on a SASL_PLAINTEXT listener with
    SCRAM-SHA-512 logins: ``admin`` a super user, each of ``users`` a login with no grant (give it ACLs).
    Yields the spec and each login's librdkafka config (bootstrap included); the passwords are new for
    each cluster and go to the role through its inventory only."""
    password = {name: uuid.uuid4().hex for name in (admin, *users)}
    inventory = {"kafka_broker_listeners": [{"name": "CLIENT", "port": "{{ kafka_broker_port }}",
                                             "protocol": "SASL_PLAINTEXT"}],
                 "kafka_broker_scram_users": [{"name": n, "password": p} for n, p in password.items()],
                 "kafka_broker_super_users": [admin]}

    def login(user: str) -> dict[str, str]:
        return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": user,
                "sasl.password": password[user]}

    with temporary_cluster(prefix, inventory_vars=inventory, client_config=login(admin), **spec_args) as spec:
        yield spec, {name: {"bootstrap.servers": spec.bootstrap, **login(name)} for name in password}


#: Kafka's own remote storage plugin for tests (KIP-405), in the jar cache's ``tiered-storage`` folder
#: (jvm/tiered-storage/pom.xml: kafka-storage's test fixtures from Maven Central).
LOCAL_TIERED_STORAGE = "org.apache.kafka.server.log.remote.storage.LocalTieredStorage"


def tiered_storage_config(remote_dir: Path, *, brokers: int) -> dict[str, Any]:
    """Broker settings for tiered storage with :data:`LOCAL_TIERED_STORAGE` keeping the "remote" segments
    in ``remote_dir`` (one folder all ``brokers`` share, as they would share a bucket), Kafka's default
    topic-based metadata manager on the PLAINTEXT listener, and the remote log manager's and the retention
    check's tasks every half second from the start (Kafka waits 30 s after start-up for the first retention
    check by default: ``log.initial.task.delay.ms``)."""
    jars = sorted(jar_dir("tiered-storage").glob("kafka-storage-*.jar"))
    if not jars:
        raise ProvisionError(f"no kafka-storage test-fixtures jar in {jar_dir('tiered-storage')}; run make setup")
    return {"remote.log.storage.system.enable": "true",
            "remote.log.storage.manager.class.name": LOCAL_TIERED_STORAGE,
            "remote.log.storage.manager.class.path": str(jars[-1]),
            "rsm.config.dir": str(remote_dir),
            "remote.log.metadata.manager.listener.name": "PLAINTEXT",
            "rlmm.config.remote.log.metadata.topic.replication.factor": min(brokers, 3),
            "rlmm.config.remote.log.metadata.topic.num.partitions": 3,
            "remote.log.manager.task.interval.ms": 500,
            "log.retention.check.interval.ms": 500,
            "log.initial.task.delay.ms": 500}


@contextmanager
def tiered_cluster(prefix: str = "kafkaops-tiered-", *, brokers: int = 2, controllers: int = 1,
                   **spec_args: Any) -> Iterator[tuple[ClusterSpec, Path]]:
    """A :func:`temporary_cluster` with tiered storage on (:func:`tiered_storage_config`, with the tests'
    broker settings): yields the spec and the folder of the remote storage, removed with the cluster."""
    remote = Path(tempfile.mkdtemp(prefix=f"{prefix}remote-"))
    try:
        config = {**TEST_BROKER_CONFIG, **tiered_storage_config(remote, brokers=brokers),
                  **spec_args.pop("extra_config", {})}
        with temporary_cluster(prefix, brokers=brokers, controllers=controllers, extra_config=config,
                               **spec_args) as spec:
            try:
                yield spec, remote
            finally:
                stop_brokers_first(spec)
    finally:
        shutil.rmtree(remote, ignore_errors=True)


def stop_brokers_first(spec: ClusterSpec, timeout_s: float = 60.0) -> None:
    """Stop the broker-only nodes of ``spec`` through the script the role installed on each (SIGTERM, killed
    after the role's 30 s), before the cluster's teardown stops the controllers: stopped beside their
    controller, a broker's controlled shutdown can outlast it and wait those 30 s."""
    import subprocess

    for node in spec.nodes:
        script = spec.base_dir / f"node-{node.node_id}" / "kafka-broker.sh"
        if not node.is_controller and script.is_file():
            subprocess.run([str(script), "stop"], timeout=timeout_s, check=False, capture_output=True)


def log_node_tails(base_dir: Path, lines: int = 25) -> None:
    """Log the last ``lines`` of each node's server.log under ``base_dir`` (a cluster that did not come up)."""
    for server_log in sorted(base_dir.glob("node-*/logs/server.log")):
        tail = server_log.read_text(errors="replace").splitlines()[-lines:]
        log.error("%s, its last %d lines:\n%s", server_log.relative_to(base_dir), len(tail), "\n".join(tail))


def kill_strays(base_dir: Path) -> list[int]:
    """SIGKILL every java process whose command line names ``base_dir``: the last resort of a
    test teardown, so no broker outlives its cluster's folder. Returns the pids killed."""
    import signal

    killed = []
    marker = str(base_dir)
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "kafka.Kafka" in cmdline and marker in cmdline:
            try:
                os.kill(int(proc.name), signal.SIGKILL)
                killed.append(int(proc.name))
            except OSError:
                pass
    if killed:
        log.warning("killed %d stray broker process(es) under %s: %s", len(killed), base_dir, killed)
    return killed


#: Kafka's ``kafka-metadata-quorum`` command (``bin/kafka-metadata-quorum.sh`` runs this class).
QUORUM_TOOL = "org.apache.kafka.tools.MetadataQuorumCommand"


def active_controller(spec: ClusterSpec, timeout_s: float = 60.0) -> int:
    """The node leading the KRaft quorum (``kafka-metadata-quorum describe --status``: its ``LeaderId``). KRaft
    clients are not told: DescribeCluster names any broker as the controller."""
    import re
    import subprocess

    cmd = ["java", "-Xmx128m", "-XX:TieredStopAtLevel=1", "-cp", f"{jar_dir('tools')}/*", QUORUM_TOOL,
           "--bootstrap-server", spec.bootstrap, "describe", "--status"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    found = re.search(r"^LeaderId:\s*(\d+)", done.stdout, re.MULTILINE)
    if done.returncode or found is None:
        raise ProvisionError(f"kafka-metadata-quorum describe --status on {spec.bootstrap} exited {done.returncode} "
                             f"without a LeaderId: {(done.stderr or done.stdout)[-800:]}")
    return int(found.group(1))
