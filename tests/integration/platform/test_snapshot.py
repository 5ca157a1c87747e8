"""The snapshot against what the real cluster holds."""
from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer

from kafkaops.platform.kafka import configs, connection, metadata, topics
from kafkaops.cli import datagen
from kafkaops.platform import provision
from kafkaops.errors import KafkaUnreachable, UnknownTopic
from kafkaops.platform.render import render_snapshot
from tests.conftest import RunningCluster, wait_for

pytestmark = pytest.mark.integration


def test_snapshot_names_the_cluster_its_brokers_and_racks(kafka_cluster: RunningCluster, kafka_conn) -> None:
    cluster = metadata.snapshot(kafka_conn)
    assert cluster.cluster_id == kafka_cluster.spec.cluster_id
    assert cluster.controller_id in {1, 2, 3}
    assert {(b.id, b.port, b.rack, b.online) for b in cluster.brokers} == {
        (n.node_id, n.port, n.rack, True) for n in kafka_cluster.spec.nodes}
    assert all(b.disk_total_bytes and b.disk_total_bytes >= (b.disk_usable_bytes or 0) > 0 for b in cluster.brokers)


def test_snapshot_holds_topics_offsets_and_sizes_that_were_produced(kafka_conn, topic_name: str) -> None:
    assert topics.create_topic(kafka_conn, topic_name, 3, 3) is True
    assert topics.create_topic(kafka_conn, topic_name, 3, 3) is False  # idempotent
    spec = datagen.DatagenSpec(records=3000, keys=50, skew="hot", hot_share=0.5, record_bytes=200, seed=3)
    produced = datagen.produce(kafka_conn.config, topic_name, spec)

    cluster = metadata.snapshot(kafka_conn, topics=[topic_name])
    assert cluster.topics == (topic_name,)
    parts = cluster.partitions_of(topic_name)
    assert [p.partition for p in parts] == [0, 1, 2]
    for p in parts:
        assert sorted(p.replicas) == [1, 2, 3] and sorted(p.isr) == [1, 2, 3]
        assert p.leader in p.replicas
        assert p.start_offset == 0
        assert p.end_offset == produced.per_partition.get(p.partition, 0)
        assert p.size_bytes is not None and p.size_bytes >= 200 * (p.end_offset or 0)
    assert sum(p.records or 0 for p in parts) == 3000
    # the hot key's partition is the hottest one in the snapshot
    hottest = max(parts, key=lambda p: p.records or 0)
    assert hottest.records == max(produced.per_partition.values())
    assert "hottest partitions" in render_snapshot(cluster)


def test_snapshot_reports_consumer_lag(kafka_conn, topic_name: str) -> None:
    topics.create_topic(kafka_conn, topic_name, 1, 3)
    datagen.produce(kafka_conn.config, topic_name, datagen.DatagenSpec(records=400, keys=20, seed=1))
    group = f"{topic_name}-group"
    consumer = Consumer({"bootstrap.servers": kafka_conn.bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic_name])
    consumed = 0
    deadline = time.monotonic() + 30
    while consumed < 150 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            consumed += 1
    consumer.commit(asynchronous=False)
    consumer.close()

    cluster = metadata.snapshot(kafka_conn, topics=[topic_name])
    lag = cluster.group(group)
    assert lag.total_lag == 400 - consumed
    assert [(x.topic, x.partition, x.committed, x.end_offset) for x in lag.partitions] == [
        (topic_name, 0, consumed, 400)]
    assert lag.members == 0 and lag.state == "EMPTY"


def test_unknown_topic_is_named(kafka_conn) -> None:
    with pytest.raises(UnknownTopic, match="no-such-topic"):
        metadata.snapshot(kafka_conn, topics=["no-such-topic"])


def test_a_missing_topic_is_typed_by_its_error_code_in_every_admin_call(kafka_conn, topic_name: str) -> None:
    # kafkaops.reassign.engine.remove_throttles relies on describe_configs of a deleted topic raising UnknownTopic
    with pytest.raises(UnknownTopic, match="UNKNOWN_TOPIC_OR_PART") as info:
        configs.describe_configs(kafka_conn, "topic", [topic_name])
    assert info.value.code == "UNKNOWN_TOPIC_OR_PART"
    topics.delete_topics(kafka_conn, [topic_name])  # nothing to delete is not an error
    with pytest.raises(UnknownTopic, match=topic_name):
        topics.create_partitions(kafka_conn, topic_name, 4)


def test_unreachable_bootstrap_fails_fast_with_a_clear_error() -> None:
    port = provision.free_ports(1)[0]
    started = time.monotonic()
    with pytest.raises(KafkaUnreachable, match=f"127.0.0.1:{port}.*check bootstrap.servers"):
        with connection.connect(f"127.0.0.1:{port}", timeout_s=3) as conn:
            metadata.snapshot(conn)
    assert time.monotonic() - started < 15


def test_a_killed_broker_shows_offline_with_under_replicated_partitions(
        kafka_cluster: RunningCluster, kafka_conn, topic_name: str) -> None:
    topics.create_topic(kafka_conn, topic_name, 3, 3)
    datagen.produce(kafka_conn.config, topic_name, datagen.DatagenSpec(records=300, keys=30, seed=2))
    # not the active controller: its loss would stall the metadata answers while a new one is elected
    controller = metadata.snapshot(kafka_conn, topics=[topic_name], sizes=False, groups=False).controller_id
    victim = max(b for b in (1, 2, 3) if b != controller)
    pid = provision.node_pid(kafka_cluster.spec, victim)
    assert pid is not None
    import os
    import signal
    os.kill(pid, signal.SIGKILL)
    try:
        def degraded():
            # a fresh client each time: in KRaft the "controller" a client learns from metadata is any
            # broker, and a long-lived client keeps asking the dead one until its metadata refreshes
            try:
                with kafka_cluster.connect(timeout_s=5) as fresh:
                    snap = metadata.snapshot(fresh, topics=[topic_name], sizes=False, groups=False)
            except KafkaUnreachable:  # a moment without answers while the cluster notices the loss
                return None
            return snap if victim in snap.offline_broker_ids and snap.under_replicated else None
        snap = wait_for(degraded, timeout=45, what=f"broker {victim} to show offline")
        assert victim not in snap.online_broker_ids
        assert {p.name for p in snap.under_replicated} == {p.name for p in snap.partitions_of(topic_name)}
        assert all(victim not in p.isr for p in snap.partitions_of(topic_name))
        assert not snap.offline_partitions  # RF 3: two replicas remain, every partition has a leader
    finally:
        # the same role brings the killed node back; the others are left as they are
        result = provision.cluster_up(kafka_cluster.spec)
        assert set(result.changed) == {f"kafka-{victim}"}
    def healed():
        try:
            with kafka_cluster.connect(timeout_s=5) as fresh:
                return not metadata.snapshot(fresh, topics=[topic_name], sizes=False, groups=False).under_replicated
        except KafkaUnreachable:
            return False

    wait_for(healed, timeout=60, what="the restarted broker to rejoin every ISR")
