"""A scale-out brings each topic within one replica per broker where its rules allow (moves onto the new
brokers only, from brokers above their share, the fewest moves), and its note says why each other topic stays.

The explanation a topic left uneven must have is computed here from the cluster alone, not by the planner:
a broker at or below the even share holds it above the level of its least-holding old broker, or a rack's
old brokers hold more of it above that level than the rack's new brokers can take."""
from __future__ import annotations

import math
import re
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkaops.model import Broker, Cluster, PartitionAssignment
from kafkaops.reassign.planner import Goals, plan_scale_out
from kafkaops.reassign.planner.levels import REASONS

from kafkaops.reassign.planner.errors import PlanInfeasible

from .clusters import assert_hard_goals, clusters, final_assignment, uneven_cluster


def _explanation(cluster: Cluster, added: list[Broker], topic: str, taken: int) -> str | None:
    """Why no scale-out under the rules can bring ``topic`` within one, from the cluster alone and the
    replicas the new brokers take in all (``taken``, the plan's lower bound); None if nothing here forbids it."""
    old = list(cluster.broker_ids)
    count = Counter(b for p in cluster.partitions for b in p.replicas)
    share = math.ceil(sum(count.values()) / (len(old) + len(added)))
    held = Counter(b for p in cluster.partitions if p.topic == topic for b in p.replicas)
    level = min(held[b] for b in old)
    if any(held[b] > level + 1 and count[b] <= share for b in old):
        return "kept"
    excess = sum(max(0, held[b] - level - 1) for b in old)
    if excess > taken or level * len(added) > taken:
        return "level"  # more to give than the new brokers take in all
    rack_of = {b.id: b.rack for b in cluster.brokers}
    for rack in {b.rack for b in added}:
        on_rack = sum(max(0, held[b] - level - 1) for b in old if rack_of[b] == rack)
        if on_rack > (level + 1) * sum(1 for b in added if b.rack == rack):
            return "level"
    if level and sum(held[b] - level for b in old) < level * len(added):
        return "level"
    return None


def _uneven(plan) -> list[str]:
    return sorted(t for t, s in plan.stats_after.topic_spread.items() if s > 1)


@pytest.mark.parametrize("racks", [1, 3])
def test_every_topic_a_scale_out_leaves_uneven_has_a_reason_the_cluster_shows(racks):
    cluster = uneven_cluster(5_000, 40, 3, racks)
    added = [Broker(b, rack=f"r{b % racks}" if racks > 1 else None) for b in range(41, 45)]
    plan = plan_scale_out(cluster, added)
    assert_hard_goals(cluster, plan)
    assert plan.replica_moves <= plan.lower_bound
    assert {b for m in plan.moves for b in m.adding} <= {b.id for b in added}
    uneven = _uneven(plan)
    unexplained = [t for t in uneven if _explanation(cluster, added, t, plan.lower_bound) is None]
    assert not unexplained, unexplained[:10]
    worked = [t for t in cluster.topics if plan.stats_before.topic_spread[t] > 1 and _explanation(cluster, added, t, plan.lower_bound) is None]
    assert len(worked) >= 10, worked  # uneven before, levelable: the shape gives the leveling real work
    before = plan_scale_out(cluster, added, Goals(topic_spread=False))
    assert len(_uneven(before)) > len(uneven)  # without the topic goal, more stay uneven
    _assert_note_counts(plan, len(cluster.topics))


def _assert_note_counts(plan, total: int) -> None:
    """The plan's per-topic note counts every topic left above one, each under one reason."""
    uneven = _uneven(plan)
    notes = [n for n in plan.notes if n.startswith("per-topic spread")]
    if not uneven:
        assert not notes
        return
    [note] = notes
    assert f"{total - len(uneven)} of {total} topics within one replica per broker; {len(uneven)} stay above one" in note
    counted = sum(int(n) for n in re.findall(r"(\d+) because", note))
    leftover = re.search(r"(\d+) leveled onto the new brokers, then given more", note)
    assert counted + (int(leftover.group(1)) if leftover else 0) == len(uneven), note


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(rack_valid=True), st.integers(1, 3))
def test_on_any_cluster_a_scale_out_moves_the_fewest_onto_new_brokers_and_counts_every_uneven_topic(cluster, k):
    racks = sorted({b.rack for b in cluster.brokers}, key=str)
    added = [Broker(max(cluster.broker_ids) + j + 1, rack=racks[j % len(racks)]) for j in range(k)]
    try:
        plan = plan_scale_out(cluster, added)
    except PlanInfeasible:
        return
    assert_hard_goals(cluster, plan)
    assert plan.replica_moves <= plan.lower_bound
    assert {b for m in plan.moves for b in m.adding} <= {b.id for b in added}
    _assert_note_counts(plan, len(cluster.topics))


def _three_old_one_new() -> tuple[Cluster, list[Broker]]:
    """Brokers 1-3 (RF 1, no racks): broker 1 holds 9 replicas, 2 of them of ``hot``; broker 2 holds 3, two of
    them of ``cold``; broker 3 holds 4. The even share over four brokers is 4: broker 1 gives, broker 2 cannot."""
    parts = [PartitionAssignment("hot", p, (1,)) for p in range(2)]
    parts += [PartitionAssignment("cold", p, (2,)) for p in range(2)]
    parts += [PartitionAssignment("filler", p, (b,)) for p, b in enumerate([1] * 7 + [2] + [3] * 4)]
    return Cluster(tuple(Broker(b) for b in range(1, 4)), tuple(parts)), [Broker(4)]


def test_a_topic_held_by_a_broker_above_its_share_is_leveled_onto_the_new_broker():
    cluster, added = _three_old_one_new()
    plan = plan_scale_out(cluster, added)
    assert plan.replica_moves == plan.lower_bound == 4
    after = Counter(b for (t, _), reps in final_assignment(plan).items() if t == "hot" for b in reps)
    assert after == {1: 1, 4: 1}  # hot: 2/0/0 -> 1/0/0/1
    assert plan_scale_out(cluster, added, Goals(topic_spread=False)).stats_after.topic_spread["hot"] == 2


def test_a_topic_held_by_a_broker_below_its_share_stays_and_the_note_says_why():
    cluster, added = _three_old_one_new()
    plan = plan_scale_out(cluster, added)
    assert plan.stats_after.topic_spread["cold"] == 2  # broker 2 (3 replicas, share 4) keeps both
    note = next(n for n in plan.notes if n.startswith("per-topic spread"))
    assert f"1 because {REASONS['kept']}" in note
    assert _explanation(cluster, added, "cold", plan.lower_bound) == "kept"
