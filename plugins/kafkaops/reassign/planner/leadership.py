"""Preferred leaders per broker within one of each other, by reordering replicas (no data moves).

A partition's preferred leader is its first replica. Leadership can pass only to a broker that
already holds a replica, so this is a degree-constrained assignment: a direct greedy pass does
nearly all of it, then augmenting paths (leadership passed along a chain u -> v -> ... -> w, which
changes only the two ends' counts) finish what the greedy could not.
"""
from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Collection, Mapping, Sequence

log = logging.getLogger(__name__)


class Leadership:
    """Who leads which partition, with an index of (leader, follower) pairs for path search."""

    def __init__(self, reps: list[list[int]], eligible: Sequence[int], moved: Collection[int]) -> None:
        self.reps = reps
        self.eligible = tuple(eligible)
        self.members = frozenset(eligible)
        self.moved = moved if isinstance(moved, (set, frozenset)) else frozenset(moved)
        self.count = dict.fromkeys(self.eligible, 0)
        self.led: dict[int, set[int]] = {b: set() for b in self.eligible}
        # out[u][f] and into[f][u] are the same set: partitions u leads and f follows.
        self.out: dict[int, dict[int, set[int]]] = {b: {} for b in self.eligible}
        self.into: dict[int, dict[int, set[int]]] = {b: {} for b in self.eligible}
        for i, r in enumerate(reps):
            if r[0] in self.members:
                self._add(i)
        total = sum(self.count.values())
        self.low, extra = divmod(total, len(self.eligible)) if self.eligible else (0, 0)
        self.high = self.low + (1 if extra else 0)

    def _add(self, i: int) -> None:
        leader, *followers = self.reps[i]
        self.count[leader] += 1
        self.led[leader].add(i)
        for f in followers:
            if f in self.members:
                pair = self.out[leader].get(f)
                if pair is None:
                    pair = self.out[leader][f] = self.into[f][leader] = set()
                pair.add(i)

    def _remove(self, i: int) -> None:
        leader, *followers = self.reps[i]
        self.count[leader] -= 1
        self.led[leader].discard(i)
        for f in followers:
            if f in self.members:
                self.out[leader][f].discard(i)

    def transfer(self, i: int, dst: int) -> None:
        """Make ``dst`` (a follower) the first replica of partition ``i``; the others keep their order."""
        self._remove(i)
        r = self.reps[i]
        r.remove(dst)
        r.insert(0, dst)
        self._add(i)

    def _choice(self, candidates: Collection[int]) -> int:
        """Prefer partitions that already change (their reorder costs nothing extra), then low index:
        the least of ``candidates`` by ``(i not in moved, i)``, through a set intersection (it
        walks the smaller side) instead of a key call per candidate."""
        changing = self.moved.intersection(candidates)
        return min(changing) if changing else min(candidates)

    # -- passes ------------------------------------------------------------------------------------
    def greedy(self) -> None:
        for u in sorted(self.eligible, key=lambda b: (-self.count[b], b)):
            for i in sorted(self.led[u], key=lambda i: (i not in self.moved, i)):
                if self.count[u] <= self.high:
                    break
                options = [f for f in self.reps[i][1:] if f in self.members and self.count[f] < self.high]
                if options:
                    self.transfer(i, min(options, key=lambda f: (self.count[f], f)))
        for w in sorted(self.eligible, key=lambda b: (self.count[b], b)):
            for u in sorted(self.eligible, key=lambda b: (-self.count[b], b)):
                while self.count[w] < self.low and self.count[u] > self.low and self.out[u].get(w):
                    self.transfer(self._choice(self.out[u][w]), w)

    def _levels(self, sources: Sequence[int], links: dict[int, dict[int, set[int]]],
                is_end: Callable[[int], bool]) -> dict[int, int] | None:
        """Breadth-first distance of each broker from ``sources`` along ``links``; None when no
        broker that ``is_end`` can be reached."""
        level = dict.fromkeys(sources, 0)
        queue = deque(sources)
        found = False
        while queue:
            b = queue.popleft()
            for other, shared in links[b].items():
                if shared and other not in level:
                    level[other] = level[b] + 1
                    found = found or is_end(other)
                    queue.append(other)
        return level if found else None

    def _path(self, start: int, links: dict[int, dict[int, set[int]]], level: Mapping[int, int],
              arcs: dict[int, list[int]], is_end: Callable[[int], bool]) -> list[int] | None:
        """A chain from ``start`` one level further at each step to a broker that ``is_end``,
        depth first; ``arcs`` keeps each broker's untried next brokers across calls (a broker
        whose arcs run out leads nowhere in this phase)."""
        path = [start]
        while path:
            b = path[-1]
            if b not in arcs:
                arcs[b] = sorted((o for o in links[b] if level.get(o) == level[b] + 1), reverse=True)
            nexts = arcs[b]
            while nexts and not links[b][nexts[-1]]:
                nexts.pop()
            if not nexts:
                path.pop()
                if path:
                    arcs[path[-1]].pop()
                continue
            other = nexts[-1]
            path.append(other)
            if is_end(other):
                return path
        return None

    def _shift(self, path: list[int]) -> None:
        """Pass one leadership along each edge of ``path`` (given leader -> follower order)."""
        for u, v in zip(path, path[1:]):
            self.transfer(self._choice(self.out[u][v]), v)

    def _augment(self, over: Callable[[int], bool], is_end: Callable[[int], bool], forward: bool) -> None:
        """Augmenting paths in phases (Dinic's blocking flows): each phase measures distances from
        every broker that is ``over`` and follows only chains that step one distance further, so
        a phase costs about the pairs once plus its paths; phases end when no chain reaches an end."""
        links = self.out if forward else self.into
        while True:
            sources = [b for b in self.eligible if over(b)]
            level = self._levels(sources, links, is_end) if sources else None
            if level is None:
                return
            arcs: dict[int, list[int]] = {}
            for s in sources:
                while over(s):
                    path = self._path(s, links, level, arcs, is_end)
                    if path is None:
                        break
                    self._shift(path if forward else path[::-1])

    def augment(self) -> None:
        """Leaderships from brokers above ``high`` to brokers below it along chains, then to
        brokers below ``low`` from brokers above it."""
        self._augment(lambda b: self.count[b] > self.high, lambda b: self.count[b] < self.high, True)
        self._augment(lambda b: self.count[b] < self.low, lambda b: self.count[b] > self.low, False)
        stuck = [b for b in self.eligible if not self.low <= self.count[b] <= self.high]
        if stuck:
            log.info("%d brokers keep a preferred leader count outside %d..%d (e.g. broker %d at %d): no chain of "
                     "partitions lets them give or take one", len(stuck), self.low, self.high, stuck[0],
                     self.count[stuck[0]])


def balance_leaders(reps: list[list[int]], eligible: Sequence[int], moved: Collection[int]) -> None:
    """Reorder ``reps`` in place so preferred leaders per eligible broker are within one where the
    replica sets allow it. Partitions led by a broker outside ``eligible`` are left alone."""
    if not eligible:
        return
    leadership = Leadership(reps, eligible, moved)
    leadership.greedy()
    leadership.augment()
