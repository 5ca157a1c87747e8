"""The cluster as a value: brokers, partition assignments, offsets, sizes, consumer lag, where topics keep
their data (:class:`TopicStorage`, tiered storage), and the moves that change it (:class:`Move` planned,
:class:`Reassignment` in flight).

Frozen dataclasses, no I/O. ``kafkaops.platform.kafka.metadata.snapshot`` builds a :class:`Cluster` from a
live cluster; the planner builds one from Kafka's reassignment JSON. Everything else reads these.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from kafkaops.errors import KafkaOpsError, UnknownTopic

#: A partition by name: ``(topic, partition)``, as Kafka's clients call it.
TopicPartition = tuple[str, int]


class ModelError(KafkaOpsError):
    """Input that cannot describe a Kafka cluster."""


@dataclass(frozen=True, order=True)
class Broker:
    """A broker as the controller knows it. ``online`` is False for a broker that replicas
    name but that is not registered (fenced, stopped or gone)."""

    id: int
    host: str | None = None
    port: int | None = None
    rack: str | None = None
    online: bool = True
    disk_total_bytes: int | None = None
    disk_usable_bytes: int | None = None


@dataclass(frozen=True)
class TopicStorage:
    """Where a topic keeps its data (KIP-405), as its configs say: ``remote`` is ``remote.storage.enable``;
    with it on, segments copied to remote storage leave the brokers' disks once past
    ``local_retention_bytes`` / ``local_retention_ms`` (-2: the topic's retention.bytes / retention.ms,
    -1: unlimited). A new replica of a tiered topic copies the leader's local log only."""

    topic: str
    remote: bool = False
    local_retention_bytes: int = -2
    local_retention_ms: int = -2

    @classmethod
    def from_configs(cls, topic: str, configs: Mapping[str, str | None]) -> TopicStorage:
        """From a topic's config values (``remote.storage.enable``, ``local.retention.bytes``,
        ``local.retention.ms``, as DescribeConfigs gives them); a key missing keeps Kafka's default."""
        def number(key: str) -> int:
            value = configs.get(key)
            try:
                return int(value) if value not in (None, "") else -2
            except ValueError as err:
                raise ModelError(f"topic {topic}: {key}={value!r} is not a number; Kafka gives an integer") from err

        return cls(topic, str(configs.get("remote.storage.enable") or "false").strip().lower() == "true",
                   number("local.retention.bytes"), number("local.retention.ms"))

    def to_dict(self) -> dict[str, Any]:
        return {"topic": self.topic, "remote": self.remote, "local_retention_bytes": self.local_retention_bytes,
                "local_retention_ms": self.local_retention_ms}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TopicStorage:
        return cls(str(data["topic"]), bool(data.get("remote", False)), int(data.get("local_retention_bytes", -2)),
                   int(data.get("local_retention_ms", -2)))


@dataclass(frozen=True)
class PartitionAssignment:
    """One partition: its replicas (preferred leader first), leader, ISR and, when known,
    start and end offsets and on-disk size (the largest replica's, in bytes; for a tiered topic the
    brokers' disks hold only the local log, and so does this) and the leader replica's size
    (``leader_size_bytes``). ``remote_storage``: its topic has remote storage on (:class:`TopicStorage`,
    set by :meth:`Cluster.with_storage`), so a new replica copies only the leader's local log."""

    topic: str
    partition: int
    replicas: tuple[int, ...]
    leader: int | None = None
    isr: tuple[int, ...] = ()
    start_offset: int | None = None
    end_offset: int | None = None
    size_bytes: int | None = None
    leader_size_bytes: int | None = None
    remote_storage: bool = False

    def __post_init__(self) -> None:
        if self.partition < 0:
            raise ModelError(f"{self.topic}-{self.partition}: a partition number cannot be negative")
        if not self.replicas:
            raise ModelError(f"{self.topic}-{self.partition}: no replicas; every partition needs at least one")
        if len(set(self.replicas)) != len(self.replicas):
            raise ModelError(f"{self.topic}-{self.partition}: replicas {list(self.replicas)} name a broker twice")

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def topic_partition(self) -> TopicPartition:
        return (self.topic, self.partition)

    @property
    def replication_factor(self) -> int:
        return len(self.replicas)

    @property
    def under_replicated(self) -> bool:
        return len(self.isr) < len(self.replicas)

    @property
    def offline(self) -> bool:
        return self.leader is None or self.leader < 0

    @property
    def records(self) -> int | None:
        if self.start_offset is None or self.end_offset is None:
            return None
        return self.end_offset - self.start_offset

    @property
    def copy_bytes(self) -> int | None:
        """What a new replica copies: for a tiered partition the leader's local log (a follower may still
        hold segments the leader has deleted; remote segments are not copied), else the partition's size
        (the largest replica's). None when unknown."""
        if self.remote_storage and self.leader_size_bytes is not None:
            return self.leader_size_bytes
        return self.size_bytes

    def move_to(self, after: Iterable[int], before: Iterable[int] | None = None) -> Move:
        """The move of this partition to ``after`` (from its replicas, or ``before``), sized by :attr:`copy_bytes`."""
        return Move(self.topic, self.partition, self.replicas if before is None else tuple(before), tuple(after),
                    self.copy_bytes, tiered=self.remote_storage)


