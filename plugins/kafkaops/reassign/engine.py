"""Run a partition reassignment safely: validated, batched, throttled, resumable, cancellable.

The input is the desired replica lists, ``{(topic, partition): (broker, ...)}`` (from a planner's
plan: ``{(m.topic, m.partition): m.after for m in plan.moves}``). Nothing changes unless
``dry_run=False``. Every run compares the desired lists with what it observes (current replicas
and the reassignments in flight), so a run killed half-way is resumed by running it again: moves
already done or in flight are waited for, never resubmitted, and no local state is needed.

Throttles are set before each batch the way Kafka's ``kafka-reassign-partitions`` sets them (the
rates on every broker of the moving partitions, the existing replicas as leader-throttled and the
adding replicas as follower-throttled), recorded in a :class:`ThrottleRecord`, and removed at the
end, on error and on cancel. Only :mod:`kafkaops.platform.admin` talks to Kafka.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from kafkaops.platform import admin
from kafkaops.errors import KafkaOpsError, UnknownTopic
from kafkaops.model import Cluster, Key

log = logging.getLogger(__name__)


LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
RATE_KEYS = (LEADER_RATE, FOLLOWER_RATE)
REPLICA_KEYS = (LEADER_REPLICAS, FOLLOWER_REPLICAS)


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


def _name(key: Key) -> str:
    return f"{key[0]}-{key[1]}"


# -- values ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PartitionMove:
    """One partition's change of replicas; ``size_bytes`` is its size before the move."""

    topic: str
    partition: int
    before: tuple[int, ...]
    after: tuple[int, ...]
    size_bytes: int = 0

    @property
    def key(self) -> Key:
        return (self.topic, self.partition)

    @property
    def name(self) -> str:
        return _name(self.key)

    @property
    def adding(self) -> tuple[int, ...]:
        return tuple(b for b in self.after if b not in self.before)

    @property
    def removing(self) -> tuple[int, ...]:
        return tuple(b for b in self.before if b not in self.after)

    @property
    def brokers(self) -> frozenset[int]:
        """The brokers that gain or lose a replica."""
        return frozenset(self.adding + self.removing)

    @property
    def bytes(self) -> int:
        """Bytes to copy: the partition's size for each replica added."""
        return self.size_bytes * len(self.adding)

    def to_dict(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "before": list(self.before),
                "after": list(self.after), "size_bytes": self.size_bytes}


@dataclass(frozen=True)
class Batch:
    """Moves submitted together; ``index`` counts from 1."""

    index: int
    moves: tuple[PartitionMove, ...]

    @property
    def keys(self) -> tuple[Key, ...]:
        return tuple(m.key for m in self.moves)

    @property
    def bytes(self) -> int:
        return sum(m.bytes for m in self.moves)

    def moves_per_broker(self) -> dict[int, int]:
        return dict(sorted(Counter(b for m in self.moves for b in m.brokers).items()))


@dataclass(frozen=True)
class Progress:
    """How far a reassignment got. Bytes count each added replica, in-flight ones as far as copied."""

    partitions_done: int
    partitions_total: int
    partitions_in_flight: int
    bytes_done: int
    bytes_total: int
    elapsed_s: float | None = None

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

    def __str__(self) -> str:
        rate, eta = self.rate_bytes_per_s, self.eta_s
        return (f"{self.partitions_done}/{self.partitions_total} partitions done, {self.partitions_in_flight} "
                f"moving, {self.bytes_done / 1e6:.1f}/{self.bytes_total / 1e6:.1f} MB"
                + (f", {rate / 1e6:.2f} MB/s" if rate is not None else "")
                + (f", ETA {eta:.0f} s" if eta is not None else ""))


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
class ExecutionReport:
    """What a run found and did. A dry run has the batches it would submit and ``submitted`` empty."""

    dry_run: bool
    already_done: tuple[Key, ...]
    resumed: tuple[PartitionMove, ...]
    batches: tuple[Batch, ...]
    submitted: tuple[Key, ...] = ()
    throttles: ThrottleRecord = ThrottleRecord()
    progress: Progress | None = None
    seconds: float = 0.0
    before: Cluster | None = field(default=None, repr=False, compare=False)

    @property
    def moves(self) -> tuple[PartitionMove, ...]:
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
                "seconds": self.seconds}


