"""Partition reassignments (through kafka-python: confluent-kafka lacks them) and preferred leader
elections, for :mod:`kafkaops.reassign.engine`."""
from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from confluent_kafka import ElectionType, KafkaError, TopicPartition

from kafkaops.errors import KafkaOpsError
from kafkaops.model import Reassignment
from kafkaops.platform.kafka import connection
from kafkaops.platform.kafka.connection import KafkaConnection

log = logging.getLogger(__name__)


def list_partition_reassignments(conn: KafkaConnection, partitions: Iterable[tuple[str, int]] | None = None
                                 ) -> dict[tuple[str, int], Reassignment]:
    """The reassignments in flight, of ``partitions`` or of the whole cluster. ``partitions`` are asked
    :data:`~connection.MAX_PARTITIONS_PER_REQUEST` at a time (the whole cluster is one request naming none)."""
    from kafka.structs import TopicPartition as KafkaTopicPartition

    if partitions is None:
        slices: list[list[KafkaTopicPartition] | None] = [None]
    else:
        slices = list(connection.request_slices(KafkaTopicPartition(t, p) for t, p in partitions))
        if not slices:
            return {}
    listing: dict[Any, Any] = {}
    for wanted in slices:
        def ask(client: Any, wanted: list[Any] | None = wanted) -> dict[Any, Any]:
            return dict(client.list_partition_reassignments(wanted))
        listing.update(connection.call_legacy(conn, "the reassignments in flight", ask))
    found = {}
    for tp, state in listing.items():
        found[(tp.topic, tp.partition)] = Reassignment(
            tp.topic, tp.partition, tuple(state["replicas"]), tuple(state["adding_replicas"]),
            tuple(state["removing_replicas"]))
    return dict(sorted(found.items()))


def alter_partition_reassignments(conn: KafkaConnection,
                                  reassignments: Mapping[tuple[str, int], Iterable[int] | None]) -> None:
    """Submit new replica lists; ``None`` cancels the partition's reassignment in flight. A cancel
    that finds nothing in flight (it finished meanwhile) is not an error. They go
    :data:`~connection.MAX_PARTITIONS_PER_REQUEST` at a time: a call that fails part-way leaves the slices
    before it submitted, which the engine observes in flight and does not submit again."""
    from kafka.errors import NoReassignmentInProgressError
    from kafka.structs import TopicPartition as KafkaTopicPartition

    if not reassignments:
        return
    request = {KafkaTopicPartition(t, p): (None if r is None else [int(b) for b in r])
               for (t, p), r in reassignments.items()}
    results: dict[Any, Any] = {}
    slices = connection.request_slices(request)
    for number, part in enumerate(slices, 1):
        sliced = {tp: request[tp] for tp in part}
        what = (f"{len(request)} reassignment(s)" if len(slices) == 1 else
                f"{len(part)} of {len(request)} reassignment(s) (request {number} of {len(slices)}, "
                f"{sum(len(s) for s in slices[:number - 1])} submitted before it)")
        def submit(client: Any, sliced: dict[Any, Any] = sliced) -> dict[Any, Any]:
            return dict(client.alter_partition_reassignments(sliced))
        results.update(connection.call_legacy(conn, what, submit))
    failed = []
    for tp, error in sorted(results.items()):
        if error is None:
            continue
        if error is NoReassignmentInProgressError and request[tp] is None:
            log.info("cancel of %s-%d: no reassignment in flight", tp.topic, tp.partition)
            continue
        failed.append(f"{tp.topic}-{tp.partition} -> {request[tp]}: {error.__name__}")
    missing = sorted(f"{tp.topic}-{tp.partition}" for tp in request if tp not in results)
    if failed or missing:
        raise KafkaOpsError(f"Kafka refused {len(failed) + len(missing)} of {len(request)} reassignment(s) at "
                            f"{conn.bootstrap}: {'; '.join(failed + [m + ': no answer' for m in missing])[:2000]}; "
                            "check the topics and broker ids, then resubmit")


def elect_preferred_leaders(conn: KafkaConnection, partitions: Iterable[tuple[str, int]] | None = None
                            ) -> tuple[tuple[str, int], ...]:
    """Move leadership to each partition's first replica (all partitions when ``partitions`` is
    None). Returns the partitions whose leader changed; ones already led by it are skipped. ``partitions``
    go sorted (librdkafka writes a topic entry each time the topic changes and does not sort an election),
    :data:`~connection.MAX_PARTITIONS_PER_REQUEST` at a time."""
    if partitions is None:
        slices: list[list[TopicPartition] | None] = [None]
    else:
        slices = list(connection.request_slices(TopicPartition(t, p) for t, p in sorted(set(partitions))))
        if not slices:
            return ()
    results: dict[Any, Any] = {}
    for wanted in slices:
        # confluent-kafka 2.16 rejects every keyword argument of elect_leaders, hence none here.
        results.update(connection.wait_for(conn.admin.elect_leaders(ElectionType.PREFERRED, wanted), conn,
                                           "a preferred leader election"))
    elected, failed = [], []
    for tp, error in sorted(results.items(), key=lambda item: (item[0].topic, item[0].partition)):
        if error is None:
            elected.append((tp.topic, tp.partition))
        elif error.code() != KafkaError.ELECTION_NOT_NEEDED:
            failed.append(f"{tp.topic}-{tp.partition}: {error.str()}")
    if failed:
        raise KafkaOpsError(f"preferred leader election failed for {len(failed)} partition(s) at {conn.bootstrap}: "
                            f"{'; '.join(failed[:20])}; the first replica must be alive and in the ISR, "
                            "retry once it has caught up")
    log.info("preferred leader election: %d partition(s) changed leader", len(elected))
    return tuple(elected)
