"""What the greedy balancing pass can leave undone, finished by moves it does not try.

:func:`even_counts` brings replicas per broker within one when racks block every direct move:
a chain of moves d -> m1 -> ... -> n (each a different partition, each keeping its partition's
racks) changes only the two ends' counts. :func:`even_topics` brings each topic's replicas per
broker within one without changing any broker's count beyond one: a topic's replica moves from
a broker with two or more of it above another to that broker, alone when the counts allow it,
else swapped for a replica of a topic the receiving broker holds more of. Each step lowers the
sum of squared per-topic counts, so the pass ends; neither touches a partition outside
``movable``. For a scale-out, :func:`even_topics` only exchanges planned moves: a replica a new
broker was to receive goes back to its donor and another topic's replica of that donor comes
instead, so every move still lands on a new broker and the count stays at the lower bound.
"""
from __future__ import annotations

import heapq
import logging
from collections import deque
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from kafkaops.reassign.planner.placement import Placement
from kafkaops.reassign.planner.budget import check as budget_check

if TYPE_CHECKING:
    from _typeshed import SupportsRichComparison

log = logging.getLogger(__name__)


class _Index:
    """Which movable partitions each eligible broker holds, per topic, and which eligible brokers
    hold each topic, kept in step with moves. In a scale-out (``origins``) also which partitions
    each (donor, new broker) pair has planned: ``given[(donor, new)]``."""

    def __init__(self, work: Placement, movable: Collection[str] | None,
                 origins: Sequence[Sequence[int]] | None = None) -> None:
        self.work = work
        self.origins = origins
        self.new = frozenset(work.topo.new)
        self.eligible = tuple(work.topo.eligible)
        self.held: dict[int, dict[str, set[int]]] = {b: {} for b in self.eligible}
        self.holders: dict[str, set[int]] = {}
        self.counts: dict[str, dict[int, int]] = {}
        """Per movable topic, each eligible holder's count of it (``work.per_topic`` for those brokers), kept in
        step with moves: what a step reads in one pass."""
        self.given: dict[tuple[int, int], set[int]] = {}
        self.touches: dict[int, int] = dict.fromkeys(work.count, 0)
        """Moves so far into or out of each broker: what a result that depends on two brokers'
        replicas only (``given`` and per-topic counts) is stamped with."""
        for i, (topic, reps) in enumerate(zip(work.topics, work.reps)):
            if movable is not None and topic not in movable:
                continue
            holders = self.holders.setdefault(topic, set())
            for b in reps:
                if b in self.held:
                    self.held[b].setdefault(topic, set()).add(i)
                    holders.add(b)
            self._plan(i, True)
        per = work.per_topic
        self.counts = {t: {b: per[b][t] for b in holders} for t, holders in self.holders.items()}
        self.moves = 0

    def _plan(self, i: int, add: bool) -> None:
        if self.origins is None:
            return
        before, reps = self.origins[i], self.work.reps[i]
        for n in reps:
            if n in self.new and n not in before:
                for d in self.donors(i, n):
                    if add:
                        self.given.setdefault((d, n), set()).add(i)
                    else:
                        self.given[(d, n)].discard(i)

    def donors(self, i: int, n: int) -> list[int]:
        """The brokers partition ``i`` held before the plan and does not now: where the new broker
        ``n`` may give it back."""
        assert self.origins is not None  # asked in a scale-out only
        reps = self.work.reps[i]
        return [d for d in self.origins[i] if d not in reps] if n not in self.origins[i] else []

    def move(self, i: int, src: int, dst: int) -> None:
        topic = self.work.topics[i]
        self._plan(i, False)
        self.work.move(i, src, dst)
        self._plan(i, True)
        held = self.held[src][topic]
        held.discard(i)
        if not held:
            self.holders[topic].discard(src)
        self.held[dst].setdefault(topic, set()).add(i)
        self.holders[topic].add(dst)
        counts = self.counts[topic]
        if held:
            counts[src] -= 1
        else:
            del counts[src]
        counts[dst] = counts.get(dst, 0) + 1
        self.touches[src] += 1
        self.touches[dst] += 1
        self.moves += 1

    def can(self, i: int, src: int, dst: int) -> bool:
        if self.origins is not None and not self._onto_new_or_back(i, src, dst):
            return False
        return dst not in self.work.reps[i] and self.work.rack_ok(i, src, dst)

    def _onto_new_or_back(self, i: int, src: int, dst: int) -> bool:
        """In a scale-out: a move onto a new broker, or one that returns a replica a new broker
        was to receive to the broker it came from."""
        assert self.origins is not None  # asked in a scale-out only
        before = self.origins[i]
        if src in self.new:
            return dst in before and src not in before
        return dst in self.new

    def first(self, candidates: Iterable[int], src: int, dst: int, key: Callable[[int], SupportsRichComparison]) -> int | None:
        """The candidate partition that may move ``src`` -> ``dst``, best by ``key``."""
        if self.origins is None:  # can(), inline: this is the planner's innermost loop
            reps, work = self.work.reps, self.work
            if work.rack[src] == work.rack[dst]:
                fits = [i for i in candidates if dst not in reps[i]]
            else:
                fits = [i for i in candidates if dst not in reps[i] and work.rack_ok(i, src, dst)]
        else:
            fits = [i for i in candidates if self.can(i, src, dst)]
        return min(fits, key=key) if fits else None


