"""Offsets: the earliest and latest of each partition, and consumer groups (their committed offsets
and lag read, offsets set, groups deleted)."""
from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import OffsetSpec

from kafkaops.errors import KafkaOpsError, KafkaUnreachable
from kafkaops.model import ConsumerGroup, GroupPartitionLag, PartitionAssignment
from kafkaops.platform.kafka import connection, errors
from kafkaops.platform.kafka.connection import KafkaConnection

log = logging.getLogger(__name__)


def list_offsets(conn: KafkaConnection, partitions: list[PartitionAssignment], *, attempts: int = 4
                 ) -> tuple[dict[tuple[str, int], int], dict[tuple[str, int], int]]:
    """Earliest and latest offsets of every partition that has a leader. Partitions whose leader
    moved under the client (new topics, elections, reassignments) are asked again."""
    led = [TopicPartition(p.topic, p.partition) for p in partitions if not p.offline]
    return (_offsets_at(conn, led, OffsetSpec.earliest(), "earliest", attempts),
            _offsets_at(conn, led, OffsetSpec.latest(), "latest", attempts))


def _offsets_at(conn: KafkaConnection, led: list[TopicPartition], spec: OffsetSpec, label: str, attempts: int
                ) -> dict[tuple[str, int], int]:
    """The ``label`` offset of each of ``led``; partitions without one are left out, with a warning. librdkafka
    sends one ListOffsets per leader, but a leader may lead any number: ``led`` goes in calls of at most
    :data:`~connection.MAX_PARTITIONS_PER_REQUEST` partitions."""
    found: dict[tuple[str, int], int] = {}
    failed: dict[TopicPartition, KafkaOpsError] = {}
    pending = list(led)

    def ask() -> None:
        nonlocal pending
        futures = {tp: future for part in connection.request_slices(pending)
                   for tp, future in conn.admin.list_offsets({tp: spec for tp in part},
                                                             request_timeout=conn.timeout_s).items()}
        for tp, future in futures.items():
            try:
                found[(tp.topic, tp.partition)] = connection.wait_for(
                    future, conn, f"the {label} offset of {tp.topic}-{tp.partition}").offset
                failed.pop(tp, None)
            except KafkaOpsError as err:
                failed[tp] = err
        pending = [tp for tp, err in failed.items() if err.retriable]
        if pending:
            raise errors.typed(KafkaOpsError, f"no {label} offsets yet for {len(pending)} partition(s) at "
                                              f"{conn.bootstrap}, first {pending[0].topic}-{pending[0].partition}: "
                                              f"{failed[pending[0]]}", retriable=True)

    try:
        errors.retrying(f"the {label} offsets", attempts=attempts, first_wait_s=0.5, max_wait_s=2.0)(ask)
    except KafkaOpsError:
        pass  # the partitions in ``failed`` are named below
    if failed:
        first_tp, first_err = next(iter(failed.items()))
        log.warning("no %s offsets for %d of %d partitions (first: %s-%d: %s)", label, len(failed), len(led),
                    first_tp.topic, first_tp.partition, first_err)
    return found


def consumer_groups(conn: KafkaConnection, end_offsets: Mapping[tuple[str, int], int]) -> list[ConsumerGroup]:
    """The cluster's consumer groups: state, members, and each committed offset beside ``end_offsets``."""
    listing = connection.wait_for(conn.admin.list_consumer_groups(request_timeout=conn.timeout_s), conn,
                                  "consumer groups")
    ids = sorted(g.group_id for g in listing.valid)
    if not ids:
        return []
    described = conn.admin.describe_consumer_groups(ids, request_timeout=conn.timeout_s)
    groups = []
    for gid in ids:
        try:
            desc = described[gid].result(timeout=conn.timeout_s + 5)
            state, members = str(desc.state.name if hasattr(desc.state, "name") else desc.state), len(desc.members)
        except KafkaException as err:
            log.warning("cannot describe group %s: %s", gid, err)
            state, members = "UNKNOWN", 0
        offsets_future = conn.admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(gid)],
                                                                request_timeout=conn.timeout_s)[gid]
        lags = []
        try:
            for tp in offsets_future.result(timeout=conn.timeout_s + 5).topic_partitions:
                committed = tp.offset if tp.offset is not None and tp.offset >= 0 else None
                lags.append(GroupPartitionLag(tp.topic, tp.partition, committed,
                                              end_offsets.get((tp.topic, tp.partition))))
        except KafkaException as err:
            log.warning("cannot read offsets of group %s: %s", gid, err)
        groups.append(ConsumerGroup(gid, state, members, tuple(sorted(lags, key=lambda x: (x.topic, x.partition)))))
    return groups


