"""A traffic check: a keyed producer and a consumer that run through an operation and count what
the cluster lost, duplicated or reordered.

The producer (acks=all, idempotent, Java's murmur2 placement) sends ``rate_per_s`` records a
second over ``keys`` keys, each record's value carrying its key's sequence number (0, 1, 2, ...).
The consumer reads them from a group of its own, from the end offsets taken before the first
record was sent. :meth:`TrafficCheck.stop` stops producing, waits until every acknowledged record
was read (or a timeout), and folds both sides with :func:`account` (pure) into a
:class:`TrafficReport`: records sent, acknowledged, received, lost, duplicated, out of order.

A record the consumer is handed twice at the same offset (at-least-once delivery around a leader
or coordinator change) is *redelivered*, not duplicated: a duplicate is one record stored at two
offsets, which the idempotent producer must never cause.

:class:`MigrationTraffic` plays an operator's applications through a topic migration (records of a
source topic copied into a target with other partitions, the group's offsets translated): producers
and a consumer group on the source, told when to quiesce and when to switch to the target.
:func:`account_migration` (pure) folds what they saw on both topics into a :class:`MigrationReport`;
a record read on the source and again on the target is duplicated, and a key's order must hold
across the switch.

It plays an operator's applications, so it has Kafka clients of its own (confluent-kafka producers and
consumers) beside the Kafka adapter, which it uses for the rest (client settings, end offsets, deleting
its group). The tests, the benchmarks and ``make demo`` run it; no operation does.
"""
from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, NamedTuple

from kafkaops.errors import KafkaOpsError
from kafkaops.platform import waits

log = logging.getLogger(__name__)
#: The producers send what is due in bursts at least this far apart: at 2,000 records/s a wake-up per record (or
#: every 5 ms) cost the suite more CPU than the records themselves; 20 ms keeps the rate and the order.
_BURST_S = 0.02


class TrafficError(KafkaOpsError):
    """The traffic check could not start or stop (no assignment, no metadata)."""


class Received(NamedTuple):
    """One record as the consumer got it; ``topic`` is empty for the single-topic check."""

    key: str
    seq: int
    partition: int
    offset: int
    topic: str = ""


@dataclass(frozen=True)
class _Counts:
    """The counts both reports share (see :class:`TrafficReport` and :class:`MigrationReport`)."""

    sent: int
    acknowledged: int
    unacknowledged: int
    received: int
    lost: int
    duplicated: int
    out_of_order: int
    redelivered: int = 0
    keys: int = 0
    producer_resets: int = 0

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.out_of_order or self.unacknowledged)

    @property
    def cluster_ok(self) -> bool:
        """:attr:`ok` but for duplicates the producer may have made (:attr:`duplicates_by_the_producer`):
        what an operation on the cluster is judged by."""
        return (not (self.lost or self.out_of_order or self.unacknowledged)
                and (not self.duplicated or self.duplicates_by_the_producer))

    @property
    def duplicates_by_the_producer(self) -> bool:
        """Every duplicate can be the producer's: it changed its idempotence identity (id or epoch) at
        least once while sending, and the broker deduplicates a retry only within one identity (see
        :class:`ProducerIdentity`). False without duplicates; a duplicate without such a change is the
        cluster's."""
        return self.duplicated > 0 and self.producer_resets > 0

    def _summary(self, received_detail: str = "") -> str:
        text = (f"sent {self.sent:,} over {self.keys} keys, acknowledged {self.acknowledged:,}, received "
                f"{self.received:,}{received_detail}: lost {self.lost}, duplicated {self.duplicated}, out of order "
                f"{self.out_of_order}")
        if self.unacknowledged:
            text += f", unacknowledged {self.unacknowledged}"
        if self.redelivered:
            text += f" (redelivered at the same offset: {self.redelivered})"
        if self.producer_resets:
            text += (f"; the producer changed its idempotence id or epoch {self.producer_resets} time(s), so a record "
                     "in flight then may be stored twice (librdkafka issue 4953)")
        return text

    def _counts(self) -> dict[str, Any]:
        return {"sent": self.sent, "acknowledged": self.acknowledged, "unacknowledged": self.unacknowledged,
                "received": self.received, "lost": self.lost, "duplicated": self.duplicated,
                "out_of_order": self.out_of_order, "redelivered": self.redelivered, "keys": self.keys,
                "producer_resets": self.producer_resets}


@dataclass(frozen=True)
class TrafficReport(_Counts):
    """What the traffic check saw. ``lost``: acknowledged records never read; ``duplicated``: extra
    copies of a record stored at another offset; ``out_of_order``: records stored after a later
    record of their key; ``redelivered``: the same offset handed to the consumer again."""

    examples: tuple[str, ...] = ()

    def __str__(self) -> str:
        return self._summary() + (f"; e.g. {', '.join(self.examples)}" if self.examples else "")

    def to_dict(self) -> dict[str, Any]:
        return {**self._counts(), "ok": self.ok, "examples": list(self.examples)}