def _bounds(work: Placement) -> tuple[int, int] | None:
    """Fewest and most replicas per eligible broker in an even split, when the targets are one
    (racks that cannot take an even split get uneven targets, and there is nothing to finish)."""
    targets = [work.target.get(b, 0) for b in work.topo.eligible]
    if not targets or max(targets) - min(targets) > 1:
        return None
    return min(targets), max(targets)


def _chain(index: _Index, sources: list[int], is_end: Callable[[int], bool]) -> list[tuple[int, int, int]] | None:
    """Shortest chain of moves (src, dst, partition) from one of ``sources`` to a broker that
    ``is_end``, every partition different: a breadth-first search over brokers."""
    work = index.work
    parent: dict[int, tuple[int, int] | None] = dict.fromkeys(sources)
    queue = deque(sources)
    while queue:
        budget_check("searching chains of moves")
        u = queue.popleft()
        used, node = set(), u
        while (step := parent[node]) is not None:
            node, j = step
            used.add(j)
        cands = sorted((i for held in index.held[u].values() for i in held if i not in used),
                       key=lambda i: (i in work.moved, i))
        for v in index.eligible:
            if v in parent:
                continue
            i = next((i for i in cands if index.can(i, u, v)), None)
            if i is None:
                continue
            parent[v] = (u, i)
            if is_end(v):
                chain, node = [], v
                while (step := parent[node]) is not None:
                    prev, i = step
                    chain.append((prev, node, i))
                    node = prev
                return chain[::-1]
            queue.append(v)
    return None


def even_counts(work: Placement, movable: Collection[str] | None) -> int:
    """Chains of moves until every eligible broker holds within one replica of the others, or no
    chain is left. Returns the number of replicas moved."""
    bounds = _bounds(work)
    if bounds is None:
        return 0
    low, high = bounds
    index = _Index(work, movable)
    count = work.count
    while True:
        budget_check("evening out replica counts")
        over = [b for b in index.eligible if count[b] > high]
        under = [b for b in index.eligible if count[b] < low]
        if over:
            chain = _chain(index, over, lambda v: count[v] < high)
        elif under:
            chain = _chain(index, [b for b in index.eligible if count[b] > low], lambda v: count[v] < low)
        else:
            break
        if chain is None:
            log.info("replicas per broker stay between %d and %d: no chain of moves keeps the racks",
                     min(count[b] for b in index.eligible), max(count[b] for b in index.eligible))
            break
        for src, dst, i in chain:
            index.move(i, src, dst)
    return index.moves