def group_members(conn: KafkaConnection, group_id: str) -> tuple[str, tuple[str, ...]]:
    """The state of consumer group ``group_id`` and its members as ``client.id@host`` (sorted); a group the
    coordinator does not know is ``("DEAD", ())``."""
    future = conn.admin.describe_consumer_groups([group_id], request_timeout=conn.timeout_s)[group_id]
    desc = connection.wait_for(future, conn, f"the members of consumer group {group_id}")
    state = str(desc.state.name if hasattr(desc.state, "name") else desc.state)
    return state, tuple(sorted(f"{m.client_id}@{m.host.lstrip('/')}" for m in desc.members))


def delete_consumer_group(conn: KafkaConnection, group_id: str, *, attempts: int = 5) -> None:
    """Delete consumer group ``group_id``; a group whose members are still leaving
    (NON_EMPTY_GROUP) is asked again, up to ``attempts`` times."""
    def delete() -> None:
        future = conn.admin.delete_consumer_groups([group_id], request_timeout=conn.timeout_s)[group_id]
        try:
            future.result(timeout=conn.timeout_s + 5)
        except KafkaException as err:
            code = err.args[0].code() if err.args and isinstance(err.args[0], KafkaError) else None
            if code == KafkaError.NON_EMPTY_GROUP:
                raise errors.typed(KafkaOpsError, f"consumer group {group_id} still has members leaving",
                                   retriable=True) from err
            raise errors.classify(err, f"the deletion of consumer group {group_id}", conn) from err

    errors.retrying(f"the deletion of consumer group {group_id}", attempts=attempts, first_wait_s=0.5,
                    max_wait_s=2.0)(delete)


def group_ids(conn: KafkaConnection) -> list[str]:
    """The ids of the cluster's consumer groups (listed only: nothing described, no offset read)."""
    listing = connection.wait_for(conn.admin.list_consumer_groups(request_timeout=conn.timeout_s), conn,
                                  "consumer groups")
    return sorted(g.group_id for g in listing.valid)


@dataclass(frozen=True)
class GroupsDeleted:
    """What :func:`delete_consumer_groups` did: the groups ``deleted`` now, those ``absent`` (Kafka knows no such
    group: deleted before, so a retry counts them done) and those ``failed``, each with its error in words."""

    deleted: tuple[str, ...] = ()
    absent: tuple[str, ...] = ()
    failed: Mapping[str, str] = field(default_factory=dict)


def delete_consumer_groups(conn: KafkaConnection, group_ids: Iterable[str]) -> GroupsDeleted:
    """Delete ``group_ids`` in one request (DeleteGroups). Each group's answer is read by its error code: a group
    that is not there (GROUP_ID_NOT_FOUND) is ``absent``; any other error (NON_EMPTY_GROUP: it has members; the
    coordinator not answering) leaves the group in ``failed``; nothing is raised, so the caller says what is left."""
    ids = sorted(set(group_ids))
    if not ids:
        return GroupsDeleted()
    futures = conn.admin.delete_consumer_groups(ids, request_timeout=conn.timeout_s)
    deleted: list[str] = []
    absent: list[str] = []
    failed: dict[str, str] = {}
    for gid in ids:
        try:
            futures[gid].result(timeout=conn.timeout_s + 5)
            deleted.append(gid)
        except KafkaException as err:
            code = err.args[0].code() if err.args and isinstance(err.args[0], KafkaError) else None
            if code == KafkaError.GROUP_ID_NOT_FOUND:
                absent.append(gid)
            elif code == KafkaError.NON_EMPTY_GROUP:
                failed[gid] = f"consumer group {gid} has members: not deleted"
            else:
                failed[gid] = str(errors.classify(err, f"the deletion of consumer group {gid}", conn))
        except TimeoutError:
            failed[gid] = f"the deletion of consumer group {gid}: no answer within {conn.timeout_s + 5:.0f} s"
    return GroupsDeleted(tuple(deleted), tuple(absent), failed)


#: The longest one request to commit a group's offsets may go unanswered before it is sent again.
COMMIT_ATTEMPT_S = 15.0


