"""A reassignment plan as a value: the moves (:class:`kafkaops.model.Move`), the load before and after,
Kafka's JSON, a diff, and which moves are of tiered topics (:meth:`ReassignmentPlan.with_storage`)."""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from kafkaops.model import Cluster, ModelError, Move, TopicStorage
from kafkaops.reassign.planner.errors import PlanInputError


def _spread(values: Mapping[int, int], brokers: Iterable[int]) -> int:
    counts = [values.get(b, 0) for b in brokers]
    return max(counts) - min(counts) if counts else 0


def _topic_spread(counts: Mapping[int, int], brokers: Sequence[int], members: frozenset[int]) -> int:
    """:func:`_spread` for a topic's counts: a topic on fewer brokers than ``members`` has a
    minimum of 0, without a pass over every broker."""
    held = [n for b, n in counts.items() if b in members and n]
    if len(held) < len(members):
        return max(held, default=0)
    return _spread(counts, brokers)


@dataclass(frozen=True)
class LoadStats:
    """Replicas, preferred leaders and bytes per broker, and each topic's replica spread (most
    minus fewest replicas of the topic on one broker) over the ``balanced`` brokers."""

    replicas: Mapping[int, int]
    leaders: Mapping[int, int]
    bytes: Mapping[int, int]
    topic_spread: Mapping[str, int]
    balanced: tuple[int, ...]

    @classmethod
    def measure(cls, rows: Iterable[tuple[str, Sequence[int], int]], brokers: Sequence[int],
                balanced: Sequence[int]) -> LoadStats:
        """Stats of (topic, replicas, size) rows over ``brokers``."""
        replicas = dict.fromkeys(brokers, 0)
        leaders = dict.fromkeys(brokers, 0)
        sizes = dict.fromkeys(brokers, 0)
        per_topic: dict[str, Counter[int]] = {}
        for topic, reps, size in rows:
            leaders[reps[0]] += 1
            topic_counts = per_topic.setdefault(topic, Counter())
            for b in reps:
                replicas[b] += 1
                sizes[b] += size
                topic_counts[b] += 1
        members = frozenset(balanced)
        spread = {t: _topic_spread(c, balanced, members) for t, c in sorted(per_topic.items())}
        return cls(replicas, leaders, sizes, spread, tuple(balanced))

    @property
    def replica_spread(self) -> int:
        return _spread(self.replicas, self.balanced)

    @property
    def leader_spread(self) -> int:
        return _spread(self.leaders, self.balanced)

    @property
    def byte_spread(self) -> int:
        return _spread(self.bytes, self.balanced)

    @property
    def max_topic_spread(self) -> int:
        return max(self.topic_spread.values(), default=0)

    def to_dict(self) -> dict[str, Any]:
        def keyed(m: Mapping[Any, int]) -> dict[str, int]:
            return {str(k): v for k, v in m.items()}

        return {"replicas": keyed(self.replicas), "leaders": keyed(self.leaders), "bytes": keyed(self.bytes),
                "topic_spread": dict(self.topic_spread), "balanced": list(self.balanced)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LoadStats:
        def ints(m: Mapping[str, int]) -> dict[int, int]:
            return {int(k): int(v) for k, v in m.items()}

        return cls(ints(data["replicas"]), ints(data["leaders"]), ints(data["bytes"]),
                   dict(data["topic_spread"]), tuple(data["balanced"]))


def _human(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return str(n)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


@dataclass(frozen=True)
class ReassignmentPlan:
    """What to change (``moves``, changed partitions only) and what it does to the load.

    ``kind`` is ``scale-out``, ``rebalance`` or ``drain``; ``lower_bound`` is the fewest replica
    moves any plan of that kind needs. ``cluster`` (the cluster planned on, with new brokers
    added) is kept out of equality; :attr:`after` applies the moves to it. ``notes`` say where
    a goal was bounded at scale (see :func:`~kafkaops.reassign.planner.refine.even_topics`).
    """

    kind: str
    moves: tuple[Move, ...]
    stats_before: LoadStats
    stats_after: LoadStats
    lower_bound: int
    new_brokers: tuple[int, ...] = ()
    drained: tuple[int, ...] = ()
    excluded: tuple[int, ...] = ()
    notes: tuple[str, ...] = ()
    cluster: Cluster | None = field(default=None, compare=False, repr=False)
    #: a plan made of parts, each with its replica moves counted apart (a drain, then the rebalance after it)
    part_moves: tuple[tuple[str, int], ...] = ()
    #: where the moved topics keep their data, as read from their configs (:meth:`with_storage`); empty when
    #: not read (a plan from Kafka's JSON, or made before they were read)
    storage: tuple[TopicStorage, ...] = ()

    def with_storage(self, storage: Iterable[TopicStorage]) -> ReassignmentPlan:
        """This plan with its moves sized by what their new replicas copy once the topics' storage is known:
        a tiered topic's (remote storage on) the leader's local log, others their size
        (:attr:`kafkaops.model.PartitionAssignment.copy_bytes`). The same moves, the cluster marked; pure."""
        found = tuple(sorted({s.topic: s for s in (*self.storage, *storage)}.values(), key=lambda s: s.topic))
        if self.cluster is None:
            raise PlanInputError("this plan carries no cluster (it was read without one), so its moves cannot be "
                                 "sized by the leaders' local logs; plan again from the cluster")
        cluster = self.cluster.with_storage(found)
        moves = tuple(cluster.partition(*m.topic_partition).move_to(m.after, m.before) for m in self.moves)
        return replace(self, moves=moves, cluster=cluster, storage=found)

    @property
    def tiered_moves(self) -> tuple[Move, ...]:
        """The moves of partitions of tiered topics that copy data: their new replicas copy the leader's local log only."""
        return tuple(m for m in self.moves if m.tiered and m.adding)

    def tiered_note(self) -> str:
        """How many moving partitions are tiered and what their copies are, in words; empty when none."""
        tiered = self.tiered_moves
        if not tiered:
            return ""
        moving = sum(1 for m in self.moves if m.adding)
        local = sum(m.bytes for m in tiered)
        return (f"{len(tiered)} of {_count(moving, 'moving partition')} tiered (remote storage on): their new "
                f"replicas copy the leader's local log only, {_human(local)} of the {_human(self.bytes_to_move)}")

    @property
    def replica_moves(self) -> int:
        """Replicas placed on a broker that did not hold them: the data the plan copies."""
        return sum(len(m.adding) for m in self.moves)

    @property
    def leader_changes(self) -> int:
        return sum(m.leader_changed for m in self.moves)

    @property
    def leader_only(self) -> int:
        """Partitions whose replicas stay and only their order changes, for a new preferred leader: no data
        moves for them."""
        return sum(1 for m in self.moves if not m.adding and not m.removing)

    @property
    def bytes_to_move(self) -> int:
        return sum(m.bytes for m in self.moves)

    @cached_property
    def after(self) -> Cluster:
        """The cluster once the plan ran, leaders at the preferred replica."""
        if self.cluster is None:
            raise PlanInputError("this plan carries no cluster (it was read without one); plan again from "
                                 "the cluster to get the cluster after it")
        return self.cluster.with_assignments({m.topic_partition: m.after for m in self.moves})

    def to_kafka_json(self, *, log_dirs: bool = False) -> dict[str, Any]:
        """The ``kafka-reassign-partitions --execute`` input for the changed partitions."""
        partitions = []
        for m in self.moves:
            entry: dict[str, Any] = {"topic": m.topic, "partition": m.partition, "replicas": list(m.after)}
            if log_dirs:
                entry["log_dirs"] = ["any"] * len(m.after)
            partitions.append(entry)
        return {"version": 1, "partitions": partitions}

    def rollback_kafka_json(self) -> dict[str, Any]:
        """The reassignment that puts the changed partitions back as they were."""
        return {"version": 1, "partitions": [{"topic": m.topic, "partition": m.partition,
                                              "replicas": list(m.before)} for m in self.moves]}

    def diff(self) -> tuple[str, ...]:
        """One line per changed partition, e.g. ``orders-3: [1,2,3] -> [1,4,3]``."""
        return tuple(m.line() for m in self.moves)

    def bound_note(self) -> str:
        """The replica moves against :attr:`lower_bound`, in words that never contradict the count.

        The bound counts replicas only (an even replica count on the brokers that take them);
        rack-awareness can leave new brokers a smaller share, and evening out topics, racks or the
        brokers that stay can take more moves."""
        n, bound = self.replica_moves, self.lower_bound
        if self.kind == "drain":
            one = len(self.drained) == 1
            holder = f"the drained {'broker holds' if one else 'brokers hold'}"
            parts = dict(self.part_moves)
            drain = parts.get("drain", n)
            after = (f"; then {parts['rebalance after']} to even out the brokers that stay (rebalance after)"
                     if "rebalance after" in parts else "")
            if not bound:
                return (f"{holder} no replicas" + (after or f"; {n} to even out the brokers that stay")) if n else \
                    "none needed"
            held = f"the {bound} {holder}"
            if drain <= bound:
                return f"{held}, no more{after}"
            why = "to spread partitions whose racks were short" if parts else "to even out the brokers that stay"
            return f"{held} and {drain - bound} more {why}{after}"
        if n == bound:
            return "the fewest possible" if n else "none needed"
        if n < bound:
            racks = self.cluster is None or len(self.cluster.racks) > 1
            why = "rack-aware placement" if racks else "the planning goals"
            whom = "other brokers" if not self.new_brokers else \
                "the new broker" if len(self.new_brokers) == 1 else "the new brokers"
            return f"an even replica count would move {bound} onto {whom}; {why} allows {n}"
        return f"{n - bound} more than the {bound} an even replica count needs, to keep topics and racks even"

    def summary(self, *, notes: bool = True) -> str:
        """E.g. ``scale-out: 3 partitions change, 3 replica moves (the fewest possible), 1 leader change,
        8.5 MiB to copy``, then the plan's notes (``notes=False``: without them)."""
        parts = len(self.moves)
        return (f"{self.kind}: {parts} {'partition changes' if parts == 1 else 'partitions change'}, "
                f"{_count(self.replica_moves, 'replica move')} ({self.bound_note()}), "
                f"{_count(self.leader_changes, 'leader change')}"
                + (f" ({self.leader_only} of them leader-only, no data)" if self.leader_only else "")
                + f", {_human(self.bytes_to_move)} to copy"
                + "".join(f"; {note}" for note in ((self.tiered_note(), *self.notes) if notes else ()) if note))

    def table(self) -> tuple[str, ...]:
        """Replicas, leaders and bytes per broker, before -> after, with the spreads below."""
        before, after = self.stats_before, self.stats_after
        brokers = sorted(set(before.replicas) | set(after.replicas))
        rows = [("broker", "replicas", "leaders", "bytes")]
        for b in brokers:
            tag = " (new)" if b in self.new_brokers else " (drained)" if b in self.drained else \
                " (excluded)" if b in self.excluded else ""
            rows.append((f"{b}{tag}",
                         f"{before.replicas.get(b, 0)} -> {after.replicas.get(b, 0)}",
                         f"{before.leaders.get(b, 0)} -> {after.leaders.get(b, 0)}",
                         f"{_human(before.bytes.get(b, 0))} -> {_human(after.bytes.get(b, 0))}"))
        rows.append(("spread", f"{before.replica_spread} -> {after.replica_spread}",
                     f"{before.leader_spread} -> {after.leader_spread}",
                     f"{_human(before.byte_spread)} -> {_human(after.byte_spread)}"))
        widths = [max(len(r[c]) for r in rows) for c in range(4)]
        lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
        lines.append(f"largest per-topic replica spread: {before.max_topic_spread} -> {after.max_topic_spread}")
        return tuple(lines)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "lower_bound": self.lower_bound, "new_brokers": list(self.new_brokers),
                "drained": list(self.drained), "excluded": list(self.excluded), "notes": list(self.notes),
                "moves": [m.to_dict() for m in self.moves], "stats_before": self.stats_before.to_dict(),
                "stats_after": self.stats_after.to_dict(),
                "cluster": self.cluster.to_dict() if self.cluster is not None else None,
                "part_moves": [[name, n] for name, n in self.part_moves],
                "storage": [s.to_dict() for s in self.storage]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ReassignmentPlan:
        try:
            return cls(kind=data["kind"], moves=tuple(Move.from_dict(m) for m in data["moves"]),
                       stats_before=LoadStats.from_dict(data["stats_before"]),
                       stats_after=LoadStats.from_dict(data["stats_after"]),
                       lower_bound=int(data["lower_bound"]), new_brokers=tuple(data.get("new_brokers", ())),
                       drained=tuple(data.get("drained", ())), excluded=tuple(data.get("excluded", ())),
                       notes=tuple(data.get("notes", ())),
                       cluster=Cluster.from_dict(data["cluster"]) if data.get("cluster") else None,
                       part_moves=tuple((str(name), int(n)) for name, n in data.get("part_moves") or ()),
                       storage=tuple(TopicStorage.from_dict(s) for s in data.get("storage") or ()))
        except (KeyError, TypeError, ValueError, ModelError) as err:
            raise PlanInputError(f"cannot read a reassignment plan from this dict: {err!r}; expected the shape "
                                 "of ReassignmentPlan.to_dict()") from err
