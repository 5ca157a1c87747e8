"""The tail copy (kafkaops.rekey.migration.Tail) on a real broker: it follows a source while a producer
writes, each part checked before its commit; a copy killed in the middle of a part resumes exactly once
(its transaction is aborted, the process after it fences it); a part that finds a foreign record in the
target is aborted and says so; the rekey is the contract's (the merged order for a key in two source
partitions)."""
from __future__ import annotations

import itertools
import json
import threading
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from confluent_kafka import Producer

from kafkaops.platform import keyrules, waits
from kafkaops.platform.kafka import connection, records, topics
from kafkaops.platform.partitioner import partition_for
from kafkaops.rekey import backfill, migration, tail
from kafkaops.rekey.backfill import LINEAGE_HEADER, BackfillPlan, parse_lineage
from kafkaops.rekey.records import PassResult
from tests.conftest import wait_for

pytestmark = pytest.mark.integration


@dataclass
class Audit:
    notes: list[dict[str, Any]] = field(default_factory=list)

    def append(self, kind: str, **data: Any) -> None:
        self.notes.append({"kind": kind, **data})


@dataclass
class Ctx:
    """What the tail uses of an OperationContext: the cluster's client config and the record."""

    conn_config: dict[str, str]
    audit: Audit = field(default_factory=Audit)


