"""The only module that talks to Kafka's admin APIs.

confluent-kafka does the work; kafka-python's KafkaAdminClient is used only for what
confluent-kafka lacks (describe_log_dirs here; partition reassignments in the executor).
:func:`snapshot` turns a live cluster into an immutable :class:`kafkaops.model.Cluster`.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from kafkaops.errors import ConfigError, KafkaOpsError, KafkaUnreachable, UnknownTopic
from kafkaops.model import Broker, Cluster, ConsumerGroup, GroupPartitionLag, PartitionAssignment

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 10.0

# librdkafka setting -> kafka-python KafkaAdminClient argument, for the few calls made through it.
_KAFKA_PYTHON_KEYS = {
    "bootstrap.servers": "bootstrap_servers",
    "client.id": "client_id",
    "security.protocol": "security_protocol",
    "sasl.mechanism": "sasl_mechanism",
    "sasl.mechanisms": "sasl_mechanism",
    "sasl.username": "sasl_plain_username",
    "sasl.password": "sasl_plain_password",
    "ssl.ca.location": "ssl_cafile",
    "ssl.certificate.location": "ssl_certfile",
    "ssl.key.location": "ssl_keyfile",
    "ssl.key.password": "ssl_password",
}


class _QuietLibrdkafkaLog:
    """Routes librdkafka's own log lines (connection retries and the like) to DEBUG; the
    errors that matter reach the caller as exceptions with a message of kafkaops'."""

    _log = logging.getLogger("kafkaops.librdkafka")

    def log(self, level: int, fmt: str, *args: object) -> None:
        self._log.debug(fmt, *args)


def client_config(config: Mapping[str, str]) -> dict[str, Any]:
    """A confluent-kafka client config: the connection's, with librdkafka's logging routed to DEBUG."""
    return {"logger": _QuietLibrdkafkaLog(), **config}


def connection_config(source: Mapping[str, Any] | str) -> dict[str, str]:
    """A librdkafka config from a plain dict or a bootstrap string. SASL/SSL keys pass through unchanged."""
    config = {"bootstrap.servers": source} if isinstance(source, str) else dict(source)
    if not config.get("bootstrap.servers"):
        raise ConfigError("the Kafka connection has no bootstrap.servers; set it in the dict or in the "
                          "Airflow connection's extras, e.g. {\"bootstrap.servers\": \"host:9092\"}")
    return {k: str(v) if not isinstance(v, str) else v for k, v in config.items()}


