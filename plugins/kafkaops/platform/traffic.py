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
"""
from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from kafkaops.errors import KafkaOpsError

log = logging.getLogger(__name__)


class TrafficError(KafkaOpsError):
    """The traffic check could not start or stop (no assignment, no metadata)."""


class Received(NamedTuple):
    """One record as the consumer got it."""

    key: str
    seq: int
    partition: int
    offset: int


@dataclass(frozen=True)
class TrafficReport:
    """What the traffic check saw. ``lost``: acknowledged records never read; ``duplicated``: extra
    copies of a record stored at another offset; ``out_of_order``: records stored after a later
    record of their key; ``redelivered``: the same offset handed to the consumer again."""

    sent: int
    acknowledged: int
    unacknowledged: int
    received: int
    lost: int
    duplicated: int
    out_of_order: int
    redelivered: int = 0
    keys: int = 0
    examples: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.out_of_order or self.unacknowledged)

    def __str__(self) -> str:
        text = (f"sent {self.sent:,} over {self.keys} keys, acknowledged {self.acknowledged:,}, received "
                f"{self.received:,}: lost {self.lost}, duplicated {self.duplicated}, out of order {self.out_of_order}")
        if self.unacknowledged:
            text += f", unacknowledged {self.unacknowledged}"
        if self.redelivered:
            text += f" (redelivered at the same offset: {self.redelivered})"
        return text + (f"; e.g. {', '.join(self.examples)}" if self.examples else "")

    def to_dict(self) -> dict[str, Any]:
        return {"sent": self.sent, "acknowledged": self.acknowledged, "unacknowledged": self.unacknowledged,
                "received": self.received, "lost": self.lost, "duplicated": self.duplicated,
                "out_of_order": self.out_of_order, "redelivered": self.redelivered, "keys": self.keys,
                "ok": self.ok, "examples": list(self.examples)}


def account(sent: int, acked: Iterable[tuple[str, int]], received: Iterable[Received], *, examples: int = 3
            ) -> TrafficReport:
    """Fold the producer's acknowledged ``(key, seq)`` pairs and the consumer's records (pure).

    Records are deduplicated by ``(partition, offset)`` first (what the log holds); a key's order
    is its stored records in offset order, and a record counts out of order when a higher
    sequence number of its key is stored before it. A sequence number missing from the log is
    lost, not out of order."""
    acked_set = set(acked)
    got = list(received)
    stored = {(r.partition, r.offset): r for r in got}
    copies = Counter((r.key, r.seq) for r in stored.values())
    duplicated = sorted((k, s) for (k, s), n in copies.items() if n > 1)
    lost = sorted(acked_set - set(copies))
    per_key: dict[str, list[Received]] = defaultdict(list)
    for r in sorted(stored.values(), key=lambda r: (r.partition, r.offset)):
        per_key[r.key].append(r)
    late: list[Received] = []
    for records in per_key.values():
        highest, seen = -1, set()
        for r in records:
            if r.seq in seen:
                continue  # a duplicate, counted as such
            seen.add(r.seq)
            if r.seq < highest:
                late.append(r)
            highest = max(highest, r.seq)
    said = ([f"lost {k}#{s}" for k, s in lost[:examples]] + [f"duplicated {k}#{s}" for k, s in duplicated[:examples]]
            + [f"{r.key}#{r.seq} at {r.partition}:{r.offset} after a later one" for r in late[:examples]])
    return TrafficReport(sent=sent, acknowledged=len(acked_set), unacknowledged=max(sent - len(acked_set), 0),
                         received=len(got), lost=len(lost), duplicated=sum(copies[d] - 1 for d in duplicated),
                         out_of_order=len(late), redelivered=len(got) - len(stored),
                         keys=len({k for k, _ in acked_set} | set(per_key)), examples=tuple(said[:examples]))


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


def producer_config(config: Mapping[str, str]) -> dict[str, Any]:
    """No loss, no duplicates, Java's placement: acks=all with the idempotent producer."""
    from kafkaops.platform.admin import client_config

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

        from kafkaops.platform.admin import client_config

        consumer = Consumer(client_config({**self.config, "group.id": self.group_id, "enable.auto.commit": True,
                                           "auto.offset.reset": "earliest"}))
        try:
            meta = consumer.list_topics(self.topic, timeout=15)
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

        producer = Producer(producer_config(self.config))
        seqs: Counter[int] = Counter()

        def on_delivery(err: Any, msg: Any) -> None:
            if err is not None:
                self.failures.append(str(err))
            else:
                found = decode(msg.value(), self.run)
                if found is not None:
                    self.acked.append(found)

        started = time.monotonic()
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
            if ahead > 0:
                time.sleep(ahead)
        left = producer.flush(60)
        if left:
            self.failures.append(f"{left} records still unacknowledged after 60 s")

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
                for msg in consumer.consume(500, 0.2):
                    if msg.error() is not None:
                        self._errors.append(str(msg.error()))
                        continue
                    next_offset[msg.partition()] = msg.offset() + 1
                    found = decode(msg.value(), self.run)
                    if found is not None:
                        self.received.append(Received(found[0], found[1], msg.partition(), msg.offset()))
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
        self.report = account(self.sent, self.acked, self.received)
        if consumer is not None:
            self._delete_group()
        if self.failures:
            log.warning("traffic check %s: %d delivery failures, first: %s", self.run, len(self.failures),
                        self.failures[0])
        return self.report

    def _delete_group(self) -> None:
        """Leave no group behind (the next snapshot of the cluster would list it); best effort."""
        from kafkaops.platform import admin

        try:
            with admin.connect(self.config) as conn:
                admin.delete_consumer_group(conn, self.group_id)
        except KafkaOpsError as err:  # the report stands; a group left behind is only clutter
            log.warning("traffic check %s: could not delete its consumer group %s: %s", self.run, self.group_id, err)
