"""Plan a scale-out, a rebalance or a drain: pure functions from a :class:`Cluster` to a
:class:`ReassignmentPlan`. Same input, same plan; the input is never changed."""
from __future__ import annotations

import dataclasses
import logging
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from kafkaops.model import Broker, Cluster
from kafkaops.reassign.planner.errors import PlanInputError
from kafkaops.reassign.planner.goals import Goals
from kafkaops.reassign.planner.leadership import balance_leaders
from kafkaops.reassign.planner.levels import REASONS, TopicLevels, level_topics
from kafkaops.reassign.planner.placement import Placement
from kafkaops.reassign.planner.plan import LoadStats, ReassignmentPlan
from kafkaops.reassign.planner.refine import PAIR_LIMIT, PARTNER_LIMIT, even_counts, even_topics
from kafkaops.reassign.planner.topology import Topology, replica_targets, resolve_topology, scale_out_shares

log = logging.getLogger(__name__)

DEFAULT_GOALS = Goals()


def _movable(cluster: Cluster, topics: Collection[str] | None) -> frozenset[str] | None:
    if topics is None:
        return None
    unknown = sorted(set(topics) - set(cluster.topics))
    if unknown:
        raise PlanInputError(f"topics {unknown} are not in the cluster; it has {len(cluster.topics)} topics: "
                             f"{', '.join(cluster.topics[:20])}")
    return frozenset(topics)


def _scale_out_caps(work: Placement, topo: Topology) -> dict[int, int]:
    added, eligible = set(topo.new), set(work.eligible)  # sets: membership in a tuple is linear
    existing = len([b for b in topo.eligible if b not in added])
    new = [b for b in topo.new if b in eligible]
    return scale_out_shares(work.total, existing, new)


def lower_bound_moves(cluster: Cluster, new_brokers: Sequence[int | Broker], *,
                      exclude: Sequence[int] = ()) -> int:
    """Fewest replica moves that bring ``new_brokers`` to an even share of the replicas: the new
    brokers take the smaller shares of the most even split over all brokers."""
    base, topo = resolve_topology(cluster, DEFAULT_GOALS, new=new_brokers, exclude=exclude)
    work = Placement(base, topo, DEFAULT_GOALS)
    return sum(_scale_out_caps(work, topo).values())


def _build(kind: str, base: Cluster, topo: Topology, work: Placement, lower_bound: int,
           excluded: Sequence[int], parts: tuple[tuple[str, int], ...] = (),
           leader_notes: tuple[str, ...] = (), *, bounded_note: bool = True) -> ReassignmentPlan:
    moves = []
    for p, reps, _size in zip(base.partitions, work.reps, work.sizes):
        after = tuple(reps)
        if after != p.replicas:
            moves.append(p.move_to(after))
    brokers = base.broker_ids
    before = LoadStats.measure(((p.topic, p.replicas, p.size_bytes or 0) for p in base.partitions),
                               brokers, topo.eligible)
    after_stats = LoadStats.measure(zip(work.topics, work.reps, work.sizes), brokers, topo.eligible)
    plan = ReassignmentPlan(kind=kind, moves=tuple(moves), stats_before=before, stats_after=after_stats,
                            lower_bound=lower_bound, new_brokers=topo.new, drained=topo.drained,
                            excluded=tuple(sorted(excluded)),
                            notes=(_notes(work) if bounded_note else ()) + leader_notes, cluster=base,
                            part_moves=parts)
    log.info("%s plan: %d partitions change, %d replica moves (replica-count lower bound %d)", kind, len(moves),
             plan.replica_moves, lower_bound)
    return plan


def _notes(work: Placement) -> tuple[str, ...]:
    """What the plan bounded: topics the per-topic evening left uneven after a bounded search."""
    if not work.bounded_topics:
        return ()
    return (f"per-topic evening searched at most {PAIR_LIMIT} receiving brokers and {PARTNER_LIMIT} swap partners "
            f"a step: {work.bounded_topics} of the {work.uneven_topics} topics left with a replica spread above one "
            "stopped at that bound",)