def even_topics(work: Placement, movable: Collection[str] | None,
                origins: Sequence[Sequence[int]] | None = None) -> int:
    """Moves and swaps until every movable topic holds within one replica per eligible broker,
    or none is left that keeps replicas per broker within one and the racks. With ``origins``
    (each partition's replicas before the plan: a scale-out) only exchanges of planned moves
    onto new brokers. Returns the number of replicas moved (an exchange counts two).

    Topics are worked through once, in name order, each until no step narrows it; a topic that
    found no step is tried again only if a later swap changed its counts. A step's search is
    bounded (:data:`PAIR_LIMIT` receiving brokers per giving broker, :data:`PARTNER_LIMIT`
    partner topics per swap), so its cost follows the topic's size and the brokers it touches,
    not all pairs of brokers; the bounds never bind below :data:`PAIR_LIMIT` brokers."""
    bounds = _bounds(work) if origins is None else (0, 0)
    if bounds is None:
        return 0
    index = _Index(work, movable, origins)
    evener = _Evener(index, bounds)
    topics = sorted(index.holders)
    queue = deque(topics)
    waiting = set(topics)
    cut: set[str] = set()
    while queue:
        topic = queue.popleft()
        waiting.discard(topic)
        evener.cut = False
        while evener.step(topic):
            budget_check("evening out each topic's replicas")
            evener.cut = False
            for other in evener.touched:
                if other not in waiting and other != topic:
                    waiting.add(other)
                    queue.append(other)
        if evener.cut:
            cut.add(topic)
        else:
            cut.discard(topic)
    stuck = [t for t in topics if evener.spread(t) > 1]
    if stuck:
        log.info("%d topics keep a replica spread above one (e.g. %s): no move or swap keeps the racks",
                 len(stuck), stuck[0])
    work.uneven_topics = len(stuck)
    work.bounded_topics = sum(1 for t in stuck if t in cut)
    return index.moves


PAIR_LIMIT = 48
"""Receiving brokers tried per giving broker in one step of :func:`even_topics`."""

PARTNER_LIMIT = 24
"""Topics tried as the partner of one swap in :func:`even_topics`."""