@dataclass
class KafkaConnection:
    """Admin clients for one cluster. Create with :func:`connect`; close with :meth:`close`."""

    config: dict[str, str]
    timeout_s: float = DEFAULT_TIMEOUT_S
    admin: AdminClient = field(init=False)
    _legacy: Any = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.admin = AdminClient(client_config({"socket.connection.setup.timeout.ms": int(self.timeout_s * 1000),
                                                **self.config}))

    @property
    def bootstrap(self) -> str:
        return self.config["bootstrap.servers"]

    def legacy_admin(self) -> Any:
        """kafka-python's KafkaAdminClient, built on first use from the same config."""
        if self._legacy is None:
            from kafka.admin import KafkaAdminClient

            kwargs = {_KAFKA_PYTHON_KEYS[k]: v for k, v in self.config.items() if k in _KAFKA_PYTHON_KEYS}
            kwargs["bootstrap_servers"] = kwargs["bootstrap_servers"].split(",")
            try:
                self._legacy = KafkaAdminClient(request_timeout_ms=int(self.timeout_s * 1000), **kwargs)
            except Exception as err:
                raise KafkaUnreachable(f"kafka-python could not connect to {self.bootstrap}: {err}") from err
        return self._legacy

    def close(self) -> None:
        if self._legacy is not None:
            self._legacy.close()
            self._legacy = None

    def __enter__(self) -> KafkaConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def connect(source: Mapping[str, Any] | str, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> KafkaConnection:
    return KafkaConnection(connection_config(source), timeout_s=timeout_s)


def _result(future: Any, conn: KafkaConnection, what: str) -> Any:
    try:
        return future.result(timeout=conn.timeout_s + 5)
    except KafkaException as err:
        text = str(err)
        if any(s in text for s in ("_TRANSPORT", "TIMED_OUT", "Timed out", "_ALL_BROKERS_DOWN", "Connection refused")):
            raise KafkaUnreachable(f"cannot reach Kafka at {conn.bootstrap} within {conn.timeout_s:.0f} s while "
                                   f"asking for {what}: {err}; check bootstrap.servers and that the brokers "
                                   "are up") from err
        raise KafkaOpsError(f"Kafka refused {what} at {conn.bootstrap}: {err}") from err
    except TimeoutError as err:
        raise KafkaUnreachable(f"no answer from Kafka at {conn.bootstrap} within {conn.timeout_s:.0f} s while "
                               f"asking for {what}; check bootstrap.servers and that the brokers are up") from err


def describe_cluster(conn: KafkaConnection) -> tuple[str, int | None, list[Broker]]:
    """Cluster id, controller id and the registered (unfenced) brokers."""
    desc = _result(conn.admin.describe_cluster(request_timeout=conn.timeout_s), conn, "the cluster description")
    brokers = [Broker(id=n.id, host=n.host, port=n.port, rack=n.rack or None) for n in desc.nodes]
    return desc.cluster_id, (desc.controller.id if desc.controller else None), brokers


def snapshot(conn: KafkaConnection, *, topics: Iterable[str] | None = None, include_internal: bool = False,
             offsets: bool = True, sizes: bool = True, groups: bool = True) -> Cluster:
    """An immutable picture of the live cluster. Unknown ``topics`` raise :class:`UnknownTopic`."""
    started = time.monotonic()
    cluster_id, controller_id, brokers = describe_cluster(conn)
    try:
        metadata = conn.admin.list_topics(timeout=conn.timeout_s)
    except KafkaException as err:
        raise KafkaUnreachable(f"cannot read topic metadata from {conn.bootstrap}: {err}") from err
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
            raise KafkaOpsError(f"metadata of topic {name} has an error: {tmeta.error}")
        for pid, pmeta in sorted(tmeta.partitions.items()):
            partitions.append(PartitionAssignment(
                topic=name, partition=pid, replicas=tuple(pmeta.replicas),
                leader=pmeta.leader if pmeta.leader >= 0 else None, isr=tuple(pmeta.isrs)))

    registered = {b.id for b in brokers}
    offline_ids = sorted({r for p in partitions for r in p.replicas} - registered)
    all_brokers = brokers + [Broker(id=i, online=False) for i in offline_ids]

    start_offsets, end_offsets = (_list_offsets(conn, partitions) if offsets and partitions else ({}, {}))
    wanted_dirs: dict[str, list[int]] = {}
    for p in partitions:
        wanted_dirs.setdefault(p.topic, []).append(p.partition)
    size_of, disks = _log_dir_sizes(conn, wanted_dirs, sorted(registered)) if sizes else ({}, {})
    all_brokers = [_with_disk(b, disks.get(b.id)) for b in all_brokers]
    partitions = [PartitionAssignment(topic=p.topic, partition=p.partition, replicas=p.replicas, leader=p.leader,
                                      isr=p.isr, start_offset=start_offsets.get(p.key),
                                      end_offset=end_offsets.get(p.key), size_bytes=size_of.get(p.key))
                  for p in partitions]
    group_list = _consumer_groups(conn, end_offsets) if groups else []
    cluster = Cluster(brokers=tuple(all_brokers), partitions=tuple(partitions), cluster_id=cluster_id,
                      controller_id=controller_id, groups=tuple(group_list), taken_at=time.time())
    log.info("snapshot of %s: %d brokers (%d offline), %d topics, %d partitions, %d groups in %.2f s",
             cluster_id, len(all_brokers), len(offline_ids), len(names), len(partitions), len(group_list),
             time.monotonic() - started)
    return cluster


def _with_disk(broker: Broker, disk: tuple[int, int] | None) -> Broker:
    if disk is None:
        return broker
    return Broker(id=broker.id, host=broker.host, port=broker.port, rack=broker.rack, online=broker.online,
                  disk_total_bytes=disk[0], disk_usable_bytes=disk[1])


def _list_offsets(conn: KafkaConnection, partitions: list[PartitionAssignment]
                  ) -> tuple[dict[tuple[str, int], int], dict[tuple[str, int], int]]:
    """Earliest and latest offsets of every partition that has a leader."""
    led = [TopicPartition(p.topic, p.partition) for p in partitions if not p.offline]
    found: list[dict[tuple[str, int], int]] = []
    for spec in (OffsetSpec.earliest(), OffsetSpec.latest()):
        futures = conn.admin.list_offsets({tp: spec for tp in led}, request_timeout=conn.timeout_s)
        result = {}
        for tp, future in futures.items():
            try:
                result[(tp.topic, tp.partition)] = future.result(timeout=conn.timeout_s + 5).offset
            except (KafkaException, TimeoutError) as err:
                log.warning("no offset for %s-%d: %s", tp.topic, tp.partition, err)
        found.append(result)
    return found[0], found[1]


def _log_dir_sizes(conn: KafkaConnection, topics: dict[str, list[int]], brokers: list[int]
                   ) -> tuple[dict[tuple[str, int], int], dict[int, tuple[int, int]]]:
    """Largest replica size per partition, and (total, usable) disk bytes per broker."""
    try:
        answers = conn.legacy_admin().describe_log_dirs(topic_partitions=topics, brokers=brokers)
    except KafkaUnreachable:
        raise
    except Exception as err:
        raise KafkaOpsError(f"describe_log_dirs failed on {conn.bootstrap}: {err}") from err
    sizes: dict[tuple[str, int], int] = {}
    disks: dict[int, tuple[int, int]] = {}
    for answer in answers:
        total = usable = 0
        for log_dir in answer["log_dirs"]:
            if log_dir.get("error_code", 0) != 0:
                continue
            total += max(log_dir.get("total_bytes", 0), 0)
            usable += max(log_dir.get("usable_bytes", 0), 0)
            for topic in log_dir.get("topics", []):
                for part in topic["partitions"]:
                    if part.get("is_future_key"):
                        continue
                    key = (topic["name"], part["partition_index"])
                    sizes[key] = max(sizes.get(key, 0), part["partition_size"])
        disks[answer["broker"]] = (total, usable)
    return sizes, disks


def _consumer_groups(conn: KafkaConnection, end_offsets: Mapping[tuple[str, int], int]) -> list[ConsumerGroup]:
    listing = _result(conn.admin.list_consumer_groups(request_timeout=conn.timeout_s), conn, "consumer groups")
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


def create_topic(conn: KafkaConnection, name: str, partitions: int, replication_factor: int,
                 config: Mapping[str, str] | None = None) -> bool:
    """Create a topic; False when it exists already with the same partition count."""
    future = conn.admin.create_topics([NewTopic(name, partitions, replication_factor, config=dict(config or {}))],
                                      request_timeout=conn.timeout_s)[name]
    try:
        future.result(timeout=conn.timeout_s + 5)
        return True
    except KafkaException as err:
        if "TOPIC_ALREADY_EXISTS" in str(err) or "already exists" in str(err):
            existing = conn.admin.list_topics(topic=name, timeout=conn.timeout_s).topics[name]
            if len(existing.partitions) != partitions:
                raise KafkaOpsError(f"topic {name} exists with {len(existing.partitions)} partitions, not "
                                    f"{partitions}; use another name or delete it first") from err
            return False
        raise KafkaOpsError(f"cannot create topic {name} ({partitions} partitions, RF {replication_factor}) "
                            f"on {conn.bootstrap}: {err}") from err


def delete_topics(conn: KafkaConnection, names: Iterable[str]) -> None:
    futures = conn.admin.delete_topics(list(names), request_timeout=conn.timeout_s)
    for name, future in futures.items():
        try:
            future.result(timeout=conn.timeout_s + 5)
        except KafkaException as err:
            if "UNKNOWN_TOPIC" not in str(err):
                raise KafkaOpsError(f"cannot delete topic {name}: {err}") from err
