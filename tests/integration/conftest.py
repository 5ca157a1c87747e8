"""Fixtures of the reassignment tests: a small cluster of their own that can grow by a broker (so
the shared session cluster keeps its shape), client traffic that proves nothing is lost, and a
look at the throttle configs left on a cluster."""
from __future__ import annotations

from tests.store_fixtures import local_store  # noqa: F401

import time
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

from kafkaops.platform.kafka import configs, connection, metadata
from kafkaops.testing import clusters, traffic
from kafkaops.reassign import engine
from kafkaops.platform import provision
from kafkaops.testing.clusters import TEST_BROKER_CONFIG
from tests.conftest import RunningCluster


class GrowableCluster:
    """A :class:`RunningCluster` whose spec grows when a broker is added (teardown then covers it
    too); ``spec``, ``bootstrap``, ``config`` and ``connect`` are the current cluster's."""

    def __init__(self, spec: provision.ClusterSpec) -> None:
        self.current = RunningCluster(spec)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.current, name)

    def add_broker(self, node_id: int, rack: str) -> provision.ProvisionResult:
        """Start one more broker-only node through the role, touching no other node."""
        port, controller_port = provision.free_ports(2)
        node = provision.NodeSpec(node_id=node_id, port=port, controller_port=controller_port, rack=rack,
                                  roles=("broker",))
        self.current = RunningCluster(self.current.spec.with_node(node))
        return provision.cluster_up(self.current.spec, limit=[f"kafka-{node_id}"])

    def has_node(self, node_id: int) -> bool:
        return any(n.node_id == node_id for n in self.spec.nodes)


@pytest.fixture(scope="module")
def own_cluster() -> Iterator[GrowableCluster]:
    """Three brokers (one of them the only controller), started for one test module. At its end the broker-only
    nodes (a test's added ones) stop before the controller (:func:`kafkaops.testing.clusters.stop_brokers_first`)."""
    with clusters.temporary_cluster("kafkaops-exec-", brokers=3, controllers=1,
                                    extra_config=TEST_BROKER_CONFIG) as spec:
        grown = GrowableCluster(spec)
        yield grown
        clusters.stop_brokers_first(grown.spec)


@pytest.fixture
def own_conn(own_cluster: GrowableCluster) -> Iterator[connection.KafkaConnection]:
    with own_cluster.connect() as conn:
        yield conn


def throttles_left(conn: connection.KafkaConnection, *, online_only: bool = False) -> dict[str, dict[str, str]]:
    """Every replication throttle config set on any broker or topic of the cluster; ``online_only``: on the brokers
    that answer (a broker that is down keeps its dynamic configs in the metadata log, unread until it is back)."""
    cluster = metadata.snapshot(conn, include_internal=True, offsets=False, sizes=False, groups=False)
    brokers = configs.describe_configs(conn, "broker", cluster.online_broker_ids if online_only else cluster.broker_ids,
                                       keys=engine.RATE_KEYS)
    topics = configs.describe_configs(conn, "topic", cluster.topics, keys=engine.REPLICA_KEYS)
    return {**{f"broker {b}": c for b, c in brokers.items() if c}, **{f"topic {t}": c for t, c in topics.items() if c}}


def wait_for_no_throttles(conn: connection.KafkaConnection, timeout: float = 20.0) -> None:
    """Configs reach every broker a moment after they change: poll, then name what is left."""
    deadline = time.monotonic() + timeout
    while (left := throttles_left(conn)) and time.monotonic() < deadline:
        time.sleep(0.5)
    if left:
        pytest.fail(f"throttle configs remain after {timeout:.0f} s: {left}")


class Traffic(traffic.TrafficCheck):
    """The traffic check (:class:`kafkaops.testing.traffic.TrafficCheck`: a keyed producer, acks=all
    and idempotent, at ~``rate`` records/s, and a consumer of its own group) around a test.
    :meth:`check` asserts every acknowledged record was consumed exactly once and each key's
    ``seq`` arrived in order."""

    def __init__(self, config: dict[str, str], topic: str, partitions: int, *, rate: int = 200) -> None:
        super().__init__(config, topic, keys=40, rate_per_s=rate)
        self.partitions = partitions

    def check(self, *, at_least: int) -> None:
        report = self.stop()
        assert not self.failures, f"producer failures: {self.failures[:5]}"
        assert report.acknowledged >= at_least, f"only {report.acknowledged} records were produced during the test"
        # A duplicate is the cluster's defect unless the producer changed its idempotence identity meanwhile
        # (traffic.ProducerIdentity: librdkafka sent a stored batch again under a new epoch, which no broker
        # can recognise); that one is reported, not failed. Loss, disorder and unacknowledged records fail.
        assert report.cluster_ok, str(report)
        if report.duplicated:
            warnings.warn(f"duplicates by the traffic producer, not the cluster: {report}", stacklevel=2)
        self.redelivered = report.redelivered


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    """A local[2] SparkSession of the backfill (with the jars of .cache/jars/spark), one per module."""
    from spark_apps import common

    session = common.spark_session("local[2]", driver_memory="1g")
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
