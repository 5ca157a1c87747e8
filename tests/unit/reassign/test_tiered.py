"""Tiered storage in the plan (pure): a tiered topic's new replica copies the leader's local log, so its
moves are sized by the leader replica's bytes, others by the largest replica's; the plan, its record
value, the approval and the engine's moves say so. Measured on a real broker in
tests/integration/reassign/test_tiered.py."""
from __future__ import annotations

import copy
import dataclasses

import pytest

from kafkaops.model import Broker, Cluster, ModelError, Move, PartitionAssignment, Reassignment, TopicStorage
from kafkaops.platform import render
from kafkaops.platform.kafka import configs
from kafkaops.reassign import approval, engine, steps
from kafkaops.reassign.planner import PlanInputError, plan_drain
from kafkaops.reassign.planner.plan import ReassignmentPlan

TIERED = TopicStorage("logs", remote=True, local_retention_bytes=1 << 20, local_retention_ms=-2)
PLAIN = TopicStorage("orders")


def cluster() -> Cluster:
    """Brokers 1-4; logs (tiered) and orders, two partitions each at RF 2. Of logs, the leader's local log
    is smaller than its follower's (the follower has not deleted the segments the leader has)."""
    brokers = tuple(Broker(i, rack="abcd"[i - 1]) for i in (1, 2, 3, 4))
    parts = (PartitionAssignment("logs", 0, (1, 2), leader=1, isr=(1, 2), size_bytes=9_000, leader_size_bytes=2_000),
             PartitionAssignment("logs", 1, (2, 1), leader=2, isr=(2, 1), size_bytes=8_000, leader_size_bytes=8_000),
             PartitionAssignment("orders", 0, (1, 2), leader=1, isr=(1, 2), size_bytes=5_000, leader_size_bytes=4_000),
             PartitionAssignment("orders", 1, (2, 1), leader=2, isr=(2, 1), size_bytes=6_000))
    return Cluster(brokers=brokers, partitions=parts)


def test_a_topics_storage_reads_its_configs_and_keeps_kafkas_defaults_for_what_is_missing() -> None:
    assert TopicStorage.from_configs("logs", {"remote.storage.enable": "true", "local.retention.bytes": "1048576",
                                              "local.retention.ms": "-1"}) == TopicStorage("logs", True, 1 << 20, -1)
    assert TopicStorage.from_configs("orders", {"remote.storage.enable": "false"}) == PLAIN
    assert TopicStorage.from_configs("orders", {}) == TopicStorage("orders", False, -2, -2)
    with pytest.raises(ModelError, match=r"topic logs: local.retention.bytes='lots' is not a number"):
        TopicStorage.from_configs("logs", {"local.retention.bytes": "lots"})
    assert TopicStorage.from_dict(TIERED.to_dict()) == TIERED


def test_a_new_replica_of_a_tiered_partition_copies_the_leaders_local_log_others_the_largest_replica() -> None:
    tiered = cluster().with_storage([TIERED, PLAIN])
    assert [(p.name, p.remote_storage, p.copy_bytes) for p in tiered.partitions] == [
        ("logs-0", True, 2_000), ("logs-1", True, 8_000), ("orders-0", False, 5_000), ("orders-1", False, 6_000)]
    # the leader's size unknown: the largest replica's, as before
    unknown = PartitionAssignment("logs", 0, (1, 2), leader=1, size_bytes=9_000, remote_storage=True)
    assert unknown.copy_bytes == 9_000
    move = tiered.partition("logs", 0).move_to((3, 2))
    assert (move.tiered, move.size_bytes, move.adding, move.bytes) == (True, 2_000, (3,), 2_000)
    assert tiered.partition("orders", 0).move_to((3, 4), before=(1, 2)).bytes == 10_000


def test_marking_storage_leaves_the_cluster_as_it_was_and_other_topics_alone() -> None:
    base = cluster()
    kept = copy.deepcopy(base)
    marked = base.with_storage([TIERED])
    assert base == kept and not any(p.remote_storage for p in base.partitions)
    assert {p.name for p in marked.partitions if p.remote_storage} == {"logs-0", "logs-1"}
    assert marked.with_storage([TIERED]) is marked and base.with_storage([PLAIN]) is base  # nothing to change
    assert marked.with_storage([TopicStorage("logs")]) == base  # remote storage turned off again
    assert Cluster.from_dict(marked.to_dict()) == marked
    # a snapshot stored before keeps its shape: neither key when unknown or off
    assert "remote_storage" not in base.to_dict()["partitions"][0]
    assert "leader_size_bytes" not in base.to_dict()["partitions"][3]