def _group_coordinator_ready(conn: KafkaConnection, group_id: str, topic: str, partitions: list[int],
                             timeout_s: float, what: str) -> None:
    """Return once ``group_id``'s coordinator answers: its committed offsets read through a consumer (the
    group protocol's own coordinator lookup, bounded by ``timeout_s``), never through the admin API.

    librdkafka's admin requests to a group coordinator (AlterConsumerGroupOffsets, ListConsumerGroupOffsets,
    DescribeConsumerGroups) abort the process when one times out while its coordinator lookup is still
    going on and that lookup ends later: the lookup's callback finds the request's once-only reply object
    already freed (``rd_kafka_enq_once_del_source_return: Assertion `eonce->refcnt > 0'``, from
    ``rd_kafka_admin_coord_response_parse`` on librdkafka's main thread; librdkafka 2.16, unfixed upstream,
    confluentinc/librdkafka#5397 describes the same use-after-free). A fresh cluster creates
    ``__consumer_offsets`` on the first lookup, and under load that took longer than the commit's
    15 s request timeout: the abort of issue 29 (a core dump of tests/integration/platform/test_kafka_39.py
    under CPU load showed that stack). Once the coordinator has answered this consumer, the admin request's
    lookup answers at once. A lookup that does not end in ``timeout_s`` is a retriable timeout, and no
    admin request was sent."""
    from confluent_kafka import Consumer  # looked up per call: the tests' client guard replaces it

    consumer = Consumer(connection.client_config({**conn.config, "group.id": group_id, "enable.auto.commit": False,
                                                  "socket.connection.setup.timeout.ms": int(timeout_s * 1000)}))
    try:
        consumer.committed([TopicPartition(topic, p) for p in partitions], timeout=timeout_s)
    except KafkaException as err:
        raise errors.classify(err, what, conn) from err
    finally:
        consumer.close()


def commit_group_offsets(conn: KafkaConnection, group_id: str, topic: str, offsets: Mapping[int, int], *,
                         attempts: int = 10) -> None:
    """Set ``group_id``'s committed offsets on ``topic`` (partition -> next offset to read). The group
    must have no active members (Kafka refuses otherwise). A coordinator that is still loading or
    moving (a fresh cluster creates ``__consumer_offsets`` on first use) is asked again, and so is one
    that did not answer within ``COMMIT_ATTEMPT_S``: setting the same offsets twice is harmless, and a
    coordinator elected a moment ago may leave its first request unanswered. All attempts together
    take at most ``attempts`` tries or twice the connection's timeout. The offsets go
    :data:`~connection.MAX_PARTITIONS_PER_REQUEST` partitions a request (one commit per slice: the group has no
    members to see a part)."""
    requests = [ConsumerGroupTopicPartitions(group_id, [TopicPartition(topic, int(p), int(o)) for p, o in part])
                for part in connection.request_slices(sorted(offsets.items()))]
    what = f"the committed offsets of group {group_id} on {topic}"
    attempt_s = min(conn.timeout_s, COMMIT_ATTEMPT_S)

    def commit() -> None:
        try:
            # the coordinator is the group's, whichever partitions: the first slice's probe it
            _group_coordinator_ready(conn, group_id, topic, sorted(offsets)[:connection.MAX_PARTITIONS_PER_REQUEST],
                                     attempt_s, what)
            answered = []
            for request in requests:  # librdkafka takes one group per call
                future = conn.admin.alter_consumer_group_offsets([request], request_timeout=attempt_s)[group_id]
                answered.extend(connection.wait_for(future, conn, what).topic_partitions)
        except KafkaUnreachable as err:
            if err.code in ("_TIMED_OUT", "REQUEST_TIMED_OUT") and conn.refused is None:
                err.retriable = True  # unanswered, not refused: the same request again is safe
            raise
        failed = [(tp, errors.classify(tp.error, what, conn)) for tp in answered if tp.error]
        if failed:
            refused = "; ".join(f"{tp.topic}-{tp.partition}: {err.code}" for tp, err in failed)
            raise errors.typed(KafkaOpsError, f"Kafka refused offsets of group {group_id} on {len(failed)} of "
                                              f"{len(offsets)} partition(s): {refused}; stop the group's consumers "
                                              "(an active group cannot be changed) and retry",
                               retriable=all(err.retriable for _, err in failed))

    errors.retrying(what, attempts=attempts, deadline_s=2 * conn.timeout_s, first_wait_s=0.5, max_wait_s=3.0)(commit)
