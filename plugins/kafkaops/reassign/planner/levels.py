"""Which topics a scale-out can bring within one replica per broker, and the moves that do it.

A scale-out moves replicas onto the new brokers only, and only from brokers above their replica share (the
fewest moves; the replica-count goal ranks first). Under those rules a topic ``t`` ends within one replica per
eligible broker only at the level of its least-holding old broker ``m`` (0 unless every old broker holds it):
every old broker above ``m + 1`` gives its excess, every new broker ends at ``m`` or ``m + 1``. :func:`level_topics`
plans that for every topic, the topics needing the fewest moves first (so the new brokers' shares even the most
topics), before the greedy fill of :meth:`Placement.balance` spends the rest of the shares. A topic is leveled
whole or not at all, and each topic it cannot level gets the reason (:data:`REASONS`) the plan's note gives.
"""
from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from kafkaops.reassign.planner.placement import Placement
from kafkaops.reassign.planner.budget import check as budget_check

log = logging.getLogger(__name__)

KEPT = "kept"
LEVEL = "level"
ROOM = "room"
REASONS: Mapping[str, str] = {
    KEPT: "a broker at or below its replica share holds more than one above the others, and a scale-out takes "
          "only from brokers above their share",
    LEVEL: "more of it sits above the level of its least-holding old broker than the new brokers can take (each "
           "takes one more than that broker holds, from brokers on the racks it may join)",
    ROOM: "the new brokers' shares went to topics that needed fewer moves",
}
"""Why a scale-out leaves a topic's replica spread above one, by key; a rebalance evens each of them."""


@dataclass(frozen=True)
class TopicLevels:
    """What :func:`level_topics` did: topics leveled, replicas moved, and each topic it could not level
    with its reason (a key of :data:`REASONS`)."""

    leveled: int = 0
    moves: int = 0
    not_leveled: Mapping[str, str] = field(default_factory=dict)


def level_topics(work: Placement, movable: Collection[str] | None, receivers: Sequence[int]) -> TopicLevels:
    """Move replicas from old brokers above their share onto ``receivers`` (new brokers below theirs) so that
    each topic ends within one replica per eligible broker, the topics needing the fewest moves first, each
    whole or not at all. Invariants: every move is old -> new and keeps the partition's racks; no giver drops
    to or below its target, no receiver rises above its target; a topic already within one is not touched."""
    topo = work.topo
    new_set = frozenset(topo.new)
    new = [n for n in receivers if n in new_set and work.surplus(n) < 0]
    old = [b for b in topo.eligible if b not in new_set]
    if not new or not old:
        return TopicLevels()
    per = work.per_topic
    holders: dict[str, list[int]] = {}
    for b in old:
        for t, c in per[b].items():
            if c and (movable is None or t in movable):
                holders.setdefault(t, []).append(b)
    wanted: dict[str, int] = {}
    order = []
    for t, held in holders.items():
        m = min(per[b][t] for b in held) if len(held) == len(old) else 0
        top = max(per[v][t] for v in new)
        over = sum(per[b][t] - m - 1 for b in held if per[b][t] > m + 1)
        fill = sum(max(0, m - per[v][t]) for v in new)
        if over or fill or top > m + 1:
            wanted[t] = m
            order.append((max(over, fill), t))
    order.sort()
    parts: dict[tuple[str, int], list[int]] = {}
    old_set = frozenset(old)
    for i, (t, reps) in enumerate(zip(work.topics, work.reps)):
        level = wanted.get(t)
        if level is None:
            continue
        for b in reps:
            if b in old_set and per[b][t] > level:
                parts.setdefault((t, b), []).append(i)
    leveler = _Leveler(work, new)
    not_leveled: dict[str, str] = {}
    leveled = moves = 0
    for _, t in order:
        budget_check("leveling topics onto the new brokers")
        chosen, reason = leveler.plan(t, wanted[t], holders[t], parts)
        if reason is not None:
            not_leveled[t] = reason
            continue
        for i, u, v in chosen:
            work.move(i, u, v)
        work.level_caps[t] = wanted[t] + 1
        leveled += 1
        moves += len(chosen)
    if not_leveled:
        counts: dict[str, int] = {}
        for reason in not_leveled.values():
            counts[reason] = counts.get(reason, 0) + 1
        log.info("scale-out: %d topics leveled onto the new brokers (%d moves), %d not: %s", leveled, moves,
                 len(not_leveled), ", ".join(f"{n} {r}" for r, n in sorted(counts.items())))
    return TopicLevels(leveled, moves, not_leveled)


