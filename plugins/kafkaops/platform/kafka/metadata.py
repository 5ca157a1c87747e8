"""What a cluster is now: its brokers, topics and partitions, and :func:`snapshot`, the immutable
:class:`kafkaops.model.Cluster` of the live cluster (with offsets, replica sizes and consumer groups).
Reads only: nothing here changes the cluster."""
from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FuturesTimeout
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaException

from kafkaops.errors import UnknownTopic
from kafkaops.model import Broker, Cluster, PartitionAssignment
from kafkaops.platform import waits
from kafkaops.platform.kafka import connection, errors
from kafkaops.platform.kafka.connection import KafkaConnection
from kafkaops.platform.kafka.offsets import consumer_groups, list_offsets

log = logging.getLogger(__name__)


def cluster_metadata(conn: KafkaConnection) -> Any:
    """The brokers' metadata of every topic, asked in slices of a second (:func:`waits.list_topics`)."""
    try:
        return waits.list_topics(conn.admin, waits.Deadline(conn.timeout_s))
    except KafkaException as err:
        raise errors.classify(err, "the topic metadata", conn) from err


def topic_names(conn: KafkaConnection) -> set[str]:
    """The names of the cluster's topics, internal ones included."""
    return set(cluster_metadata(conn).topics)


def topic_metadata(conn: KafkaConnection, name: str) -> Any | None:
    """The brokers' metadata of topic ``name``; None when it lacks the topic."""
    try:
        return waits.list_topics(conn.admin, waits.Deadline(conn.timeout_s), name).topics.get(name)
    except KafkaException as err:
        raise errors.classify(err, f"the metadata of topic {name}", conn) from err


def describe_cluster(conn: KafkaConnection) -> tuple[str, int | None, list[Broker]]:
    """Cluster id, controller id and the registered (unfenced) brokers."""
    desc = connection.wait_for(conn.admin.describe_cluster(request_timeout=conn.timeout_s), conn,
                               "the cluster description")
    brokers = [Broker(id=n.id, host=n.host, port=n.port, rack=n.rack or None) for n in desc.nodes]
    return desc.cluster_id, (desc.controller.id if desc.controller else None), brokers



def metadata_version(conn: KafkaConnection) -> int | None:
    """The cluster's finalized ``metadata.version`` feature level, as a broker's ApiVersions answer gives it
    (KIP-584's finalized features, asked through kafka-python's ``describe_features``): what the brokers and
    controllers all run at, so what a feature of a Kafka release may be used from (e.g. 30, Kafka 4.3-IV0, for
    cordoned log dirs). None when the broker reports no level."""
    def ask(client: Any) -> dict[str, Any]:
        return dict(client.describe_features())

    found = connection.call_legacy(conn, "the cluster's finalized features", ask)
    level = (found.get("metadata.version") or {}).get("finalized")
    return None if level is None else int(level[1])

def snapshot(conn: KafkaConnection, *, topics: Iterable[str] | None = None, include_internal: bool = False,
             offsets: bool = True, sizes: bool = True, groups: bool = True) -> Cluster:
    """An immutable picture of the live cluster. Unknown ``topics`` raise :class:`UnknownTopic`."""
    started = time.monotonic()
    cluster_id, controller_id, brokers = describe_cluster(conn)
    metadata = cluster_metadata(conn)
    wanted = None if topics is None else list(dict.fromkeys(topics))
    if wanted is not None:
        missing = [t for t in wanted if t not in metadata.topics]
        if missing:
            existing = sorted(t for t in metadata.topics if not t.startswith("__"))
            raise UnknownTopic(f"topic(s) {', '.join(missing)} do not exist on {conn.bootstrap}; existing topics: "
                               f"{', '.join(existing[:20]) or '(none)'}; check the name or create the topic first")
    names = wanted if wanted is not None else sorted(
        t for t in metadata.topics if include_internal or not t.startswith("__"))

    partitions = []
    for name in names:
        tmeta = metadata.topics[name]
        if tmeta.error is not None:
            raise errors.classify(tmeta.error, f"the metadata of topic {name}", conn)
        for pid, pmeta in sorted(tmeta.partitions.items()):
            partitions.append(PartitionAssignment(
                topic=name, partition=pid, replicas=tuple(pmeta.replicas),
                leader=pmeta.leader if pmeta.leader >= 0 else None, isr=tuple(pmeta.isrs)))

    registered = {b.id for b in brokers}
    offline_ids = sorted({r for p in partitions for r in p.replicas} - registered)
    all_brokers = brokers + [Broker(id=i, online=False) for i in offline_ids]

    wanted_dirs: dict[str, list[int]] = {}
    for p in partitions:
        wanted_dirs.setdefault(p.topic, []).append(p.partition)
    # Log-dir sizes (kafka-python, decoded in Python) overlap with the offset look-ups (librdkafka).
    # The pool is shut down without waiting: a look-up that outlived its bound must not hold this wait.
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kafkaops-log-dirs")
    try:
        sizes_job = pool.submit(_describe_log_dirs, conn, wanted_dirs, sorted(registered)) if sizes else None
        start_offsets, end_offsets = (list_offsets(conn, partitions) if offsets and partitions else ({}, {}))
        bound = waits.Deadline(3 * conn.timeout_s + 10)  # call_legacy's 3 attempts, each within the timeout
        try:
            per_replica, disks = sizes_job.result(timeout=bound.remaining()) if sizes_job is not None else ({}, {})
        except FuturesTimeout:
            raise bound.timed_out(f"the log dir sizes of brokers {sorted(registered)} on {conn.name}",
                                  state="nothing changed on the cluster",
                                  then="check the brokers' DescribeLogDirs answers, or snapshot without sizes") \
                from None
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    all_brokers = [_with_disk(b, disks.get(b.id)) for b in all_brokers]
    size_of = _largest_replicas(per_replica)
    partitions = [PartitionAssignment(topic=p.topic, partition=p.partition, replicas=p.replicas, leader=p.leader,
                                      isr=p.isr, start_offset=start_offsets.get(p.topic_partition),
                                      end_offset=end_offsets.get(p.topic_partition), size_bytes=size_of.get(p.topic_partition),
                                      leader_size_bytes=None if p.leader is None else
                                      per_replica.get((p.topic, p.partition, p.leader)))
                  for p in partitions]
    group_list = consumer_groups(conn, end_offsets) if groups else []
    cluster = Cluster(brokers=tuple(all_brokers), partitions=tuple(partitions), cluster_id=cluster_id,
                      controller_id=controller_id, groups=tuple(group_list), taken_at=time.time())
    log.info("snapshot of %s: %d brokers (%d offline), %d topics, %d partitions, %d groups in %.2f s",
             cluster_id, len(all_brokers), len(offline_ids), len(names), len(partitions), len(group_list),
             time.monotonic() - started)
    return cluster


