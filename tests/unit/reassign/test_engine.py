"""The pure steps of kafkaops.reassign.engine: refusals, classification, batching, throttles, progress."""
from __future__ import annotations

import pytest

from kafkaops.platform.admin import Reassignment
from kafkaops.errors import KafkaOpsError
from kafkaops.reassign.engine import (
    FOLLOWER_REPLICAS,
    LEADER_REPLICAS,
    Executor,
    InvalidReassignment,
    PartitionMove,
    Progress,
    ThrottleRecord,
    classify,
    measure,
    normalize,
    plan_batches,
    problems,
    throttle_entries,
)
from kafkaops.model import Broker, Cluster, PartitionAssignment

CLUSTER = Cluster(brokers=tuple(Broker(i) for i in (1, 2, 3, 4)) + (Broker(9, online=False),),
                  partitions=(PartitionAssignment("orders", 0, (1, 2, 3), size_bytes=1000),
                              PartitionAssignment("orders", 1, (2, 3, 1), size_bytes=2000),
                              PartitionAssignment("orders", 2, (3, 1, 2), size_bytes=3000)))


@pytest.mark.parametrize(("options", "message"), [
    ({"throttle_bytes_per_s": 0}, "throttle_bytes_per_s is 0; give a positive rate"),
    ({"throttle_bytes_per_s": -5}, "throttle_bytes_per_s is -5"),
    ({"throttle_bytes_per_s": 10, "max_moves_per_broker": 0}, "max_moves_per_broker is 0; give 1 or more"),
    ({"throttle_bytes_per_s": 10, "max_moves_total": 0}, "max_moves_total is 0"),
])
def test_bad_parameters_are_refused_before_touching_the_cluster(options: dict, message: str) -> None:
    with pytest.raises(InvalidReassignment, match=message) as caught:
        Executor(None, {("orders", 0): (1, 2, 3)}, **options)  # type: ignore[arg-type]
    assert isinstance(caught.value, KafkaOpsError)
    assert "nothing was changed" in str(caught.value)


def test_a_desired_map_of_the_wrong_shape_is_refused() -> None:
    with pytest.raises(InvalidReassignment, match="'orders-0'.*give e.g.") as caught:
        normalize({"orders-0": (1, 2)})  # type: ignore[dict-item]
    assert caught.value.__cause__ is not None
    assert normalize({("orders", "1"): ["4", 2]}) == {("orders", 1): (4, 2)}


def test_problems_name_the_partition_the_numbers_and_a_fix() -> None:
    found, first = problems(CLUSTER, {("orders", 7): (1, 2), ("orders", 0): (1, 1, 2), ("orders", 1): (2, 5, 9),
                                      ("orders", 2): ()})
    assert found == [
        "partition orders-7 does not exist; orders has partitions 0..2",
        "orders-0: replicas [1, 1, 2] name broker(s) [1] more than once; list each broker once",
        "orders-1: replicas [2, 5, 9] name broker(s) [5, 9] that are not registered; registered brokers are "
        "[1, 2, 3, 4]",
        "orders-2: empty replica list; give at least one broker id"]
    assert isinstance(first, KafkaOpsError)


def test_classify_splits_done_in_flight_pending_and_conflicting() -> None:
    in_flight = {("orders", 1): Reassignment("orders", 1, (4, 3, 1, 2), adding=(4,), removing=(2,)),
                 ("orders", 2): Reassignment("orders", 2, (3, 1, 4, 2), adding=(4,), removing=(2,))}
    desired = {("orders", 0): (1, 2, 3), ("orders", 1): (4, 3, 1), ("orders", 2): (1, 3, 4)}
    done, resumed, pending, conflicts = classify(CLUSTER, in_flight, desired)
    assert done == (("orders", 0),)
    assert resumed == (PartitionMove("orders", 1, (3, 1, 2), (4, 3, 1), 2000),)
    assert pending == ()
    assert conflicts == ["orders-2: a reassignment to [3, 1, 4] is in flight, not the plan's [1, 3, 4]; wait for it "
                         "to finish or cancel it with kafkaops.reassign.engine.cancel(conn, [('orders', 2)])"]
    _, _, pending, _ = classify(CLUSTER, {}, {("orders", 2): (4, 1, 2)})
    assert pending == (PartitionMove("orders", 2, (3, 1, 2), (4, 1, 2), 3000),)