def account(sent: int, acked: Iterable[tuple[str, int]], received: Iterable[Received], *, examples: int = 3,
            producer_resets: int = 0) -> TrafficReport:
    """Fold the producer's acknowledged ``(key, seq)`` pairs and the consumer's records (pure).

    Records are deduplicated by ``(partition, offset)`` first (what the log holds); a key's order
    is its stored records in offset order, and a record counts out of order when a higher
    sequence number of its key is stored before it. A sequence number missing from the log is
    lost, not out of order."""
    acked_set = set(acked)
    got = list(received)
    stored = drop_redeliveries(got)
    positions = _positions(stored)
    duplicated = sorted(pair for pair, at in positions.items() if len(at) > 1)
    lost = sorted(acked_set - set(positions))
    late = find_late(sorted(stored, key=lambda r: (r.partition, r.offset)))
    said = _examples(lost, _duplicates_said(duplicated, positions), late, examples)
    return TrafficReport(sent=sent, acknowledged=len(acked_set), unacknowledged=max(sent - len(acked_set), 0),
                         received=len(got), lost=len(lost), duplicated=sum(len(positions[d]) - 1 for d in duplicated),
                         out_of_order=len(late), redelivered=len(got) - len(stored),
                         keys=len({k for k, _ in acked_set} | {r.key for r in stored}), examples=said,
                         producer_resets=producer_resets)


def drop_redeliveries(received: Iterable[Received]) -> list[Received]:
    """Each stored record once, as first delivered, in delivery order (pure). The same
    ``(topic, partition, offset)`` handed to the consumer again is a redelivery and dropped here."""
    first: dict[tuple[str, int, int], Received] = {}
    for r in received:
        first.setdefault((r.topic, r.partition, r.offset), r)
    return list(first.values())


def find_late(records: Iterable[Received]) -> list[Received]:
    """Records that come, in the given order, after a higher sequence number of their key (pure).
    A ``(key, seq)`` seen before is a duplicate, counted as such and not again here."""
    highest: dict[str, int] = {}
    seen: defaultdict[str, set[int]] = defaultdict(set)
    late: list[Received] = []
    for r in records:
        if r.seq in seen[r.key]:
            continue
        seen[r.key].add(r.seq)
        if r.seq < highest.get(r.key, -1):
            late.append(r)
        highest[r.key] = max(highest.get(r.key, -1), r.seq)
    return late


def _positions(stored: Iterable[Received]) -> dict[tuple[str, int], list[Received]]:
    """Where each ``(key, seq)`` is stored, in the given order (pure)."""
    positions: defaultdict[tuple[str, int], list[Received]] = defaultdict(list)
    for r in stored:
        positions[(r.key, r.seq)].append(r)
    return positions


def _duplicates_said(duplicated: list[tuple[str, int]], positions: Mapping[tuple[str, int], list[Received]]
                     ) -> list[str]:
    return [f"duplicated {k}#{s} at {' and '.join(_where(r) for r in positions[(k, s)])}" for k, s in duplicated]


def _where(r: Received) -> str:
    return f"{r.topic}-{r.partition}:{r.offset}" if r.topic else f"{r.partition}:{r.offset}"


def _examples(lost: list[tuple[str, int]], duplicated: list[str], late: list[Received], n: int) -> tuple[str, ...]:
    said = ([f"lost {k}#{s}" for k, s in lost[:n]] + duplicated[:n]
            + [f"{r.key}#{r.seq} at {_where(r)} after a later one" for r in late[:n]])
    return tuple(said[:n])


def encode(key: str, seq: int, run: str) -> bytes:
    """A traffic record's value: its key, its sequence number and the check it belongs to."""
    return json.dumps({"key": key, "seq": seq, "check": run}, separators=(",", ":")).encode()


def decode(value: bytes | None, run: str) -> tuple[str, int] | None:
    """``(key, seq)`` of a record of check ``run``; None for any other record of the topic."""
    try:
        body = json.loads(value or b"")
    except ValueError:
        return None
    if not isinstance(body, dict) or body.get("check") != run:
        return None
    return str(body["key"]), int(body["seq"])


def poll(consumer: Any, run: str, errors: list[str], topic: str = "") -> tuple[dict[int, int], list[Received]]:
    """One ``consume`` (at most 500 records, 0.2 s): per partition the offset after the last record read,
    and the records of check ``run`` among them (``topic`` given to each); errors appended to ``errors``."""
    upto: dict[int, int] = {}
    batch: list[Received] = []
    for msg in consumer.consume(500, 0.2):
        if msg.error() is not None:
            errors.append(str(msg.error()))
            continue
        upto[msg.partition()] = msg.offset() + 1
        found = decode(msg.value(), run)
        if found is not None:
            batch.append(Received(found[0], found[1], msg.partition(), msg.offset(), topic))
    return upto, batch


class ProducerIdentity(logging.Handler):
    """Counts how often an idempotent librdkafka producer changed its identity while it sent.

    The broker recognises a retried batch by producer id, epoch and sequence. librdkafka bumps the
    epoch (or takes a new id) after some errors (a sequence gap, an unknown producer id, a timeout),
    entering its ``DrainBump`` or ``DrainReset`` state; a batch that was stored but whose answer was
    lost is then sent again under the new identity and stored twice. librdkafka issue 4953 shows it
    around leader changes. A traffic check therefore tells such duplicates (the client's) from
    duplicates with no change of identity (the cluster's).

    Give :meth:`client_config` to the producer: its ``eos`` debug lines (a few per leader change) come
    here through ``poll()``; warnings and errors go on to this module's log."""

    #: The idempotence states librdkafka enters when it changes the producer's epoch or id.
    RESET_STATES = ("-> DrainBump", "-> DrainReset")

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.resets: list[str] = []
        self.lines = 0
        self._logger = logging.Logger(f"{__name__}.librdkafka")  # not in the logging tree: no propagation
        self._logger.addHandler(self)

    def client_config(self) -> dict[str, Any]:
        return {"debug": "eos", "logger": self._logger}

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        self.lines += 1
        if any(state in message for state in self.RESET_STATES):
            self.resets.append(message)
            log.warning("traffic producer changed its idempotence identity: %s", message)
        elif record.levelno >= logging.WARNING:
            log.log(record.levelno, "%s", message)


