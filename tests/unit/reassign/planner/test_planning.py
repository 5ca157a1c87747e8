"""Scale-out, rebalance and drain on named clusters, and the errors of bad requests."""
from __future__ import annotations

import pytest

from kafkaops.model import Broker, Cluster, PartitionAssignment
from kafkaops.reassign.planner import (Goals, PlanInfeasible, PlanInputError, lower_bound_moves, plan_drain,
                              plan_rebalance, plan_scale_out)

from .clusters import (assert_hard_goals, final_assignment, six_brokers_three_racks, skewed_four_brokers,
                       three_brokers_one_rack)

NEW_RACKED = [Broker(7, rack="a"), Broker(8, rack="b"), Broker(9, rack="c")]


class TestScaleOut:
    def test_moves_exactly_the_lower_bound_onto_new_brokers_only(self):
        cluster = six_brokers_three_racks()
        plan = plan_scale_out(cluster, NEW_RACKED)
        assert plan.replica_moves == plan.lower_bound == lower_bound_moves(cluster, NEW_RACKED) == 18
        assert {b for m in plan.moves for b in m.adding} <= {7, 8, 9}
        assert_hard_goals(cluster, plan)

    def test_balances_replicas_leaders_and_topics(self):
        plan = plan_scale_out(six_brokers_three_racks(), NEW_RACKED)
        after = plan.stats_after
        assert after.replica_spread == 0 and after.leader_spread <= 1
        assert after.max_topic_spread <= 1

    def test_lower_bound_gives_new_brokers_the_floor_shares(self):
        cluster = three_brokers_one_rack()  # 12 replicas over 3 + 2 brokers -> 2 each for the new ones
        assert lower_bound_moves(cluster, [4, 5]) == 4
        plan = plan_scale_out(cluster, [4, 5])
        assert plan.replica_moves == 4
        assert plan.stats_after.replicas == {1: 3, 2: 3, 3: 2, 4: 2, 5: 2}

    def test_new_brokers_take_ceil_shares_only_when_existing_ones_cannot(self):
        cluster = Cluster((Broker(1),), (PartitionAssignment("t", 0, (1,)), PartitionAssignment("t", 1, (1,)),
                                         PartitionAssignment("t", 2, (1,))))
        assert lower_bound_moves(cluster, [2, 3, 4, 5]) == 2  # 3 replicas on 5 brokers: new get 1, 1, 0, 0

    def test_topics_limit_what_moves(self):
        plan = plan_scale_out(six_brokers_three_racks(), NEW_RACKED, topics=["payments"])
        assert {m.topic for m in plan.moves} == {"payments"}

    def test_rack_stays_spread_when_new_brokers_share_one_rack(self):
        cluster = six_brokers_three_racks()
        plan = plan_scale_out(cluster, [Broker(7, rack="a"), Broker(8, rack="a")])
        assert_hard_goals(cluster, plan)
        assert plan.replica_moves <= plan.lower_bound

    def test_sizes_pick_replicas_that_even_bytes(self):
        cluster = six_brokers_three_racks(sizes=True)
        plan = plan_scale_out(cluster, NEW_RACKED)
        blind = plan_scale_out(cluster, NEW_RACKED, Goals(bytes=False))
        assert plan.replica_moves == blind.replica_moves
        assert plan.stats_after.byte_spread <= blind.stats_after.byte_spread
        assert plan.bytes_to_move == sum(len(m.adding) * m.size_bytes for m in plan.moves)

    def test_registered_empty_broker_counts_as_new(self):
        cluster = three_brokers_one_rack()
        registered = Cluster(cluster.brokers + (Broker(4),), cluster.partitions)
        assert plan_scale_out(registered, [4]).moves == plan_scale_out(cluster, [4]).moves

    def test_excluded_new_broker_receives_nothing(self):
        plan = plan_scale_out(three_brokers_one_rack(), [4, 5], exclude=[5])
        assert all(5 not in m.after for m in plan.moves)


