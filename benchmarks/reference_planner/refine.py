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

import logging
from collections import deque
from collections.abc import Callable, Collection, Iterable, Sequence

from reference_planner.placement import Placement

log = logging.getLogger(__name__)


class _Index:
    """Which movable partitions each eligible broker holds, per topic, kept in step with moves."""

    def __init__(self, work: Placement, movable: Collection[str] | None,
                 origins: Sequence[Sequence[int]] | None = None) -> None:
        self.work = work
        self.origins = origins
        self.new = frozenset(work.topo.new)
        self.eligible = tuple(work.topo.eligible)
        self.held: dict[int, dict[str, set[int]]] = {b: {} for b in self.eligible}
        for i, (topic, reps) in enumerate(zip(work.topics, work.reps)):
            if movable is not None and topic not in movable:
                continue
            for b in reps:
                if b in self.held:
                    self.held[b].setdefault(topic, set()).add(i)
        self.moves = 0

    def move(self, i: int, src: int, dst: int) -> None:
        topic = self.work.topics[i]
        self.work.move(i, src, dst)
        self.held[src][topic].discard(i)
        self.held[dst].setdefault(topic, set()).add(i)
        self.moves += 1

    def can(self, i: int, src: int, dst: int) -> bool:
        if self.origins is not None and not self._onto_new_or_back(i, src, dst):
            return False
        return dst not in self.work.reps[i] and self.work.rack_ok(i, src, dst)

    def _onto_new_or_back(self, i: int, src: int, dst: int) -> bool:
        """In a scale-out: a move onto a new broker, or one that returns a replica a new broker
        was to receive to the broker it came from."""
        before = self.origins[i]
        if src in self.new:
            return dst in before and src not in before
        return dst in self.new

    def first(self, candidates: Iterable[int], src: int, dst: int, key: Callable[[int], object]) -> int | None:
        """The candidate partition that may move ``src`` -> ``dst``, best by ``key``."""
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
        u = queue.popleft()
        used, node = set(), u
        while parent[node] is not None:
            node, i = parent[node]
            used.add(i)
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
                while parent[node] is not None:
                    prev, i = parent[node]
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
    onto new brokers. Returns the number of replicas moved (an exchange counts two)."""
    bounds = _bounds(work) if origins is None else (0, 0)
    if bounds is None:
        return 0
    index = _Index(work, movable, origins)
    topics = sorted({t for held in index.held.values() for t in held})
    progress = True
    while progress:
        progress = False
        for topic in topics:
            while _even_one(index, topic, bounds):
                progress = True
    stuck = [t for t in topics if _spread(index, t) > 1]
    if stuck:
        log.info("%d topics keep a replica spread above one (e.g. %s): no move or swap keeps the racks",
                 len(stuck), stuck[0])
    return index.moves


def _spread(index: _Index, topic: str) -> int:
    counts = [index.work.per_topic[b][topic] for b in index.eligible]
    return max(counts) - min(counts)


def _even_one(index: _Index, topic: str, bounds: tuple[int, int]) -> bool:
    """One move or swap that narrows ``topic``'s spread; False when there is none."""
    work = index.work
    per = work.per_topic
    low, high = bounds
    ranked = sorted(index.eligible, key=lambda b: (-per[b][topic], b))
    for u in ranked:
        for v in reversed(ranked):
            if per[u][topic] - per[v][topic] < 2:
                break
            if (u in index.new) == (v in index.new) and index.origins is not None:
                continue  # a scale-out exchanges moves between a new broker and a donor only
            mine = index.held[u].get(topic, ())
            if index.origins is None and work.count[u] > low and work.count[v] < high:  # a plain move keeps the counts within one
                i = index.first(mine, u, v, key=lambda i: (i in work.moved, i))
                if i is not None:
                    index.move(i, u, v)
                    return True
            if _swap(index, topic, u, v, mine):
                return True
    return False


def _swap(index: _Index, topic: str, u: int, v: int, mine: Collection[int]) -> bool:
    """Move a ``topic`` replica u -> v and one of a topic ``v`` holds more of than ``u`` back
    v -> u, the partner as close in size as can be so bytes stay put."""
    work = index.work
    per = work.per_topic
    gives = sorted(mine, key=lambda i: (i in work.moved, i))
    others = sorted((t for t, held in index.held[v].items() if t != topic and held and per[v][t] > per[u][t]),
                    key=lambda t: (per[u][t] - per[v][t], t))
    for i in gives:
        if not index.can(i, u, v):
            continue
        size = work.sizes[i]
        for other in others:
            j = index.first(index.held[v][other], v, u, key=lambda j: (abs(work.sizes[j] - size), j in work.moved, j))
            if j is not None:
                index.move(i, u, v)
                index.move(j, v, u)
                return True
    return False