@dataclass(frozen=True)
class LogDirs:
    """A broker's log dirs as DescribeLogDirs answers: the bytes of those that answered (total, usable by
    Kafka), and how many answered with an error (``offline``: Kafka took them offline, full or failing)."""

    total_bytes: int
    usable_bytes: int
    offline: int = 0


def _with_disk(broker: Broker, disk: LogDirs | None) -> Broker:
    if disk is None:
        return broker
    return Broker(id=broker.id, host=broker.host, port=broker.port, rack=broker.rack, online=broker.online,
                  disk_total_bytes=disk.total_bytes, disk_usable_bytes=disk.usable_bytes)


def _largest_replicas(per_replica: Mapping[tuple[str, int, int], int]) -> dict[tuple[str, int], int]:
    """The largest replica's bytes of each partition, from each replica's ``(topic, partition, broker)``."""
    sizes: dict[tuple[str, int], int] = {}
    for (topic, partition, _broker), size in per_replica.items():
        sizes[(topic, partition)] = max(sizes.get((topic, partition), 0), size)
    return sizes


def replica_sizes(conn: KafkaConnection, partitions: Iterable[tuple[str, int]], brokers: Iterable[int]
                  ) -> dict[tuple[str, int, int], int]:
    """Bytes on disk of each replica ``(topic, partition, broker)`` of ``partitions`` on ``brokers``,
    counting a replica that is being copied (a reassignment's adding replica) as far as it got."""
    return replicas_and_log_dirs(conn, partitions, brokers)[0]


def replicas_and_log_dirs(conn: KafkaConnection, partitions: Iterable[tuple[str, int]], brokers: Iterable[int]
                          ) -> tuple[dict[tuple[str, int, int], int], dict[int, LogDirs]]:
    """:func:`replica_sizes` and, from the same answers, each broker's :class:`LogDirs` (nothing asked: nothing)."""
    topics: dict[str, list[int]] = {}
    for topic, partition in partitions:
        topics.setdefault(topic, []).append(partition)
    wanted = sorted(set(brokers))
    if not topics or not wanted:
        return {}, {}
    return _describe_log_dirs(conn, topics, wanted)


def log_dirs(conn: KafkaConnection, brokers: Iterable[int]) -> dict[int, LogDirs]:
    """Each of ``brokers``' :class:`LogDirs` (their bytes, total and usable), asking for no partition; a broker that
    did not answer is missing. Reads only."""
    wanted = sorted(set(brokers))
    if not wanted:
        return {}
    return _describe_log_dirs(conn, {}, wanted)[1]


def _describe_log_dirs(conn: KafkaConnection, topics: dict[str, list[int]], brokers: list[int]
                       ) -> tuple[dict[tuple[str, int, int], int], dict[int, LogDirs]]:
    """Replica sizes ``(topic, partition, broker) -> bytes`` and each broker's :class:`LogDirs`.
    DescribeLogDirs counts a replica's local log: of a tiered topic (remote storage on) the segments copied to
    remote storage and deleted locally are not in it (measured on Kafka 4.4 with LocalTieredStorage,
    tests/integration/reassign/test_tiered.py).
    kafka-python sends each broker one DescribeLogDirs naming every partition asked: they go
    :data:`~connection.MAX_PARTITIONS_PER_REQUEST` at a time (each answer has the brokers' whole disks)."""
    pairs = [(t, p) for t, parts in topics.items() for p in parts]
    answers: list[Any] = []
    for part in connection.request_slices(pairs) or [[]]:  # none asked: one call still reads the disks
        asked: dict[str, list[int]] = {}
        for t, p in part:
            asked.setdefault(t, []).append(p)

        def ask(client: Any, asked: dict[str, list[int]] = asked) -> list[Any]:
            return list(client.describe_log_dirs(topic_partitions=asked, brokers=brokers))
        answers.extend(connection.call_legacy(conn, f"the log dirs of brokers {brokers}", ask))
    sizes: dict[tuple[str, int, int], int] = {}
    disks: dict[int, LogDirs] = {}
    for answer in answers:
        total = usable = offline = 0
        for log_dir in answer["log_dirs"]:
            if log_dir.get("error_code", 0) != 0:
                offline += 1
                continue
            total += max(log_dir.get("total_bytes", 0), 0)
            usable += max(log_dir.get("usable_bytes", 0), 0)
            for topic in log_dir.get("topics", []):
                for part in topic["partitions"]:
                    if part.get("is_future_key"):
                        continue
                    key = (topic["name"], part["partition_index"], answer["broker"])
                    sizes[key] = max(sizes.get(key, 0), part["partition_size"])
        disks[answer["broker"]] = LogDirs(total, usable, offline)
    return sizes, disks