def producer_config(config: Mapping[str, str]) -> dict[str, Any]:
    """No loss, no duplicates, Java's placement: acks=all with the idempotent producer."""
    from kafkaops.platform.kafka.connection import client_config

    return client_config({**config, "acks": "all", "enable.idempotence": True, "partitioner": "murmur2_random",
                          "linger.ms": 5, "message.timeout.ms": 120_000})


class TrafficCheck:
    """A producer and a consumer in background threads on ``topic``. Use as a context manager, or
    :meth:`start` and :meth:`stop` (which returns the :class:`TrafficReport`)."""

    def __init__(self, config: Mapping[str, str], topic: str, *, keys: int = 40, rate_per_s: float = 200.0,
                 group_id: str | None = None) -> None:
        self.config, self.topic, self.keys, self.rate_per_s = dict(config), topic, keys, rate_per_s
        self.run = uuid.uuid4().hex[:10]
        self.group_id = group_id or f"kafkaops-traffic-{self.run}"
        self.sent = 0
        self.acked: list[tuple[str, int]] = []
        self.failures: list[str] = []
        self.received: list[Received] = []
        self.identity = ProducerIdentity()
        self._start_offsets: dict[int, int] = {}
        self._assigned = threading.Event()
        self._stop_producing = threading.Event()
        self._stop_consuming = threading.Event()
        self._errors: list[str] = []
        self._producer = threading.Thread(target=self._produce, name="traffic-producer", daemon=True)
        self._consumer: threading.Thread | None = None
        self.report: TrafficReport | None = None

    def __enter__(self) -> TrafficCheck:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, timeout_s: float = 60.0) -> TrafficCheck:
        """Start the consumer, wait until its group assigned it the topic, then start producing."""
        from confluent_kafka import Consumer, TopicPartition

        from kafkaops.platform.kafka.connection import client_config

        consumer = Consumer(client_config({**self.config, "group.id": self.group_id, "enable.auto.commit": True,
                                           "auto.offset.reset": "earliest"}))
        try:
            meta = waits.list_topics(consumer, waits.Deadline(15), self.topic)
            partitions = sorted(meta.topics[self.topic].partitions) if self.topic in meta.topics else []
            if not partitions or meta.topics[self.topic].error is not None:
                raise TrafficError(f"traffic check: topic {self.topic} has no partitions in the metadata of "
                                   f"{self.config.get('bootstrap.servers')}; create it first")
            for p in partitions:  # read from here: what the topic held before is not this check's
                self._start_offsets[p] = consumer.get_watermark_offsets(TopicPartition(self.topic, p), timeout=15)[1]
        except Exception:
            consumer.close()
            raise
        self._consumer = threading.Thread(target=self._consume, args=(consumer,), name="traffic-consumer",
                                          daemon=True)
        self._consumer.start()
        if not self._assigned.wait(timeout_s):
            self._stop_consuming.set()
            raise TrafficError(f"traffic check: group {self.group_id} got no partition of {self.topic} within "
                               f"{timeout_s:.0f} s ({'; '.join(self._errors) or 'no error'}); check the group "
                               "coordinator (__consumer_offsets)")
        self._producer.start()
        log.info("traffic check %s on %s: %d keys at %.0f records/s", self.run, self.topic, self.keys,
                 self.rate_per_s)
        return self

    def _produce(self) -> None:
        from confluent_kafka import Producer

        producer = Producer({**producer_config(self.config), **self.identity.client_config()})
        seqs: Counter[int] = Counter()

        def on_delivery(err: Any, msg: Any) -> None:
            if err is not None:
                self.failures.append(str(err))
            else:
                found = decode(msg.value(), self.run)
                if found is not None:
                    self.acked.append(found)

        started = time.monotonic()
        try:
            self._send(producer, seqs, on_delivery, started)
        finally:
            left = waits.close_producer(producer, waits.Deadline(60))
        if left:
            self.failures.append(f"{left} records still unacknowledged after 60 s")

    def _send(self, producer: Any, seqs: Counter[int], on_delivery: Callable[[Any, Any], None],
              started: float) -> None:
        while not self._stop_producing.is_set():
            k = self.sent % self.keys
            key = f"traffic-{k:03d}"
            try:
                producer.produce(self.topic, key=key.encode(), value=encode(key, seqs[k], self.run),
                                 on_delivery=on_delivery)
            except BufferError:
                producer.poll(0.05)
                continue
            seqs[k] += 1
            self.sent += 1
            producer.poll(0)
            ahead = self.sent / self.rate_per_s - (time.monotonic() - started)
            if ahead > _BURST_S:  # sends in bursts of up to _BURST_S, not a wake-up per record
                time.sleep(ahead)

    def _consume(self, consumer: Any) -> None:
        next_offset: dict[int, int] = {}

        def on_assign(c: Any, partitions: list[Any]) -> None:
            for tp in partitions:  # resume where this check was, or start where the topic ended
                tp.offset = next_offset.get(tp.partition, self._start_offsets.get(tp.partition, tp.offset))
            c.assign(partitions)
            self._assigned.set()

        try:
            consumer.subscribe([self.topic], on_assign=on_assign)
            while not self._stop_consuming.is_set():
                upto, batch = poll(consumer, self.run, self._errors)
                next_offset.update(upto)
                self.received.extend(batch)
        finally:
            consumer.close()

    def stop(self, timeout_s: float = 60.0) -> TrafficReport:
        """Stop producing, read until every acknowledged record arrived (or ``timeout_s``), and
        account for both sides. Stopping twice returns the same report."""
        if self.report is not None:
            return self.report
        self._stop_producing.set()
        if self._producer.is_alive():
            self._producer.join(timeout_s + 60)
        deadline = time.monotonic() + timeout_s
        consumer = self._consumer
        while (consumer is not None and consumer.is_alive() and time.monotonic() < deadline
               and len({(r.key, r.seq) for r in self.received}) < len(set(self.acked))):
            time.sleep(0.2)
        time.sleep(1.0)  # a duplicate would arrive after the last new record
        self._stop_consuming.set()
        if consumer is not None and consumer.is_alive():
            consumer.join(timeout_s)
        self.report = account(self.sent, self.acked, self.received, producer_resets=len(self.identity.resets))
        if consumer is not None:
            self._delete_group()
        if self.failures:
            log.warning("traffic check %s: %d delivery failures, first: %s", self.run, len(self.failures),
                        self.failures[0])
        return self.report

    def _delete_group(self) -> None:
        """Leave no group behind (the next snapshot of the cluster would list it); best effort."""
        from kafkaops.platform.kafka import connection, offsets

        try:
            with connection.connect(self.config) as conn:
                offsets.delete_consumer_group(conn, self.group_id)
        except KafkaOpsError as err:  # the report stands; a group left behind is only clutter
            log.warning("traffic check %s: could not delete its consumer group %s: %s", self.run, self.group_id, err)