def _finish(work: Placement, topo: Topology, goals: Goals, movable: frozenset[str] | None = None) -> tuple[str, ...]:
    """Balance preferred leaders over every partition the plan may touch (``movable`` topics only, when
    given); the note says where the replica sets keep leaders more than one apart."""
    if not goals.leaders:
        return ()
    fixed = () if movable is None else frozenset(i for i, t in enumerate(work.topics) if t not in movable)
    note = balance_leaders(work.reps, topo.eligible, work.moved, fixed).note()
    return (note,) if note else ()


def plan_scale_out(cluster: Cluster, new_brokers: Sequence[int | Broker], goals: Goals = DEFAULT_GOALS,
                   topics: Collection[str] | None = None, *, exclude: Sequence[int] = ()) -> ReassignmentPlan:
    """Move replicas onto ``new_brokers`` only (ids, or :class:`Broker` values to give racks), each
    up to its even share and no further, so the plan copies no more than the lower bound. First each
    topic that can be brought within one replica per broker under those rules is leveled onto the new
    brokers, the topics needing the fewest moves first (:func:`~kafkaops.reassign.planner.levels.level_topics`);
    the greedy fill spends the rest of the shares; then planned moves are exchanged (same donor, same new
    broker, another topic) where that evens topics out. The note counts the topics left above one by
    reason. With ``topics`` only those topics move. Brokers already registered but empty count as new."""
    base, topo = resolve_topology(cluster, goals, new=new_brokers, exclude=exclude)
    movable = _movable(base, topics)
    work = Placement(base, topo, goals)
    caps = _scale_out_caps(work, topo)
    targets = replica_targets(base, topo, work.count, work.total)
    targets.update({b: min(targets[b], cap) for b, cap in caps.items()})
    work.set_targets(targets)
    receivers = sorted(caps)
    work.repair(prefer=frozenset(receivers))
    levels = TopicLevels()
    if goals.replicas:
        if goals.topic_spread:
            levels = level_topics(work, movable, receivers)
        donors = [b for b in topo.eligible if b not in caps]
        work.balance(receivers, donors, movable)
    if goals.topic_spread:
        even_topics(work, movable, origins=[p.replicas for p in base.partitions])
    leader_notes = _finish(work, topo, goals, movable)
    plan = _build("scale-out", base, topo, work, sum(caps.values()), exclude, leader_notes=leader_notes,
                  bounded_note=not goals.topic_spread)
    if not goals.topic_spread:
        return plan
    note = _uneven_note(plan.stats_after.topic_spread, levels.not_leveled, movable)
    return dataclasses.replace(plan, notes=(note, *plan.notes)) if note else plan


def _uneven_note(spread: Mapping[str, int], not_leveled: Mapping[str, str], movable: frozenset[str] | None) -> str:
    """What a scale-out's note says of the topics it leaves with a replica spread above one: how many, and why
    (:data:`~kafkaops.reassign.planner.levels.REASONS`)."""
    uneven = [t for t, s in spread.items() if s > 1 and (movable is None or t in movable)]
    if not uneven:
        return ""
    by_reason: dict[str, int] = {}
    for t in uneven:
        reason = not_leveled.get(t, "")
        by_reason[reason] = by_reason.get(reason, 0) + 1
    parts = [f"{n} because {REASONS[r]}" for r, n in sorted(by_reason.items(), key=lambda kv: (-kv[1], kv[0])) if r]
    if "" in by_reason:
        parts.append(f"{by_reason['']} leveled onto the new brokers, then given more by the replica-count fill")
    total = len(spread) if movable is None else len([t for t in spread if t in movable])
    return (f"per-topic spread: {total - len(uneven)} of {total} topics within one replica per broker; "
            f"{len(uneven)} stay above one ({'; '.join(parts)}); a rebalance evens them")


