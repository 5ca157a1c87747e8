"""Fixtures of the reassignment tests: a small cluster of their own that can grow by a broker (so
the shared session cluster keeps its shape), client traffic that proves nothing is lost, and a
look at the throttle configs left on a cluster."""
from __future__ import annotations

from tests.store_fixtures import local_store  # noqa: F401

import json
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from kafkaops.platform import admin
from kafkaops.cli import datagen
from kafkaops.reassign import engine
from kafkaops.platform import provision
from tests.conftest import TEST_BROKER_CONFIG, RunningCluster


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
    """Three brokers (one of them the only controller), started for one test module."""
    with provision.temporary_cluster("kafkaops-exec-", brokers=3, controllers=1,
                                     extra_config=TEST_BROKER_CONFIG) as spec:
        yield GrowableCluster(spec)


@pytest.fixture
def own_conn(own_cluster: GrowableCluster) -> Iterator[admin.KafkaConnection]:
    with own_cluster.connect() as conn:
        yield conn


def throttles_left(conn: admin.KafkaConnection) -> dict[str, dict[str, str]]:
    """Every replication throttle config set on any broker or topic of the cluster."""
    cluster = admin.snapshot(conn, include_internal=True, offsets=False, sizes=False, groups=False)
    brokers = admin.describe_configs(conn, "broker", cluster.broker_ids, keys=engine.RATE_KEYS)
    topics = admin.describe_configs(conn, "topic", cluster.topics, keys=engine.REPLICA_KEYS)
    return {**{f"broker {b}": c for b, c in brokers.items() if c}, **{f"topic {t}": c for t, c in topics.items() if c}}


def wait_for_no_throttles(conn: admin.KafkaConnection, timeout: float = 20.0) -> None:
    """Configs reach every broker a moment after they change: poll, then name what is left."""
    deadline = time.monotonic() + timeout
    while (left := throttles_left(conn)) and time.monotonic() < deadline:
        time.sleep(0.5)
    if left:
        pytest.fail(f"throttle configs remain after {timeout:.0f} s: {left}")


class Traffic:
    """A keyed producer (acks=all, idempotent, ~``rate`` records/s) and a consumer of every partition,
    in background threads. :meth:`check` asserts every acknowledged record was consumed exactly once
    and each key's ``seq`` arrived in order."""

    def __init__(self, config: dict[str, str], topic: str, partitions: int, *, rate: int = 200) -> None:
        self.config, self.topic, self.partitions, self.rate = config, topic, partitions, rate
        # keys unique to this traffic, so records of earlier traffic on the topic are not counted
        self.KEY_PREFIX = f"traffic{uuid.uuid4().hex[:8]}"
        self.acked: list[int] = []
        self.failures: list[str] = []
        self.consumed: list[tuple[int, str, int, int, int]] = []  # id, key, seq, partition, offset
        self._stop_producing = threading.Event()
        self._stop_consuming = threading.Event()
        self._threads = [threading.Thread(target=self._produce, daemon=True),
                         threading.Thread(target=self._consume, daemon=True)]

    def __enter__(self) -> Traffic:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _produce(self) -> None:
        producer = Producer(datagen.producer_config(self.config))

        def on_delivery(err: object, msg: object) -> None:
            if err is not None:
                self.failures.append(str(err))
            else:
                self.acked.append(json.loads(msg.value())["id"])  # type: ignore[attr-defined]

        spec = datagen.DatagenSpec(records=10_000_000, keys=40, skew="uniform", record_bytes=128, seed=11,
                                   key_prefix=self.KEY_PREFIX)
        started = time.monotonic()
        for i, (key, value) in enumerate(datagen.generate_records(spec)):
            if self._stop_producing.is_set():
                break
            producer.produce(self.topic, key=key, value=value, on_delivery=on_delivery)
            producer.poll(0)
            ahead = i / self.rate - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(ahead)
        if producer.flush(60):
            self.failures.append("records still unacknowledged after 60 s")

    def _consume(self) -> None:
        # assign(), not subscribe(): no group, no rebalance, positions only in this consumer
        consumer = Consumer(admin.client_config({"bootstrap.servers": self.config["bootstrap.servers"],
                                                 "group.id": f"traffic-{self.topic}", "enable.auto.commit": False}))
        consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in range(self.partitions)])
        try:
            while not self._stop_consuming.is_set():
                msg = consumer.poll(0.2)
                if msg is None or msg.error() is not None:
                    continue
                body = json.loads(msg.value())
                if body["key"].startswith(self.KEY_PREFIX):  # not the data the test filled in before
                    self.consumed.append((body["id"], body["key"], body["seq"], msg.partition(), msg.offset()))
        finally:
            consumer.close()

    def stop(self, timeout: float = 60.0) -> None:
        """Stop producing, then consume until every acknowledged record arrived (or ``timeout``)."""
        if self._stop_consuming.is_set():
            return
        self._stop_producing.set()
        self._threads[0].join(timeout)
        deadline = time.monotonic() + timeout
        while len({c[0] for c in self.consumed}) < len(set(self.acked)) and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(1.0)  # a duplicate would arrive after the last new record
        self._stop_consuming.set()
        self._threads[1].join(timeout)

    def check(self, *, at_least: int) -> None:
        self.stop()
        assert not self.failures, f"producer failures: {self.failures[:5]}"
        assert len(self.acked) >= at_least, f"only {len(self.acked)} records were produced during the test"
        # A consumer may be handed the same offset twice around a leader change (at-least-once
        # delivery); the log holds a duplicate only when one id sits at two offsets.
        stored = {(partition, offset): (i, key, seq) for i, key, seq, partition, offset in self.consumed}
        counts = Counter(i for i, _, _ in stored.values())
        duplicates = sorted(i for i, n in counts.items() if n > 1)
        missing = sorted(set(self.acked) - set(counts))
        assert not missing, f"{len(missing)} acknowledged records never consumed, e.g. ids {missing[:10]}"
        assert not duplicates, f"{len(duplicates)} records stored more than once, e.g. ids {duplicates[:10]}"
        per_key: dict[str, list[int]] = defaultdict(list)
        for (_, _), (_, key, seq) in sorted(stored.items()):
            per_key[key].append(seq)
        out_of_order = sorted(k for k, seqs in per_key.items() if seqs != list(range(len(seqs))))
        assert not out_of_order, f"keys {out_of_order[:5]} are out of seq order in their partition"
        self.redelivered = len(self.consumed) - len(stored)


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    """A local[2] SparkSession of the backfill (with the jars of .cache/jars/spark), one per module."""
    from spark_apps import rekey_backfill

    session = rekey_backfill.spark_session("local[2]", driver_memory="1g")
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