def _brokers(replicas: Iterable[int]) -> str:
    return "[" + ",".join(str(b) for b in replicas) + "]"


@dataclass(frozen=True)
class Move:
    """One partition's change of replicas, ``before`` to ``after`` (preferred leader first): what
    a plan proposes and what a reassignment runs. A pure reorder is a move that copies nothing.
    ``size_bytes`` is what each new replica copies, None when unknown: the partition's size before the
    move, or with ``tiered`` (its topic has remote storage on) the leader's local log
    (:attr:`PartitionAssignment.copy_bytes`)."""

    topic: str
    partition: int
    before: tuple[int, ...]
    after: tuple[int, ...]
    size_bytes: int | None = None
    tiered: bool = False

    @property
    def topic_partition(self) -> TopicPartition:
        return (self.topic, self.partition)

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def adding(self) -> tuple[int, ...]:
        """Brokers that receive a copy of the partition."""
        return tuple(b for b in self.after if b not in self.before)

    @property
    def removing(self) -> tuple[int, ...]:
        """Brokers that drop their copy."""
        return tuple(b for b in self.before if b not in self.after)

    @property
    def brokers(self) -> frozenset[int]:
        """The brokers that gain or lose a replica."""
        return frozenset(self.adding + self.removing)

    @property
    def bytes(self) -> int:
        """Bytes to copy: the partition's size (0 when unknown) for each replica added."""
        return (self.size_bytes or 0) * len(self.adding)

    @property
    def leader_changed(self) -> bool:
        return self.before[0] != self.after[0]

    def line(self) -> str:
        """E.g. ``orders-3: [1,2,3] -> [1,4,3]``."""
        return f"{self.name}: {_brokers(self.before)} -> {_brokers(self.after)}"

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"topic": self.topic, "partition": self.partition, "before": list(self.before),
                                "after": list(self.after), "size_bytes": self.size_bytes}
        if self.tiered:  # the shape moves were stored in before, unless tiered
            data["tiered"] = True
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Move:
        return cls(data["topic"], int(data["partition"]), tuple(data["before"]), tuple(data["after"]),
                   data.get("size_bytes"), bool(data.get("tiered", False)))


@dataclass(frozen=True)
class Reassignment:
    """A reassignment in flight, as Kafka lists it. ``replicas`` is the union Kafka keeps while it
    copies: the target first, then the replicas being removed."""

    topic: str
    partition: int
    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]

    @property
    def topic_partition(self) -> TopicPartition:
        return (self.topic, self.partition)

    @property
    def target(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.removing)

    @property
    def original(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.adding)


@dataclass(frozen=True)
class GroupPartitionLag:
    topic: str
    partition: int
    committed: int | None
    end_offset: int | None

    @property
    def lag(self) -> int | None:
        if self.end_offset is None:
            return None
        return self.end_offset - (self.committed if self.committed is not None and self.committed >= 0 else 0)


@dataclass(frozen=True)
class ConsumerGroup:
    group_id: str
    state: str
    members: int
    partitions: tuple[GroupPartitionLag, ...] = ()

    @property
    def total_lag(self) -> int:
        return sum(p.lag or 0 for p in self.partitions)