def test_a_plan_sizes_tiered_moves_by_the_leaders_local_log_once_the_storage_is_read() -> None:
    base = cluster()
    kept = copy.deepcopy(base)
    plain = plan_drain(base, [1])
    plan = plain.with_storage([TIERED, PLAIN])
    assert base == kept  # the input is never changed
    assert plan_drain(base, [1]).with_storage([PLAIN, TIERED]) == plan  # same input, same plan
    assert [m.after for m in plan.moves] == [m.after for m in plain.moves]  # the same moves, sized anew
    sizes = {m.name: (m.tiered, m.size_bytes) for m in plan.moves}
    assert sizes == {"logs-0": (True, 2_000), "logs-1": (True, 8_000), "orders-0": (False, 5_000),
                     "orders-1": (False, 6_000)}
    # before the storage was read, every move copied the largest replica's bytes
    assert plain.bytes_to_move == 9_000 + 8_000 + 5_000 + 6_000 and not plain.tiered_moves
    assert plan.bytes_to_move == 2_000 + 8_000 + 5_000 + 6_000
    assert [m.name for m in plan.tiered_moves] == ["logs-0", "logs-1"]
    assert plan.tiered_note() == ("2 of 4 moving partitions tiered (remote storage on): their new replicas copy "
                                  "the leader's local log only, 9.8 KiB of the 20.5 KiB")
    assert "; 2 of 4 moving partitions tiered" in plan.summary() and "tiered" not in plain.summary()
    # the record's value: read back alike, with the topics' storage
    again = ReassignmentPlan.from_dict(plan.to_dict())
    assert again == plan and again.storage == (TIERED, PLAIN) and again.tiered_moves == plan.tiered_moves
    assert "tiered" not in plain.moves[2].to_dict() and plan.moves[0].to_dict()["tiered"] is True
    assert Move.from_dict({k: v for k, v in plan.moves[0].to_dict().items() if k != "tiered"}).tiered is False


def test_a_plan_without_its_cluster_cannot_be_sized_by_the_leaders() -> None:
    plan = ReassignmentPlan.from_dict({**plan_drain(cluster(), [1]).to_dict(), "cluster": None})
    with pytest.raises(PlanInputError, match="carries no cluster"):
        plan.with_storage([TIERED])


def test_the_approval_says_how_many_moving_partitions_are_tiered_and_counts_their_local_logs() -> None:
    params = steps.OperationParams(kind="drain", drain_brokers=(1,))
    plan = plan_drain(cluster(), [1]).with_storage([TIERED, PLAIN])
    text = approval.approval_markdown(plan, params)
    assert ("**Tiered storage** 2 of the 4 moving partitions are of 1 topic with remote storage on "
            "(remote.storage.enable): a new replica copies only the leader's local log, 9.8 KiB of the 20.5 KiB "
            "to copy, and the bytes and the ETA count that; their segments in remote storage are not copied. "
            "Local retention (local.retention.bytes, local.retention.ms): logs: 1.0 MiB, its retention.ms.") in text
    assert "| logs-0 | 1, 2 | " in text and "| 2.0 KiB (local log, tiered) |" in text
    assert approval.tiered_part(plan_drain(cluster(), [1])) == []
    flows = approval.plan_traffic(plan, params)
    assert sum(flows.bytes_in.values()) == plan.bytes_to_move == 21_000


def test_one_sizing_reads_the_copied_topics_storage_through_the_connection_it_is_given(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """steps.size_moves: the plan step's (ctx.connect) and kafkaops plan's live (tests/unit/cli/test_plan.py)."""
    opened: list[str] = []
    asked: list[set[str]] = []

    class Conn:
        def __enter__(self) -> Conn:
            opened.append("open")
            return self

        def __exit__(self, *exc: object) -> None:
            opened.append("closed")

    def describe_topic_storage(conn: object, topics: set[str]) -> dict[str, TopicStorage]:
        asked.append(set(topics))
        return {s.topic: s for s in (TIERED, PLAIN) if s.topic in topics}

    monkeypatch.setattr(configs, "describe_topic_storage", describe_topic_storage)
    plan = plan_drain(cluster(), [1])
    assert steps.size_moves(plan, Conn) == plan.with_storage([TIERED, PLAIN])
    assert opened == ["open", "closed"] and asked == [{"logs", "orders"}]
    # a plan whose moves copy nothing (leader-only changes) opens no connection
    leaders_only = dataclasses.replace(plan, moves=tuple(m for m in plan.moves if not m.adding))
    assert steps.size_moves(leaders_only, Conn) is leaders_only and opened == ["open", "closed"]


def test_the_engine_sizes_the_moves_it_observes_by_what_a_new_replica_copies() -> None:
    tiered = cluster().with_storage([TIERED])
    desired = {("logs", 0): (3, 2), ("orders", 0): (3, 2)}
    assert [(m.tiered, m.bytes) for m in engine.moves_for(tiered, desired)] == [(True, 2_000), (False, 5_000)]
    done, resumed, pending, conflicts = engine.classify(tiered, {}, desired)
    assert [(m.name, m.tiered, m.size_bytes) for m in pending] == [("logs-0", True, 2_000), ("orders-0", False, 5_000)]
    # the progress counts an added replica up to its copy, the leader's local log
    progress = engine.measure(pending, tiered.with_assignments({("orders", 0): (3, 2)}),
                              {("logs", 0): Reassignment("logs", 0, (3, 2, 1), adding=(3,), removing=(1,))},
                              {("logs", 0, 3): 1_500})
    assert (progress.bytes_done, progress.bytes_total) == (5_000 + 1_500, 7_000)



def test_the_record_shows_the_tiered_partitions_apart() -> None:
    facts = dict(render.plan_facts({"moves": 4, "bytes_to_move": 21_000, "tiered_moves": 2, "tiered_bytes": 10_000}))
    assert facts["tiered partitions that move (local log only)"] == "2, 9.8 KiB"
    assert "tiered partitions that move (local log only)" not in dict(render.plan_facts({"tiered_moves": 0}))