# -- live migration: producers and a consumer group moving from a source topic to a target -------------


@dataclass(frozen=True)
class MigrationReport(_Counts):
    """What the migration harness saw on both topics, from the consumer's point of view.

    ``received`` counts every delivery, redeliveries included (``received_by_topic`` splits it, so its
    values sum to ``received``). ``redelivered``: the same ``(topic, partition, offset)`` handed again
    (at-least-once around a rebalance; not an error). ``duplicated``: extra deliveries of one
    ``(key, seq)`` at other positions, e.g. read on the source and again on the target: what a
    migration with wrongly translated offsets causes. ``lost``: acknowledged ``(key, seq)`` read on
    neither topic. ``out_of_order``: records delivered after a higher ``seq`` of their key, the
    switch included. ``write_window_s``: the first acknowledged write to the target minus the last
    to the source (None when producers never switched); ``total_s``: start to finish."""

    received_by_topic: Mapping[str, int] = field(default_factory=dict, hash=False)
    write_window_s: float | None = None
    total_s: float = 0.0
    examples: tuple[str, ...] = ()

    def __str__(self) -> str:
        topics = ", ".join(f"{t} {n:,}" for t, n in self.received_by_topic.items())
        text = self._summary(f" ({topics})" if topics else "")
        if self.write_window_s is not None:
            text += f"; writes paused {self.write_window_s:.2f} s"
        text += f", {self.total_s:.1f} s in all"
        return text + (f"; e.g. {', '.join(self.examples)}" if self.examples else "")

    def to_dict(self) -> dict[str, Any]:
        return {**self._counts(), "received_by_topic": dict(self.received_by_topic),
                "write_window_s": self.write_window_s, "total_s": self.total_s, "ok": self.ok,
                "examples": list(self.examples)}


def account_migration(sent: int, acked: Iterable[tuple[str, int]], received: Iterable[Received], *,
                      write_window_s: float | None = None, total_s: float = 0.0, examples: int = 3
                      ) -> MigrationReport:
    """Fold the producers' acknowledged ``(key, seq)`` pairs and the consumer's log across both
    topics (pure; ``received`` in delivery order, each record carrying its topic).

    Deliveries are deduplicated by ``(topic, partition, offset)`` first (a redelivery); a ``(key,
    seq)`` then delivered at more than one position is duplicated, once per extra position. A key's
    order is its delivery order (per partition the log's order, and the source before the target),
    so a record delivered after a higher ``seq`` of its key is out of order, across the switch too.
    A ``seq`` never delivered is lost, not out of order."""
    acked_set = set(acked)
    got = list(received)
    stored = drop_redeliveries(got)
    positions = _positions(stored)
    duplicated = sorted(pair for pair, at in positions.items() if len(at) > 1)
    lost = sorted(acked_set - set(positions))
    late = find_late(stored)
    said = _examples(lost, _duplicates_said(duplicated, positions), late, examples)
    return MigrationReport(
        sent=sent, acknowledged=len(acked_set), unacknowledged=max(sent - len(acked_set), 0), received=len(got),
        lost=len(lost), duplicated=sum(len(positions[d]) - 1 for d in duplicated), out_of_order=len(late),
        redelivered=len(got) - len(stored), keys=len({k for k, _ in acked_set} | {r.key for r in stored}),
        received_by_topic=dict(Counter(r.topic for r in got)), write_window_s=write_window_s, total_s=total_s,
        examples=said)


