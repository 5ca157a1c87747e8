"""The planner's working copy of an assignment and the replica moves it makes.

:class:`Placement` holds replica lists as mutable lists plus the per-broker and per-topic counts
the goals need, so that each move costs O(log) instead of a rescan. It never leaves the planner:
:mod:`kafkaops.reassign.planner.planning` turns the final lists into a :class:`ReassignmentPlan`.
"""
from __future__ import annotations

import heapq
import logging
from bisect import bisect_left
from collections import Counter
from collections.abc import Collection, Iterator, Mapping, Sequence

from kafkaops.model import Cluster
from kafkaops.reassign.planner.errors import PlanInfeasible
from kafkaops.reassign.planner.goals import Goals
from kafkaops.reassign.planner.topology import Topology
from kafkaops.reassign.planner.budget import check as budget_check

log = logging.getLogger(__name__)

SCAN_LIMIT = 256
"""Candidates looked at per (donor, topic) before that donor counts as unable to give the topic."""


class Placement:
    """Replica lists under edit, with the counts that make each move cheap."""

    def __init__(self, cluster: Cluster, topo: Topology, goals: Goals) -> None:
        self.topo = topo
        self.goals = goals
        parts = cluster.partitions
        self.names = [p.name for p in parts]
        self.topics = [p.topic for p in parts]
        self.sizes = [p.size_bytes or 0 for p in parts]
        self.sized = any(self.sizes)
        self.reps = [list(p.replicas) for p in parts]
        self.need = [topo.racks_needed(len(r)) for r in self.reps]
        self.rack = topo.racks
        self.eligible = frozenset(topo.eligible)
        self.drained = frozenset(topo.drained)
        count = dict.fromkeys(cluster.broker_ids, 0)
        held = dict.fromkeys(cluster.broker_ids, 0)
        per_topic: dict[int, dict[str, int]] = {b: {} for b in cluster.broker_ids}
        topic_total: dict[str, int] = {}
        fixed = frozenset(topo.fixed)
        for topic, size, reps in zip(self.topics, self.sizes, self.reps):
            for b in reps:
                count[b] += 1
                held[b] += size
                mine = per_topic[b]
                mine[topic] = mine.get(topic, 0) + 1
                if b not in fixed:
                    topic_total[topic] = topic_total.get(topic, 0) + 1
        self.count: Counter[int] = Counter(count)
        self.bytes: Counter[int] = Counter(held)
        self.per_topic: dict[int, Counter[str]] = {b: Counter(c) for b, c in per_topic.items()}
        self.topic_total: Counter[str] = Counter(topic_total)
        self.total = sum(self.count[b] for b in self.count if b not in topo.fixed)
        self.moved: set[int] = set()
        self.uneven_topics = 0
        """Topics :func:`~kafkaops.reassign.planner.refine.even_topics` left with a replica spread above one."""
        self.bounded_topics = 0
        """Of those, the topics whose last search stopped at a bound rather than running out of candidates."""
        self.level_caps: dict[str, int] = {}
        """Per topic, the most replicas of it a receiver should end with (set by
        :func:`~kafkaops.reassign.planner.levels.level_topics` for the topics it leveled): :meth:`balance` gives a
        receiver more of such a topic only when nothing else fits."""
        self.target: dict[int, int] = {}
        self.byte_target: dict[int, float] = {}
        self._cands: dict[tuple[int, str], list[tuple[int, int]]] = {}

    # -- state -----------------------------------------------------------------------------------
    def set_targets(self, targets: Mapping[int, int]) -> None:
        self.target = dict(targets)
        total_bytes = sum(self.bytes[b] for b in self.bytes if b not in self.topo.fixed)
        self.byte_target = {b: total_bytes * t / self.total if self.total else 0.0 for b, t in self.target.items()}

    def surplus(self, b: int) -> int:
        return self.count[b] - self.target.get(b, 0)

    def move(self, i: int, src: int, dst: int) -> None:
        """Replace ``src`` by ``dst`` in partition ``i``, in the same position (a leader's
        replacement leads)."""
        reps = self.reps[i]
        reps[reps.index(src)] = dst
        topic, size = self.topics[i], self.sizes[i]
        self.count[src] -= 1
        self.count[dst] += 1
        self.bytes[src] -= size
        self.bytes[dst] += size
        self.per_topic[src][topic] -= 1
        self.per_topic[dst][topic] += 1
        self.moved.add(i)
        entries = self._cands.get((src, topic))
        if entries:
            pos = bisect_left(entries, (size, i))
            if pos < len(entries) and entries[pos] == (size, i):
                del entries[pos]

    def rack_ok(self, i: int, src: int, dst: int) -> bool:
        """Whether replacing ``src`` by ``dst`` keeps partition ``i`` on enough racks."""
        rack = self.rack
        if rack[src] == rack[dst]:
            return True
        racks = {rack[b] for b in self.reps[i] if b != src}
        racks.add(rack[dst])
        return len(racks) >= self.need[i]

    # -- mandatory moves: drained brokers and rack spread ------------------------------------------
    def repair(self, prefer: Collection[int]) -> int:
        """Move every replica off drained brokers and off racks that hold too many replicas of one
        partition. Returns the number of replicas moved."""
        moves = 0
        drained = self.drained
        rack = self.rack
        for i, reps in enumerate(self.reps):
            if drained.isdisjoint(reps) and (self.need[i] == 1 or len({rack[b] for b in reps}) >= self.need[i]):
                continue  # nothing to leave, racks spread already
            leaving = [b for b in reps if b in drained]
            kept = [b for b in reps if b not in drained]
            short = self.need[i] - len({self.rack[b] for b in kept}) - len(leaving)
            while short > 0:
                victim = self._victim(kept)
                kept.remove(victim)
                leaving.append(victim)
                short -= 1
            pending = sorted(leaving, key=reps.index)
            budget_check("moving replicas off drained brokers and crowded racks")
            while pending:
                src = pending.pop(0)
                self.move(i, src, self._destination(i, src, pending, prefer))
                moves += 1
        return moves

    def _victim(self, kept: list[int]) -> int:
        racks = Counter(self.rack[b] for b in kept)
        crowded = [b for b in kept if racks[self.rack[b]] > 1]
        return max(crowded, key=lambda b: (b not in self.eligible, self.surplus(b), b))

    def _destination(self, i: int, src: int, pending: list[int], prefer: Collection[int]) -> int:
        reps = self.reps[i]
        others = {self.rack[b] for b in reps if b != src and b not in pending}
        need = self.need[i] - len(pending)
        free = [b for b in self.topo.eligible if b not in reps]
        fits = [b for b in free if len(others | {self.rack[b]}) >= need]
        if not fits:
            if not free:
                raise PlanInfeasible(
                    f"cannot place {self.names[i]}: every broker that can receive it ({list(self.topo.eligible)}) "
                    f"already holds a replica of it; add a broker or lower the RF")
            racks = sorted({self.rack[b] for b in free})
            raise PlanInfeasible(
                f"cannot place {self.names[i]}: it needs {self.need[i]} racks, its other replicas are on "
                f"{sorted(others)} and the brokers free to receive it are only on {racks}; add a broker "
                f"on another rack or lower the RF")
        return min(fits, key=lambda b: (b not in prefer, self.surplus(b), self.bytes[b], b))

    # -- balancing moves -------------------------------------------------------------------------
    def balance(self, receivers: Sequence[int], donors: Sequence[int], movable: Collection[str] | None) -> int:
        """Move replicas from ``donors`` above target to ``receivers`` below it, one at a time to
        the receiver furthest below, preferring the topics it lacks most and, with sizes, the
        sizes that even out bytes. Returns the number of replicas moved."""
        donors = [d for d in donors if self.surplus(d) > 0]
        receivers = [n for n in receivers if self.surplus(n) < 0]
        if not donors or not receivers:
            return 0
        self._index_candidates(donors, movable)
        self._donor_heaps: dict[str, dict[str, list[tuple[float, int]]]] = {}
        for (d, topic), entries in sorted(self._cands.items()):
            if entries:
                heap = self._donor_heaps.setdefault(topic, {}).setdefault(self.rack[d], [])
                heap.append((self._donor_key(d, topic), d))
        for racks in self._donor_heaps.values():
            for heap in racks.values():
                heapq.heapify(heap)
        topics = sorted(self._donor_heaps)
        topic_heaps = {n: [(self._receiver_key(n, t), t) for t in topics] for n in receivers}
        for topic_heap in topic_heaps.values():
            heapq.heapify(topic_heap)
        queue = [(self.surplus(n), n) for n in receivers]
        heapq.heapify(queue)
        moves = 0
        while queue:
            budget_check("filling the brokers below their share")
            _, n = heapq.heappop(queue)
            if self.surplus(n) >= 0:
                continue
            if self._receive_one(n, topic_heaps[n]):
                moves += 1
                heapq.heappush(queue, (self.surplus(n), n))
            else:
                log.info("broker %d stays %d replicas short: no donor partition fits it", n, -self.surplus(n))
        self._cands.clear()
        return moves

    def _index_candidates(self, donors: Sequence[int], movable: Collection[str] | None) -> None:
        self._cands.clear()
        wanted = set(donors)
        for i, (topic, size, reps) in enumerate(zip(self.topics, self.sizes, self.reps)):
            if movable is not None and topic not in movable:
                continue
            for b in reps:
                if b in wanted:
                    self._cands.setdefault((b, topic), []).append((size, i))
        for entries in self._cands.values():
            entries.sort()

    def _want(self, b: int, topic: str) -> float:
        return self.topic_total[topic] * self.target.get(b, 0) / self.total if self.total else 0.0

    def _donor_key(self, d: int, topic: str) -> float:
        """Donors give first the topics they hold most of beyond their share. The key changes only
        when ``d`` gives ``topic``, so heap entries never go stale; without the topic goal the
        donors furthest above target give first."""
        if self.goals.topic_spread:
            return self._want(d, topic) - self.per_topic[d][topic]
        return -self.surplus(d)

    def _receiver_key(self, n: int, topic: str) -> float:
        if not self.goals.topic_spread:
            return 0.0
        held = self.per_topic[n][topic]
        last = held >= self.level_caps.get(topic, held + 1)  # a leveled topic at its level: only when nothing else fits
        return held - self._want(n, topic) + (self.total + 1 if last else 0)

    def _receive_one(self, n: int, heap: list[tuple[float, str]]) -> bool:
        while heap:
            key, topic = heapq.heappop(heap)
            fresh = self._receiver_key(n, topic)
            if fresh != key:
                heapq.heappush(heap, (fresh, topic))
                continue
            if self._take_topic(n, topic):
                heapq.heappush(heap, (self._receiver_key(n, topic), topic))
                return True
        return False

    def _take_topic(self, n: int, topic: str) -> bool:
        racks = self._donor_heaps[topic]
        home = self.rack[n]
        order = ([home] if home in racks else []) + [r for r in sorted(racks) if r != home]
        for rack in order:
            heap = racks[rack]
            aside = []
            try:
                while heap:
                    key, d = heapq.heappop(heap)
                    entries = self._cands.get((d, topic))
                    if self.surplus(d) <= 0 or not entries:
                        continue
                    fresh = self._donor_key(d, topic)
                    if fresh != key:
                        heapq.heappush(heap, (fresh, d))
                        continue
                    pos = self._pick(entries, n, d)
                    if pos is None:
                        aside.append((key, d))
                        continue
                    self.move(entries[pos][1], d, n)
                    if self.surplus(d) > 0 and entries:
                        heapq.heappush(heap, (self._donor_key(d, topic), d))
                    return True
            finally:
                for item in aside:
                    heapq.heappush(heap, item)
        return False

    def ideal_size(self, n: int, d: int) -> float:
        """The size that evens bytes out: what the donor is above its byte share per replica it
        still gives, or, when the receiver lacks more per replica, halfway between the two."""
        if not (self.sized and self.goals.bytes):
            return 0.0
        take = (self.byte_target[n] - self.bytes[n]) / max(1, -self.surplus(n))
        give = (self.bytes[d] - self.byte_target[d]) / max(1, self.surplus(d))
        return max(0.0, give if give > take else (take + give) / 2)

    def _pick(self, entries: list[tuple[int, int]], n: int, d: int) -> int | None:
        """The candidate closest to the ideal size that ``n`` may take, preferring partitions no
        move touched yet (one new replica per partition keeps each reassignment small)."""
        fallback = None
        for pos in _nearest(entries, self.ideal_size(n, d)):
            i = entries[pos][1]
            if n not in self.reps[i] and self.rack_ok(i, d, n):
                if i not in self.moved:
                    return pos
                if fallback is None:
                    fallback = pos
        return fallback


def _nearest(entries: list[tuple[int, int]], ideal: float) -> Iterator[int]:
    """Positions of ``entries`` (sorted by size) from the size closest to ``ideal`` outwards."""
    hi = bisect_left(entries, (ideal, -1))
    lo = hi - 1
    for _ in range(SCAN_LIMIT):
        if hi < len(entries) and (lo < 0 or entries[hi][0] - ideal <= ideal - entries[lo][0]):
            yield hi
            hi += 1
        elif lo >= 0:
            yield lo
            lo -= 1
        else:
            return