class Writer:
    """Writes JSON records ``{"customer": c<i % 40>, "n": i}`` keyed ``r<i>`` (so one customer spans the
    source's partitions) until stopped; acks=all, idempotent."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic, self.count, self.stop = topic, 0, threading.Event()
        self.producer = Producer(connection.client_config({"bootstrap.servers": bootstrap, "acks": "all",
                                                           "enable.idempotence": True, "linger.ms": 5}))
        self.thread = threading.Thread(target=self.run, name="tail-test-writer", daemon=True)

    def run(self) -> None:
        for i in itertools.count():
            if self.stop.is_set():
                return
            value = json.dumps({"customer": f"c{i % 40}", "n": i}).encode()
            self.producer.produce(self.topic, value, f"r{i}".encode())
            self.count += 1
            self.producer.poll(0)
            self.stop.wait(0.0005)

    def __enter__(self) -> Writer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(10)
        assert waits.close_producer(self.producer, waits.Deadline(30)) == 0


@pytest.fixture
def source(rekey_cluster, request) -> Iterator[tuple[dict[str, str], BackfillPlan]]:
    """A 3-partition source with 300 records (the 'backfill', copied as one tail part here) and a
    6-partition target; the plan rekeys by ``customer``."""
    name = f"tail.{request.node.name[5:40]}".replace("[", "").replace("]", "")
    config = {"bootstrap.servers": rekey_cluster.bootstrap}
    with connection.connect(config) as conn:
        topics.create_topic(conn, name, 3, 1)
        topics.create_topic(conn, f"{name}.v2", 6, 1)
        topics.create_topic(conn, backfill.BackfillPlan(name, ((0, 0, 0),), f"{name}.v2", 6).dead_letter_topic, 1, 1)
    yield config, BackfillPlan(name, ((0, 0, 0), (1, 0, 0), (2, 0, 0)), f"{name}.v2", 6, key_rule="field:customer")


def ends(config: dict[str, str], topic: str) -> dict[int, int]:
    return {p: e for p, (_, e) in records.end_offsets(config, topic).items()}


def assert_exactly_once_in_key_order(config: dict[str, str], plan: BackfillPlan) -> list[records.Record]:
    """Every source record once in the target (read_committed), on its customer's partition, and each
    customer's records in the order of their ``n`` (the writer's order: one producer, so per-key)."""
    copied = records.read_topic(config, plan.target_topic)
    source = records.read_topic(config, plan.source_topic)
    lineages = [parse_lineage(r.header(LINEAGE_HEADER) or b"") for r in copied]
    assert len(lineages) == len(set(lineages)) == len(source), (len(lineages), len(set(lineages)), len(source))
    by_key: dict[bytes, list[int]] = defaultdict(list)
    for r in copied:
        assert r.key == keyrules.extract_key(None, r.value, plan.rule) and r.partition == partition_for(r.key, 6)
        by_key[r.key].append(json.loads(r.value or b"{}")["n"])
    assert all(ns == sorted(ns) for ns in by_key.values())
    return copied


def test_the_tail_follows_a_written_source_part_by_part_and_copies_every_record_once_in_key_order(source) -> None:
    config, plan = source
    ctx = Ctx(config)
    policy = migration.LivePolicy(quiesce="manual", catch_up_lag_records=500, catch_up_budget_s=60)
    with Writer(config["bootstrap.servers"], plan.source_topic) as writer:
        wait_for(lambda: writer.count > 3000, timeout=30, what="3,000 records written")
        caught = migration.follow(ctx, plan, policy)
        assert caught.tail is not None and caught.tail.parts >= 1 and caught.lag <= 500
    still = ends(config, plan.source_topic)
    quiesced = migration.Quiesced("manual", 0.0, 0.0, still)
    empty = backfill.IntegrityReport(source_records=0, target_records=0, dead_letters=0, expected_dead_letters=0,
                                     source_checksum="0" * 16, output_checksum="0" * 16, partitions=(),
                                     source_topic=plan.source_topic, target_topic=plan.target_topic,
                                     target_partitions=6, failures=())
    done = migration.final_part(ctx, caught, quiesced, PassResult(None, empty.to_dict()))
    whole = backfill.IntegrityReport.from_dict(done.integrity or {})
    assert whole.ok and whole.source_records == writer.count == whole.target_records, whole.totals()
    assert done.target_ends == ends(config, plan.target_topic)
    assert_exactly_once_in_key_order(config, plan)
    progress = [n for n in ctx.audit.notes if "tail" in n]
    assert progress and "records/s" in progress[-1]["text"]


def test_a_tail_killed_in_the_middle_of_a_part_resumes_exactly_once(source, monkeypatch) -> None:
    """The first copy writes a part and dies before its commit (its process gone, the transaction open);
    the next copy with the same transactional id fences it, aborts the part and copies it again: once.
    Parts of at most 600 records here, each cut at one moment in every partition (a customer's records
    span the source's partitions)."""
    monkeypatch.setattr(migration, "PART_RECORDS", 600)
    config, plan = source
    with Writer(config["bootstrap.servers"], plan.source_topic) as writer:
        wait_for(lambda: writer.count > 2000, timeout=30, what="2,000 records written")
    ctx = Ctx(config)
    dead = migration.Tail(ctx, plan)
    dead.part(ends(config, plan.source_topic))  # a first part (capped), committed
    assert 0 < sum(dead.position.values()) <= 600
    committed = dict(dead.position)
    end = ends(config, plan.source_topic)
    dead.copy.begin()
    dead.copy.write(tail.rekey_part(plan, dead.copy.read_source(dead.position, end)))  # written, never committed
    try:
        with migration.Tail(ctx, plan) as after:  # the worker's retry
            assert after.position == committed
            after.run(lambda _p: None, stop_at=end)
            assert after.position == end
        with pytest.raises(Exception) as fenced:  # the old process cannot commit what it wrote
            dead.copy.commit(end)
        assert "fenced" in str(fenced.value).lower() or "FENCED" in str(fenced.value), str(fenced.value)
    finally:
        dead.copy.close()
    copied = assert_exactly_once_in_key_order(config, plan)
    assert len(copied) == writer.count


def test_a_part_that_finds_a_foreign_record_in_the_target_is_aborted_and_says_so(source) -> None:
    config, plan = source
    with Writer(config["bootstrap.servers"], plan.source_topic) as writer:
        wait_for(lambda: writer.count > 500, timeout=30, what="500 records written")
    ctx = Ctx(config)
    with migration.Tail(ctx, plan) as t:
        while t.position != {p: 50 for p in range(3)}:  # the first part is small (no record size known yet)
            assert t.part({p: 50 for p in range(3)}) > 0
        before = ends(config, plan.target_topic)
        stranger = Producer(connection.client_config(config))
        stranger.produce(plan.target_topic, b"{}", b"x", partition=0)  # a producer already switched, too early
        assert waits.close_producer(stranger, waits.Deadline(10)) == 0
        with pytest.raises(backfill.BackfillError) as refused:
            t.part(ends(config, plan.source_topic))
        assert "failed its check" in str(refused.value) and "not of this part" in str(refused.value)
        assert "It was aborted" in str(refused.value)
        assert t.position == {p: 50 for p in range(3)}
    committed = records.read_topic(config, plan.target_topic)
    assert len(committed) == 150 + 1  # the first part and the stranger's record; nothing of the aborted part
    assert sum(before.values()) + 1 <= sum(ends(config, plan.target_topic).values())