class _Evener:
    """One narrowing step of a topic at a time, over the brokers that hold it (see :func:`even_topics`)."""

    def __init__(self, index: _Index, bounds: tuple[int, int]) -> None:
        self.index = index
        self.work = index.work
        self.low, self.high = bounds
        self.touched: tuple[str, ...] = ()
        self.cut = False  # whether a bound stopped the last step's search before it ran out of candidates
        self.rotation = 0
        # Each broker's topics, most held first, as they stood at the start: the order swap
        # partners are looked for in (the condition itself is checked on the live counts).
        self.ranked_topics: dict[int, list[str]] = {}
        self._backs: dict[tuple[int, int], tuple[tuple[int, int], list[tuple[str, list[int]]]]] = {}

    def spread(self, topic: str) -> int:
        holders = self.index.holders[topic]
        per = self.work.per_topic
        counts = [per[b][topic] for b in holders]
        if not counts:
            return 0
        return max(counts) - (0 if len(holders) < len(self.index.eligible) else min(counts))

    def step(self, topic: str) -> bool:
        """One move or swap that narrows ``topic``'s spread; False when the search finds none."""
        index, per = self.index, self.work.per_topic
        holders = index.holders[topic]
        if not holders:
            return False
        counts = index.counts[topic]
        lowest = 0 if len(holders) < len(index.eligible) else min(counts.values())
        ranked = [(-c, b) for b, c in counts.items() if c - lowest >= 2]
        if not ranked:
            return False
        if index.origins is not None:
            return self._exchange(topic, [b for _, b in sorted(ranked)])
        heapq.heapify(ranked)  # the givers, most held first, popped as asked: the first usually moves
        while ranked:
            u = heapq.heappop(ranked)[1]
            mine = per[u][topic]
            tried = 0
            for v in self._receivers(topic, holders, mine, counts):
                if u == v:
                    continue
                if tried >= PAIR_LIMIT:
                    self.cut = True
                    break
                tried += 1
                if self._move_or_swap(topic, u, v):
                    return True
        return False

    def _receivers(self, topic: str, holders: Collection[int], mine: int, counts: Mapping[int, int]
                   ) -> Iterable[int]:
        """Brokers holding at most ``mine - 2`` of ``topic``: those without it first (from a
        rotating start, so no broker is always asked first), then holders, fewest first (``counts``: each
        holder's count of ``topic`` and id, as they stand: no move happens while the receivers are asked)."""
        index = self.index
        if len(holders) < len(index.eligible) and mine >= 2:
            eligible = index.eligible
            n = len(eligible)
            start = self.rotation % n
            self.rotation += 1
            for k in range(n):
                v = eligible[(start + k) % n]
                if v not in holders:
                    yield v
        yield from (b for _, b in sorted((c, b) for b, c in counts.items() if c <= mine - 2))

    def _move_or_swap(self, topic: str, u: int, v: int) -> bool:
        """Move ``u``'s first ``topic`` partition that may go to ``v`` (unmoved ones first), alone when the counts
        allow, else swapped for a partner. Whether a partner exists does not depend on which partition goes, so
        when the first that may go finds none, no other would."""
        index, work = self.index, self.work
        moved = work.moved
        i = index.first(index.held[u].get(topic, ()), u, v, key=lambda i: (i in moved, i))
        if i is None:
            return False
        if work.count[u] > self.low and work.count[v] < self.high:  # a plain move keeps the counts within one
            index.move(i, u, v)
            self.touched = (topic,)
            return True
        return self._swap_back(topic, i, u, v, self._partners(u, v, topic))

    def _partners(self, u: int, v: int, topic: str) -> Iterable[tuple[str, Collection[int]]]:
        """Topics ``v`` holds more of than ``u`` (besides ``topic``), most held by ``v`` first,
        with ``v``'s partitions of each; at most :data:`PARTNER_LIMIT`."""
        index, per = self.index, self.work.per_topic
        ranked = self.ranked_topics.get(v)
        if ranked is None:
            ranked = self.ranked_topics[v] = sorted(index.held[v], key=lambda t: (-per[v][t], t))
        found = 0
        for other in ranked:
            held = index.held[v].get(other)
            if other == topic or not held or per[v][other] <= per[u][other]:
                continue
            if found >= PARTNER_LIMIT:
                self.cut = True
                return
            yield other, held
            found += 1

    def _swap_back(self, topic: str, i: int, u: int, v: int,
                   partners: Iterable[tuple[str, Collection[int]]]) -> bool:
        """Move ``i`` (of ``topic``) u -> v and a partner partition v -> u, as close in size to
        ``i`` as can be so bytes stay put."""
        index, work = self.index, self.work
        size = work.sizes[i]
        for other, held in partners:
            j = index.first(held, v, u, key=lambda j: (abs(work.sizes[j] - size), j in work.moved, j))
            if j is not None:
                index.move(i, u, v)
                index.move(j, v, u)
                self.touched = (topic, other)
                return True
        return False

    # -- a scale-out: exchanges between a new broker and a donor only -----------------------------
    def _exchange(self, topic: str, givers: Sequence[int]) -> bool:
        """A new broker gives a planned ``topic`` replica back to its donor and takes another
        topic from it, or a donor gives ``topic`` to a new broker and takes back one it was to give."""
        index, per = self.index, self.work.per_topic
        new = sorted(index.new, key=lambda b: (per[b][topic], b))
        tried = 0  # (donor, new broker) pairs with planned moves looked at: at most PAIR_LIMIT a step
        for u in givers:
            mine = per[u][topic]
            if u in index.new:
                for i in sorted(index.held[u].get(topic, ()), key=lambda i: (i in self.work.moved, i)):
                    for v in index.donors(i, u):
                        if mine - per[v][topic] >= 2 and index.can(i, u, v) and \
                                self._swap_back(topic, i, u, v, self._partners(u, v, topic)):
                            return True
                continue
            for v in new:
                if mine - per[v][topic] < 2:
                    break
                if tried >= PAIR_LIMIT:
                    self.cut = True
                    break
                given = index.given.get((u, v))
                if not given:
                    continue
                tried += 1
                partners = [p for p in self._takes_back(u, v, given) if p[0] != topic]
                if not partners:
                    continue
                for i in sorted(index.held[u].get(topic, ()), key=lambda i: (i in self.work.moved, i)):
                    if index.can(i, u, v) and self._swap_back(topic, i, u, v, partners):
                        return True
        return False


    def _takes_back(self, u: int, v: int, given: Collection[int]) -> list[tuple[str, list[int]]]:
        """The topics of the moves ``u`` -> ``v`` planned that ``v`` holds more of than ``u``, with
        those moves, the most uneven first: what the new broker ``v`` may give back to ``u``.
        Depends only on the two brokers' replicas, so it is kept until a move touches either
        (:attr:`_Index.touches`): a search that finds nothing does not rescan the same pair."""
        index, per, topics = self.index, self.work.per_topic, self.work.topics
        stamp = (index.touches[u], index.touches[v])
        kept = self._backs.get((u, v))
        if kept is not None and kept[0] == stamp:
            return kept[1]
        mine, theirs = per[u], per[v]
        grouped: dict[str, list[int]] = {}
        for j in given:
            t = topics[j]
            if theirs[t] > mine[t]:
                grouped.setdefault(t, []).append(j)
        partners = sorted(grouped.items(), key=lambda p: (mine[p[0]] - theirs[p[0]], p[0]))
        self._backs[(u, v)] = (stamp, partners)
        return partners