class _Leveler:
    """Plans one topic's moves against the live counts, applying nothing (see :func:`level_topics`)."""

    def __init__(self, work: Placement, new: Sequence[int]) -> None:
        self.work = work
        self.new = list(new)

    def plan(self, t: str, m: int, held: Sequence[int], parts: Mapping[tuple[str, int], list[int]]
             ) -> tuple[list[tuple[int, int, int]], str | None]:
        work, per = self.work, self.work.per_topic
        if any(per[v][t] > m + 1 for v in self.new):
            return [], LEVEL  # a new broker already above the level (a registered-but-empty broker never is)
        gave: dict[int, int] = {}
        given: set[tuple[int, int]] = set()  # (partition, giver) planned
        took: dict[int, int] = {}
        used: dict[int, list[int]] = {}  # partition -> the new brokers planned onto it in this topic
        crossed: set[int] = set()  # partitions with a planned move across racks: no second move for them
        chosen: list[tuple[int, int, int]] = []
        rack = work.rack

        def give(u: int, floor: int, only: int | None = None) -> str | None:
            if work.count[u] - gave.get(u, 0) <= work.target.get(u, 0):
                return KEPT
            level_ok = False
            mine = [i for i in parts.get((t, u), ()) if (i, u) not in given and i not in crossed]
            ideal = work.ideal_size(self.new[0] if only is None else only, u)
            sizes = work.sizes
            for i in sorted(mine, key=lambda i: (i in used, i in work.moved, abs(sizes[i] - ideal), i)):
                others: set[str] | None = None  # the racks of i's other replicas, when a move across racks is asked
                for v in (self.new if only is None else (only,)):
                    if per[v][t] + took.get(v, 0) >= floor or v in work.reps[i] or v in used.get(i, ()):
                        continue
                    if rack[u] != rack[v]:  # as Placement.rack_ok, with the other replicas' racks found once
                        if i in used:
                            continue
                        if others is None:
                            others = {rack[b] for b in work.reps[i] if b != u}
                        if len(others | {rack[v]}) < work.need[i]:
                            continue
                    level_ok = True
                    if work.count[v] + took.get(v, 0) < work.target.get(v, 0):
                        chosen.append((i, u, v))
                        used.setdefault(i, []).append(v)
                        given.add((i, u))
                        if rack[u] != rack[v]:
                            crossed.add(i)
                        gave[u] = gave.get(u, 0) + 1
                        took[v] = took.get(v, 0) + 1
                        return None
            return ROOM if level_ok else LEVEL

        self.new.sort(key=lambda v: (per[v][t], work.count[v] - work.target.get(v, 0), v))
        reason: str | None
        for u in sorted(held, key=lambda b: (-per[b][t], b)):
            for _ in range(per[u][t] - m - 1):
                reason = give(u, m + 1)
                if reason is not None:
                    return [], reason
        for v in self.new:
            while per[v][t] + took.get(v, 0) < m:
                donors = [u for u in held if per[u][t] - gave.get(u, 0) > m]
                reason = LEVEL
                for u in sorted(donors, key=lambda b: (-(per[b][t] - gave.get(b, 0)), b)):
                    reason = give(u, m, only=v)
                    if reason is None:
                        break
                if reason is not None:
                    return [], reason
        return chosen, None
