"""The Kafka adapter's requests stay under the protocol's array bounds at a plan of more than a million
partitions (issue 34 item 5): Kafka 4.4's readers refuse an array of more than 1,000,000 elements
(``MessageUtil.MAX_ARRAY_LENGTH``), librdkafka an answer of more than 100,000 partitions of a topic.

Pure splitting: the admin clients here are fakes that only record what each call would send; no Kafka,
no librdkafka handle. Each test hands one adapter function 1,000,001 partitions (or topics) shaped the worst
way for its request (one topic's partitions array, or one partition per topic for the topics array) and
checks that every call names at most ``MAX_PARTITIONS_PER_REQUEST`` and all calls together name each once."""
from __future__ import annotations

import concurrent.futures
from collections import Counter
from types import SimpleNamespace
from typing import Any

import pytest

from kafkaops.errors import ConfigError
from kafkaops.platform.kafka import configs, metadata, offsets, reassignments, topics
from kafkaops.platform.kafka.connection import MAX_PARTITIONS_PER_REQUEST, request_slices

#: one more than Kafka 4.4 reads in one array
SIZE = 1_000_001
KAFKA_MAX_ARRAY_LENGTH = 1_000_000
LIBRDKAFKA_PARTITIONS_MAX = 100_000


def _done(value: Any) -> concurrent.futures.Future[Any]:
    future: concurrent.futures.Future[Any] = concurrent.futures.Future()
    future.set_result(value)
    return future


class _Admin:
    """confluent-kafka's AdminClient as far as the adapter calls it: each call's argument is kept, and the
    answer is a done future (one shared per call: a million futures would only cost memory)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[Any]]] = []

    def poll(self, _timeout: float) -> int:
        return 0

    def list_offsets(self, wanted: dict[Any, Any], **_: Any) -> dict[Any, Any]:
        self.calls.append(("list_offsets", list(wanted)))
        answer = _done(SimpleNamespace(offset=7))
        return dict.fromkeys(wanted, answer)

    def elect_leaders(self, _election: Any, partitions: list[Any] | None) -> Any:
        self.calls.append(("elect_leaders", partitions if partitions is not None else [None]))
        return _done(dict.fromkeys(partitions or []))

    def delete_records(self, partitions: list[Any], **_: Any) -> dict[Any, Any]:
        self.calls.append(("delete_records", list(partitions)))
        return dict.fromkeys(partitions, _done(None))

    def incremental_alter_configs(self, resources: list[Any], **_: Any) -> dict[Any, Any]:
        self.calls.append(("incremental_alter_configs", list(resources)))
        return dict.fromkeys(resources, _done(None))

    def alter_consumer_group_offsets(self, requests: list[Any], **_: Any) -> dict[str, Any]:
        (request,) = requests
        self.calls.append(("alter_consumer_group_offsets", list(request.topic_partitions)))
        return {request.group_id: _done(SimpleNamespace(topic_partitions=[
            SimpleNamespace(topic=tp.topic, partition=tp.partition, error=None) for tp in request.topic_partitions]))}


class _Legacy:
    """kafka-python's KafkaAdminClient as far as the adapter calls it."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def list_partition_reassignments(self, wanted: list[Any] | None) -> dict[Any, Any]:
        self.calls.append(("list_partition_reassignments", wanted))
        return {}

    @staticmethod
    def _process_alter_partition_reassignments_input(request: dict[Any, Any]) -> list[Any]:
        from kafka.admin import KafkaAdminClient

        return list(KafkaAdminClient._process_alter_partition_reassignments_input(request))

    @property
    def _manager(self) -> Any:
        return SimpleNamespace(run=self._controller)

    _send_request_to_controller = None  # the manager's run is given it; the fake's run answers for the controller

    def _controller(self, send: Any, request: Any, errors: Any) -> Any:
        """The controller's answer to an AlterPartitionReassignments request (the adapter builds kafka-python's
        request itself, to refuse replication-factor changes): every partition accepted."""
        from kafka.structs import TopicPartition as KafkaTopicPartition

        request.API_VERSION = 1
        self.calls.append(("alter_partition_reassignments",
                           [KafkaTopicPartition(t.name, p.partition_index) for t in request.topics for p in t.partitions]))
        return SimpleNamespace(responses=[SimpleNamespace(name=t.name, partitions=[
            SimpleNamespace(partition_index=p.partition_index, error_code=0) for p in t.partitions])
            for t in request.topics])

    def describe_log_dirs(self, topic_partitions: dict[str, list[int]], brokers: list[int]) -> list[dict[str, Any]]:
        self.calls.append(("describe_log_dirs", topic_partitions))
        return [{"broker": b, "log_dirs": [{"error_code": 0, "total_bytes": 100, "usable_bytes": 40, "topics": [
            {"name": t, "partitions": [{"partition_index": p, "partition_size": 1} for p in parts]}
            for t, parts in topic_partitions.items()]}]} for b in brokers]


class _Connection:
    """What the adapter's functions read of a KafkaConnection."""

    timeout_s = 1.0
    refused = None
    bootstrap = "fake:9092"
    name = "fake:9092"
    config: dict[str, str] = {}

    def __init__(self) -> None:
        self.admin = _Admin()
        self.legacy = _Legacy()

    def legacy_admin(self) -> _Legacy:
        return self.legacy

    def drop_legacy_admin(self) -> None:
        pass

    def probe_tls(self) -> None:
        pass


def _one_topic(n: int = SIZE) -> list[tuple[str, int]]:
    """The worst shape for a partitions array: every partition of one topic."""
    return [("t", p) for p in range(n)]


def _topic_each(n: int = SIZE) -> list[tuple[str, int]]:
    """The worst shape for a topics array: one partition per topic."""
    return [(f"t{i}", 0) for i in range(n)]


