"""An in-memory cluster behind :mod:`kafkaops.platform.kafka`'s functions, for the engine's loops
without Kafka: replica lists, reassignments that finish after a few listings, dynamic configs,
and brokers that are down or refuse config changes."""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from kafkaops.errors import KafkaOpsError, KafkaUnreachable, UnknownTopic
from kafkaops.model import Broker, Cluster, TopicPartition, PartitionAssignment, Reassignment, TopicStorage
from kafkaops.platform.kafka import configs, connection, metadata, reassignments


class _Connection:
    bootstrap = "fake:9092"

    def __enter__(self) -> _Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def close(self) -> None:
        pass


@dataclass
class FakeKafka:
    """``replicas`` per partition, brokers ``online`` (others named by replicas are down),
    ``configs[(resource, name)]`` the dynamic configs. A submitted move is in flight for
    ``polls`` listings of reassignments, then done."""

    replicas: dict[TopicPartition, tuple[int, ...]]
    online: set[int]
    sizes: dict[TopicPartition, int] = field(default_factory=dict)
    configs: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)
    disks: dict[int, tuple[int, int]] = field(default_factory=dict)  # broker -> (log-dir bytes total, usable)
    polls: int = 1
    cluster_id: str = "fake-cluster"
    refusing: set[int] = field(default_factory=set)  # brokers whose config changes fail
    unreachable: bool = False
    submitted: list[dict[TopicPartition, tuple[int, ...] | None]] = field(default_factory=list)
    config_calls: list[tuple[str, dict[str, list[tuple[str, str, str | None]]]]] = field(default_factory=list)
    _moving: dict[TopicPartition, tuple[tuple[int, ...], tuple[int, ...], int]] = field(default_factory=dict)

    def install(self, monkeypatch: pytest.MonkeyPatch) -> FakeKafka:
        for module, names in ((connection, ("connect",)),
                              (metadata, ("describe_cluster", "snapshot", "replica_sizes", "replicas_and_log_dirs")),
                              (reassignments, ("list_partition_reassignments", "alter_partition_reassignments")),
                              (configs, ("describe_configs", "incremental_alter_configs",
                                         "describe_topic_storage"))):
            for name in names:
                monkeypatch.setattr(module, name, getattr(self, name))
        return self

    def conn(self) -> Any:
        return _Connection()

    # -- the Kafka adapter's functions-------------------------------------------------------------
    def connect(self, source: Any, *, timeout_s: float = 10.0) -> Any:
        return _Connection()

    def describe_cluster(self, conn: Any) -> tuple[str, int | None, list[Broker]]:
        if self.unreachable:
            raise KafkaUnreachable("no answer from Kafka at fake:9092")
        return self.cluster_id, 1, [Broker(b) for b in sorted(self.online)]

    def snapshot(self, conn: Any, *, topics: Iterable[str] | None = None, **_: bool) -> Cluster:
        known = {t for t, _ in self.replicas}
        missing = sorted(set(topics or ()) - known)
        if missing:
            raise UnknownTopic(f"topic(s) {', '.join(missing)} do not exist on fake:9092")
        parts = []
        for key, replicas in sorted(self.replicas.items()):
            if topics is not None and key[0] not in topics:
                continue
            if key in self._moving:
                original, target, _ = self._moving[key]
                replicas = target + tuple(b for b in original if b not in target)
            live = tuple(b for b in replicas if b in self.online)
            parts.append(PartitionAssignment(key[0], key[1], replicas, leader=live[0] if live else None, isr=live,
                                             size_bytes=self.sizes.get(key)))
        named = {b for p in parts for b in p.replicas} | self.online
        brokers = tuple(Broker(b, online=b in self.online, disk_total_bytes=self.disks.get(b, (None, None))[0],
                               disk_usable_bytes=self.disks.get(b, (None, None))[1]) for b in sorted(named))
        return Cluster(brokers=brokers, partitions=tuple(parts), cluster_id=self.cluster_id)

    def list_partition_reassignments(self, conn: Any, partitions: Iterable[TopicPartition] | None = None
                                     ) -> dict[TopicPartition, Reassignment]:
        for key, (original, target, left) in list(self._moving.items()):
            if left <= 0:
                self.replicas[key] = target
                del self._moving[key]
            else:
                self._moving[key] = (original, target, left - 1)
        wanted = None if partitions is None else set(partitions)
        found = {}
        for key, (original, target, _) in sorted(self._moving.items()):
            if wanted is None or key in wanted:
                removing = tuple(b for b in original if b not in target)
                found[key] = Reassignment(key[0], key[1], target + removing,
                                          tuple(b for b in target if b not in original), removing)
        return found

    def alter_partition_reassignments(self, conn: Any, reassignments: Mapping[TopicPartition, Iterable[int] | None]) -> None:
        self.submitted.append({k: None if r is None else tuple(r) for k, r in reassignments.items()})
        for key, target in reassignments.items():
            if target is None:
                self._moving.pop(key, None)
            else:
                self._moving[key] = (self.replicas[key], tuple(target), self.polls)

    def describe_configs(self, conn: Any, resource: str, names: Iterable[str | int], *,
                         keys: Iterable[str] | None = None) -> dict[str, dict[str, str]]:
        wanted = None if keys is None else set(keys)
        found = {}
        for name in (str(n) for n in names):
            if resource == "topic" and name not in {t for t, _ in self.replicas}:
                raise UnknownTopic(f"topic {name} does not exist on fake:9092")
            if resource == "broker" and int(name) not in self.online:
                raise KafkaUnreachable(f"broker {name} does not answer")
            found[name] = {k: v for k, v in self.configs.get((resource, name), {}).items()
                           if wanted is None or k in wanted}
        return found

    def describe_topic_storage(self, conn: Any, topics: Iterable[str]) -> dict[str, TopicStorage]:
        """Each topic's storage from its configs here (remote storage off unless set)."""
        values = self.describe_configs(conn, "topic", sorted(set(topics)))
        return {name: TopicStorage.from_configs(name, found) for name, found in values.items()}

    def incremental_alter_configs(self, conn: Any, resource: str, changes: Mapping[str | int, Iterable[Any]]) -> None:
        self.config_calls.append((resource, {str(n): [(op.key, op.op, op.value) for op in ops]
                                             for n, ops in changes.items()}))
        for name, ops in changes.items():
            if resource == "broker" and (int(name) not in self.online or int(name) in self.refusing):
                raise KafkaOpsError(f"1 of 1 config change(s) failed: broker {name} does not answer")
            values = self.configs.setdefault((resource, str(name)), {})
            for op in ops:
                items = [x for x in values.get(op.key, "").split(",") if x]
                if op.op == "SET":
                    values[op.key] = op.value
                elif op.op == "DELETE":
                    values.pop(op.key, None)
                elif op.op == "APPEND":
                    values[op.key] = ",".join(items + [x for x in op.value.split(",") if x not in items])
                else:  # SUBTRACT
                    values[op.key] = ",".join(x for x in items if x not in op.value.split(","))

    def replica_sizes(self, conn: Any, partitions: Iterable[TopicPartition], brokers: Iterable[int]
                      ) -> dict[tuple[str, int, int], int]:
        return {}

    def replicas_and_log_dirs(self, conn: Any, partitions: Iterable[TopicPartition], brokers: Iterable[int]
                              ) -> tuple[dict[tuple[str, int, int], int], dict[int, metadata.LogDirs]]:
        return {}, {}

    # -- what a test asks ------------------------------------------------------------------------
    def throttles(self) -> dict[tuple[str, str], dict[str, str]]:
        """Every throttle config set now, by resource."""
        return {res: {k: v for k, v in values.items() if "throttled" in k}
                for res, values in self.configs.items() if any("throttled" in k for k in values)}