# -- pure steps ---------------------------------------------------------------------------------------

def normalize(desired: Mapping[Key, Iterable[int]]) -> dict[Key, tuple[int, ...]]:
    """The desired map with int broker ids, sorted by partition; bad shapes raise InvalidReassignment."""
    result: dict[Key, tuple[int, ...]] = {}
    for key, replicas in desired.items():
        try:
            topic, partition = key
            result[(str(topic), int(partition))] = tuple(int(b) for b in replicas)
        except (TypeError, ValueError) as err:
            raise InvalidReassignment(f"desired replicas {key!r}: {list(replicas) if replicas else replicas!r} "
                                      f"is not (topic, partition) -> broker ids ({err}); give e.g. "
                                      "{('orders', 3): (1, 4, 3)}") from err
    return dict(sorted(result.items()))


def problems(cluster: Cluster, desired: Mapping[Key, Sequence[int]]) -> tuple[list[str], Exception | None]:
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


def classify(cluster: Cluster, in_flight: Mapping[Key, admin.Reassignment],
             desired: Mapping[Key, Sequence[int]]
             ) -> tuple[tuple[Key, ...], tuple[PartitionMove, ...], tuple[PartitionMove, ...], list[str]]:
    """Split ``desired`` by what is observed: already done, in flight to the desired replicas
    (resumed), still to submit (pending), and in flight elsewhere (conflicts, as messages)."""
    done, resumed, pending, conflicts = [], [], [], []
    for key, after in desired.items():
        current = cluster.partition(*key)
        size = current.size_bytes or 0
        moving = in_flight.get(key)
        if moving is not None:
            if moving.target == tuple(after):
                resumed.append(PartitionMove(key[0], key[1], moving.original, tuple(after), size))
            else:
                conflicts.append(f"{_name(key)}: a reassignment to {list(moving.target)} is in flight, not the "
                                 f"plan's {list(after)}; wait for it to finish or cancel it with "
                                 f"kafkaops.reassign.engine.cancel(conn, [{key!r}])")
        elif current.replicas == tuple(after):
            done.append(key)
        else:
            pending.append(PartitionMove(key[0], key[1], current.replicas, tuple(after), size))
    return tuple(done), tuple(resumed), tuple(pending), conflicts


def plan_batches(moves: Iterable[PartitionMove], *, max_moves_per_broker: int, max_moves_total: int
                 ) -> tuple[Batch, ...]:
    """First-fit, largest moves first: each batch has at most ``max_moves_total`` moves and at most
    ``max_moves_per_broker`` moves that add or remove a replica on any one broker."""
    batches: list[list[PartitionMove]] = []
    loads: list[Counter[int]] = []
    for move in sorted(moves, key=lambda m: (-m.bytes, m.key)):
        for batch, load in zip(batches, loads):
            if len(batch) < max_moves_total and all(load[b] < max_moves_per_broker for b in move.brokers):
                break
        else:
            batch, load = [], Counter()
            batches.append(batch)
            loads.append(load)
        batch.append(move)
        load.update(move.brokers)
    return tuple(Batch(i, tuple(sorted(b, key=lambda m: m.key))) for i, b in enumerate(batches, start=1))


def measure(moves: Iterable[PartitionMove], cluster: Cluster, in_flight: Mapping[Key, admin.Reassignment],
            replica_sizes: Mapping[tuple[str, int, int], int], elapsed_s: float | None = None) -> Progress:
    """Progress of ``moves`` on an observed cluster; ``replica_sizes`` are the adding replicas' bytes so far."""
    done = moving = bytes_done = bytes_total = total = 0
    for m in moves:
        total += 1
        bytes_total += m.bytes
        if m.key in in_flight:
            moving += 1
            bytes_done += sum(min(replica_sizes.get((m.topic, m.partition, b), 0), m.size_bytes) for b in m.adding)
        elif cluster.partition(*m.key).replicas == m.after:
            done += 1
            bytes_done += m.bytes
    return Progress(done, total, moving, bytes_done, bytes_total, elapsed_s)