def _check(calls: list[list[Any]], expected: int) -> None:
    assert calls, "no request was sent"
    assert max(len(c) for c in calls) <= MAX_PARTITIONS_PER_REQUEST
    assert sum(len(c) for c in calls) == expected


def test_the_bound_is_well_under_kafkas_and_librdkafkas() -> None:
    assert MAX_PARTITIONS_PER_REQUEST <= LIBRDKAFKA_PARTITIONS_MAX // 2
    assert MAX_PARTITIONS_PER_REQUEST < KAFKA_MAX_ARRAY_LENGTH


@pytest.mark.slow
def test_request_slices_keep_order_and_cover_everything_once() -> None:
    items = list(range(SIZE))
    slices = request_slices(items)
    assert len(slices) == -(-SIZE // MAX_PARTITIONS_PER_REQUEST)
    assert max(len(s) for s in slices) == MAX_PARTITIONS_PER_REQUEST
    assert [x for s in slices for x in s] == items
    assert request_slices([]) == []
    with pytest.raises(ConfigError, match="at least 1"):
        request_slices(items, 0)


@pytest.mark.slow
@pytest.mark.parametrize("shape", [_one_topic, _topic_each])
def test_reassignments_are_submitted_in_slices(shape: Any) -> None:
    conn = _Connection()
    moves = dict.fromkeys(shape(), (1, 2, 3))
    reassignments.alter_partition_reassignments(conn, moves)  # type: ignore[arg-type]
    sent = [tps for name, tps in conn.legacy.calls if name == "alter_partition_reassignments"]
    _check(sent, SIZE)
    assert Counter((tp.topic, tp.partition) for tps in sent for tp in tps) == Counter(list(moves))


@pytest.mark.slow
def test_reassignments_in_flight_are_listed_in_slices() -> None:
    conn = _Connection()
    assert reassignments.list_partition_reassignments(conn, _topic_each()) == {}  # type: ignore[arg-type]
    _check([w for _, w in conn.legacy.calls], SIZE)
    conn = _Connection()
    reassignments.list_partition_reassignments(conn)  # type: ignore[arg-type]
    assert conn.legacy.calls == [("list_partition_reassignments", None)]  # the whole cluster: one request, no array
    conn = _Connection()
    assert reassignments.list_partition_reassignments(conn, []) == {}  # type: ignore[arg-type]
    assert conn.legacy.calls == []


@pytest.mark.slow
def test_preferred_leaders_are_elected_in_sorted_slices() -> None:
    conn = _Connection()
    interleaved = [(f"t{p % 2}", p // 2) for p in range(SIZE)]  # unsorted, two topics taking turns
    elected = reassignments.elect_preferred_leaders(conn, interleaved)  # type: ignore[arg-type]
    sent = [tps for _, tps in conn.admin.calls]
    _check(sent, SIZE)
    for tps in sent:  # sorted: librdkafka writes one topic entry per run of a topic, so at most two here
        keys = [(tp.topic, tp.partition) for tp in tps]
        assert keys == sorted(keys)
    assert sorted(elected) == sorted(interleaved)


@pytest.mark.slow
def test_offsets_are_listed_in_slices() -> None:
    conn = _Connection()
    partitions = [SimpleNamespace(topic=t, partition=p, offline=False) for t, p in _one_topic()]
    earliest, latest = offsets.list_offsets(conn, partitions)  # type: ignore[arg-type]
    assert len(earliest) == len(latest) == SIZE
    _check([tps for name, tps in conn.admin.calls if name == "list_offsets"], 2 * SIZE)


@pytest.mark.slow
def test_records_are_deleted_in_slices() -> None:
    conn = _Connection()
    topics.delete_records_before(conn, dict.fromkeys(_one_topic(), 5))  # type: ignore[arg-type]
    _check([tps for _, tps in conn.admin.calls], SIZE)


@pytest.mark.slow
def test_group_offsets_are_committed_in_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    probed: list[int] = []
    monkeypatch.setattr(offsets, "_group_coordinator_ready", lambda _c, _g, _t, parts, *_: probed.append(len(parts)))
    conn = _Connection()
    offsets.commit_group_offsets(conn, "g", "t", {p: 9 for p in range(SIZE)})  # type: ignore[arg-type]
    _check([tps for _, tps in conn.admin.calls], SIZE)
    assert probed == [MAX_PARTITIONS_PER_REQUEST]


@pytest.mark.slow
def test_topic_configs_are_changed_in_slices() -> None:
    conn = _Connection()
    changes = {f"t{i}": [configs.ConfigOp("retention.ms", "SET", "1")] for i in range(SIZE)}
    configs.incremental_alter_configs(conn, "topic", changes)  # type: ignore[arg-type]
    _check([rs for _, rs in conn.admin.calls], SIZE)


@pytest.mark.slow
@pytest.mark.parametrize("shape", [_one_topic, _topic_each])
def test_log_dirs_are_described_in_slices(shape: Any) -> None:
    conn = _Connection()
    sizes = metadata.replica_sizes(conn, shape(), [1])  # type: ignore[arg-type]
    assert len(sizes) == SIZE
    asked = [[(t, p) for t, parts in tps.items() for p in parts] for _, tps in conn.legacy.calls]
    _check(asked, SIZE)
    assert Counter(x for a in asked for x in a) == Counter(shape())


def test_log_dirs_with_no_partitions_still_read_the_disks() -> None:
    conn = _Connection()
    disk = metadata.LogDirs(total_bytes=100, usable_bytes=40)
    assert metadata._describe_log_dirs(conn, {}, [1, 2]) == ({}, {1: disk, 2: disk})  # type: ignore[arg-type]
    assert conn.legacy.calls == [("describe_log_dirs", {})]

