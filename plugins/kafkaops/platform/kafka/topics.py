"""Topics made, grown, emptied and deleted. Each change returns once the brokers' metadata shows it
(:func:`_wait_for_leaders`), and each is resume-safe: a topic already as asked is not an error."""
from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import NewPartitions, NewTopic

from kafkaops.errors import ConfigError, KafkaOpsError, TopicExists, UnknownTopic
from kafkaops.platform.kafka import connection, errors, metadata
from kafkaops.platform.kafka.connection import KafkaConnection

log = logging.getLogger(__name__)


def create_topic(conn: KafkaConnection, name: str, partitions: int, replication_factor: int,
                 config: Mapping[str, str] | None = None) -> bool:
    """Create a topic; False when it exists already with the same partition count."""
    future = conn.admin.create_topics([NewTopic(name, partitions, replication_factor, config=dict(config or {}))],
                                      request_timeout=conn.timeout_s)[name]
    try:
        connection.wait_for(future, conn,
                            f"the creation of topic {name} ({partitions} partitions, RF {replication_factor})")
    except TopicExists as err:
        existing = metadata.topic_metadata(conn, name)
        have = "no metadata" if existing is None else f"{len(existing.partitions)} partitions"
        if existing is None or len(existing.partitions) != partitions:
            raise KafkaOpsError(f"topic {name} exists with {have}, not {partitions} partitions; use another name "
                                "or delete it first") from err
        return False
    _wait_for_leaders(conn, name, partitions, "created")
    return True


def _wait_for_leaders(conn: KafkaConnection, name: str, partitions: int, what: str) -> None:
    """Return once the brokers' metadata shows ``name`` with ``partitions`` partitions, each with a
    leader: the controller acknowledges a change before every broker has it, and the next call may
    ask another broker."""
    def led() -> None:
        meta = metadata.topic_metadata(conn, name)
        if meta is None:
            seen = "no metadata of it"
        elif meta.error is not None:
            err = errors.classify(meta.error, f"the metadata of topic {name}", conn)
            if not err.retriable:
                raise err
            seen = f"the error {err.code}"
        else:
            with_leader = sum(1 for p in meta.partitions.values() if p.leader >= 0)
            if len(meta.partitions) == partitions and with_leader == partitions:
                return
            seen = f"{len(meta.partitions)} partition(s), {with_leader} with a leader"
        raise errors.typed(KafkaOpsError, f"topic {name} was {what}, but the metadata of {conn.bootstrap} shows "
                                          f"{seen}, not {partitions} partition(s) each with a leader; check the "
                                          "brokers' health", retriable=True)

    errors.retrying(f"the leaders of topic {name}", attempts=None, deadline_s=conn.timeout_s, first_wait_s=0.05,
                    max_wait_s=0.5)(led)


def delete_topics(conn: KafkaConnection, names: Iterable[str]) -> None:
    """Delete ``names``; ones that do not exist are skipped."""
    futures = conn.admin.delete_topics(list(names), request_timeout=conn.timeout_s)
    for name, future in futures.items():
        try:
            connection.wait_for(future, conn, f"the deletion of topic {name}")
        except UnknownTopic:
            log.info("topic %s does not exist, nothing to delete", name)


def truncate_topics(conn: KafkaConnection, names: Iterable[str]) -> dict[tuple[str, int], int]:
    """Delete every record now in ``names`` (DeleteRecords up to each partition's end offset),
    keeping the topics and their configs; returns the offsets each partition now starts at."""
    names = list(names)
    snap = metadata.snapshot(conn, topics=names, sizes=False, groups=False)
    delete_records_before(conn, {(p.topic, p.partition): p.end_offset or 0 for p in snap.partitions})
    return {(p.topic, p.partition): p.end_offset or 0 for p in snap.partitions}


def delete_records_before(conn: KafkaConnection, offsets: Mapping[tuple[str, int], int]) -> None:
    """DeleteRecords: each partition's records before its offset in ``offsets`` (what retention does to the
    oldest records); a partition at offset 0 is left alone. librdkafka sends one request per leader; the
    partitions go in calls of at most :data:`~connection.MAX_PARTITIONS_PER_REQUEST`."""
    ends = [TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items()) if o]
    for part in connection.request_slices(ends):
        futures = conn.admin.delete_records(part, request_timeout=conn.timeout_s)
        for tp, future in futures.items():
            try:
                future.result(timeout=conn.timeout_s + 5)
            except KafkaException as err:
                raise KafkaOpsError(f"cannot delete the records of {tp.topic}-{tp.partition} before offset "
                                    f"{tp.offset}: {err}; a compacted topic refuses DeleteRecords: delete the "
                                    "topic and create it again") from err


def create_partitions(conn: KafkaConnection, topic: str, new_total: int,
                      assignment: Iterable[Iterable[int]] | None = None) -> bool:
    """Grow ``topic`` to ``new_total`` partitions, the new ones on ``assignment`` (one replica list
    per new partition, preferred leader first). Resume-safe: False when the topic already has
    ``new_total`` partitions; a topic with more is refused (Kafka never shrinks a topic)."""
    meta = metadata.topic_metadata(conn, topic)
    if meta is None or meta.error is not None:
        raise UnknownTopic(f"topic {topic} does not exist on {conn.bootstrap}; check the name")
    current = len(meta.partitions)
    if current == new_total:
        return False
    if current > new_total:
        raise KafkaOpsError(f"topic {topic} has {current} partitions, more than the {new_total} asked for; Kafka "
                            "cannot remove partitions: migrate to a new topic instead")
    replicas = [[int(b) for b in r] for r in assignment] if assignment is not None else None
    if replicas is not None and len(replicas) != new_total - current:
        raise ConfigError(f"growing {topic} from {current} to {new_total} partitions needs {new_total - current} "
                          f"replica lists, got {len(replicas)}")
    request = NewPartitions(topic, new_total, replica_assignment=replicas) if replicas else \
        NewPartitions(topic, new_total)
    future = conn.admin.create_partitions([request], request_timeout=conn.timeout_s)[topic]
    connection.wait_for(future, conn, f"growing {topic} from {current} to {new_total} partitions")
    _wait_for_leaders(conn, topic, new_total, f"grown from {current} to {new_total} partitions")
    log.info("topic %s grown from %d to %d partitions", topic, current, new_total)
    return True
