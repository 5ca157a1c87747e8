"""One one-broker cluster for the rekey integration tests (test_backfill, test_backfill_verify): each module
seeds a source topic of its own (:func:`seed_source`)."""
from __future__ import annotations

from collections.abc import Iterator, Sequence

import pytest
from confluent_kafka import Producer

from kafkaops.cli import datagen
from kafkaops.testing import clusters
from kafkaops.platform import provision, waits
from kafkaops.platform.kafka import connection, topics
from kafkaops.testing.clusters import TEST_BROKER_CONFIG


@pytest.fixture(scope="package")
def rekey_cluster() -> Iterator[provision.ClusterSpec]:
    with clusters.temporary_cluster("kafkaops-rekey-", brokers=1, controllers=1,
                                    extra_config=TEST_BROKER_CONFIG) as spec:
        yield spec


def seed_source(spec: provision.ClusterSpec, topic: str, generated: datagen.DatagenSpec,
                bad: Sequence[bytes], *, keyless: bytes | None = None) -> None:
    """``topic`` (3 partitions): the ``generated`` datagen records, then each ``bad`` value keyed ``bad-<i>``
    on partition i % 3, and ``keyless`` (a value without a record key) on partition 1."""
    with connection.connect(spec.bootstrap) as conn:
        topics.create_topic(conn, topic, 3, 1)
        datagen.produce(conn.config, topic, generated)
    producer = Producer(connection.client_config({"bootstrap.servers": spec.bootstrap}))
    for i, value in enumerate(bad):
        producer.produce(topic, key=f"bad-{i}".encode(), value=value, partition=i % 3)
    if keyless is not None:
        producer.produce(topic, key=None, value=keyless, partition=1)
    assert waits.close_producer(producer, waits.Deadline(30)) == 0, f"seeding {topic}: records still unsent after 30 s"
