"""Preferred leaders per broker as even as the replicas allow, by reordering replicas (no data moves).

A partition's preferred leader is its first replica. Leadership can pass only to a broker that
already holds a replica, so this is a degree-constrained assignment. Each broker's target is the
water level of :func:`best_leader_counts` (a broker cannot lead more than the partitions it holds);
a direct greedy pass does nearly all of it, augmenting paths (leadership passed along a chain
u -> v -> ... -> w, which changes only the two ends' counts) the rest, and :meth:`Leadership.settle`
then removes every chain from a broker to one that leads two or more fewer. With no such chain left
the counts are the most even the replica sets allow (no broker can come closer to the others without
another moving further away): each broker leads within one of the best count its replicas allow.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING
from kafkaops.reassign.planner.budget import check as budget_check

if TYPE_CHECKING:  # numpy is imported where a plan balances leaders, not when a DAG file is parsed
    import numpy as np

log = logging.getLogger(__name__)


class Leadership:
    """Who leads which partition, with an index of (leader, follower) pairs for path search."""

    def __init__(self, reps: list[list[int]], eligible: Sequence[int], moved: Collection[int],
                 fixed: Collection[int] = ()) -> None:
        import numpy as np

        self.reps = reps
        self.eligible = tuple(eligible)
        self.members = frozenset(eligible)
        self.moved = moved if isinstance(moved, (set, frozenset)) else frozenset(moved)
        self.count = dict.fromkeys(self.eligible, 0)
        self.led: dict[int, set[int]] = {b: set() for b in self.eligible}
        # out[u][f]: the partitions u leads and f follows
        self.out: dict[int, dict[int, set[int]]] = {b: {} for b in self.eligible}
        # width[pos[u], pos[f]] = len(out[u][f]): the same pairs as a matrix, for the path searches
        self.pos = {b: k for k, b in enumerate(self.eligible)}
        self.width = np.zeros((len(self.eligible), len(self.eligible)), dtype=np.int32)
        # the most each broker can lead: the partitions it could be given, plus the fixed ones it leads
        most = dict.fromkeys(self.eligible, 0)
        fixed = fixed if isinstance(fixed, (set, frozenset)) else frozenset(fixed)
        for i, r in enumerate(reps):
            if r[0] not in self.members:
                continue
            if i in fixed:  # counted for its leader, never reordered
                self.count[r[0]] += 1
                most[r[0]] += 1
                continue
            self._add(i)
            for b in r:
                if b in self.members:
                    most[b] += 1
        self.most = most
        self.best = best_leader_counts(most, sum(self.count.values()))
        self.low = {b: low for b, (low, _) in self.best.items()}
        self.high = {b: high for b, (_, high) in self.best.items()}

    def _add(self, i: int) -> None:
        leader, *followers = self.reps[i]
        self.count[leader] += 1
        self.led[leader].add(i)
        row = self.width[self.pos[leader]]
        for f in followers:
            if f in self.members:
                pair = self.out[leader].get(f)
                if pair is None:
                    pair = self.out[leader][f] = set()
                pair.add(i)
                row[self.pos[f]] += 1

    def _remove(self, i: int) -> None:
        leader, *followers = self.reps[i]
        self.count[leader] -= 1
        self.led[leader].discard(i)
        row = self.width[self.pos[leader]]
        for f in followers:
            if f in self.members:
                self.out[leader][f].discard(i)
                row[self.pos[f]] -= 1

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
            budget_check("balancing preferred leaders")
            for i in sorted(self.led[u], key=lambda i: (i not in self.moved, i)):
                if self.count[u] <= self.high[u]:
                    break
                options = [f for f in self.reps[i][1:] if f in self.members and self.count[f] < self.high[f]]
                if options:
                    self.transfer(i, min(options, key=lambda f: (self.count[f], f)))
        for w in sorted(self.eligible, key=lambda b: (self.count[b], b)):
            budget_check("balancing preferred leaders")
            for u in sorted(self.eligible, key=lambda b: (-self.count[b], b)):
                while self.count[w] < self.low[w] and self.count[u] > self.low[u] and self.out[u].get(w):
                    self.transfer(self._choice(self.out[u][w]), w)

    def _mask(self, test: Callable[[int], bool]) -> np.ndarray:
        import numpy as np

        return np.fromiter((test(b) for b in self.eligible), dtype=bool, count=len(self.eligible))

    def _levels(self, sources: Sequence[int], links: np.ndarray, is_end: Callable[[int], bool],
                through: Callable[[int], bool] | None) -> np.ndarray | None:
        """Breadth-first distance (by position; -1: not reached) of each broker from ``sources`` along
        ``links`` (a width matrix), passing only through brokers that ``through`` allows (all when None)
        and never through an end (a shortest chain stops at the first); None when no broker that
        ``is_end`` can be reached. A step is one matrix row test for the whole frontier."""
        import numpy as np

        ends = self._mask(is_end)
        passable = ~ends if through is None else self._mask(through) & ~ends
        level = np.full(len(self.eligible), -1, dtype=np.int32)
        frontier = np.zeros(len(self.eligible), dtype=bool)
        frontier[[self.pos[b] for b in sources]] = True
        level[frontier] = 0
        depth, found = 0, False
        while frontier.any():
            budget_check("searching chains of leader changes")
            reached = (links[frontier] > 0).any(axis=0) & (level < 0)
            depth += 1
            hit = reached & ends
            if hit.any():
                found = True
                level[hit] = depth
            frontier = reached & passable
            level[frontier] = depth
        return level if found else None

    def _path(self, start: int, links: np.ndarray, level: np.ndarray, arcs: dict[int, list[int]],
              is_end: Callable[[int], bool]) -> list[int] | None:
        """A chain from ``start`` one level further at each step to a broker that ``is_end``,
        depth first; ``arcs`` keeps each broker's untried next brokers (positions) across calls (a
        broker whose arcs run out leads nowhere in this phase)."""
        import numpy as np

        path = [self.pos[start]]
        while path:
            b = path[-1]
            if b not in arcs:
                arcs[b] = np.flatnonzero((links[b] > 0) & (level == level[b] + 1))[::-1].tolist()
            nexts = arcs[b]
            while nexts and not links[b, nexts[-1]]:
                nexts.pop()
            if not nexts:
                path.pop()
                if path:
                    arcs[path[-1]].pop()
                continue
            other = nexts[-1]
            path.append(other)
            if is_end(self.eligible[other]):
                return [self.eligible[k] for k in path]
        return None

    def _shift(self, path: list[int]) -> None:
        """Pass one leadership along each edge of ``path`` (given leader -> follower order)."""
        for u, v in zip(path, path[1:]):
            self.transfer(self._choice(self.out[u][v]), v)

    def _augment(self, over: Callable[[int], bool], is_end: Callable[[int], bool], forward: bool,
                 through: Callable[[int], bool] | None = None) -> None:
        """Augmenting paths in phases (Dinic's blocking flows): each phase measures distances from
        every broker that is ``over`` and follows only chains that step one distance further, so
        a phase costs about the pairs once plus its paths; phases end when no chain reaches an end."""
        links = self.width if forward else self.width.T
        while True:
            sources = [b for b in self.eligible if over(b)]
            level = self._levels(sources, links, is_end, through) if sources else None
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
        """Leaderships from brokers above their ``high`` to brokers below theirs along chains, then to
        brokers below their ``low`` from brokers above theirs."""
        self._augment(lambda b: self.count[b] > self.high[b], lambda b: self.count[b] < self.high[b], True)
        self._augment(lambda b: self.count[b] < self.low[b], lambda b: self.count[b] > self.low[b], False)

    def settle(self) -> int:
        """Pass leadership along every chain from a broker to one leading two or more fewer until none is
        left; returns the levels that had work. From the highest count down, level ``top`` runs blocking
        flows from the brokers at ``top`` to those at ``top - 2`` or fewer. A shortest such chain passes
        only through brokers at ``top - 1`` (from any other it could start or end sooner), so each level
        searches from its smaller side (forward from the sources, or back from the ends) through that
        one count, never the whole cluster. Once a level is done no broker at it reaches one two below,
        and lower levels cannot change that: a broker's reach is closed and holds only counts of at
        least one less, so no later chain enters it. At the end the counts are the most even the
        replica sets allow (the optimality condition of balanced semi-matchings)."""
        count = self.count
        worked = 0
        top = max(count.values(), default=0)
        while top - 2 >= min(count.values(), default=0):
            sources = sum(1 for b in self.eligible if count[b] == top)
            ends = sum(1 for b in self.eligible if count[b] <= top - 2)
            if sources and ends:
                def at(b: int, n: int = top) -> bool:
                    return count[b] == n

                def below(b: int, n: int = top - 2) -> bool:
                    return count[b] <= n

                def through(b: int, n: int = top - 1) -> bool:
                    return count[b] == n

                if sources <= ends:
                    self._augment(at, below, True, through)
                else:
                    self._augment(below, at, False, through)
                worked += 1
            top -= 1
        return worked

    def off_best(self) -> list[int]:
        """Brokers whose count is outside their ``low..high``: the replica sets allow no closer."""
        return [b for b in self.eligible if not self.low[b] <= self.count[b] <= self.high[b]]


def best_leader_counts(most: Mapping[int, int], total: int) -> dict[int, tuple[int, int]]:
    """The most even split of ``total`` preferred leaderships when broker ``b`` can lead at most
    ``most[b]`` (the partitions it holds): water-filling to the level ``L`` where
    ``sum(min(most[b], L)) <= total < sum(min(most[b], L + 1))``; each broker's best is
    ``(min(most[b], L), min(most[b], L + 1))``, a range of at most one. A broker that holds fewer than
    the level leads all it holds; the others share the rest within one."""
    if not most:
        return {}
    lo, hi = 0, max(most.values())
    while lo < hi:  # the largest level whose fill fits in total
        mid = (lo + hi + 1) // 2
        if sum(min(n, mid) for n in most.values()) <= total:
            lo = mid
        else:
            hi = mid - 1
    return {b: (min(n, lo), min(n, lo + 1)) for b, n in most.items()}


@dataclass(frozen=True)
class LeaderBalance:
    """What :func:`balance_leaders` left: the fewest and most preferred leaderships of an eligible broker,
    how many brokers lead every partition they hold, and how many sit outside the water level's range
    (:func:`best_leader_counts`) because the replica sets allow no closer."""

    fewest: int
    most: int
    leading_all_they_hold: int
    off_level: int

    def note(self) -> str | None:
        """The plan's note when leaders stay more than one apart, else None."""
        if self.most - self.fewest <= 1:
            return None
        return (f"preferred leaders: {self.fewest} to {self.most} per broker, the most even the replica sets allow "
                f"(no chain of leader changes passes a leadership to a broker leading two or more fewer); "
                f"{self.leading_all_they_hold} brokers lead every partition they hold, and {self.off_level} are "
                "kept from the share their replica counts alone would give by whom they share partitions with")


def balance_leaders(reps: list[list[int]], eligible: Sequence[int], moved: Collection[int],
                    fixed: Collection[int] = ()) -> LeaderBalance:
    """Reorder ``reps`` in place so no eligible broker could pass a preferred leadership along a chain of
    shared partitions to one leading two or more fewer: each leads within one of the best count its
    replicas allow (:func:`best_leader_counts` where the replica sets allow it, as close as they allow
    where not). Partitions led by a broker outside ``eligible``, and the partitions in ``fixed`` (their
    indexes), are left alone."""
    if not eligible:
        return LeaderBalance(0, 0, 0, 0)
    leadership = Leadership(reps, eligible, moved, fixed)
    leadership.greedy()
    leadership.augment()
    levels = leadership.settle()
    counts = leadership.count
    result = LeaderBalance(fewest=min(counts.values()), most=max(counts.values()),
                           leading_all_they_hold=sum(1 for b in eligible if counts[b] == leadership.most[b]),
                           off_level=len(leadership.off_best()))
    log.info("preferred leaders: %d to %d per broker after %d levels of the sweep; %d of %d brokers outside the "
             "water level's range", result.fewest, result.most, levels, result.off_level, len(eligible))
    return result
