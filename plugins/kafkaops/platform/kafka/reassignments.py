"""Partition reassignments (through kafka-python: confluent-kafka lacks them) and preferred leader
elections, for :mod:`kafkaops.reassign.engine`."""
from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from confluent_kafka import ElectionType, KafkaError, KafkaException, TopicPartition

from kafkaops.errors import KafkaOpsError, ReplicationFactorChangeRefused
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


def _submit_slice(client: Any, sliced: Mapping[Any, list[int] | None], timeout_s: float) -> tuple[dict[Any, Any], int]:
    """One AlterPartitionReassignments request of kafka-python's own request class, sent to the controller the
    way its ``KafkaAdminClient.alter_partition_reassignments`` sends it, but with ``AllowReplicationFactorChange``
    false when the slice names a replica list (a cancel only takes moves back). The field exists from v1 (Kafka
    4.1+); kafka-python negotiates the version with the broker and writes a v0 request, without the field, to
    an older one. Returns each partition's error class (None when accepted) and the version sent."""
    import kafka.errors as kafka_errors
    from kafka.protocol.admin import AlterPartitionReassignmentsRequest
    from kafka.structs import TopicPartition as KafkaTopicPartition

    refuse = any(replicas is not None for replicas in sliced.values())
    request = AlterPartitionReassignmentsRequest(
        timeout_ms=int(timeout_s * 1000), allow_replication_factor_change=not refuse,
        topics=client._process_alter_partition_reassignments_input(sliced))

    def top_level_error(response: Any) -> Iterator[Any]:
        yield kafka_errors.for_code(response.error_code)

    response = client._manager.run(client._send_request_to_controller, request, top_level_error)
    results: dict[Any, Any] = {}
    for topic in response.responses:
        for partition in topic.partitions:
            error = kafka_errors.for_code(partition.error_code)
            results[KafkaTopicPartition(topic.name, partition.partition_index)] = (
                None if error is kafka_errors.NoError else error)
    return results, int(request.API_VERSION)


def alter_partition_reassignments(conn: KafkaConnection,
                                  reassignments: Mapping[tuple[str, int], Iterable[int] | None]) -> bool:
    """Submit new replica lists; ``None`` cancels the partition's reassignment in flight. A cancel
    that finds nothing in flight (it finished meanwhile) is not an error. They go
    :data:`~connection.MAX_PARTITIONS_PER_REQUEST` at a time: a call that fails part-way leaves the slices
    before it submitted, which the engine observes in flight and does not submit again.

    A replica list that changes its partition's replication factor is refused by Kafka 4.1+ (AlterPartitionReassignments
    v1, ``AllowReplicationFactorChange`` false): :class:`ReplicationFactorChangeRefused`, naming the partitions
    and their replica counts. Returns whether the brokers could refuse such a change (they speak v1); a Kafka
    3.9 broker gets v0, which has no such field, and False comes back."""
    from kafka.errors import InvalidReplicationFactorError, NoReassignmentInProgressError
    from kafka.structs import TopicPartition as KafkaTopicPartition

    if not reassignments:
        return False
    request = {KafkaTopicPartition(t, p): (None if r is None else [int(b) for b in r])
               for (t, p), r in reassignments.items()}
    results: dict[Any, Any] = {}
    versions: set[int] = set()
    slices = connection.request_slices(request)
    for number, part in enumerate(slices, 1):
        sliced = {tp: request[tp] for tp in part}
        what = (f"{len(request)} reassignment(s)" if len(slices) == 1 else
                f"{len(part)} of {len(request)} reassignment(s) (request {number} of {len(slices)}, "
                f"{sum(len(s) for s in slices[:number - 1])} submitted before it)")
        def submit(client: Any, sliced: dict[Any, Any] = sliced) -> tuple[dict[Any, Any], int]:
            return _submit_slice(client, sliced, conn.timeout_s)
        answered, version = connection.call_legacy(conn, what, submit)
        results.update(answered)
        versions.add(version)
    failed, rf_changes = [], []
    for tp, error in sorted(results.items()):
        if error is None:
            continue
        if error is NoReassignmentInProgressError and request[tp] is None:
            log.info("cancel of %s-%d: no reassignment in flight", tp.topic, tp.partition)
            continue
        if error is InvalidReplicationFactorError and request[tp] is not None:
            rf_changes.append((tp.topic, tp.partition))
            continue
        failed.append(f"{tp.topic}-{tp.partition} -> {request[tp]}: {error.__name__}")
    missing = sorted(f"{tp.topic}-{tp.partition}" for tp in request if tp not in results)
    refused = len(failed) + len(missing) + len(rf_changes)
    if rf_changes:
        raise ReplicationFactorChangeRefused(_rf_refusal(conn, rf_changes, request, refused, failed + missing))
    if failed or missing:
        raise KafkaOpsError(f"Kafka refused {refused} of {len(request)} reassignment(s) at "
                            f"{conn.bootstrap}: {'; '.join(failed + [m + ': no answer' for m in missing])[:2000]}; "
                            "check the topics and broker ids, then resubmit")
    guarded = min(versions, default=0) >= 1
    log.debug("%d reassignment(s) submitted with AlterPartitionReassignments v%s (replication-factor changes %s)",
              len(request), "/".join(map(str, sorted(versions))), "refused" if guarded else "not refusable: v0")
    return guarded


def _rf_refusal(conn: KafkaConnection, partitions: list[tuple[str, int]], request: Mapping[Any, list[int] | None],
                refused: int, others: list[str]) -> str:
    """The message of a refused replication-factor change: each partition with its replica count now (asked of
    the brokers' metadata; "?" when they do not answer) and the one asked."""
    from kafka.structs import TopicPartition as KafkaTopicPartition

    counts: dict[tuple[str, int], int] = {}
    for topic in sorted({t for t, _ in partitions}):
        try:
            found = conn.admin.list_topics(topic=topic, timeout=conn.timeout_s).topics.get(topic)
        except KafkaException as err:
            log.warning("the replica counts of %s could not be read: %s", topic, err)
            continue
        for index, meta in (found.partitions if found is not None else {}).items():
            counts[(topic, int(index))] = len(meta.replicas)
    named = "; ".join(f"{t}-{p}: {counts.get((t, p), '?')} replica(s) now, {len(request[KafkaTopicPartition(t, p)] or [])} "
                      f"asked ({request[KafkaTopicPartition(t, p)]})" for t, p in partitions[:20])
    more = f"; and {len(partitions) - 20} more" if len(partitions) > 20 else ""
    also = f"; also refused: {'; '.join(others)[:1000]}" if others else ""
    return (f"Kafka at {conn.bootstrap} refused {refused} of {len(request)} reassignment(s): {len(partitions)} would "
            f"change the replication factor, which kafkaops never asks of a reassignment: {named}{more}{also}. "
            "Those partitions keep their replicas (nothing was moved for them). Give each partition as many "
            "replicas as it has now; to change a topic's replication factor, do it on its own, outside kafkaops, "
            "with kafka-reassign-partitions.sh")


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