def device_key(index: int) -> str:
    """The key of device ``index``: ``dev-00042``."""
    return f"dev-{index:05d}"


def customer_of(index: int, customers: int) -> str:
    """The customer device ``index`` belongs to: a fixed function of the key, no hashing."""
    return f"cust-{index % customers:03d}"


def encode_padded(key: str, seq: int, run: str, *, customer: str, record_bytes: int = 200) -> bytes:
    """A migration record's value: a JSON object with the key, its sequence number, the customer
    and the check, padded with ``pad`` to about ``record_bytes`` (never shorter than without it).
    :func:`decode` reads it."""
    body = json.dumps({"key": key, "seq": seq, "customer": customer, "check": run, "pad": ""},
                      separators=(",", ":"))
    short = record_bytes - len(body)
    if short > 0:
        body = body[:-2] + "x" * short + body[-2:]  # inside the empty "pad" string
    return body.encode()


class Transition(NamedTuple):
    """A step of the migration harness: the phase it entered, when (UTC to show, the monotonic clock
    to subtract) and what happened."""

    phase: str
    at: datetime
    monotonic: float
    detail: str


@dataclass
class _Writing:
    """One producer thread on one topic. ``left``: records still unacknowledged after its final flush
    (purged then, so counted as unacknowledged)."""

    topic: str
    thread: threading.Thread | None = None
    stop: threading.Event = field(default_factory=threading.Event)
    flush_timeout_s: float = 30.0
    left: int = 0
    error: str | None = None


@dataclass
class _Reading:
    """One consumer thread of the group on one topic. ``drain_to``: end offsets to reach before it
    commits and closes; ``positions``: where it was when last looked at."""

    topic: str
    thread: threading.Thread | None = None
    stop: threading.Event = field(default_factory=threading.Event)
    assigned: threading.Event = field(default_factory=threading.Event)
    drained: threading.Event = field(default_factory=threading.Event)
    drain_to: dict[int, int] | None = None
    positions: dict[int, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)


