"""The planner on a cluster shaped like large real ones (heavy-tailed topics, uneven layout), at
a size unit tests can afford: every guarantee holds, and topics even out where that is feasible.
Timing is the benchmark's business (benchmarks/bench_planner_scale.py), not these tests'."""
from __future__ import annotations

import pytest

from kafkaops.model import Broker
from kafkaops.reassign.planner import Goals, plan_drain, plan_rebalance, plan_scale_out

from .clusters import assert_hard_goals, spread, uneven_cluster


@pytest.fixture(scope="module")
def one_rack():
    return uneven_cluster(5_000, 40, 3, 1)


@pytest.fixture(scope="module")
def three_racks():
    return uneven_cluster(5_000, 40, 3, 3)


def test_the_shape_is_uneven(one_rack):
    counts = one_rack.replicas_per_broker()
    assert spread(counts, one_rack.broker_ids) > 100
    assert len(one_rack.topics) > 100


def test_rebalance_evens_replicas_leaders_and_every_topic_without_racks(one_rack):
    """One rack: a topic two apart can always move or swap (see test_properties), so every topic
    ends within one; the search bounds do not bind on 40 brokers, so no note is due."""
    snapshot = one_rack.to_dict()
    plan = plan_rebalance(one_rack)
    assert one_rack.to_dict() == snapshot
    assert_hard_goals(one_rack, plan)
    after = plan.stats_after
    assert after.replica_spread <= 1 and after.leader_spread <= 1
    assert after.max_topic_spread <= 1, {t: s for t, s in after.topic_spread.items() if s > 1}
    assert plan.notes == ()
    assert plan.replica_moves >= plan.lower_bound


def test_scale_out_keeps_the_lower_bound_and_moves_onto_new_brokers_only(three_racks):
    added = [Broker(b, rack=f"r{b % 3}") for b in range(41, 45)]
    plan = plan_scale_out(three_racks, added)
    assert_hard_goals(three_racks, plan)
    assert plan.replica_moves <= plan.lower_bound  # racks of 14, 13 and 13 brokers may allow fewer
    assert {b for m in plan.moves for b in m.adding} <= {b.id for b in added}
    same_rack = [b.id for b in added if b.rack == "r2"]  # 41 and 44; racks of unequal size set the others' shares
    assert spread(plan.stats_after.replicas, same_rack) <= 1
    assert plan == plan_scale_out(three_racks, added)  # same input, same plan


def test_drain_and_rack_aware_rebalance_keep_the_hard_goals(three_racks):
    drained = plan_drain(three_racks, [1, 2])
    assert_hard_goals(three_racks, drained)
    assert drained.stats_after.replicas[1] == drained.stats_after.replicas[2] == 0
    rebalanced = plan_rebalance(three_racks)
    assert_hard_goals(three_racks, rebalanced)
    # RF 3 on 3 racks of 14, 13, 13 brokers: each rack holds a third, so brokers are even within their rack
    counts = rebalanced.stats_after.replicas
    for rack in ("r0", "r1", "r2"):
        assert spread(counts, [b.id for b in three_racks.brokers if b.rack == rack]) <= 1, rack


def test_without_the_topic_goal_the_rebalance_moves_the_minimum(one_rack):
    plan = plan_rebalance(one_rack, Goals(topic_spread=False))
    assert plan.replica_moves == plan.lower_bound
    assert plan.stats_after.replica_spread <= 1


def test_a_drain_alone_says_how_many_topics_stay_uneven_and_rebalance_after_evens_them(one_rack):
    alone = plan_drain(one_rack, [1, 2])
    uneven = sum(1 for s in alone.stats_after.topic_spread.values() if s > 1)
    assert uneven > 10
    assert any(n.startswith(f"per-topic spread: {uneven} of {len(one_rack.topics)} topics stay above one")
               for n in alone.notes), alone.notes
    evened = plan_drain(one_rack, [1, 2], rebalance_after=True)
    assert evened.stats_after.max_topic_spread <= 1, {t: s for t, s in evened.stats_after.topic_spread.items() if s > 1}
    assert evened.part_moves[0] == alone.part_moves[0]  # the drain's own moves, counted apart, are the same
    assert not any(n.startswith("per-topic spread") for n in evened.notes)
