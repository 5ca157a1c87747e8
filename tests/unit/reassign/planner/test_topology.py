"""Targets and rack handling."""
from __future__ import annotations

from kafkaops.model import Broker, Cluster, PartitionAssignment
from kafkaops.reassign.planner import Goals, plan_drain
from kafkaops.reassign.planner.topology import even_split, replica_targets, resolve_topology, scale_out_shares

from .clusters import six_brokers_three_racks


def test_even_split_gives_extras_to_the_fullest():
    assert even_split(10, [1, 2, 3], {1: 0, 2: 9, 3: 1}) == {1: 3, 2: 4, 3: 3}
    assert even_split(0, [], {}) == {}


def test_scale_out_shares():
    assert scale_out_shares(12, 3, [4, 5]) == {4: 2, 5: 2}
    assert scale_out_shares(14, 3, [4, 5]) == {4: 3, 5: 2}  # 14 = 5*2 + 4: 3 extras to the 3 old, 1 spills
    assert scale_out_shares(19, 3, [5, 4]) == {4: 4, 5: 3}


def test_rack_forced_targets_when_a_rack_is_small():
    cluster = six_brokers_three_racks()
    base, topo = resolve_topology(cluster, Goals(), drain=[3])
    targets = replica_targets(base, topo, base.replicas_per_broker(), 54)
    assert targets[6] == 18  # rack c keeps one replica of each of the 18 partitions on one broker
    assert sum(targets.values()) == 54


def test_rack_unaware_goals_ignore_racks():
    cluster = six_brokers_three_racks()
    plan = plan_drain(cluster, [3, 6], Goals(rack_aware=False))
    assert plan.stats_after.replicas[3] == plan.stats_after.replicas[6] == 0


def test_offline_broker_keeps_its_replicas_and_receives_none():
    brokers = (Broker(1), Broker(2), Broker(3, online=False), Broker(4))
    parts = tuple(PartitionAssignment("t", p, (1, 3)) for p in range(4))
    _, topo = resolve_topology(Cluster(brokers, parts), Goals())
    assert topo.fixed == (3,) and 3 not in topo.eligible