def plan_rebalance(cluster: Cluster, goals: Goals = DEFAULT_GOALS, exclude: Sequence[int] = (),
                   topics: Collection[str] | None = None) -> ReassignmentPlan:
    """Move the fewest replicas that bring every eligible broker within one replica of the
    others (excluded brokers keep theirs and receive none), with chains of moves where racks
    block a direct one; then even out each topic by moves and count-neutral swaps (the topic
    goal ranks above minimal movement), then balance preferred leaders."""
    base, topo = resolve_topology(cluster, goals, exclude=exclude)
    movable = _movable(base, topics)
    work = Placement(base, topo, goals)
    work.set_targets(replica_targets(base, topo, work.count, work.total))
    lower_bound = sum(max(0, work.surplus(b)) for b in topo.eligible)
    work.repair(prefer=frozenset(b for b in topo.eligible if work.surplus(b) < 0))
    if goals.replicas:
        work.balance(topo.eligible, topo.eligible, movable)
        even_counts(work, movable)
    if goals.topic_spread:
        even_topics(work, movable)
    leader_notes = _finish(work, topo, goals, movable)
    return _build("rebalance", base, topo, work, lower_bound, exclude, leader_notes=leader_notes)


def plan_drain(cluster: Cluster, brokers: Sequence[int], goals: Goals = DEFAULT_GOALS,
               exclude: Sequence[int] = (), *, rebalance_after: bool = False) -> ReassignmentPlan:
    """Move every replica off ``brokers`` and no other (the lower bound: what they hold), each to the
    eligible broker furthest below its share that keeps the partition's racks; a partition whose racks
    are already short moves too (a repair, said in the bound note). An operator decommissioning a
    broker expects the copy of what it holds, as Cruise Control's ``remove_broker`` does.

    ``rebalance_after``: then even out the brokers that stay, as a rebalance would; those moves are
    counted apart (:attr:`ReassignmentPlan.part_moves`), so the approval shows the drain and the
    rebalance separately."""
    if not brokers:
        raise PlanInputError("a drain needs at least one broker to drain; pass brokers=[ID, ...]")
    base, topo = resolve_topology(cluster, goals, drain=brokers, exclude=exclude)
    work = Placement(base, topo, goals)
    work.set_targets(replica_targets(base, topo, work.count, work.total))
    lower_bound = sum(work.count[b] for b in topo.drained)
    work.repair(prefer=frozenset(topo.eligible))
    drained = [tuple(reps) for reps in work.reps]
    if rebalance_after and goals.replicas:
        work.balance(topo.eligible, topo.eligible, None)
        even_counts(work, None)
    if rebalance_after and goals.topic_spread:
        even_topics(work, None)
    leader_notes = _finish(work, topo, goals)
    parts: tuple[tuple[str, int], ...] = (("drain", _added(base.partitions, drained)),)
    if rebalance_after:
        parts += (("rebalance after", sum(len(set(after) - set(before)) for before, after in zip(drained, work.reps))),)
    plan = _build("drain", base, topo, work, lower_bound, exclude, parts, leader_notes)
    uneven = sum(1 for s in plan.stats_after.topic_spread.values() if s > 1)
    if rebalance_after or not goals.topic_spread or not uneven:
        return plan
    note = (f"per-topic spread: {uneven} of {len(plan.stats_after.topic_spread)} topics stay above one replica per "
            "broker: a drain moves only what the drained brokers hold; rebalance_after evens them")
    return dataclasses.replace(plan, notes=(note, *plan.notes))


def _added(partitions: Sequence[Any], after: Sequence[tuple[int, ...]]) -> int:
    """Replicas placed on a broker that did not hold them, from ``partitions`` to ``after``."""
    return sum(len(set(reps) - set(p.replicas)) for p, reps in zip(partitions, after))
