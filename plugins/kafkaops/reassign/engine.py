"""One reassignment engine: the small steps of a safe partition reassignment, and a blocking loop over them.

    observe              the desired replicas against the cluster: done, in flight (resumed), pending;
                         refuses bad input and moves in flight elsewhere before anything changes
    next_batch           (pure) the batch to submit next; none while a move is in flight
    submit               hand a batch to Kafka
    progress             how far moves got: partitions done, bytes copied, rate, ETA, and the receiving
                         brokers (:class:`Receiver`: up or down, their log dirs' free bytes)
    plan_throttles       the throttles moves need, in a :class:`ThrottleRecord` (values to restore)
    set_throttles        set them
    plan_throttle_removal  (pure) undoing a record, given the throttle ledger and the brokers online
    remove_throttles     undo it as planned, each broker apart, the ledger saved whatever fails
    cancel               revert moves in flight and remove their throttles
    (cordons)            a drain's brokers cordoned for the run and lifted at its end (:mod:`kafkaops.reassign.cordons`)

Two callers run the same steps: :class:`Executor` (``kafkaops execute``, :func:`execute`) loops
over them, blocking and cancellable, and :mod:`kafkaops.reassign.steps` runs them as Airflow tasks
(set throttles, the batches operator with its progress trigger, remove throttles).

The input is the desired replica lists, ``{(topic, partition): (broker, ...)}`` (from a planner's
plan: ``{m.topic_partition: m.after for m in plan.moves}``). Nothing changes unless ``dry_run=False``. Every
round observes the cluster (current replicas and the reassignments in flight), so a run killed
half-way is resumed by running it again: moves already done or in flight are waited for, never
resubmitted, and no local state is needed.

Throttles are set the way Kafka's ``kafka-reassign-partitions`` sets them (the rates on every
broker of the moving partitions, the existing replicas as leader-throttled and the adding replicas
as follower-throttled), recorded, and removed at the end, on error and on cancel. A rate that
cannot be removed (its broker is down) goes into the throttle ledger of
:mod:`kafkaops.platform.state`; the next run on the cluster deletes it. Only the adapter,
:mod:`kafkaops.platform.kafka`, talks to Kafka. Every submission refuses replication-factor changes where the
brokers can (Kafka 4.1+, :func:`kafkaops.platform.kafka.reassignments.alter_partition_reassignments`).
"""
from __future__ import annotations

import logging
import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from kafkaops.errors import KafkaOpsError, KafkaUnreachable, UnknownTopic
from kafkaops.model import Cluster, ModelError, Move, Reassignment, TopicPartition
from kafkaops.platform import store
from kafkaops.platform.kafka import configs, connection, metadata, reassignments
from kafkaops.platform.render import human_bytes, utc_time
from kafkaops.reassign import cordons
from kafkaops.reassign.cordons import CordonLift, CordonRecord

log = logging.getLogger(__name__)

_T = TypeVar("_T")


LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
RATE_KEYS = (LEADER_RATE, FOLLOWER_RATE)
REPLICA_KEYS = (LEADER_REPLICAS, FOLLOWER_REPLICAS)

#: The longest config value Kafka takes, in UTF-8 bytes: its request readers refuse a longer string field (every
#: generated reader checks ``length > 0x7fff``, Kafka 3.9 and 4.4 alike) and the KRaft ``ConfigRecord`` that keeps
#: a topic's value cannot hold one. A throttled-replica list longer than this is refused whole.
MAX_CONFIG_VALUE_BYTES = 32_767

#: The throttle ledger: broker id (a string, as JSON keeps it) -> rate keys kafkaops set there and could not remove.
Ledger = Mapping[str, Iterable[str]]


class ReassignmentError(KafkaOpsError):
    """A reassignment that cannot start, finish or be undone as asked."""


class InvalidReassignment(ReassignmentError):
    """Refused before any change: bad parameters, unknown partitions or broker ids."""


class ReassignmentConflict(InvalidReassignment):
    """Another reassignment of a planned partition is in flight."""


class ReassignmentStalled(ReassignmentError):
    """A batch did not finish within its timeout; its moves are still in flight."""


class ReassignmentCancelled(ReassignmentError):
    """The run was cancelled; the moves in flight were reverted."""


class ThrottlesLeft(ReassignmentError):
    """A teardown left throttles behind; ``removal`` says what was undone and what stays."""

    def __init__(self, message: str, removal: ThrottleRemoval) -> None:
        super().__init__(message)
        self.removal = removal


def _name(key: TopicPartition) -> str:
    return f"{key[0]}-{key[1]}"


# -- values ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Observation:
    """The desired replicas as the cluster shows them: partitions already as desired (``done``),
    moves in flight to the desired replicas (``resumed``: waited for, never resubmitted) and moves
    still to submit (``pending``), on the cluster ``before`` (sizes included)."""

    before: Cluster
    done: tuple[TopicPartition, ...]
    resumed: tuple[Move, ...]
    pending: tuple[Move, ...]


@dataclass(frozen=True)
class Batch:
    """Moves submitted together: batch ``index`` (from 1) of ``of``."""

    index: int
    moves: tuple[Move, ...]
    of: int

    @property
    def label(self) -> str:
        return f"batch {self.index}/{self.of}"

    @property
    def keys(self) -> tuple[TopicPartition, ...]:
        return tuple(m.topic_partition for m in self.moves)

    @property
    def bytes(self) -> int:
        return sum(m.bytes for m in self.moves)

    def moves_per_broker(self) -> dict[int, int]:
        return dict(sorted(Counter(b for m in self.moves for b in m.brokers).items()))


@dataclass(frozen=True)
class Receiver:
    """A broker receiving replicas of moves in flight, as a progress poll saw it: ``to_copy``, the bytes still
    to arrive; ``online``, registered with the controller; its log dirs' ``total_bytes`` and ``usable_bytes``
    and how many are ``offline_dirs`` (Kafka took them offline: full or failing), as they answered at
    ``seen_at`` (Unix time; None: they did not answer, e.g. the broker is down). A broker whose only log dir
    fills stops: so a stalled wait names each receiver, and the last free bytes it showed."""

    broker: int
    to_copy: int
    online: bool = True
    total_bytes: int | None = None
    usable_bytes: int | None = None
    offline_dirs: int = 0
    seen_at: float | None = None

    @property
    def short_of_room(self) -> bool:
        """Fewer bytes free than still to arrive (as last seen)."""
        return self.usable_bytes is not None and self.usable_bytes < self.to_copy

    @property
    def in_trouble(self) -> bool:
        return not self.online or self.offline_dirs > 0 or self.short_of_room

    def remembering(self, earlier: Receiver | None) -> Receiver:
        """This poll's view, with the log dirs ``earlier`` saw when this poll had none (the broker is down)."""
        if self.seen_at is not None or earlier is None or earlier.seen_at is None:
            return self
        return replace(self, total_bytes=earlier.total_bytes, usable_bytes=earlier.usable_bytes,
                       offline_dirs=earlier.offline_dirs, seen_at=earlier.seen_at)

    def __str__(self) -> str:
        """E.g. ``broker 5: down; last seen 2026-11-30 03:12:04 UTC with 1.1 MiB free of 8.0 MiB; 9.3 MiB
        still to copy onto it``."""
        disk = ""
        if self.seen_at is not None and self.usable_bytes is not None:
            disk = (f"{human_bytes(self.usable_bytes)} free of {human_bytes(self.total_bytes or 0)}"
                    + (f", {self.offline_dirs} log dir(s) offline (full or failing)" if self.offline_dirs else ""))
        if self.online:
            state = disk or "up, its log dirs did not answer"
        else:
            at = utc_time(self.seen_at) if self.seen_at else ""
            state = "down" + (f"; last seen {at} with {disk}" if disk else "; its log dirs never answered")
        short = " (not enough room)" if self.short_of_room else ""
        return f"broker {self.broker}: {state}; {human_bytes(self.to_copy)} still to copy onto it{short}"

    def to_dict(self) -> dict[str, Any]:
        return {"broker": self.broker, "to_copy": self.to_copy, "online": self.online,
                "total_bytes": self.total_bytes, "usable_bytes": self.usable_bytes,
                "offline_dirs": self.offline_dirs, "seen_at": self.seen_at}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Receiver:
        def number(key: str) -> int | None:
            return None if data.get(key) is None else int(data[key])

        seen = data.get("seen_at")
        return cls(int(data["broker"]), int(data["to_copy"]), bool(data.get("online", True)), number("total_bytes"),
                   number("usable_bytes"), int(data.get("offline_dirs") or 0), None if seen is None else float(seen))


