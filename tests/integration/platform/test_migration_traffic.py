"""The migration harness on a real one-broker KRaft cluster: producers and a consumer group move from
a 3-partition source to a 12-partition copy of it. With the group's offsets on the copy at its end,
nothing is lost, duplicated or reordered; with them at 0 the copy is read again, and the harness
says so (the check can fail)."""
from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from kafkaops.platform import partitioner
from kafkaops.platform.kafka import offsets, records, topics
from kafkaops.testing import clusters, traffic
from kafkaops.testing.clusters import TEST_BROKER_CONFIG
from tests.conftest import RunningCluster, wait_for


@pytest.fixture(scope="module")
def one_broker() -> Iterator[RunningCluster]:
    with clusters.temporary_cluster("kafkaops-migration-", brokers=1, controllers=1,
                                    extra_config=TEST_BROKER_CONFIG) as spec:
        yield RunningCluster(spec)


def copy_topic(config: dict[str, str], source: str, target: str) -> int:
    """Every record of ``source``, in its partitions' order, produced to ``target`` with the same key
    and value (Java's murmur2 placement, acks=all, idempotent), flushed; returns how many."""
    from confluent_kafka import Producer

    copied = records.read_topic(config, source)
    producer = Producer(traffic.producer_config(config))
    failed: list[str] = []

    def delivered(err: object, msg: object) -> None:
        if err is not None:
            failed.append(str(err))

    for r in copied:
        while True:
            try:
                producer.produce(target, key=r.key, value=r.value, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(30) == 0 and not failed, failed[:3]
    producer.close()
    return len(copied)


def migrate(cluster: RunningCluster, name: str, *, translated: bool, source_s: float, target_s: float,
            source_records: int = 1, target_records: int = 1
            ) -> tuple[traffic.MigrationReport, traffic.MigrationTraffic, int]:
    """The migration around the harness: S (3 partitions) copied to T (12) while the applications are
    quiet; the group's offsets on T at T's end offsets (``translated``) or at 0. Each phase lasts its seconds and
    at least until S holds ``source_records`` acknowledged records (T: the consumer received ``target_records``):
    a loaded machine's producers send fewer records a second than they are asked to."""
    source, target, group = f"{name}-s", f"{name}-t", f"{name}-group"
    with cluster.connect() as conn:
        topics.create_topic(conn, source, 3, 1)
        topics.create_topic(conn, target, 12, 1)
        with traffic.MigrationTraffic(cluster.config, source, group=group, keys=200, rate_per_s=2000) as harness:
            time.sleep(source_s)
            wait_for(lambda: harness.acked_by_topic[source] >= source_records, timeout=120,
                     what=f"{source_records:,} records acknowledged on {source}")
            harness.stop_producing()
            harness.drain_and_stop_consumer()
            copied = copy_topic(cluster.config, source, target)
            ends = {p: e for p, (_, e) in records.end_offsets(cluster.config, target).items()}
            assert sum(ends.values()) == copied
            offsets.commit_group_offsets(conn, group, target, ends if translated else {p: 0 for p in ends})
            harness.switch_producers(target)
            harness.switch_consumer(target)
            time.sleep(target_s)
            wait_for(lambda: sum(1 for r in list(harness.received) if r.topic == target) >= target_records,
                     timeout=120, what=f"{target_records:,} records of {target} received")
            report = harness.finish()
    return report, harness, copied


def test_a_migration_with_translated_offsets_loses_duplicates_and_reorders_nothing(one_broker: RunningCluster
                                                                                     ) -> None:
    name = f"mig-{uuid.uuid4().hex[:6]}"
    report, harness, copied = migrate(one_broker, name, translated=True, source_s=3.0, target_s=2.0,
                                      source_records=3001, target_records=2001)

    assert (report.lost, report.duplicated, report.out_of_order, report.unacknowledged) == (0, 0, 0, 0), str(report)
    assert report.ok and not harness.failures
    by_topic = report.received_by_topic
    assert by_topic[f"{name}-s"] == copied > 3000 and by_topic[f"{name}-t"] > 2000, str(report)
    assert report.received - report.redelivered == report.acknowledged == report.sent and report.keys == 200
    assert report.write_window_s is not None and report.write_window_s > 0, str(report)
    assert harness.last_source_ack_utc is not None and harness.first_target_ack_utc is not None
    assert harness.first_target_ack_utc > harness.last_source_ack_utc
    # each key stays on one partition per topic: murmur2 on 3, then on 12 partitions
    for r in harness.received:
        assert r.partition == partitioner.partition_for(r.key.encode(), 3 if r.topic.endswith("-s") else 12)
    phases = [e.phase for e in harness.events]
    assert phases == ["created", "running", "quiesced", "drained", "producers switched", "consumer switched",
                      "finishing", "finished"], phases
    assert all(a.monotonic <= b.monotonic for a, b in zip(harness.events, harness.events[1:]))
    assert not [t for t in threading.enumerate() if t.name.startswith("migration-")]


def test_offsets_left_at_zero_on_the_target_are_caught_as_duplicates(one_broker: RunningCluster) -> None:
    name = f"mig0-{uuid.uuid4().hex[:6]}"
    report, harness, copied = migrate(one_broker, name, translated=False, source_s=1.0, target_s=0.5)

    # the group reads the whole copy again: every record it had read on S, once more on T
    assert report.duplicated == copied > 0 and not report.ok, str(report)
    assert (report.lost, report.out_of_order) == (0, 0), str(report)
    assert any(e.startswith("duplicated dev-") for e in report.examples), report.examples
    assert not [t for t in threading.enumerate() if t.name.startswith("migration-")]


def test_an_error_inside_the_block_still_stops_every_thread(one_broker: RunningCluster) -> None:
    source = f"migerr-{uuid.uuid4().hex[:6]}"
    with one_broker.connect() as conn:
        topics.create_topic(conn, source, 3, 1)
    with pytest.raises(traffic.TrafficError, match="create it first"):
        with traffic.MigrationTraffic(one_broker.config, source, group=f"{source}-group", rate_per_s=500) as harness:
            time.sleep(0.5)
            harness.stop_producing()
            harness.switch_producers(f"{source}-missing")
    assert harness.phase == "closed" and harness.sent > 0
    assert not [t for t in threading.enumerate() if t.name.startswith("migration-")]