def throttle_entries(moves: Iterable[PartitionMove]) -> tuple[tuple[int, ...], dict[tuple[str, str], list[str]]]:
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


def _items(value: str | None) -> list[str]:
    return [x.strip() for x in (value or "").split(",") if x.strip()]


# -- throttles -------------------------------------------------------------------------------------------

def plan_throttles(conn: admin.KafkaConnection, moves: Iterable[PartitionMove], *,
                   inherit: bool = False) -> ThrottleRecord:
    """The record of the throttles ``moves`` need, with the rate values to restore read from the
    brokers. With ``inherit`` (resuming a killed run) rates found set are the killed run's: deleted
    afterwards, not restored. Entries of a topic throttled with ``*`` are left alone."""
    brokers, entries = throttle_entries(moves)
    if not brokers:
        return ThrottleRecord()
    rates = admin.describe_configs(conn, "broker", brokers, keys=RATE_KEYS)
    topics = admin.describe_configs(conn, "topic", sorted({t for t, _ in entries}), keys=REPLICA_KEYS)
    return ThrottleRecord(
        rates=tuple((b, k, None if inherit else rates[str(b)].get(k)) for b in brokers for k in RATE_KEYS),
        replicas=tuple((t, k, tuple(e)) for (t, k), e in entries.items() if topics[t].get(k) != "*"))


def set_throttles(conn: admin.KafkaConnection, record: ThrottleRecord, throttle_bytes_per_s: int) -> None:
    """Set the rates on the record's brokers and add its entries to its topics (other values stay)."""
    rate = str(int(throttle_bytes_per_s))
    broker_ops: dict[str | int, list[admin.ConfigOp]] = {}
    for broker, key, _ in record.rates:
        broker_ops.setdefault(broker, []).append(admin.ConfigOp(key, "SET", rate))
    topic_ops: dict[str | int, list[admin.ConfigOp]] = {}
    for topic, key, items in record.replicas:
        topic_ops.setdefault(topic, []).append(admin.ConfigOp(key, "APPEND", ",".join(items)))
    admin.incremental_alter_configs(conn, "broker", broker_ops)
    admin.incremental_alter_configs(conn, "topic", topic_ops)
    log.info("throttle %s B/s set on %d broker(s) and %d topic(s)", rate, len(broker_ops), len(topic_ops))


def remove_throttles(conn: admin.KafkaConnection, record: ThrottleRecord) -> None:
    """Undo exactly what ``record`` set: restore or delete the rates, take out the entries (and
    delete a topic's list once nothing else is in it). For teardown tasks in any process."""
    if record.empty:
        return
    failures: list[str] = []
    broker_ops: dict[str | int, list[admin.ConfigOp]] = {}
    for broker, key, prior in record.rates:
        broker_ops.setdefault(broker, []).append(
            admin.ConfigOp(key, "DELETE") if prior is None else admin.ConfigOp(key, "SET", prior))
    topic_ops: dict[str | int, list[admin.ConfigOp]] = {}
    for topic in record.topics:
        try:
            current = admin.describe_configs(conn, "topic", [topic], keys=REPLICA_KEYS)[topic]
        except KafkaOpsError as err:
            if "UNKNOWN_TOPIC" not in str(err):
                failures.append(f"topic {topic}: {err}")
            continue
        for t, key, items in record.replicas:
            if t == topic:
                remaining = [x for x in _items(current.get(key)) if x not in items]
                topic_ops.setdefault(topic, []).append(
                    admin.ConfigOp(key, "SUBTRACT", ",".join(items)) if remaining else admin.ConfigOp(key, "DELETE"))
    for resource, ops in (("broker", broker_ops), ("topic", topic_ops)):
        try:
            admin.incremental_alter_configs(conn, resource, ops)
        except KafkaOpsError as err:
            failures.append(str(err))
    if failures:
        raise ReassignmentError(f"could not remove every throttle set on brokers {list(record.brokers)} and topics "
                                f"{list(record.topics)}: {'; '.join(failures)}; retry with remove_throttles(conn, "
                                "record) or clear them all with clear_throttles(conn, brokers, topics)")
    log.info("throttles removed from %d broker(s) and %d topic(s)", len(broker_ops), len(topic_ops))