def receivers_advice(receivers: Iterable[Receiver]) -> str:
    """What to do about the receivers in trouble before resuming ('' when none is): start the ones down,
    free space on the full ones (a broker whose only log dir fills stops)."""
    down = sorted(r.broker for r in receivers if not r.online)
    full = sorted(r.broker for r in receivers if r.online and (r.short_of_room or r.offline_dirs))
    full_down = sorted(r.broker for r in receivers if not r.online and r.short_of_room)
    steps = []
    if full or full_down:
        steps.append(f"free space on the log dirs of broker(s) {sorted({*full, *full_down})} (or give them larger "
                     "ones)")
    if down:
        steps.append(f"start broker(s) {down}" + (" (a broker whose log dir filled stops)" if full_down else ""))
    return "; ".join(steps)


@dataclass(frozen=True)
class Progress:
    """How far a reassignment got. Bytes count each added replica, in-flight ones as far as copied;
    ``receivers``, the brokers receiving the moves in flight (empty when not polled)."""

    partitions_done: int
    partitions_total: int
    partitions_in_flight: int
    bytes_done: int
    bytes_total: int
    elapsed_s: float | None = None
    receivers: tuple[Receiver, ...] = ()

    @property
    def done(self) -> bool:
        return self.partitions_done == self.partitions_total

    @property
    def rate_bytes_per_s(self) -> float | None:
        if not self.elapsed_s or self.elapsed_s <= 0:
            return None
        return self.bytes_done / self.elapsed_s

    @property
    def eta_s(self) -> float | None:
        if self.done or self.bytes_done >= self.bytes_total:
            return 0.0
        rate = self.rate_bytes_per_s
        return (self.bytes_total - self.bytes_done) / rate if rate else None

    @property
    def percent(self) -> float:
        """Bytes copied of those to copy; partitions done when nothing is to copy."""
        if self.bytes_total:
            return 100.0 * self.bytes_done / self.bytes_total
        return 100.0 * self.partitions_done / self.partitions_total if self.partitions_total else 100.0

    def __str__(self) -> str:
        """One progress line, e.g. ``42% (3.1 MiB of 7.4 MiB), 4/6 partitions done, 2 moving, 1.20 MB/s,
        ETA 00:01:10`` (the rate in MB/s, as the throttle is given)."""
        rate, eta = self.rate_bytes_per_s, self.eta_s
        return (f"{self.percent:.0f}% ({human_bytes(self.bytes_done)} of {human_bytes(self.bytes_total)}), "
                f"{self.partitions_done}/{self.partitions_total} partitions done, {self.partitions_in_flight} moving"
                + (f", {rate / 1e6:.2f} MB/s" if rate is not None else "")
                + f", ETA {clock(eta) if eta is not None else 'unknown yet'}")


def clock(seconds: float | None) -> str:
    """``00:01:10`` (hours grow past 99); ``-`` when unknown. Rounded up: 0.2 s is ``00:00:01``."""
    if seconds is None:
        return "-"
    total = math.ceil(max(float(seconds), 0.0))
    return f"{total // 3600:02d}:{total % 3600 // 60:02d}:{total % 60:02d}"


@dataclass
class ProgressLog:
    """When a progress line is worth logging: the first, any whose progress changed, and otherwise
    one every ``every_s`` seconds, so a long wait shows it is alive without a line per poll."""

    every_s: float = 30.0
    _mark: tuple[int, int] | None = field(default=None, init=False)
    _at: float | None = field(default=None, init=False)

    def due(self, progress: Progress, now: float) -> bool:
        """Whether to log ``progress`` at ``now``."""
        mark = (progress.partitions_done, progress.bytes_done)
        if mark != self._mark or self._at is None or now - self._at >= self.every_s:
            self._mark, self._at = mark, now
            return True
        return False


def _ledger_rates(ledger: Ledger) -> set[tuple[int, str]]:
    return {(int(b), str(k)) for b, keys in ledger.items() for k in keys}