@dataclass(frozen=True)
class Cluster:
    """An immutable picture of a cluster at one moment."""

    brokers: tuple[Broker, ...]
    partitions: tuple[PartitionAssignment, ...]
    cluster_id: str | None = None
    controller_id: int | None = None
    groups: tuple[ConsumerGroup, ...] = ()
    taken_at: float | None = None
    # None only until __post_init__ builds it (and in `replace(..., _index=None)`, which rebuilds it)
    _index: Mapping[tuple[str, int], PartitionAssignment] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        ids = [b.id for b in self.brokers]
        dupes = sorted(i for i, n in Counter(ids).items() if n > 1)
        if dupes:
            raise ModelError(f"broker ids {dupes} appear more than once; each broker id must be unique")
        index: dict[tuple[str, int], PartitionAssignment] = {}
        for p in self.partitions:
            if p.topic_partition in index:
                raise ModelError(f"partition {p.name} appears twice; list each partition once")
            index[p.topic_partition] = p
        object.__setattr__(self, "brokers", tuple(sorted(self.brokers)))
        object.__setattr__(self, "partitions", tuple(sorted(self.partitions, key=lambda p: p.topic_partition)))
        object.__setattr__(self, "_index", index)

    # -- lookups ---------------------------------------------------------------------------
    @property
    def broker_ids(self) -> tuple[int, ...]:
        return tuple(b.id for b in self.brokers)

    @property
    def online_broker_ids(self) -> tuple[int, ...]:
        return tuple(b.id for b in self.brokers if b.online)

    @property
    def offline_broker_ids(self) -> tuple[int, ...]:
        return tuple(b.id for b in self.brokers if not b.online)

    def broker(self, broker_id: int) -> Broker:
        for b in self.brokers:
            if b.id == broker_id:
                return b
        raise ModelError(f"broker {broker_id} is not in the cluster; brokers are {list(self.broker_ids)}")

    @property
    def topics(self) -> tuple[str, ...]:
        return tuple(sorted({p.topic for p in self.partitions}))

    def partition(self, topic: str, partition: int) -> PartitionAssignment:
        assert self._index is not None  # __post_init__ built it
        try:
            return self._index[(topic, partition)]
        except KeyError as err:
            if topic not in self.topics:
                raise UnknownTopic(f"topic {topic!r} does not exist; the cluster has {len(self.topics)} "
                                   f"topics: {', '.join(self.topics[:20])}") from err
            count = len(self.partitions_of(topic))
            raise ModelError(f"partition {topic}-{partition} does not exist; {topic} has partitions "
                             f"0..{count - 1}") from err

    def partitions_of(self, topic: str) -> tuple[PartitionAssignment, ...]:
        found = tuple(p for p in self.partitions if p.topic == topic)
        if not found:
            raise UnknownTopic(f"topic {topic!r} does not exist; the cluster has {len(self.topics)} topics: "
                               f"{', '.join(self.topics[:20]) or '(none)'}")
        return found

    def group(self, group_id: str) -> ConsumerGroup:
        for g in self.groups:
            if g.group_id == group_id:
                return g
        raise ModelError(f"consumer group {group_id!r} not found; groups are {[g.group_id for g in self.groups]}")

    # -- health ------------------------------------------------------------------------------
    @property
    def under_replicated(self) -> tuple[PartitionAssignment, ...]:
        return tuple(p for p in self.partitions if p.under_replicated)

    @property
    def offline_partitions(self) -> tuple[PartitionAssignment, ...]:
        return tuple(p for p in self.partitions if p.offline)

    @property
    def racks(self) -> tuple[str, ...]:
        return tuple(sorted({b.rack for b in self.brokers if b.rack is not None}))

    # -- load ----------------------------------------------------------------------------------
    def replicas_per_broker(self) -> dict[int, int]:
        counts = dict.fromkeys(self.broker_ids, 0)
        for p in self.partitions:
            for r in p.replicas:
                counts[r] = counts.get(r, 0) + 1
        return counts

    def leaders_per_broker(self, *, preferred: bool = False) -> dict[int, int]:
        """Leaders per broker: the current leaders, or with ``preferred`` the first replicas."""
        counts = dict.fromkeys(self.broker_ids, 0)
        for p in self.partitions:
            leader = p.replicas[0] if preferred else p.leader
            if leader is not None and leader >= 0:
                counts[leader] = counts.get(leader, 0) + 1
        return counts

    def bytes_per_broker(self) -> dict[int, int]:
        counts = dict.fromkeys(self.broker_ids, 0)
        for p in self.partitions:
            for r in p.replicas:
                counts[r] = counts.get(r, 0) + (p.size_bytes or 0)
        return counts

    # -- derived values -----------------------------------------------------------------------
    def with_assignments(self, replicas: Mapping[tuple[str, int], Iterable[int]]) -> Cluster:
        """The cluster after a reassignment: new replica lists, leaders at the preferred replica."""
        updated = []
        for p in self.partitions:
            if p.topic_partition in replicas:
                new = tuple(replicas[p.topic_partition])
                p = replace(p, replicas=new, leader=new[0], isr=new)
            updated.append(p)
        return replace(self, partitions=tuple(updated), _index=None)

    def with_storage(self, storage: Iterable[TopicStorage]) -> Cluster:
        """The cluster with each named topic's partitions marked tiered or not (``remote_storage``) as its
        :class:`TopicStorage` says; other topics as they were. Pure: this cluster is not changed."""
        remote = {s.topic: s.remote for s in storage}
        if not any(p.topic in remote and p.remote_storage != remote[p.topic] for p in self.partitions):
            return self
        return replace(self, partitions=tuple(replace(p, remote_storage=remote[p.topic]) if p.topic in remote else p
                                              for p in self.partitions), _index=None)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("_index", None)
        for p in data["partitions"]:  # the shape snapshots were stored in before, unless known
            if not p["remote_storage"]:
                del p["remote_storage"]
            if p["leader_size_bytes"] is None:
                del p["leader_size_bytes"]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Cluster:
        try:
            return cls(
                brokers=tuple(Broker(**b) for b in data["brokers"]),
                partitions=tuple(PartitionAssignment(**{**p, "replicas": tuple(p["replicas"]),
                                                        "isr": tuple(p.get("isr", ()))})
                                 for p in data["partitions"]),
                cluster_id=data.get("cluster_id"), controller_id=data.get("controller_id"),
                groups=tuple(ConsumerGroup(g["group_id"], g["state"], g["members"],
                                           tuple(GroupPartitionLag(**x) for x in g.get("partitions", ())))
                             for g in data.get("groups", ())),
                taken_at=data.get("taken_at"))
        except (KeyError, TypeError) as err:
            raise ModelError(f"cannot read a cluster from this dict: {err}; expected the shape of "
                             "Cluster.to_dict()") from err