def clear_throttles(conn: admin.KafkaConnection, brokers: Iterable[int], topics: Iterable[str]) -> None:
    """Delete every replication throttle on ``brokers`` and ``topics``, whoever set it (as Kafka's
    tool does after a reassignment): the teardown when no :class:`ThrottleRecord` survived."""
    admin.incremental_alter_configs(conn, "broker", {b: [admin.ConfigOp(k, "DELETE") for k in RATE_KEYS]
                                                     for b in sorted(set(brokers))})
    admin.incremental_alter_configs(conn, "topic", {t: [admin.ConfigOp(k, "DELETE") for k in REPLICA_KEYS]
                                                    for t in sorted(set(topics))})


def cancel(conn: admin.KafkaConnection, partitions: Iterable[Key], *,
           throttles: ThrottleRecord | None = None) -> tuple[Key, ...]:
    """Revert the reassignments in flight of ``partitions`` (finished ones stay) and remove their
    throttles: ``throttles`` if given, else the ones such moves get. Returns the partitions reverted."""
    in_flight = admin.list_partition_reassignments(conn, list(partitions))
    record = throttles
    if record is None:
        record = plan_throttles(conn, [PartitionMove(r.topic, r.partition, r.original, r.target)
                                       for r in in_flight.values()], inherit=True)
    try:
        admin.alter_partition_reassignments(conn, dict.fromkeys(in_flight))
    finally:
        remove_throttles(conn, record)
    log.info("cancelled %d reassignment(s) in flight", len(in_flight))
    return tuple(in_flight)


# -- the run --------------------------------------------------------------------------------------------

