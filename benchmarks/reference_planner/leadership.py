"""Preferred leaders per broker within one of each other, by reordering replicas (no data moves).

A partition's preferred leader is its first replica. Leadership can pass only to a broker that
already holds a replica, so this is a degree-constrained assignment: a direct greedy pass does
nearly all of it, then augmenting paths (leadership passed along a chain u -> v -> ... -> w, which
changes only the two ends' counts) finish what the greedy could not.
"""
from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Collection, Sequence

log = logging.getLogger(__name__)


class Leadership:
    """Who leads which partition, with an index of (leader, follower) pairs for path search."""

    def __init__(self, reps: list[list[int]], eligible: Sequence[int], moved: Collection[int]) -> None:
        self.reps = reps
        self.eligible = tuple(eligible)
        self.members = frozenset(eligible)
        self.moved = moved
        self.count = dict.fromkeys(self.eligible, 0)
        self.led: dict[int, set[int]] = {b: set() for b in self.eligible}
        self.pairs: dict[tuple[int, int], set[int]] = {}
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
                self.pairs.setdefault((leader, f), set()).add(i)

    def _remove(self, i: int) -> None:
        leader, *followers = self.reps[i]
        self.count[leader] -= 1
        self.led[leader].discard(i)
        for f in followers:
            if f in self.members:
                self.pairs[(leader, f)].discard(i)

    def transfer(self, i: int, dst: int) -> None:
        """Make ``dst`` (a follower) the first replica of partition ``i``; the others keep their order."""
        self._remove(i)
        r = self.reps[i]
        r.remove(dst)
        r.insert(0, dst)
        self._add(i)

    def _choice(self, candidates: Collection[int]) -> int:
        """Prefer partitions that already change (their reorder costs nothing extra), then low index."""
        return min(candidates, key=lambda i: (i not in self.moved, i))

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
                while self.count[w] < self.low and self.count[u] > self.low and self.pairs.get((u, w)):
                    self.transfer(self._choice(self.pairs[(u, w)]), w)

    def _path(self, start: int, forward: bool, is_end: Callable[[int], bool]) -> list[int] | None:
        """Shortest chain of brokers from ``start`` along (leader -> follower) pairs (or backwards)."""
        parent = {start: start}
        queue = deque([start])
        while queue:
            b = queue.popleft()
            for other in self.eligible:
                if other in parent or not self.pairs.get((b, other) if forward else (other, b)):
                    continue
                parent[other] = b
                if is_end(other):
                    path = [other]
                    while path[-1] != start:
                        path.append(parent[path[-1]])
                    return path[::-1]
                queue.append(other)
        return None

    def _shift(self, path: list[int]) -> None:
        """Pass one leadership along each edge of ``path`` (given leader -> follower order)."""
        for u, v in zip(path, path[1:]):
            self.transfer(self._choice(self.pairs[(u, v)]), v)

    def augment(self) -> None:
        for u in sorted(self.eligible):
            while self.count[u] > self.high:
                path = self._path(u, True, lambda b: self.count[b] < self.high)
                if path is None:
                    log.info("broker %d keeps %d preferred leaderships; no partition lets it give one up",
                             u, self.count[u])
                    break
                self._shift(path)
        for w in sorted(self.eligible):
            while self.count[w] < self.low:
                path = self._path(w, False, lambda b: self.count[b] > self.low)
                if path is None:
                    log.info("broker %d stays at %d preferred leaderships; it follows no partition it could "
                             "lead", w, self.count[w])
                    break
                self._shift(path[::-1])


def balance_leaders(reps: list[list[int]], eligible: Sequence[int], moved: Collection[int]) -> None:
    """Reorder ``reps`` in place so preferred leaders per eligible broker are within one where the
    replica sets allow it. Partitions led by a broker outside ``eligible`` are left alone."""
    if not eligible:
        return
    leadership = Leadership(reps, eligible, moved)
    leadership.greedy()
    leadership.augment()