class MigrationTraffic:
    """An operator's applications around a topic migration: a producer thread (acks=all, idempotent,
    Java's murmur2 placement) writing ``keys`` device keys at ``rate_per_s`` to ``source``, and a
    consumer of group ``group`` reading it (no auto-commit: a synchronous commit after each batch;
    read_committed; earliest when the group has no offset). The caller says when to quiesce
    (:meth:`stop_producing`, :meth:`drain_and_stop_consumer`) and when to switch to the target
    (:meth:`switch_producers`, :meth:`switch_consumer`); :meth:`finish` folds it all with
    :func:`account_migration` into a :class:`MigrationReport`.

    Invariants: a key's ``seq`` runs 0, 1, 2, ... across both topics (assigned when sent); once
    :meth:`stop_producing` returned, nothing more is sent to the source; at most one producer thread
    and one consumer thread run at a time, each owning its client; used as a context manager, every
    thread has ended and every client is closed when the ``with`` block is left, error or not.
    ``config`` may hold credentials: it is never logged."""

    def __init__(self, config: Mapping[str, str], source: str, *, group: str, keys: int = 200,
                 rate_per_s: float = 2000.0, customers: int = 20, run: str | None = None,
                 record_bytes: int = 200) -> None:
        if keys < 1 or customers < 1 or rate_per_s <= 0:
            raise TrafficError(f"migration traffic on {source}: keys ({keys}), customers ({customers}) and "
                               f"rate_per_s ({rate_per_s}) must be positive")
        self.config, self.source, self.group = dict(config), source, group
        self.keys, self.rate_per_s, self.customers, self.record_bytes = keys, rate_per_s, customers, record_bytes
        self.run = run or uuid.uuid4().hex[:10]
        self.target: str | None = None
        self.sent = 0
        self.acked: list[tuple[str, int]] = []
        self.acked_by_topic: Counter[str] = Counter()
        self.failures: list[str] = []
        self.received: list[Received] = []
        self.phase = "created"
        self.events: list[Transition] = []
        self.report: MigrationReport | None = None
        self._keys = [device_key(i) for i in range(keys)]
        self._key_bytes = [k.encode() for k in self._keys]
        self._customers = [customer_of(i, customers) for i in range(keys)]
        self._seqs = [0] * keys
        self._read_pairs: set[tuple[str, int]] = set()
        self._lock = threading.Lock()
        self._writing: _Writing | None = None
        self._reading: _Reading | None = None
        self._threads: list[threading.Thread] = []
        self._started: float | None = None
        self._last_source_ack: tuple[float, float] | None = None  # (monotonic, epoch seconds)
        self._first_target_ack: tuple[float, float] | None = None
        self._transition("created", f"source {source}, group {group}, {keys} keys at {rate_per_s:.0f} records/s")

    # -- lifecycle -------------------------------------------------------------------------------

    def __enter__(self) -> MigrationTraffic:
        try:
            self.start()
        except BaseException:  # __exit__ is not called when __enter__ fails: stop what started
            self.close(raise_on_stragglers=False)
            raise
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self.close(raise_on_stragglers=exc_type is None)

    def start(self, timeout_s: float = 30.0) -> None:
        """Start the consumer on the source, wait until the group assigned it, then start producing."""
        if self.phase != "created":
            raise TrafficError(f"migration traffic {self.run} is {self.phase}, not created; start it once")
        self._started = time.monotonic()
        self._start_reading(self.source, timeout_s)
        self._start_writing(self.source)
        self._transition("running", f"producing to and consuming {self.source}")

    @property
    def writing_to(self) -> str | None:
        """The topic the producers write to now; None while they are stopped."""
        writing = self._writing
        return None if writing is None else writing.topic

    def stop_producing(self, timeout_s: float = 30.0) -> float:
        """Quiesce: stop sending to the source and flush. Returns the monotonic time (``time.monotonic``)
        of the last acknowledged write to the source (:attr:`last_source_ack_utc` shows it in UTC). Once
        it returned, nothing more is sent to the source."""
        writing = self._writing
        if writing is None or writing.topic != self.source:
            raise TrafficError(f"migration traffic {self.run}: no producer writes to {self.source} (phase "
                               f"{self.phase}); call stop_producing once, after start")
        self._stop_writing(writing, timeout_s)
        if writing.left:
            raise TrafficError(f"migration traffic {self.run}: {writing.left} records to {self.source} were still "
                               f"unacknowledged {timeout_s:.0f} s after producing stopped; they were purged and count "
                               "as unacknowledged, but a broker may still append ones already sent, so the source is "
                               "not provably quiet; check the brokers and retry with a longer timeout_s")
        if self._last_source_ack is None:
            raise TrafficError(f"migration traffic {self.run}: none of {self.sent} records sent to {self.source} was "
                               f"acknowledged ({'; '.join(self.failures[:2]) or writing.error or 'no error'}); check "
                               "the topic's leaders and the producer's access")
        self._transition("quiesced", f"{self.acked_by_topic[self.source]:,} records acknowledged by "
                                     f"{self.source}, the last at {self.last_source_ack_utc:%H:%M:%S.%f} UTC")
        return self._last_source_ack[0]

    def drain_and_stop_consumer(self, ends: Mapping[int, int] | None = None, timeout_s: float = 60.0) -> None:
        """Read the current topic until the consumer's position reaches ``ends`` (partition -> end
        offset; default: the topic's end offsets now, partitions holding no record skipped), commit
        synchronously and close, so the group is left without members (Empty)."""
        reading = self._reading
        if reading is None or reading.thread is None or not reading.thread.is_alive():
            raise TrafficError(f"migration traffic {self.run}: no consumer of group {self.group} is running "
                               f"(phase {self.phase}); nothing to drain")
        if ends is None:
            from kafkaops.platform.kafka import records

            ends = {p: e for p, (s, e) in records.end_offsets(self.config, reading.topic).items() if e > s}
        reading.drain_to = {int(p): int(e) for p, e in ends.items()}
        deadline = time.monotonic() + timeout_s
        while not reading.drained.is_set() and reading.thread.is_alive() and time.monotonic() < deadline:
            reading.drained.wait(0.1)
        reading.stop.set()
        reading.thread.join(30)
        self._reading = None
        if not reading.drained.is_set():
            behind = ", ".join(f"{p}: {reading.positions.get(p, 'none')} of {e}" for p, e in
                               sorted(reading.drain_to.items()) if reading.positions.get(p, -1) < e)
            raise TrafficError(f"migration traffic {self.run}: group {self.group} did not reach the end of "
                               f"{reading.topic} within {timeout_s:.0f} s (positions: {behind or 'unknown'}; errors: "
                               f"{'; '.join(reading.errors[:3]) or 'none'}); it was closed anyway. Check that no "
                               "other member holds partitions and that the producers stopped")
        self._transition("drained", f"group {self.group} read {reading.topic} to its end offsets "
                                    f"({sum(reading.drain_to.values()):,} in all), committed and left")

    def switch_producers(self, target: str) -> None:
        """Resume producing, into ``target``: each key's sequence goes on where it stopped."""
        if self._writing is not None or self.phase in ("created", "running"):
            raise TrafficError(f"migration traffic {self.run}: producers still write to {self.source} (phase "
                               f"{self.phase}); call stop_producing first")
        self.target = target
        self._start_writing(target)
        self._transition("producers switched", f"producing to {target}")

    def switch_consumer(self, target: str, timeout_s: float = 30.0) -> None:
        """A new consumer of the same group on ``target``: it starts at the group's committed offsets
        there (none: the start of the topic)."""
        if self._reading is not None:
            raise TrafficError(f"migration traffic {self.run}: group {self.group} still reads "
                               f"{self._reading.topic}; call drain_and_stop_consumer first")
        self.target = self.target or target
        self._start_reading(target, timeout_s)
        self._transition("consumer switched", f"group {self.group} reads {target}")

    def finish(self, timeout_s: float = 60.0) -> MigrationReport:
        """Stop producing, wait until every acknowledged record was read (or ``timeout_s``), close all
        clients and fold. Finishing twice returns the same report."""
        if self.report is not None:
            return self.report
        self._transition("finishing", f"{self.sent:,} sent")
        if self._writing is not None:
            writing = self._writing
            self._stop_writing(writing, timeout_s)
            if writing.left:
                log.warning("migration traffic %s: %d records to %s unacknowledged at the end", self.run,
                            writing.left, writing.topic)
        reading = self._reading
        if reading is not None and reading.thread is not None:
            acked = set(self.acked)
            deadline = time.monotonic() + timeout_s
            while reading.thread.is_alive() and time.monotonic() < deadline:
                with self._lock:
                    if acked <= self._read_pairs:
                        break
                time.sleep(0.1)
            time.sleep(1.0)  # a duplicate would come after the last new record
            reading.stop.set()
            reading.thread.join(30)
            self._reading = None
        with self._lock:
            received = list(self.received)
        self.report = account_migration(self.sent, self.acked, received, write_window_s=self.write_window_s,
                                        total_s=time.monotonic() - (self._started or time.monotonic()))
        if self.failures:
            log.warning("migration traffic %s: %d delivery failures, first: %s", self.run, len(self.failures),
                        self.failures[0])
        self._transition("finished", str(self.report))
        return self.report

    def close(self, *, raise_on_stragglers: bool = True) -> None:
        """Stop every thread (producers flush for at most 5 s, then purge) and close every client;
        safe at any phase and more than once."""
        if self._writing is not None:
            self._writing.flush_timeout_s = min(self._writing.flush_timeout_s, 5.0)
            self._writing.stop.set()
        if self._reading is not None:
            self._reading.stop.set()
        for thread in self._threads:
            thread.join(40)
        self._writing = self._reading = None
        alive = [t.name for t in self._threads if t.is_alive()]
        if self.phase not in ("finished", "closed"):
            self._transition("closed", "stopped before finish")
        if alive:
            message = (f"migration traffic {self.run}: threads {', '.join(alive)} still run 40 s after being "
                       "stopped; a client call hangs, check the brokers")
            if raise_on_stragglers:
                raise TrafficError(message)
            log.error("%s", message)

    # -- what it measured --------------------------------------------------------------------------

    @property
    def last_source_ack_utc(self) -> datetime | None:
        """When the source last acknowledged a write (a delivery callback), UTC."""
        return None if self._last_source_ack is None else datetime.fromtimestamp(self._last_source_ack[1], timezone.utc)

    @property
    def first_target_ack_utc(self) -> datetime | None:
        """When the target first acknowledged a write (a delivery callback), UTC."""
        return None if self._first_target_ack is None else datetime.fromtimestamp(self._first_target_ack[1],
                                                                                  timezone.utc)

    @property
    def write_window_s(self) -> float | None:
        """Writes unavailable: the first acknowledged write to the target minus the last to the source
        (monotonic clock); None until both happened."""
        if self._last_source_ack is None or self._first_target_ack is None:
            return None
        return self._first_target_ack[0] - self._last_source_ack[0]

    # -- threads ---------------------------------------------------------------------------------

    def _transition(self, phase: str, detail: str) -> None:
        self.phase = phase
        self.events.append(Transition(phase, datetime.now(timezone.utc), time.monotonic(), detail))
        log.info("migration traffic %s: %s: %s", self.run, phase, detail)

    def _partitions(self, topic: str) -> list[int]:
        """The topic's partitions, from a consumer's metadata (a consumer never auto-creates a topic). A topic
        created a moment ago may not be in the metadata of the broker asked yet (the controller acknowledges
        before every broker has it): asked again until 15 s have passed."""
        from confluent_kafka import Consumer

        from kafkaops.platform.kafka.connection import client_config

        deadline = waits.Deadline(15)
        probe = Consumer(client_config({**self.config, "group.id": f"kafkaops-probe-{self.run}"}))
        try:
            while True:
                found = waits.list_topics(probe, deadline, topic).topics.get(topic)
                if found is not None and found.error is None and found.partitions:
                    return sorted(found.partitions)
                if deadline.expired():
                    break
                time.sleep(min(0.2, max(deadline.remaining(), 0.0)))
        finally:
            probe.close()
        raise TrafficError(f"migration traffic {self.run}: topic {topic} has no partitions in the metadata of "
                           f"{self.config.get('bootstrap.servers')} after {deadline.elapsed():.0f} s; create it "
                           "first")

    def _start_writing(self, topic: str) -> None:
        from confluent_kafka import Producer

        self._partitions(topic)
        writing = _Writing(topic)
        producer = Producer(producer_config(self.config))
        writing.thread = threading.Thread(target=self._produce, args=(producer, writing),
                                          name=f"migration-producer-{topic}", daemon=True)
        self._writing = writing
        self._threads.append(writing.thread)
        writing.thread.start()

    def _stop_writing(self, writing: _Writing, timeout_s: float) -> None:
        writing.flush_timeout_s = timeout_s
        writing.stop.set()
        if writing.thread is not None:
            writing.thread.join(timeout_s + 30)
            if writing.thread.is_alive():
                raise TrafficError(f"migration traffic {self.run}: the producer to {writing.topic} still runs "
                                   f"{timeout_s + 30:.0f} s after being stopped (a flush hangs); {writing.topic} "
                                   "is not quiet, check its brokers")
        self._writing = None
        if writing.error:
            log.warning("migration traffic %s: the producer to %s failed: %s", self.run, writing.topic, writing.error)

    def _produce(self, producer: Any, writing: _Writing) -> None:
        """Send at ``rate_per_s`` (the records due since this thread started, in bursts of at most
        1,000), keys round robin; a key's ``seq`` is taken only once produce() accepted the record."""
        started, here = time.monotonic(), 0
        try:
            while not writing.stop.is_set():
                due = min(int((time.monotonic() - started) * self.rate_per_s) - here, 1000)
                for _ in range(max(due, 0)):
                    i = self.sent % self.keys
                    value = encode_padded(self._keys[i], self._seqs[i], self.run, customer=self._customers[i],
                                          record_bytes=self.record_bytes)
                    try:
                        producer.produce(writing.topic, key=self._key_bytes[i], value=value,
                                         on_delivery=self._delivered)
                    except BufferError:
                        producer.poll(0.05)
                        break
                    self._seqs[i] += 1
                    self.sent += 1
                    here += 1
                producer.poll(0)
                if due <= 0:  # until the next record is due, and at least _BURST_S: bursts, not a wake-up per record
                    writing.stop.wait(max(_BURST_S, (here + 1) / self.rate_per_s - (time.monotonic() - started)))
        except Exception as err:  # a fatal producer error (e.g. the idempotent producer's): report, stop
            writing.error = f"{type(err).__name__}: {err}"
        finally:
            writing.left = waits.close_producer(producer, waits.Deadline(writing.flush_timeout_s))

    def _delivered(self, err: Any, msg: Any) -> None:
        found = decode(msg.value(), self.run)
        if found is None:
            return
        if err is not None:  # unacknowledged; the key's order after it is no longer guaranteed
            self.failures.append(f"{found[0]}#{found[1]} to {msg.topic()}: {err} (the key's order after it is "
                                 "not guaranteed)")
            return
        now = (time.monotonic(), time.time())
        topic = msg.topic()
        self.acked.append(found)
        self.acked_by_topic[topic] += 1
        if topic == self.source:
            self._last_source_ack = now
        elif self._first_target_ack is None:
            self._first_target_ack = now

    def _start_reading(self, topic: str, timeout_s: float) -> None:
        from confluent_kafka import Consumer

        from kafkaops.platform.kafka.connection import client_config

        self._partitions(topic)
        reading = _Reading(topic)
        consumer = Consumer(client_config({**self.config, "group.id": self.group, "enable.auto.commit": False,
                                           "auto.offset.reset": "earliest", "isolation.level": "read_committed"}))
        reading.thread = threading.Thread(target=self._consume, args=(consumer, reading),
                                          name=f"migration-consumer-{topic}", daemon=True)
        self._reading = reading
        self._threads.append(reading.thread)
        reading.thread.start()
        if not reading.assigned.wait(timeout_s):
            raise TrafficError(f"migration traffic {self.run}: group {self.group} got no partition of {topic} within "
                               f"{timeout_s:.0f} s ({'; '.join(reading.errors[:3]) or 'no error'}); check the group "
                               "coordinator (__consumer_offsets) and that no other member holds the partitions")

    def _consume(self, consumer: Any, reading: _Reading) -> None:
        """Read, log each record of this run with its position, commit each batch synchronously; when
        asked to drain, stop once the position reached ``drain_to``, commit it and close."""
        from confluent_kafka import TopicPartition

        def on_assign(c: Any, partitions: list[Any]) -> None:
            reading.assigned.set()

        try:
            consumer.subscribe([reading.topic], on_assign=on_assign)
            while not reading.stop.is_set():
                upto, batch = poll(consumer, self.run, reading.errors, reading.topic)
                if batch:
                    with self._lock:
                        self.received.extend(batch)
                        self._read_pairs.update((r.key, r.seq) for r in batch)
                if upto:
                    self._commit(consumer, [TopicPartition(reading.topic, p, o) for p, o in sorted(upto.items())],
                                 reading)
                if reading.drain_to is not None and self._caught_up(consumer, reading):
                    at = [TopicPartition(reading.topic, p, o) for p, o in sorted(reading.positions.items()) if o >= 0]
                    if at:
                        self._commit(consumer, at, reading)
                    reading.drained.set()
                    break
        except Exception as err:  # the main thread sees it in reading.errors
            reading.errors.append(f"{type(err).__name__}: {err}")
            log.warning("migration traffic %s: the consumer of %s failed: %s", self.run, reading.topic, err)
        finally:
            consumer.close()

    def _commit(self, consumer: Any, offsets: list[Any], reading: _Reading) -> None:
        from confluent_kafka import KafkaException

        try:
            done = consumer.commit(offsets=offsets, asynchronous=False) or []
        except KafkaException as err:  # at least once: the next member reads these again (redelivered)
            reading.errors.append(f"commit: {err}")
            log.warning("migration traffic %s: group %s could not commit %d offsets of %s: %s", self.run,
                        self.group, len(offsets), reading.topic, err)
            return
        failed = [tp for tp in done if tp.error is not None]
        if failed:
            reading.errors.append(f"commit: {failed[0].error}")
            log.warning("migration traffic %s: group %s could not commit %d of %d offsets of %s, first: %s",
                        self.run, self.group, len(failed), len(offsets), reading.topic, failed[0].error)

    @staticmethod
    def _caught_up(consumer: Any, reading: _Reading) -> bool:
        assigned = consumer.assignment()
        if assigned:
            for tp in consumer.position(assigned):
                reading.positions[tp.partition] = max(tp.offset, reading.positions.get(tp.partition, -1))
        return all(reading.positions.get(p, -1) >= end for p, end in (reading.drain_to or {}).items())