def test_a_move_knows_what_it_adds_removes_and_copies() -> None:
    move = PartitionMove("orders", 0, (1, 2, 3), (4, 2, 5), 100)
    assert (move.adding, move.removing, move.brokers, move.bytes) == ((4, 5), (1, 3), frozenset({1, 3, 4, 5}), 200)
    reorder = PartitionMove("orders", 0, (1, 2, 3), (3, 2, 1), 100)
    assert (reorder.brokers, reorder.bytes) == (frozenset(), 0)


def test_batches_respect_the_per_broker_and_total_caps() -> None:
    moves = [PartitionMove("t", i, (1, 2), (1, 3 + i % 3), size_bytes=i) for i in range(12)]
    batches = plan_batches(moves, max_moves_per_broker=2, max_moves_total=5)
    assert sorted(k for b in batches for k in b.keys) == [("t", i) for i in range(12)]
    for b in batches:
        assert len(b.moves) <= 5
        assert max(b.moves_per_broker().values()) <= 2
    assert [b.index for b in batches] == list(range(1, len(batches) + 1))
    # broker 2 loses a replica in every move: at most 2 per batch, so 6 batches
    assert len(batches) == 6
    assert plan_batches(moves, max_moves_per_broker=100, max_moves_total=100)[0].keys == tuple(("t", i) for i in range(12))


def test_throttles_follow_kafkas_tool_existing_replicas_lead_adding_ones_follow() -> None:
    brokers, entries = throttle_entries([PartitionMove("orders", 0, (1, 2, 3), (1, 4, 3)),
                                         PartitionMove("orders", 2, (3, 1, 2), (4, 1, 5)),
                                         PartitionMove("orders", 1, (2, 3, 1), (3, 2, 1))])  # reorder: no copy
    assert brokers == (1, 2, 3, 4, 5)
    assert entries == {("orders", FOLLOWER_REPLICAS): ["0:4", "2:4", "2:5"],
                       ("orders", LEADER_REPLICAS): ["0:1", "0:2", "0:3", "2:3", "2:1", "2:2"]}


def test_a_throttle_record_merges_keeping_the_older_value_to_restore_and_travels_as_a_dict() -> None:
    first = ThrottleRecord(rates=((1, "leader.replication.throttled.rate", "777"),),
                           replicas=(("orders", LEADER_REPLICAS, ("0:1",)),))
    second = ThrottleRecord(rates=((1, "leader.replication.throttled.rate", "50000"),
                                   (2, "leader.replication.throttled.rate", None)),
                            replicas=(("orders", LEADER_REPLICAS, ("0:1", "1:2")),))
    merged = first.merged(second)
    assert merged.rates == ((1, "leader.replication.throttled.rate", "777"),
                            (2, "leader.replication.throttled.rate", None))
    assert merged.replicas == (("orders", LEADER_REPLICAS, ("0:1", "1:2")),)
    assert (merged.brokers, merged.topics) == ((1, 2), ("orders",))
    assert ThrottleRecord.from_dict(merged.to_dict()) == merged
    assert ThrottleRecord().empty and not merged.empty
    with pytest.raises(InvalidReassignment, match="ThrottleRecord.to_dict"):
        ThrottleRecord.from_dict({"rates": [[1]]})


def test_progress_counts_done_and_in_flight_bytes() -> None:
    moves = [PartitionMove("orders", 0, (1, 2, 3), (1, 2, 3), 1000),      # no-op, done
             PartitionMove("orders", 1, (2, 3, 1), (4, 3, 1), 2000),      # in flight, half copied
             PartitionMove("orders", 2, (3, 1, 2), (4, 5, 2), 3000)]      # pending, 2 replicas to add
    in_flight = {("orders", 1): Reassignment("orders", 1, (4, 3, 1, 2), (4,), (2,))}
    p = measure(moves, CLUSTER, in_flight, {("orders", 1, 4): 1000}, elapsed_s=10.0)
    assert (p.partitions_done, p.partitions_total, p.partitions_in_flight) == (1, 3, 1)
    assert (p.bytes_done, p.bytes_total) == (1000, 8000)
    assert p.rate_bytes_per_s == 100.0 and p.eta_s == 70.0 and not p.done
    assert str(p) == "1/3 partitions done, 1 moving, 0.0/0.0 MB, 0.00 MB/s, ETA 70 s"
    assert Progress(3, 3, 0, 10, 10).eta_s == 0.0 and Progress(0, 3, 0, 0, 10).eta_s is None