@dataclass(frozen=True)
class ThrottleRecord:
    """The throttles a run set, so exactly those can be removed, also by another process
    (:meth:`to_dict`/:meth:`from_dict`). ``rates``: ``(broker, key, value to restore or None to
    delete)``; ``replicas``: ``(topic, key, entries added)`` with entries ``partition:broker``."""

    rates: tuple[tuple[int, str, str | None], ...] = ()
    replicas: tuple[tuple[str, str, tuple[str, ...]], ...] = ()

    @property
    def empty(self) -> bool:
        return not self.rates and not self.replicas

    @property
    def brokers(self) -> tuple[int, ...]:
        return tuple(sorted({b for b, _, _ in self.rates}))

    @property
    def topics(self) -> tuple[str, ...]:
        return tuple(sorted({t for t, _, _ in self.replicas}))

    def merged(self, other: ThrottleRecord) -> ThrottleRecord:
        """Both records; for a rate in both, this record's value to restore (the older) wins."""
        rates = {(b, k): prior for b, k, prior in other.rates}
        rates.update({(b, k): prior for b, k, prior in self.rates})
        entries: dict[tuple[str, str], dict[str, None]] = {}
        for topic, key, items in self.replicas + other.replicas:
            entries.setdefault((topic, key), {}).update(dict.fromkeys(items))
        return ThrottleRecord(rates=tuple((b, k, p) for (b, k), p in sorted(rates.items())),
                              replicas=tuple((t, k, tuple(e)) for (t, k), e in sorted(entries.items())))

    def inheriting(self, ledger: Ledger) -> ThrottleRecord:
        """This record with the rates the throttle ``ledger`` names to be deleted, not restored:
        the value found there is an earlier kafkaops run's throttle, not someone else's setting."""
        stale = _ledger_rates(ledger)
        return replace(self, rates=tuple((b, k, None if (b, k) in stale else prior) for b, k, prior in self.rates))

    def to_dict(self) -> dict[str, Any]:
        return {"rates": [list(r) for r in self.rates], "replicas": [[t, k, list(e)] for t, k, e in self.replicas]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ThrottleRecord:
        try:
            return cls(rates=tuple((int(b), str(k), p) for b, k, p in data.get("rates", ())),
                       replicas=tuple((str(t), str(k), tuple(e)) for t, k, e in data.get("replicas", ())))
        except (TypeError, ValueError) as err:
            raise InvalidReassignment(f"cannot read a throttle record from {str(dict(data))[:200]}: {err}; "
                                      "pass what ThrottleRecord.to_dict() returned") from err


@dataclass(frozen=True)
class ThrottleRemoval:
    """Undoing a run's throttles: broker rates to ``restore`` to their value before the run or to
    ``delete``; the run's rates to ``keep`` (their broker is offline or did not answer) and earlier
    runs' ledger rates ``carried`` on offline brokers, both left for the next run to delete;
    ``replicas`` entries to take out of topics and ``clear_topics`` whose throttled-replica lists go
    whole. :func:`plan_throttle_removal` decides it; :func:`remove_throttles` returns it as carried
    out, a broker that failed moved from restore/delete to keep and named in ``failures``."""

    restore: tuple[tuple[int, str, str], ...] = ()
    delete: tuple[tuple[int, str], ...] = ()
    keep: tuple[tuple[int, str], ...] = ()
    carried: tuple[tuple[int, str], ...] = ()
    replicas: tuple[tuple[str, str, tuple[str, ...]], ...] = ()
    clear_topics: tuple[str, ...] = ()
    failures: tuple[str, ...] = ()

    @property
    def brokers(self) -> tuple[int, ...]:
        """The brokers whose rates change."""
        return tuple(sorted({b for b, _, _ in self.restore} | {b for b, _ in self.delete}))

    @property
    def topics(self) -> tuple[str, ...]:
        return tuple(sorted({t for t, _, _ in self.replicas} | set(self.clear_topics)))

    @property
    def left(self) -> dict[str, list[str]]:
        """The run's rates that stay, by broker."""
        return _by_broker(self.keep)

    @property
    def ledger(self) -> dict[str, list[str]]:
        """The throttle ledger after: every rate that stays, the run's and earlier runs'."""
        return _by_broker(set(self.keep) | set(self.carried))

    def broker_ops(self, broker: int) -> list[configs.ConfigOp]:
        return ([configs.ConfigOp(k, "SET", v) for b, k, v in self.restore if b == broker]
                + [configs.ConfigOp(k, "DELETE") for b, k in self.delete if b == broker])

    def failed(self, brokers: Iterable[int], error: str) -> ThrottleRemoval:
        """This removal with the changes of ``brokers`` not made: their rates stay (kept)."""
        gone = set(brokers)
        stay = {(b, k) for b, k, _ in self.restore if b in gone} | {(b, k) for b, k in self.delete if b in gone}
        return replace(self, restore=tuple(r for r in self.restore if r[0] not in gone),
                       delete=tuple(d for d in self.delete if d[0] not in gone),
                       keep=tuple(sorted(set(self.keep) | stay)), failures=self.failures + (error,))


def _by_broker(rates: Iterable[tuple[int, str]]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for broker, key in sorted(set(rates)):
        found.setdefault(str(broker), []).append(key)
    return found


@dataclass(frozen=True)
class ExecutionReport:
    """What a run found and did. A dry run has the batches it would submit and ``submitted`` empty;
    a run has the batches it submitted."""

    dry_run: bool
    already_done: tuple[TopicPartition, ...]
    resumed: tuple[Move, ...]
    batches: tuple[Batch, ...]
    submitted: tuple[TopicPartition, ...] = ()
    throttles: ThrottleRecord = ThrottleRecord()
    progress: Progress | None = None
    seconds: float = 0.0
    before: Cluster | None = field(default=None, repr=False, compare=False)
    cordons: CordonRecord = CordonRecord()
    cordons_lifted: CordonLift | None = None

    @property
    def moves(self) -> tuple[Move, ...]:
        return self.resumed + tuple(m for b in self.batches for m in b.moves)

    def summary(self) -> str:
        verb = "would submit" if self.dry_run else "submitted"
        return (f"{len(self.already_done)} partition(s) already as planned, {len(self.resumed)} in flight "
                f"(waited for, not resubmitted), {verb} {sum(len(b.moves) for b in self.batches)} in "
                f"{len(self.batches)} batch(es), {sum(b.bytes for b in self.batches) / 1e6:.1f} MB to copy")

    def to_dict(self) -> dict[str, Any]:
        return {"dry_run": self.dry_run, "already_done": [list(k) for k in self.already_done],
                "resumed": [m.to_dict() for m in self.resumed],
                "batches": [[m.to_dict() for m in b.moves] for b in self.batches],
                "submitted": [list(k) for k in self.submitted], "throttles": self.throttles.to_dict(),
                "cordons": self.cordons.to_dict(),
                "cordons_lifted": None if self.cordons_lifted is None else self.cordons_lifted.to_dict(),
                "seconds": self.seconds}


# -- pure steps ---------------------------------------------------------------------------------------

def normalize(desired: Mapping[TopicPartition, Iterable[int]]) -> dict[TopicPartition, tuple[int, ...]]:
    """The desired map with int broker ids, sorted by partition; bad shapes raise InvalidReassignment."""
    result: dict[TopicPartition, tuple[int, ...]] = {}
    for key, replicas in desired.items():
        try:
            topic, partition = key
            result[(str(topic), int(partition))] = tuple(int(b) for b in replicas)
        except (TypeError, ValueError) as err:
            raise InvalidReassignment(f"desired replicas {key!r}: {list(replicas) if replicas else replicas!r} "
                                      f"is not (topic, partition) -> broker ids ({err}); give e.g. "
                                      "{('orders', 3): (1, 4, 3)}") from err
    return dict(sorted(result.items()))


def problems(cluster: Cluster, desired: Mapping[TopicPartition, Sequence[int]]) -> tuple[list[str], Exception | None]:
    """What makes ``desired`` impossible on ``cluster`` (and the first underlying error)."""
    found: list[str] = []
    first: Exception | None = None
    registered = set(cluster.online_broker_ids)
    for key, replicas in desired.items():
        name = _name(key)
        try:
            cluster.partition(*key)
        except KafkaOpsError as err:
            found.append(str(err))
            first = first or err
            continue
        if not replicas:
            found.append(f"{name}: empty replica list; give at least one broker id")
            continue
        twice = sorted(b for b, n in Counter(replicas).items() if n > 1)
        if twice:
            found.append(f"{name}: replicas {list(replicas)} name broker(s) {twice} more than once; "
                         "list each broker once")
        unknown = sorted(set(replicas) - registered)
        if unknown:
            found.append(f"{name}: replicas {list(replicas)} name broker(s) {unknown} that are not registered; "
                         f"registered brokers are {sorted(registered)}")
    return found, first


def classify(cluster: Cluster, in_flight: Mapping[TopicPartition, Reassignment], desired: Mapping[TopicPartition, Sequence[int]]
             ) -> tuple[tuple[TopicPartition, ...], tuple[Move, ...], tuple[Move, ...], list[str]]:
    """Split ``desired`` by what is observed: already done, in flight to the desired replicas
    (resumed), still to submit (pending), and in flight elsewhere (conflicts, as messages)."""
    done, resumed, pending, conflicts = [], [], [], []
    for key, after in desired.items():
        current = cluster.partition(*key)
        moving = in_flight.get(key)
        if moving is not None:
            if moving.target == tuple(after):
                resumed.append(current.move_to(after, moving.original))
            else:
                conflicts.append(f"{_name(key)}: a reassignment to {list(moving.target)} is in flight, not the "
                                 f"plan's {list(after)}; wait for it to finish or cancel it with "
                                 f"kafkaops.reassign.engine.cancel(conn, [{key!r}])")
        elif current.replicas == tuple(after):
            done.append(key)
        else:
            pending.append(current.move_to(after))
    return tuple(done), tuple(resumed), tuple(pending), conflicts


def sole_in_sync(moves: Iterable[Move], cluster: Cluster) -> frozenset[TopicPartition]:
    """The moves that take away every in-sync replica of their partition (e.g. a drained broker that is a
    partition's only in-sync copy): until their new replicas catch up, the data is only there."""
    found = set()
    for m in moves:
        try:
            isr = cluster.partition(*m.topic_partition).isr
        except (ModelError, UnknownTopic):  # not in the cluster observed: nothing known of its ISR
            continue
        if isr and set(isr) <= set(m.removing):
            found.add(m.topic_partition)
    return frozenset(found)


def plan_batches(moves: Iterable[Move], *, max_moves_per_broker: int, max_moves_total: int,
                 first: Collection[TopicPartition] = ()) -> tuple[Batch, ...]:
    """First-fit, the moves in ``first`` (see :func:`sole_in_sync`) before the others, largest moves
    first within each: each batch has at most ``max_moves_total`` moves and at most
    ``max_moves_per_broker`` moves that add or remove a replica on any one broker."""
    batches: list[list[Move]] = []
    loads: list[Counter[int]] = []
    for move in sorted(moves, key=lambda m: (m.topic_partition not in first, -m.bytes, m.topic_partition)):
        for batch, load in zip(batches, loads):
            if len(batch) < max_moves_total and all(load[b] < max_moves_per_broker for b in move.brokers):
                break
        else:
            batch, load = [], Counter()
            batches.append(batch)
            loads.append(load)
        batch.append(move)
        load.update(move.brokers)
    return tuple(Batch(i, tuple(sorted(b, key=lambda m: m.topic_partition)), len(batches))
                 for i, b in enumerate(batches, start=1))


def next_batch(seen: Observation, *, max_moves_per_broker: int, max_moves_total: int, submitted: int = 0
               ) -> Batch | None:
    """The batch to submit after the ``submitted`` ones before it: None while a move of the plan is
    in flight (it is waited for, never resubmitted) and when nothing is pending; else the first of
    :func:`plan_batches` over the pending moves, numbered on from ``submitted``, ``of`` counting it
    and the batches still to come."""
    if seen.resumed or not seen.pending:
        return None
    batches = plan_batches(seen.pending, max_moves_per_broker=max_moves_per_broker, max_moves_total=max_moves_total,
                           first=sole_in_sync(seen.pending, seen.before))
    return replace(batches[0], index=submitted + 1, of=submitted + len(batches))


def measure(moves: Iterable[Move], cluster: Cluster, in_flight: Mapping[TopicPartition, Reassignment],
            replica_sizes: Mapping[tuple[str, int, int], int], elapsed_s: float | None = None,
            log_dirs: Mapping[int, metadata.LogDirs] | None = None, seen_at: float | None = None) -> Progress:
    """Progress of ``moves`` on an observed cluster; ``replica_sizes`` are the adding replicas' bytes so far.
    With ``log_dirs`` (of the adding brokers that answered, at ``seen_at``), each receiving broker of a move in
    flight as a :class:`Receiver`."""
    done = moving = bytes_done = bytes_total = total = 0
    to_copy: dict[int, int] = {}
    for m in moves:
        total += 1
        bytes_total += m.bytes
        if m.topic_partition in in_flight:
            moving += 1
            for b in m.adding:
                copied = min(replica_sizes.get((m.topic, m.partition, b), 0), m.size_bytes or 0)
                bytes_done += copied
                to_copy[b] = to_copy.get(b, 0) + (m.size_bytes or 0) - copied
        elif cluster.partition(*m.topic_partition).replicas == m.after:
            done += 1
            bytes_done += m.bytes
    receivers: list[Receiver] = []
    if log_dirs is not None:
        online = set(cluster.online_broker_ids)
        for b in sorted(to_copy):
            receiver = Receiver(b, to_copy[b], b in online)
            disk = log_dirs.get(b)
            if disk is not None:  # it answered
                receiver = replace(receiver, total_bytes=disk.total_bytes, usable_bytes=disk.usable_bytes,
                                   offline_dirs=disk.offline, seen_at=seen_at)
            receivers.append(receiver)
    return Progress(done, total, moving, bytes_done, bytes_total, elapsed_s, tuple(receivers))


def moves_for(before: Cluster, desired: Mapping[TopicPartition, Iterable[int]]) -> tuple[Move, ...]:
    """Every desired partition as a move from its replicas in ``before`` (no-op moves included), sized by what
    a new replica copies (:attr:`kafkaops.model.PartitionAssignment.copy_bytes`)."""
    return tuple(before.partition(*key).move_to(after) for key, after in normalize(desired).items())


def throttle_entries(moves: Iterable[Move]) -> tuple[tuple[int, ...], dict[tuple[str, str], list[str]]]:
    """Brokers to rate-limit and ``(topic, config key) -> partition:broker`` entries, as Kafka's
    reassignment tool computes them: existing replicas lead-throttled, adding ones follower-throttled.
    Moves that only reorder replicas copy nothing and are left out."""
    brokers: set[int] = set()
    entries: dict[tuple[str, str], dict[str, None]] = {}
    for m in moves:
        if not m.adding:
            continue
        brokers.update(m.before + m.after)
        for key, replicas in ((LEADER_REPLICAS, m.before), (FOLLOWER_REPLICAS, m.adding)):
            entries.setdefault((m.topic, key), {}).update(dict.fromkeys(f"{m.partition}:{b}" for b in replicas))
    return tuple(sorted(brokers)), {k: list(v) for k, v in sorted(entries.items())}


def throttle_scope(moves: Iterable[Move]) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """Every broker that holds or gets a replica of ``moves``, and their topics: what a teardown
    clears when no :class:`ThrottleRecord` of the run survived."""
    moves = list(moves)
    return (tuple(sorted({b for m in moves for b in (*m.before, *m.after)})),
            tuple(sorted({m.topic for m in moves})))


def plan_throttle_removal(record: ThrottleRecord | None, ledger: Ledger, online: Iterable[int], *,
                          brokers: Iterable[int] = (), topics: Iterable[str] = ()) -> ThrottleRemoval:
    """Undoing ``record`` given the throttle ``ledger`` and the brokers ``online``. Without a record
    (none survived the run), every rate on ``brokers`` is deleted and the throttled-replica lists of
    ``topics`` are cleared whole; with one, its entries are taken out of its topics.

    Every rate of the record and of the ledger lands in exactly one place. On an offline broker:
    kept (the record's) or carried (only the ledger's), and the ledger after names it. On an
    online broker: restored when it had a value before the run that the ledger does not name, else
    deleted: a value the ledger names was an earlier kafkaops run's throttle, not someone else's
    setting, and so is a ledger rate the record does not name. The ledger after holds offline
    brokers' rates only."""
    clear: tuple[str, ...] = ()
    if record is None:
        record = ThrottleRecord(rates=tuple((b, k, None) for b in sorted(set(brokers)) for k in RATE_KEYS))
        clear = tuple(sorted(set(topics)))
    up = set(online)
    stale = _ledger_rates(ledger)
    restore: list[tuple[int, str, str]] = []
    delete: list[tuple[int, str]] = []
    keep: list[tuple[int, str]] = []
    carried: list[tuple[int, str]] = []
    for broker, key, prior in record.rates:
        if broker not in up:
            keep.append((broker, key))
        elif prior is None or (broker, key) in stale:
            delete.append((broker, key))
        else:
            restore.append((broker, key, prior))
    for broker, key in sorted(stale - {(b, k) for b, k, _ in record.rates}):
        (delete if broker in up else carried).append((broker, key))
    return ThrottleRemoval(restore=tuple(restore), delete=tuple(sorted(delete)), keep=tuple(sorted(keep)),
                           carried=tuple(carried), replicas=record.replicas, clear_topics=clear)


def _items(value: str | None) -> list[str]:
    return [x.strip() for x in (value or "").split(",") if x.strip()]


# -- steps that talk to Kafka -------------------------------------------------------------------------------

def _refusal(partitions: int, submitted: int) -> str:
    if not submitted:
        return f"refusing the reassignment of {partitions} partition(s), nothing was changed"
    return (f"stopping the reassignment of {partitions} partition(s) after {submitted} batch(es) (their moves "
            "stay; run again to resume once this is mended)")


def fenced_brokers(cluster: Cluster, desired: Mapping[TopicPartition, Sequence[int]]) -> list[int]:
    """The brokers ``desired`` names that hold replicas on ``cluster`` but are not registered now:
    fenced (a missed heartbeat under load) or restarting, unlike an id the cluster never had."""
    named = {b for replicas in desired.values() for b in replicas}
    return sorted(named & set(cluster.offline_broker_ids))


def observe(conn: connection.KafkaConnection, desired: Mapping[TopicPartition, Iterable[int]], *, submitted: int = 0,
            fenced_grace_s: float = 15.0) -> Observation:
    """Snapshot the desired partitions' topics and the reassignments in flight, and split the
    desired replicas by what is there (:func:`classify`). Refuses partitions or brokers the cluster
    lacks and moves of a desired partition in flight elsewhere, changing nothing; ``submitted``
    (the batches this run submitted before) words the refusal. A named broker that holds replicas
    but is not registered (:func:`fenced_brokers`) is observed again for up to ``fenced_grace_s``
    before the refusal: a broker fenced for a moment does not stop a run, an id never seen does at once."""
    desired = normalize(desired)
    refusal = _refusal(len(desired), submitted)
    deadline = time.monotonic() + fenced_grace_s
    waited = False
    while True:
        try:
            before = metadata.snapshot(conn, topics=sorted({t for t, _ in desired}), offsets=True, sizes=True,
                                      groups=False)
        except UnknownTopic as err:
            raise InvalidReassignment(f"{refusal}: {err}") from err
        found, first = problems(before, desired)
        fenced = fenced_brokers(before, desired)
        if not (found and fenced) or time.monotonic() >= deadline:
            break
        if not waited:
            log.warning("broker(s) %s hold replicas but are not registered (fenced, or restarting); "
                        "observing again for up to %.0f s before refusing", fenced, fenced_grace_s)
            waited = True
        time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
    if found:
        if fenced:
            found.insert(0, f"broker(s) {fenced} hold replicas but stayed unregistered for {fenced_grace_s:.0f} s; "
                         "check their logs and `kafka-metadata-quorum.sh describe --status`, then run again")
        more = f"; and {len(found) - 20} more" if len(found) > 20 else ""
        raise InvalidReassignment(f"{refusal}: {'; '.join(found[:20])}{more}") from first
    # a tiered topic's new replica copies the leader's local log only: its moves are sized so
    before = before.with_storage(configs.describe_topic_storage(conn, {t for t, _ in desired}).values())
    in_flight = reassignments.list_partition_reassignments(conn)
    done, resumed, pending, conflicts = classify(before, in_flight, desired)
    if conflicts:
        raise ReassignmentConflict(f"{refusal}: {'; '.join(conflicts[:20])}")
    others = sorted(set(in_flight) - set(desired))
    if others:
        log.warning("%d other reassignment(s) in flight share the brokers, e.g. %s", len(others),
                    ", ".join(_name(k) for k in others[:5]))
    return Observation(before, done, resumed, pending)


def submit(conn: connection.KafkaConnection, batch: Batch) -> None:
    """Hand ``batch``'s moves to Kafka, which then copies on its own."""
    guarded = reassignments.alter_partition_reassignments(conn, {m.topic_partition: m.after for m in batch.moves})
    log.info("batch %d/%d: %d partitions moving, %d bytes to copy (replication-factor changes %s)", batch.index,
             batch.of, len(batch.moves), batch.bytes,
             "refused" if guarded else "not refusable: the brokers speak AlterPartitionReassignments v0, before 4.1")


def progress(conn: connection.KafkaConnection, moves: Sequence[Move], *, elapsed_s: float | None = None) -> Progress:
    """How far ``moves`` got (:func:`measure` on the live cluster), without blocking on them: for
    a polling trigger as for a progress line. ``elapsed_s`` since the run started gives the rate."""
    keys = [m.topic_partition for m in moves]
    if not keys:
        return Progress(0, 0, 0, 0, 0, elapsed_s)
    in_flight = reassignments.list_partition_reassignments(conn, keys)
    cluster = metadata.snapshot(conn, topics=sorted({t for t, _ in keys}), offsets=False, sizes=False, groups=False)
    moving = [m for m in moves if m.topic_partition in in_flight and m.adding]
    # a dead adding broker cannot say how far it got: count it as no progress, not as an error
    online = set(cluster.online_broker_ids)
    sizes, log_dirs = metadata.replicas_and_log_dirs(conn, [m.topic_partition for m in moving],
                                                     {b for m in moving for b in m.adding} & online)
    return measure(moves, cluster, in_flight, sizes, elapsed_s, log_dirs, time.time())


def throttle_lists_too_long(entries: Mapping[tuple[str, str], Sequence[str]],
                            current: Mapping[str, Mapping[str, str]]) -> list[tuple[str, str, int, int]]:
    """``(topic, key, bytes, entries)`` of each throttled-replica list that, with the entries a topic holds
    already (``current``: topic -> key -> value), would be longer than :data:`MAX_CONFIG_VALUE_BYTES`.
    A list set to ``*`` is left alone, so it never is."""
    too_long = []
    for (topic, key), items in sorted(entries.items()):
        held = current.get(topic, {}).get(key)
        if held == "*":
            continue
        merged = list(dict.fromkeys([*_items(held), *items]))
        size = len(",".join(merged).encode())
        if size > MAX_CONFIG_VALUE_BYTES:
            too_long.append((topic, key, size, len(merged)))
    return too_long


def plan_throttles(conn: connection.KafkaConnection, moves: Iterable[Move], *, inherit: bool = False,
                   ledger: Ledger | None = None) -> ThrottleRecord:
    """The record of the throttles ``moves`` need, with the rate values to restore read from the
    brokers. With ``inherit`` (resuming a killed run) every rate found set is the killed run's, and
    with the throttle ``ledger`` the rates it names are earlier runs': deleted afterwards, not
    restored. Entries of a topic throttled with ``*`` are left alone. A topic whose throttled-replica
    list would pass :data:`MAX_CONFIG_VALUE_BYTES` is refused (:class:`InvalidReassignment`) before any
    change, unless ``inherit``: a cancel or a resume must go on, and logs it."""
    brokers, entries = throttle_entries(moves)
    if not brokers:
        return ThrottleRecord()
    rates = configs.describe_configs(conn, "broker", brokers, keys=RATE_KEYS)
    topics = configs.describe_configs(conn, "topic", sorted({t for t, _ in entries}), keys=REPLICA_KEYS)
    too_long = throttle_lists_too_long(entries, topics)
    if too_long:
        named = "; ".join(f"{t} {k}: {size:,} bytes for {n:,} entries" for t, k, size, n in too_long[:10])
        more = f"; and {len(too_long) - 10} more" if len(too_long) > 10 else ""
        if not inherit:
            first = too_long[0][0]
            raise InvalidReassignment(
                f"the throttled-replica lists of {len(too_long)} topic key(s) would pass Kafka's "
                f"{MAX_CONFIG_VALUE_BYTES:,}-byte config value, which brokers refuse: {named}{more}. Nothing was "
                f"changed. Throttle such a topic whole first (kafka-configs.sh --alter --entity-type topics "
                f"--entity-name {first} --add-config 'leader.replication.throttled.replicas=*,"
                "follower.replication.throttled.replicas=*'; kafkaops leaves a '*' list alone, remove it after the "
                "run), or plan fewer of its partitions per run")
        log.warning("throttled-replica lists past %d bytes (%s%s): setting them will fail", MAX_CONFIG_VALUE_BYTES,
                    named, more)
    record = ThrottleRecord(
        rates=tuple((b, k, None if inherit else rates[str(b)].get(k)) for b in brokers for k in RATE_KEYS),
        replicas=tuple((t, k, tuple(e)) for (t, k), e in entries.items() if topics[t].get(k) != "*"))
    return record.inheriting(ledger or {})


def set_throttles(conn: connection.KafkaConnection, record: ThrottleRecord, throttle_bytes_per_s: int) -> None:
    """Set the rates on the record's brokers and add its entries to its topics (other values stay)."""
    rate = str(int(throttle_bytes_per_s))
    broker_ops: dict[str | int, list[configs.ConfigOp]] = {}
    for broker, key, _ in record.rates:
        broker_ops.setdefault(broker, []).append(configs.ConfigOp(key, "SET", rate))
    topic_ops: dict[str | int, list[configs.ConfigOp]] = {}
    for topic, key, items in record.replicas:
        topic_ops.setdefault(topic, []).append(configs.ConfigOp(key, "APPEND", ",".join(items)))
    configs.incremental_alter_configs(conn, "broker", broker_ops)
    configs.incremental_alter_configs(conn, "topic", topic_ops)
    log.info("throttle %.1f MB/s (%s B/s) set on %d broker(s) and %d topic(s)", throttle_bytes_per_s / 1e6,
             f"{int(throttle_bytes_per_s):,}", len(broker_ops), len(topic_ops))


def remove_throttles(conn: connection.KafkaConnection, record: ThrottleRecord | None, *, brokers: Iterable[int] = (),
                     topics: Iterable[str] = (), cluster_id: str | None = None) -> ThrottleRemoval:
    """Undo ``record`` (or, without one, every throttle on ``brokers`` and ``topics``) as
    :func:`plan_throttle_removal` decides on the cluster's throttle ledger and its brokers online
    now: each broker's rates apart, then the topics', so one failure leaves the rest undone. The
    ledger (of ``cluster_id``, else the cluster's own id) is saved whatever fails: a rate that stays
    is in it, for the next run to delete. Returns what was done; raises :class:`ThrottlesLeft`
    when a rate or topic entry stays. For teardown tasks in any process."""
    brokers, topics = tuple(brokers), tuple(topics)
    ledger: Ledger = store.current().throttle_ledger(cluster_id) if cluster_id else {}
    removal: ThrottleRemoval | None = None
    undone: set[int] = set()
    try:
        found_id, _, registered = metadata.describe_cluster(conn)
        if cluster_id is None:
            cluster_id = found_id
            ledger = store.current().throttle_ledger(cluster_id)
        removal = plan_throttle_removal(record, ledger, {b.id for b in registered}, brokers=brokers, topics=topics)
        undone = set(removal.brokers)
        for broker in removal.brokers:
            try:
                configs.incremental_alter_configs(conn, "broker", {broker: removal.broker_ops(broker)})
            except KafkaOpsError as err:
                removal = removal.failed([broker], f"broker {broker}: {err}")
            undone.discard(broker)
        removal = _remove_topic_throttles(conn, removal)
    finally:
        if removal is None:  # nothing was asked of the cluster: every rate stays
            removal = plan_throttle_removal(record, ledger, (), brokers=brokers, topics=topics)
        if undone:  # interrupted half-way: the brokers not reached yet keep their rates
            removal = removal.failed(undone, f"broker(s) {sorted(undone)}: not reached")
        if cluster_id is not None:
            store.current().save_throttle_ledger(cluster_id, removal.ledger)
    if removal.keep or removal.failures:
        raise ThrottlesLeft(_left_message(removal, cluster_id), removal)
    log.info("throttles removed from %d broker(s) and %d topic(s)", len(removal.brokers), len(removal.topics))
    return removal


def _remove_topic_throttles(conn: connection.KafkaConnection, removal: ThrottleRemoval) -> ThrottleRemoval:
    """Take the removal's entries out of its topics (a list with nothing else left is deleted) and
    delete the lists of its ``clear_topics``; a topic deleted meanwhile took its throttles along."""
    ops: dict[str | int, list[configs.ConfigOp]] = {
        t: [configs.ConfigOp(k, "DELETE") for k in REPLICA_KEYS] for t in removal.clear_topics}
    failures: list[str] = []
    for topic in sorted({t for t, _, _ in removal.replicas} - set(removal.clear_topics)):
        try:
            current = configs.describe_configs(conn, "topic", [topic], keys=REPLICA_KEYS)[topic]
        except UnknownTopic:
            continue
        except KafkaOpsError as err:
            failures.append(f"topic {topic}: {err}")
            continue
        for t, key, items in removal.replicas:
            if t == topic:
                remaining = [x for x in _items(current.get(key)) if x not in items]
                ops.setdefault(topic, []).append(configs.ConfigOp(key, "SUBTRACT", ",".join(items)) if remaining
                                                 else configs.ConfigOp(key, "DELETE"))
    try:
        configs.incremental_alter_configs(conn, "topic", ops)
    except KafkaOpsError as err:
        failures.append(str(err))
    return replace(removal, failures=removal.failures + tuple(failures)) if failures else removal


def _left_message(removal: ThrottleRemoval, cluster_id: str | None) -> str:
    parts = []
    if removal.keep:
        parts.append(f"throttle rates stay on broker(s) {sorted(int(b) for b in removal.left)}, offline or not "
                     f"answering; the throttle ledger of cluster {cluster_id or '(unknown)'} names them and the "
                     "next kafkaops run on that cluster deletes them once the broker is back")
    if removal.failures:
        parts.append(f"what failed: {'; '.join(removal.failures)[:1000]}")
    return (f"could not remove every throttle (topics {list(removal.topics)}): {'; '.join(parts)}; to retry now, "
            "run kafkaops.reassign.engine.remove_throttles(conn, record) once the brokers answer")


def cancel(conn: connection.KafkaConnection, partitions: Iterable[TopicPartition], *,
           throttles: ThrottleRecord | None = None) -> tuple[TopicPartition, ...]:
    """Revert the reassignments in flight of ``partitions`` (finished ones stay) and remove their
    throttles: ``throttles`` if given, else the ones such moves get. Returns the partitions reverted."""
    in_flight = reassignments.list_partition_reassignments(conn, list(partitions))
    record = throttles
    if record is None:
        record = plan_throttles(conn, [Move(r.topic, r.partition, r.original, r.target) for r in in_flight.values()],
                                inherit=True)
    try:
        reassignments.alter_partition_reassignments(conn, dict.fromkeys(in_flight))
    finally:
        remove_throttles(conn, record)
    log.info("cancelled %d reassignment(s) in flight", len(in_flight))
    return tuple(in_flight)


# -- the blocking loop ------------------------------------------------------------------------------------

class Executor:
    """Runs ``desired`` on a cluster, blocking: a loop over the engine's steps (see the module
    docstring). Each round observes, waits for moves in flight or submits the next batch (throttled
    first), and waits for it; throttles are removed at the end, on error and on cancel.

    ``max_moves_per_broker`` caps the moves of a batch that add or remove a replica on one broker,
    ``max_moves_total`` the moves of a batch. ``batch_timeout_s`` (default: 3x the batch's bytes at
    the throttle, plus 60 s) bounds the wait for one batch. ``on_throttles`` gets the
    :class:`ThrottleRecord` before each change of throttles, e.g. to keep it for a teardown task.
    ``fence`` is called before every change to the cluster (throttles, cordons, submissions); it raises when
    the caller no longer holds the cluster's lock (:meth:`kafkaops.platform.store.Store.check_fence`).
    ``cordon``: brokers being drained, whose log dirs are cordoned for the run (Kafka 4.3+,
    :mod:`kafkaops.reassign.cordons`) and given back their value at its end, on error and on cancel too.
    ``unanswered_s``: how long a poll of the moves is asked again while the cluster does not answer (a broker
    or the active controller lost and a new one elected: the moves copy on meanwhile) before the run fails.
    """

    def __init__(self, conn: connection.KafkaConnection, desired: Mapping[TopicPartition, Iterable[int]], *,
                 throttle_bytes_per_s: int, max_moves_per_broker: int = 5, max_moves_total: int = 20,
                 dry_run: bool = True, batch_timeout_s: float | None = None, poll_interval_s: float = 2.0,
                 on_throttles: Callable[[ThrottleRecord], None] | None = None,
                 fence: Callable[[str], object] | None = None, cordon: Iterable[int] = (),
                 unanswered_s: float = 60.0) -> None:
        bad = []
        if not throttle_bytes_per_s or throttle_bytes_per_s <= 0:
            bad.append(f"throttle_bytes_per_s is {throttle_bytes_per_s}; give a positive rate in bytes per "
                       "second, e.g. 10_000_000 for 10 MB/s")
        for name, value in (("max_moves_per_broker", max_moves_per_broker), ("max_moves_total", max_moves_total)):
            if value < 1:
                bad.append(f"{name} is {value}; give 1 or more")
        if batch_timeout_s is not None and batch_timeout_s <= 0:
            bad.append(f"batch_timeout_s is {batch_timeout_s}; give a positive number of seconds or None")
        if bad:
            raise InvalidReassignment("refusing the reassignment, nothing was changed: " + "; ".join(bad))
        self.conn = conn
        self.desired = normalize(desired)
        self.throttle_bytes_per_s = int(throttle_bytes_per_s)
        self.max_moves_per_broker = max_moves_per_broker
        self.max_moves_total = max_moves_total
        self.dry_run = dry_run
        self.batch_timeout_s = batch_timeout_s
        self.poll_interval_s = poll_interval_s
        self.on_throttles = on_throttles
        self.fence = fence or (lambda action: None)
        self.unanswered_s = unanswered_s
        self.throttles = ThrottleRecord()
        self.cordon = tuple(sorted({int(b) for b in cordon}))
        self.cordons = cordons.CordonRecord()
        self.cordons_lifted: cordons.CordonLift | None = None
        self._cancelled = threading.Event()
        self._moves: tuple[Move, ...] = ()
        self._started = time.monotonic()
        self._cluster_id: str | None = None
        self._ledger: Ledger = {}

    def cancel(self) -> None:
        """Ask a running :meth:`execute` (in another thread) to revert its moves in flight and stop."""
        self._cancelled.set()

    def plan(self) -> ExecutionReport:
        """Observe the cluster, refuse bad input, and return the batches a run would submit (a dry run)."""
        return self._report(observe(self.conn, self.desired))

    def _report(self, seen: Observation) -> ExecutionReport:
        batches = plan_batches(seen.pending, max_moves_per_broker=self.max_moves_per_broker,
                               max_moves_total=self.max_moves_total, first=sole_in_sync(seen.pending, seen.before))
        report = ExecutionReport(dry_run=True, already_done=seen.done, resumed=seen.resumed, batches=batches,
                                 before=seen.before)
        self._moves = report.moves + tuple(Move(t, p, self.desired[(t, p)], self.desired[(t, p)])
                                           for t, p in seen.done)  # already done: counted, nothing to copy
        log.info("reassignment of %d partition(s): %s", len(self.desired), report.summary())
        for batch in batches:
            log.info("batch %d/%d: %d partitions, %d bytes, moves per broker %s", batch.index, batch.of,
                     len(batch.moves), batch.bytes, batch.moves_per_broker())
        return report

    def execute(self) -> ExecutionReport:
        """Plan, then (unless a dry run) run rounds until every desired partition is as desired:
        observe; wait for the moves in flight, or throttle, submit and wait for the next batch.
        Throttles set are removed and cordons lifted on success, error and cancel."""
        self._started = time.monotonic()
        self.throttles = ThrottleRecord()
        self.cordons, self.cordons_lifted = cordons.CordonRecord(), None
        seen = observe(self.conn, self.desired)
        report = self._report(seen)
        if self.dry_run:
            log.info("dry run: nothing changed")
            return report
        self._cluster_id = seen.before.cluster_id
        self._ledger = store.current().throttle_ledger(self._cluster_id) if self._cluster_id else {}
        submitted: list[Batch] = []
        try:
            self._cordon()
            while True:
                if seen.resumed:
                    log.info("resuming: %d partition(s) already moving, waiting without resubmitting",
                             len(seen.resumed))
                    self._throttle(seen.resumed, inherit=True)
                    self._wait(seen.resumed, "moves in flight")
                else:
                    batch = next_batch(seen, max_moves_per_broker=self.max_moves_per_broker,
                                       max_moves_total=self.max_moves_total, submitted=len(submitted))
                    if batch is None:
                        break
                    if self._cancelled.is_set():
                        raise ReassignmentCancelled(
                            f"cancelled before {batch.label}; {sum(len(b.moves) for b in submitted)} partition(s) "
                            "were moved; run again to resume")
                    self._throttle(batch.moves)
                    self.fence(f"submit batch {batch.index}/{batch.of}")
                    submit(self.conn, batch)
                    submitted.append(batch)
                    self._wait(batch.moves, batch.label)
                seen = self._answered("the desired replicas", lambda: observe(self.conn, self.desired,
                                                                            submitted=len(submitted)))
        except BaseException:
            self._release(quiet=True)
            raise
        self._release(quiet=False)
        final = self.progress()
        log.info("reassignment done: %s", final)
        return replace(report, dry_run=False, batches=tuple(submitted),
                       submitted=tuple(k for b in submitted for k in b.keys), throttles=self.throttles,
                       progress=final, seconds=time.monotonic() - self._started, cordons=self.cordons,
                       cordons_lifted=self.cordons_lifted)

    def progress(self) -> Progress:
        """Progress of this run's moves (after :meth:`plan`), without blocking on them."""
        return progress(self.conn, self._moves, elapsed_s=time.monotonic() - self._started)

    def _throttle(self, moves: Sequence[Move], *, inherit: bool = False) -> None:
        record = plan_throttles(self.conn, moves, inherit=inherit, ledger=self._ledger)
        self.throttles = self.throttles.merged(record)
        if self.on_throttles is not None:
            self.on_throttles(self.throttles)
        self.fence("set throttles")
        set_throttles(self.conn, record, self.throttle_bytes_per_s)

    def _cordon(self) -> None:
        """Cordon the log dirs of the brokers being drained (nothing on brokers older than Kafka 4.3: the
        record's ``skipped`` says why)."""
        record = cordons.plan_cordons(self.conn, self.cordon)
        if record.empty:
            self.cordons = record
            return
        self.fence("cordon the drained brokers' log dirs")
        self.cordons = record
        cordons.set_cordons(self.conn, record)

    def _release(self, *, quiet: bool) -> None:
        """Remove the throttles and lift the cordons, each tried whatever the other did; ``quiet`` (the run
        fails already) logs what could not be undone instead of raising it."""
        failed: list[KafkaOpsError] = []
        try:
            remove_throttles(self.conn, self.throttles, cluster_id=self._cluster_id)
        except KafkaOpsError as err:
            failed.append(err)
        try:
            self.cordons_lifted = cordons.lift_cordons(self.conn, self.cordons)
        except cordons.CordonsLeft as err:
            self.cordons_lifted = err.lift
            failed.append(err)
        except KafkaOpsError as err:
            failed.append(err)
        for error in failed[1:] if not quiet else failed:
            log.error("while %s, could not undo: %s", "failing" if quiet else "finishing", error)
        if failed and not quiet:
            raise failed[0]

    def _answered(self, what: str, call: Callable[[], _T], deadline: float | None = None) -> _T:
        """``call()``, asked again while the cluster does not answer (a broker or the active controller lost, a new
        one being elected; the moves copy on meanwhile) for up to :attr:`unanswered_s`, and not past ``deadline``."""
        since = time.monotonic()
        while True:
            try:
                return call()
            except KafkaOpsError as err:
                if not (isinstance(err, KafkaUnreachable) or err.retriable):
                    raise
                now = time.monotonic()
                if now - since >= self.unanswered_s or (deadline is not None and now >= deadline):
                    raise
                log.warning("no answer to %s for %.0f s (%s); asking again with new clients for up to %.0f s",
                            what, now - since, err, self.unanswered_s)
                if self._cancelled.wait(self.poll_interval_s):
                    raise
                self.conn.renew()  # the clients' metadata may name a broker or controller that is gone

    def _wait(self, moves: Sequence[Move], label: str) -> None:
        keys = [m.topic_partition for m in moves]
        timeout = self.batch_timeout_s or 60.0 + 3.0 * sum(m.bytes for m in moves) / self.throttle_bytes_per_s
        deadline = time.monotonic() + timeout
        lines = ProgressLog()
        while True:
            in_flight = self._answered(f"the reassignments in flight of {label}",
                                       lambda: reassignments.list_partition_reassignments(self.conn, keys), deadline)
            if self._cancelled.is_set():
                reassignments.alter_partition_reassignments(self.conn, dict.fromkeys(in_flight))
                raise ReassignmentCancelled(
                    f"cancelled during {label}: reverted {len(in_flight)} move(s) in flight "
                    f"({', '.join(_name(k) for k in in_flight) or 'none'}); finished moves stay; run again with "
                    "the same desired replicas to resume")
            if not in_flight:
                break
            progress = self._answered(f"the progress of {label}", self.progress, deadline)
            if lines.due(progress, time.monotonic()):
                log.info("%s: %s", label, progress)
            if time.monotonic() > deadline:
                raise self._stalled(in_flight, label, timeout)
            self._cancelled.wait(self.poll_interval_s)
        wrong = self._off_plan(moves)
        if wrong:
            raise ReassignmentError(f"{label} ended but {len(wrong)} partition(s) lack the planned replicas: "
                                    f"{'; '.join(wrong[:20])}; someone cancelled or changed them; run again to "
                                    "resubmit")
        log.info("%s: %d partitions done", label, len(keys))

    def _off_plan(self, moves: Sequence[Move], settle_s: float = 5.0) -> list[str]:
        """Moves whose replicas differ from the plan, given ``settle_s`` for metadata to catch up."""
        deadline = time.monotonic() + settle_s
        while True:
            cluster = self._answered("the moved partitions", lambda: metadata.snapshot(
                self.conn, topics=sorted({m.topic for m in moves}), offsets=False, sizes=False, groups=False))
            wrong = [f"{m.name}: replicas {list(cluster.partition(*m.topic_partition).replicas)} but plan {list(m.after)}"
                     for m in moves if cluster.partition(*m.topic_partition).replicas != m.after]
            if not wrong or time.monotonic() > deadline:
                return wrong
            time.sleep(0.5)

    def _stalled(self, in_flight: Mapping[TopicPartition, Reassignment], label: str, timeout: float) -> ReassignmentStalled:
        cluster = metadata.snapshot(self.conn, topics=sorted({t for t, _ in in_flight}), offsets=False, sizes=False,
                                   groups=False)
        details = []
        for key, moving in in_flight.items():
            p = cluster.partition(*key)
            missing = [r for r in p.replicas if r not in p.isr]
            details.append(f"{_name(key)} (adding {list(moving.adding)}, not in ISR: {missing})")
        try:
            receivers = self.progress().receivers
        except KafkaOpsError as err:  # the stall is the news: the receivers' state is a detail
            log.warning("the receiving brokers' log dirs could not be read: %s", err)
            receivers = ()
        advice = receivers_advice(receivers)
        return ReassignmentStalled(
            f"{label} did not finish within {timeout:.0f} s: {len(in_flight)} partition(s) still moving: "
            f"{'; '.join(details[:20])}"
            + (f"; receiving brokers: {'; '.join(str(r) for r in receivers)}" if receivers else "")
            + "; the moves stay in flight, no longer throttled. "
            + (f"Before resuming: {advice}; then" if advice else "Check those brokers' logs and disks, then")
            + " run again (with a higher throttle_bytes_per_s or batch_timeout_s) to keep waiting, or "
            "revert them with kafkaops.reassign.engine.cancel(conn, partitions)")


def execute(conn: connection.KafkaConnection, desired: Mapping[TopicPartition, Iterable[int]], *,
            throttle_bytes_per_s: int, dry_run: bool = True, **options: Any) -> ExecutionReport:
    """:meth:`Executor.execute` in one call; ``options`` are the other :class:`Executor` arguments."""
    return Executor(conn, desired, throttle_bytes_per_s=throttle_bytes_per_s, dry_run=dry_run,
                    **options).execute()