class TestRebalance:
    def test_moves_the_minimum_to_reach_within_one(self):
        cluster = skewed_four_brokers()  # 16 replicas: 8, 8, 0, 0 -> 4 each, 8 moves
        plan = plan_rebalance(cluster)
        assert plan.lower_bound == plan.replica_moves == 8
        assert plan.stats_after.replica_spread == 0
        assert plan.stats_after.leader_spread <= 1
        assert_hard_goals(cluster, plan)

    def test_balanced_cluster_gives_an_empty_plan(self):
        plan = plan_rebalance(six_brokers_three_racks())
        assert plan.moves == () and plan.diff() == ()

    def test_leaders_only_reorders(self):
        parts = tuple(PartitionAssignment("t", p, (1, 2, 3)) for p in range(6))
        plan = plan_rebalance(Cluster(tuple(Broker(i) for i in (1, 2, 3)), parts))
        assert plan.replica_moves == 0
        assert plan.stats_after.leaders == {1: 2, 2: 2, 3: 2}
        assert all(sorted(m.after) == sorted(m.before) for m in plan.moves)

    def test_excluded_broker_receives_nothing(self):
        plan = plan_rebalance(skewed_four_brokers(), exclude=[4])
        assert all(4 not in m.adding for m in plan.moves)
        assert plan.stats_after.replicas[4] == 0
        assert spread_of(plan.stats_after.replicas, [1, 2, 3]) <= 1

    def test_fixes_partitions_that_break_rack_spread(self):
        brokers = tuple(Broker(i, rack="ab"[i % 2]) for i in range(1, 5))
        cluster = Cluster(brokers, (PartitionAssignment("t", 0, (1, 3)), PartitionAssignment("t", 1, (2, 1))))
        plan = plan_rebalance(cluster)
        assert_hard_goals(cluster, plan)
        assert final_assignment(plan)[("t", 0)] != (1, 3)

    def test_a_chain_of_moves_where_racks_block_every_direct_one(self):
        """Broker 7 (rack r1) ends one short after the greedy pass: every partition a broker above
        target could give it already spans its racks through r1 or holds 7. A chain through a
        broker at target finishes it (found by the oracle-backed property test)."""
        brokers = tuple(Broker(i, rack=f"r{i % 3}") for i in range(1, 8))
        layout = {("t0", 0): (2, 4, 6), ("t0", 1): (5, 6, 4), ("t0", 2): (2, 4, 5), ("t1", 0): (3, 7),
                  ("t1", 1): (6, 5), ("t1", 2): (2, 4), ("t2", 0): (7, 1), ("t2", 1): (4, 1)}
        cluster = Cluster(brokers, tuple(PartitionAssignment(t, p, r) for (t, p), r in layout.items()))
        plan = plan_rebalance(cluster)
        assert_hard_goals(cluster, plan)
        assert plan.stats_after.replica_spread <= 1, plan.stats_after.replicas

    def test_swaps_even_topics_without_changing_broker_counts(self):
        """Counts already even (2 and 2), topics not: a swaps onto 2, b onto 1; two moves, no
        broker count changes. Without the topic goal the plan is empty (the count lower bound)."""
        parts = tuple(PartitionAssignment(t, p, (b,)) for t, b in (("a", 1), ("b", 2)) for p in range(2))
        cluster = Cluster((Broker(1), Broker(2)), parts)
        plan = plan_rebalance(cluster)
        assert plan.lower_bound == 0 and plan.replica_moves == 2
        assert plan.stats_after.replicas == {1: 2, 2: 2}
        assert plan.stats_after.topic_spread == {"a": 0, "b": 0}
        assert plan_rebalance(cluster, Goals(topic_spread=False)).moves == ()


def spread_of(counts, brokers):
    return max(counts[b] for b in brokers) - min(counts[b] for b in brokers)


