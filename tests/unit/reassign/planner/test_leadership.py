"""Preferred leaders as even as the replicas allow (issue 34 item 2), checked against independent
searches: a brute force over every choice of leaders on small clusters, and a chain search on larger ones."""
from __future__ import annotations

import itertools
import random
from collections import Counter, deque
from collections.abc import Mapping, Sequence

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkaops.model import Broker, Cluster, PartitionAssignment
from kafkaops.reassign.planner import Goals, plan_drain, plan_rebalance, plan_scale_out
from kafkaops.reassign.planner.leadership import balance_leaders, best_leader_counts

from .clusters import clusters, final_assignment

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def counts_of(reps: Sequence[Sequence[int]], brokers: Sequence[int]) -> dict[int, int]:
    count = dict.fromkeys(brokers, 0)
    for r in reps:
        if r[0] in count:
            count[r[0]] += 1
    return count


def improvable(reps: Sequence[Sequence[int]], brokers: Sequence[int]) -> list[tuple[int, int]]:
    """(giver, taker) pairs where leadership could pass along a chain of partitions from a broker to one
    leading two or more fewer: a breadth-first search from each broker over "leads a partition the next
    one also holds"."""
    members = set(brokers)
    count = counts_of(reps, brokers)
    links: dict[int, set[int]] = {b: set() for b in brokers}
    for r in reps:
        if r[0] in members:
            links[r[0]].update(b for b in r[1:] if b in members)
    found = []
    for u in brokers:
        seen, queue = {u}, deque([u])
        while queue:
            b = queue.popleft()
            for v in links[b] - seen:
                seen.add(v)
                queue.append(v)
        lowest = min(seen, key=lambda b: count[b])
        if count[u] - count[lowest] >= 2:
            found.append((u, lowest))
    return found


def most_even(reps: Sequence[Sequence[int]], brokers: Sequence[int]) -> list[int]:
    """The most even leader counts any choice of leaders gives: every choice tried, compared by their
    counts sorted from the highest (the smallest such vector is the most even one)."""
    best: list[int] | None = None
    for leaders in itertools.product(*reps):
        counts = Counter(dict.fromkeys(brokers, 0))
        counts.update(leaders)
        vector = sorted(counts.values(), reverse=True)
        if best is None or vector < best:
            best = vector
    assert best is not None
    return best


@FAST
@given(st.integers(2, 5), st.integers(1, 7), st.integers(2, 3), st.randoms(use_true_random=False))
def test_leaders_are_the_most_even_any_choice_gives(brokers: int, partitions: int, rf: int, rand: random.Random):
    ids = list(range(1, brokers + 1))
    rf = min(rf, brokers)
    reps = [rand.sample(ids, rf) for _ in range(partitions)]
    before = [list(r) for r in reps]
    balance_leaders(reps, ids, ())
    assert [sorted(r) for r in reps] == [sorted(r) for r in before]  # only the order changes
    assert sorted(counts_of(reps, ids).values(), reverse=True) == most_even(before, ids)


def test_brokers_holding_few_replicas_lead_them_all_and_the_others_share_the_rest_within_one():
    # brokers 5 and 6 hold 2 replicas each; 1-4 hold the rest of 40 partitions at RF 2
    rand = random.Random(7)
    reps = [[5, 1], [6, 2], [5, 3], [6, 4]] + [rand.sample([1, 2, 3, 4], 2) for _ in range(36)]
    balance_leaders(reps, [1, 2, 3, 4, 5, 6], ())
    count = counts_of(reps, [1, 2, 3, 4, 5, 6])
    assert count[5] == 2 and count[6] == 2
    assert sorted(count[b] for b in (1, 2, 3, 4)) == [9, 9, 9, 9]
    best = best_leader_counts({1: 20, 2: 20, 3: 20, 4: 20, 5: 2, 6: 2}, 40)
    assert best == {1: (9, 10), 2: (9, 10), 3: (9, 10), 4: (9, 10), 5: (2, 2), 6: (2, 2)}