class Executor:
    """Runs ``desired`` on a cluster in throttled batches; see the module docstring.

    ``max_moves_per_broker`` caps the moves of a batch that add or remove a replica on one broker,
    ``max_moves_total`` the moves of a batch. ``batch_timeout_s`` (default: 3x the batch's bytes at
    the throttle, plus 60 s) bounds the wait for one batch. ``on_throttles`` gets the
    :class:`ThrottleRecord` before each change of throttles, e.g. to keep it for a teardown task.
    """

    def __init__(self, conn: admin.KafkaConnection, desired: Mapping[Key, Iterable[int]], *,
                 throttle_bytes_per_s: int, max_moves_per_broker: int = 5, max_moves_total: int = 20,
                 dry_run: bool = True, batch_timeout_s: float | None = None, poll_interval_s: float = 2.0,
                 on_throttles: Callable[[ThrottleRecord], None] | None = None) -> None:
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
        self.throttles = ThrottleRecord()
        self._cancelled = threading.Event()
        self._moves: tuple[PartitionMove, ...] = ()
        self._started = time.monotonic()

    def cancel(self) -> None:
        """Ask a running :meth:`execute` (in another thread) to revert its moves in flight and stop."""
        self._cancelled.set()

    def plan(self) -> ExecutionReport:
        """Observe the cluster, refuse bad input, and return the batches a run would submit (a dry run)."""
        topics = sorted({t for t, _ in self.desired})
        try:
            before = admin.snapshot(self.conn, topics=topics, offsets=True, sizes=True, groups=False)
        except UnknownTopic as err:
            raise InvalidReassignment(f"refusing the reassignment of {len(self.desired)} partition(s), nothing was "
                                      f"changed: {err}") from err
        found, first = problems(before, self.desired)
        if found:
            more = f"; and {len(found) - 20} more" if len(found) > 20 else ""
            raise InvalidReassignment(f"refusing the reassignment of {len(self.desired)} partition(s), nothing was "
                                      f"changed: {'; '.join(found[:20])}{more}") from first
        in_flight = admin.list_partition_reassignments(self.conn)
        done, resumed, pending, conflicts = classify(before, in_flight, self.desired)
        if conflicts:
            raise ReassignmentConflict(f"refusing the reassignment, nothing was changed: {'; '.join(conflicts[:20])}")
        others = sorted(set(in_flight) - set(self.desired))
        if others:
            log.warning("%d other reassignment(s) in flight share the brokers, e.g. %s", len(others),
                        ", ".join(_name(k) for k in others[:5]))
        batches = plan_batches(pending, max_moves_per_broker=self.max_moves_per_broker,
                               max_moves_total=self.max_moves_total)
        report = ExecutionReport(dry_run=True, already_done=done, resumed=resumed, batches=batches, before=before)
        self._moves = report.moves + tuple(PartitionMove(t, p, self.desired[(t, p)], self.desired[(t, p)])
                                           for t, p in done)  # already done: counted, nothing to copy
        log.info("reassignment of %d partition(s): %s", len(self.desired), report.summary())
        for batch in batches:
            log.info("batch %d/%d: %d partitions, %d bytes, moves per broker %s", batch.index, len(batches),
                     len(batch.moves), batch.bytes, batch.moves_per_broker())
        return report

    def execute(self) -> ExecutionReport:
        """Plan, then (unless a dry run) wait for moves found in flight and run the batches, each
        throttled and waited for. Throttles set are removed on success, error and cancel."""
        self._started = time.monotonic()
        self.throttles = ThrottleRecord()
        report = self.plan()
        if self.dry_run:
            log.info("dry run: nothing changed")
            return report
        submitted: list[Key] = []
        try:
            if report.resumed:
                log.info("resuming: %d partition(s) already moving, waiting without resubmitting", len(report.resumed))
                self._throttle(report.resumed, inherit=True)
                self._wait(report.resumed, "moves in flight at start")
            for batch in report.batches:
                if self._cancelled.is_set():
                    raise ReassignmentCancelled(f"cancelled before batch {batch.index}/{len(report.batches)}; "
                                                f"{len(submitted)} partition(s) were moved; run again to resume")
                self._throttle(batch.moves)
                log.info("batch %d/%d: %d partitions moving", batch.index, len(report.batches), len(batch.moves))
                admin.alter_partition_reassignments(self.conn, {m.key: m.after for m in batch.moves})
                submitted.extend(batch.keys)
                self._wait(batch.moves, f"batch {batch.index}/{len(report.batches)}")
        except BaseException:
            self._release(quiet=True)
            raise
        self._release(quiet=False)
        final = self.progress()
        log.info("reassignment done: %s", final)
        return replace(report, dry_run=False, submitted=tuple(submitted), throttles=self.throttles,
                       progress=final, seconds=time.monotonic() - self._started)

    def progress(self) -> Progress:
        """Progress of this run's moves (after :meth:`plan`), without blocking on them."""
        return _observe_progress(self.conn, self._moves, time.monotonic() - self._started)

    def _throttle(self, moves: Sequence[PartitionMove], *, inherit: bool = False) -> None:
        record = plan_throttles(self.conn, moves, inherit=inherit)
        self.throttles = self.throttles.merged(record)
        if self.on_throttles is not None:
            self.on_throttles(self.throttles)
        set_throttles(self.conn, record, self.throttle_bytes_per_s)

    def _release(self, *, quiet: bool) -> None:
        try:
            remove_throttles(self.conn, self.throttles)
        except KafkaOpsError as err:
            if not quiet:
                raise
            log.error("while failing, could not remove throttles: %s", err)

    def _wait(self, moves: Sequence[PartitionMove], label: str) -> None:
        keys = [m.key for m in moves]
        timeout = self.batch_timeout_s or 60.0 + 3.0 * sum(m.bytes for m in moves) / self.throttle_bytes_per_s
        deadline = time.monotonic() + timeout
        while True:
            in_flight = admin.list_partition_reassignments(self.conn, keys)
            if self._cancelled.is_set():
                admin.alter_partition_reassignments(self.conn, dict.fromkeys(in_flight))
                raise ReassignmentCancelled(
                    f"cancelled during {label}: reverted {len(in_flight)} move(s) in flight "
                    f"({', '.join(_name(k) for k in in_flight) or 'none'}); finished moves stay; run again with "
                    "the same desired replicas to resume")
            if not in_flight:
                break
            log.info("%s: %d of %d partitions still moving; %s", label, len(in_flight), len(keys), self.progress())
            if time.monotonic() > deadline:
                raise self._stalled(in_flight, label, timeout)
            self._cancelled.wait(self.poll_interval_s)
        wrong = self._off_plan(moves)
        if wrong:
            raise ReassignmentError(f"{label} ended but {len(wrong)} partition(s) lack the planned replicas: "
                                    f"{'; '.join(wrong[:20])}; someone cancelled or changed them; run again to "
                                    "resubmit")
        log.info("%s: %d partitions done", label, len(keys))

    def _off_plan(self, moves: Sequence[PartitionMove], settle_s: float = 5.0) -> list[str]:
        """Moves whose replicas differ from the plan, given ``settle_s`` for metadata to catch up."""
        deadline = time.monotonic() + settle_s
        while True:
            cluster = admin.snapshot(self.conn, topics=sorted({m.topic for m in moves}), offsets=False, sizes=False,
                                     groups=False)
            wrong = [f"{m.name}: replicas {list(cluster.partition(*m.key).replicas)} but plan {list(m.after)}"
                     for m in moves if cluster.partition(*m.key).replicas != m.after]
            if not wrong or time.monotonic() > deadline:
                return wrong
            time.sleep(0.5)

    def _stalled(self, in_flight: Mapping[Key, admin.Reassignment], label: str, timeout: float) -> ReassignmentStalled:
        cluster = admin.snapshot(self.conn, topics=sorted({t for t, _ in in_flight}), offsets=False, sizes=False,
                                 groups=False)
        details = []
        for key, moving in in_flight.items():
            p = cluster.partition(*key)
            missing = [r for r in p.replicas if r not in p.isr]
            details.append(f"{_name(key)} (adding {list(moving.adding)}, not in ISR: {missing})")
        return ReassignmentStalled(
            f"{label} did not finish within {timeout:.0f} s: {len(in_flight)} partition(s) still moving: "
            f"{'; '.join(details[:20])}; the moves stay in flight, no longer throttled. Check those brokers' logs "
            "and disks, then run again (with a higher throttle_bytes_per_s or batch_timeout_s) to keep waiting, or "
            "revert them with kafkaops.reassign.engine.cancel(conn, partitions)")