class TestDrain:
    def test_moves_every_replica_off_and_no_more(self):
        cluster = three_brokers_one_rack()
        plan = plan_drain(cluster, [3])
        assert plan.stats_after.replicas[3] == 0
        assert plan.replica_moves == plan.lower_bound == 4

    def test_keeps_racks_when_the_rack_has_another_broker(self):
        cluster = six_brokers_three_racks()
        plan = plan_drain(cluster, [3])
        assert_hard_goals(cluster, plan)
        assert {b for m in plan.moves for b in m.adding} == {6}  # the only other rack-c broker

    def test_drain_onto_a_replacement_broker(self):
        cluster = six_brokers_three_racks()
        with_spare = Cluster(cluster.brokers + (Broker(7, rack="c"),), cluster.partitions)
        plan = plan_drain(with_spare, [3])
        assert plan.stats_after.replicas[3] == 0
        assert plan.stats_after.replicas[7] == plan.stats_after.replicas[6] == 9


class TestBadInput:
    def test_draining_a_whole_rack_that_rf_needs(self):
        cluster = six_brokers_three_racks()
        with pytest.raises(PlanInfeasible, match=r"cannot place orders-0, orders-1, orders-2, orders-3, orders-4: "
                                                  r"2 racks alive, replication factor 3 needs 3 after draining "
                                                  r"\[3, 6\] \(every broker of rack c\); add a rack or lower the RF "
                                                  r"\(13 more partitions fail the same way\)"):
            plan_drain(cluster, [3, 6])

    def test_rf_above_brokers_left(self):
        with pytest.raises(PlanInfeasible, match=r"replication factor 2 needs 2 brokers, 1 can hold replicas after "
                                                 r"draining \[1, 2\]; add brokers or lower the RF \(1 more partition "
                                                 r"fails the same way\)"):
            plan_drain(three_brokers_one_rack(), [1, 2])

    @pytest.mark.parametrize("call, message", [
        (lambda c: plan_scale_out(c, [3]), "broker 3 is already in the cluster and holds 4 replicas"),
        (lambda c: plan_scale_out(c, [4, 4]), r"name broker\(s\) \[4\] more than once"),
        (lambda c: plan_scale_out(c, [-1]), "is not a broker id"),
        (lambda c: plan_drain(c, [9]), r"cannot drain broker\(s\) \[9\]: not in the cluster"),
        (lambda c: plan_drain(c, []), "needs at least one broker"),
        (lambda c: plan_rebalance(c, exclude=[9]), r"cannot exclude broker\(s\) \[9\]"),
        (lambda c: plan_scale_out(c, [4], topics=["nope"]), r"topics \['nope'\] are not in the cluster"),
    ])
    def test_bad_ids(self, call, message):
        with pytest.raises(PlanInputError, match=message):
            call(three_brokers_one_rack())

    def test_partial_racks(self):
        with pytest.raises(PlanInputError, match=r"brokers \[1, 2, 3, 4, 5, 6\] have a rack but brokers \[7\] do not"):
            plan_scale_out(six_brokers_three_racks(), [7])

    def test_replica_on_unknown_broker(self):
        cluster = Cluster((Broker(1), Broker(2)), (PartitionAssignment("t", 0, (1, 5)),))
        with pytest.raises(PlanInputError, match="t-0 has a replica on broker 5, which is not in the cluster"):
            plan_rebalance(cluster)

    def test_everything_excluded(self):
        with pytest.raises(PlanInfeasible, match="no broker can receive replicas"):
            plan_rebalance(three_brokers_one_rack(), exclude=[1, 2, 3])


class TestValue:
    def test_input_is_not_changed_and_plans_repeat(self):
        cluster = six_brokers_three_racks(sizes=True)
        snapshot = cluster.to_dict()
        first = plan_scale_out(cluster, NEW_RACKED)
        assert cluster.to_dict() == snapshot
        assert plan_scale_out(cluster, NEW_RACKED) == first