def test_brokers_that_share_their_partitions_only_with_each_other_split_them():
    # 1 and 2 hold partitions only together; 3 and 4 hold the rest: an even share of 30 each is out of reach
    reps = [[1, 2]] * 10 + [[3, 4]] * 110
    reps = [list(r) for r in reps]
    result = balance_leaders(reps, [1, 2, 3, 4], ())
    assert counts_of(reps, [1, 2, 3, 4]) == {1: 5, 2: 5, 3: 55, 4: 55}
    assert improvable(reps, [1, 2, 3, 4]) == []
    assert (result.fewest, result.most, result.leading_all_they_hold, result.off_level) == (5, 55, 0, 4)
    assert result.note() == (
        "preferred leaders: 5 to 55 per broker, the most even the replica sets allow (no chain of leader changes "
        "passes a leadership to a broker leading two or more fewer); 0 brokers lead every partition they hold, and "
        "4 are kept from the share their replica counts alone would give by whom they share partitions with")


def test_fixed_partitions_keep_their_order_and_count_for_their_leader():
    reps = [[1, 2], [1, 2], [1, 2], [1, 2], [2, 1]]
    balance_leaders(reps, [1, 2], (), fixed={0, 1, 2})
    assert reps[:3] == [[1, 2]] * 3
    assert counts_of(reps, [1, 2]) == {1: 3, 2: 2}


def uneven_ring(partitions: int, brokers: int, seed: int) -> Cluster:
    """Replicas on neighbouring brokers of a ring, the first brokers holding three times as many: leader
    shares are limited by who shares partitions with whom, as on clusters grown by hand."""
    rand = random.Random(seed)
    weights = [3 if b <= brokers // 4 else 1 for b in range(1, brokers + 1)]
    parts = []
    for p in range(partitions):
        first = rand.choices(range(1, brokers + 1), weights)[0]
        reps = tuple((first - 1 + j) % brokers + 1 for j in range(3))
        parts.append(PartitionAssignment(f"t{p % 7}", p // 7, reps))
    return Cluster(tuple(Broker(b) for b in range(1, brokers + 1)), tuple(parts))


def test_no_chain_left_after_a_scale_out_rebalance_or_drain_of_an_uneven_cluster():
    cluster = uneven_ring(3000, 24, seed=3)
    for plan in (plan_scale_out(cluster, [Broker(25), Broker(26)]), plan_rebalance(cluster),
                 plan_drain(cluster, [3])):
        after = list(final_assignment(plan).values())
        eligible = plan.stats_after.balanced
        assert improvable(after, eligible) == [], plan.kind
    leaders_off = plan_scale_out(cluster, [Broker(25), Broker(26)], Goals(leaders=False))
    assert leaders_off.leader_only == 0
    assert improvable(list(final_assignment(leaders_off).values()), leaders_off.stats_after.balanced)


@FAST
@given(clusters())
def test_no_chain_left_after_a_rebalance(cluster: Cluster):
    plan = plan_rebalance(cluster)
    assert improvable(list(final_assignment(plan).values()), plan.stats_after.balanced) == []


def test_leader_only_changes_are_counted_apart_and_said_in_the_summary():
    parts = tuple(PartitionAssignment("t", p, (1, 2, 3)) for p in range(6))
    plan = plan_rebalance(Cluster(tuple(Broker(i) for i in (1, 2, 3)), parts))
    assert plan.replica_moves == 0 and plan.leader_only == plan.leader_changes == 4
    assert "4 leader changes (4 of them leader-only, no data)" in plan.summary()
    assert plan_rebalance(Cluster(tuple(Broker(i) for i in (1, 2, 3)), parts), Goals(leaders=False)).moves == ()


def test_a_plan_for_some_topics_reorders_no_other_topic():
    cluster = uneven_ring(600, 8, seed=5)
    plan = plan_rebalance(cluster, topics=["t1", "t2"])
    assert plan.moves and {m.topic for m in plan.moves} <= {"t1", "t2"}


def _total(m: Mapping[int, int]) -> int:
    return sum(m.values())


def test_best_leader_counts_fill_to_a_level():
    assert best_leader_counts({}, 0) == {}
    best = best_leader_counts({1: 100, 2: 100, 3: 1}, 11)
    assert best == {1: (5, 6), 2: (5, 6), 3: (1, 1)}
    assert _total({b: lo for b, (lo, _) in best.items()}) <= 11 <= _total({b: hi for b, (_, hi) in best.items()})
