"""The plan as a value: Kafka JSON, diff, statistics, round trip, the cluster after."""
from __future__ import annotations

import json

import pytest

from kafkaops.model import Broker, Cluster, PartitionAssignment
from kafkaops.reassign.planner import Move, PlanInputError, ReassignmentPlan, plan_drain, plan_scale_out

from .clusters import round_robin, six_brokers_three_racks, skewed_four_brokers, three_brokers_one_rack


@pytest.fixture
def plan() -> ReassignmentPlan:
    return plan_scale_out(six_brokers_three_racks(sizes=True), [Broker(7, rack="a"), Broker(8, rack="b")])


def test_move_line_adding_and_removing():
    move = Move("orders", 3, (1, 2, 3), (1, 4, 3))
    assert move.line() == "orders-3: [1,2,3] -> [1,4,3]"
    assert move.adding == (4,) and move.removing == (2,) and not move.leader_changed


def test_kafka_json_lists_changed_partitions_only(plan):
    data = plan.to_kafka_json()
    assert data["version"] == 1
    assert [(p["topic"], p["partition"]) for p in data["partitions"]] == [(m.topic, m.partition) for m in plan.moves]
    assert all(set(p) == {"topic", "partition", "replicas"} for p in data["partitions"])
    with_dirs = plan.to_kafka_json(log_dirs=True)["partitions"][0]
    assert with_dirs["log_dirs"] == ["any"] * len(with_dirs["replicas"])
    assert [p["replicas"] for p in plan.rollback_kafka_json()["partitions"]] == [list(m.before) for m in plan.moves]


def test_diff_lines(plan):
    assert plan.diff() == tuple(f"{m.name}: [{','.join(map(str, m.before))}] -> [{','.join(map(str, m.after))}]"
                                for m in plan.moves)


def test_reorder_only_partitions_are_moves():
    parts = tuple(PartitionAssignment("t", p, (1, 2)) for p in range(4))
    plan = plan_scale_out(Cluster((Broker(1), Broker(2)), parts), [3])
    reorders = [m for m in plan.moves if not m.adding]
    assert reorders and all(sorted(m.before) == sorted(m.after) for m in reorders)


def test_stats(plan):
    before, after = plan.stats_before, plan.stats_after
    assert sum(before.replicas.values()) == sum(after.replicas.values()) == 54
    assert sum(after.leaders.values()) == 18
    assert sum(before.bytes.values()) == sum(after.bytes.values())
    assert after.replicas[7] == after.replicas[8] == 6
    assert set(after.topic_spread) == {"orders", "payments"}
    assert plan.table()[0].split() == ["broker", "replicas", "leaders", "bytes"]
    assert "7 (new)" in "\n".join(plan.table())


def test_json_round_trip(plan):
    data = json.loads(json.dumps(plan.to_dict()))
    again = ReassignmentPlan.from_dict(data)
    assert again == plan
    assert again.after == plan.after


def test_from_dict_rejects_garbage():
    with pytest.raises(PlanInputError, match="cannot read a reassignment plan"):
        ReassignmentPlan.from_dict({"kind": "drain"})


def test_after_applies_the_moves(plan):
    after = plan.after
    for m in plan.moves:
        p = after.partition(m.topic, m.partition)
        assert p.replicas == m.after and p.leader == m.after[0]
    assert after.replicas_per_broker() == plan.stats_after.replicas
    assert 7 in after.broker_ids


def test_plan_without_cluster_has_no_after():
    plan = plan_scale_out(three_brokers_one_rack(), [4])
    bare = ReassignmentPlan.from_dict({**plan.to_dict(), "cluster": None})
    with pytest.raises(PlanInputError, match="carries no cluster"):
        bare.after  # noqa: B018  (the property raises)


def test_summary_says_when_racks_leave_fewer_moves_than_the_replica_count_bound():
    """Three racks, RF 3, a fourth broker on rack a: every partition keeps one replica per rack, so
    brokers 1 and 4 share rack a's 3 replicas (1 move) although the count alone asks for 2. The
    summary says why the plan is below the bound, never that it is a lower bound."""
    cluster = round_robin(tuple(Broker(i, rack="abc"[i - 1]) for i in range(1, 4)), {"orders": 3}, 3)
    racked = plan_scale_out(cluster, [Broker(4, rack="a")])
    assert (racked.replica_moves, racked.lower_bound) == (1, 2)
    assert racked.summary().startswith("scale-out: 1 partition changes, 1 replica move (an even replica count "
                                       "would move 2 onto the new broker; rack-aware placement allows 1), ")
    assert "lower bound" not in racked.summary()
    free = plan_scale_out(three_brokers_one_rack(), [Broker(4)])
    assert free.replica_moves == free.lower_bound
    assert f"{free.replica_moves} replica moves (the fewest possible)," in free.summary()


def test_summary_of_a_drain_counts_the_drained_replicas_and_the_rebalance_after_apart():
    exact = plan_drain(six_brokers_three_racks(sizes=True), [5, 6])
    assert "18 replica moves (the 18 the drained brokers hold, no more)" in exact.summary()
    skewed = skewed_four_brokers()  # brokers 1 and 2 hold 8 replicas each, 3 and 4 none
    only = plan_drain(skewed, [1])  # what broker 1 holds, no cluster-wide evening (broker 2 keeps its 8)
    assert "8 replica moves (the 8 the drained broker holds, no more)" in only.summary()
    assert only.part_moves == (("drain", 8),) and only.stats_after.replicas[2] == 8
    evened = plan_drain(skewed, [1], rebalance_after=True)
    assert evened.part_moves == (("drain", 8), ("rebalance after", 2)) and evened.stats_after.replica_spread == 1
    assert "10 replica moves (the 8 the drained broker holds, no more; then 2 to even out the brokers that stay " \
        "(rebalance after))" in evened.summary()
    assert "0 replica moves (none needed)" in plan_drain(skewed, [4]).summary()
    assert "5 replica moves (the drained broker holds no replicas; then 5 to even out the brokers that stay " \
        "(rebalance after))" in plan_drain(skewed, [4], rebalance_after=True).summary()
    assert ReassignmentPlan.from_dict(evened.to_dict()).part_moves == evened.part_moves