def _observe_progress(conn: admin.KafkaConnection, moves: Sequence[PartitionMove],
                      elapsed_s: float | None) -> Progress:
    keys = [m.key for m in moves]
    if not keys:
        return Progress(0, 0, 0, 0, 0, elapsed_s)
    in_flight = admin.list_partition_reassignments(conn, keys)
    cluster = admin.snapshot(conn, topics=sorted({t for t, _ in keys}), offsets=False, sizes=False, groups=False)
    moving = [m for m in moves if m.key in in_flight and m.adding]
    # a dead adding broker cannot say how far it got: count it as no progress, not as an error
    online = set(cluster.online_broker_ids)
    sizes = admin.replica_sizes(conn, [m.key for m in moving], {b for m in moving for b in m.adding} & online)
    return measure(moves, cluster, in_flight, sizes, elapsed_s)


def moves_for(before: Cluster, desired: Mapping[Key, Iterable[int]]) -> tuple[PartitionMove, ...]:
    """Every desired partition as a move from its replicas in ``before`` (no-op moves included)."""
    result = []
    for key, after in normalize(desired).items():
        p = before.partition(*key)
        result.append(PartitionMove(key[0], key[1], p.replicas, after, p.size_bytes or 0))
    return tuple(result)


def progress(conn: admin.KafkaConnection, desired: Mapping[Key, Iterable[int]], before: Cluster, *,
             started_at: float | None = None) -> Progress:
    """Progress of ``desired`` since ``before`` (the snapshot taken before the run; sizes from it),
    without blocking: for a polling Airflow trigger. ``started_at`` is the run's start, ``time.time()``."""
    elapsed = None if started_at is None else max(time.time() - started_at, 0.0)
    return _observe_progress(conn, moves_for(before, desired), elapsed)


def execute(conn: admin.KafkaConnection, desired: Mapping[Key, Iterable[int]], *, throttle_bytes_per_s: int,
            dry_run: bool = True, **options: Any) -> ExecutionReport:
    """:meth:`Executor.execute` in one call; ``options`` are the other :class:`Executor` arguments."""
    return Executor(conn, desired, throttle_bytes_per_s=throttle_bytes_per_s, dry_run=dry_run,
                    **options).execute()
