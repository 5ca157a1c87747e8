"""Bounded reads of records: a sample of a topic (how many keys a partition increase would move),
lineage headers of a backfill target (the cut-over's offset translation), and whole ranges read back.

Each read has an end: the offsets it was given, or the end offsets of a snapshot. It assigns partitions
(no consumer group, nothing committed), stops when every partition reached its end, and closes its
consumer before it returns.
"""
from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, TopicPartition

from kafkaops.errors import KafkaOpsError, KafkaUnreachable
from kafkaops.platform.kafka import connection, metadata


@dataclass(frozen=True)
class Record:
    """One record as read: where it sits, its key, value and headers (name -> bytes, in order)."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()

    def header(self, name: str) -> bytes | None:
        """The value of the first header ``name`` (None when there is none)."""
        for k, v in self.headers:
            if k == name:
                return v
        return None

    def last_header(self, name: str) -> bytes | None:
        """The value of the last header ``name`` (None when there is none): the one a kafkaops copy wrote
        (its lineage, a dead letter's code), after the source record's own headers."""
        for k, v in reversed(self.headers):
            if k == name:
                return v
        return None


def read_ranges(config: Mapping[str, str], topic: str, ranges: Mapping[int, tuple[int, int]], *,
                timeout_s: float = 120.0) -> Iterator[Record]:
    """Records of ``topic`` in ``[start, end)`` per partition (``ranges``), in offset order per partition."""
    from confluent_kafka import Consumer  # looked up per call: the tests' client guard replaces it

    if not any(e > s for s, e in ranges.values()):
        return
    consumer = Consumer(connection.client_config({**config, "group.id": f"kafkaops-read-{time.monotonic_ns()}",
                                                 "enable.auto.commit": False, "enable.partition.eof": True,
                                                 "auto.offset.reset": "earliest", "fetch.max.bytes": 16 * 1024 * 1024}))
    try:
        yield from consume_ranges(consumer, {(topic, int(p)): r for p, r in ranges.items()}, timeout_s=timeout_s)
    finally:
        consumer.close()


def consume_ranges(consumer: Any, ranges: Mapping[tuple[str, int], tuple[int, int]], *, timeout_s: float,
                   poll_s: float = 1.0) -> Iterator[Record]:
    """Records of ``ranges`` (topic partition -> ``[start, end)``) read by ``consumer`` (assigned here; it
    needs ``enable.partition.eof``), in offset order per topic partition, each asked for at most ``poll_s``;
    :class:`KafkaUnreachable` when the ends are not reached within ``timeout_s``."""
    wanted = {(str(t), int(p)): (int(s), int(e)) for (t, p), (s, e) in ranges.items() if e > s}
    if not wanted:
        return
    consumer.assign([TopicPartition(t, p, s) for (t, p), (s, _) in sorted(wanted.items())])
    pending = set(wanted)
    deadline = time.monotonic() + timeout_s
    while pending:
        if time.monotonic() > deadline:
            left = {f"{t}-{p}": wanted[(t, p)][1] for t, p in sorted(pending)}
            raise KafkaUnreachable(f"reading {', '.join(sorted({t for t, _ in pending}))}: partitions did not reach "
                                   f"their end offsets {left} within {timeout_s:.0f} s; check the brokers, or that "
                                   "the records were not deleted meanwhile")
        for msg in consumer.consume(10_000, poll_s):
            t, p, offset, error = msg.topic(), msg.partition(), msg.offset(), msg.error()
            key = (t, p)
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    if key in pending and offset is not None and offset >= wanted[key][1]:
                        pending.discard(key)
                    continue
                raise KafkaOpsError(f"reading {t}-{p}: {error}")
            if p is None or offset is None:  # a record always has both: never skip one silently
                raise KafkaOpsError(f"reading {t}: the client gave a record without its partition ({p}) or "
                                    f"offset ({offset}); nothing was read past it: read again")
            if key not in pending:
                continue
            if offset >= wanted[key][1]:
                pending.discard(key)
                continue
            yield Record(t, p, offset, msg.timestamp()[1], msg.key(), msg.value(), headers_of(msg.headers()))
            if offset + 1 >= wanted[key][1]:
                pending.discard(key)


def end_offsets(config: Mapping[str, str], topic: str) -> dict[int, tuple[int, int]]:
    """Start and end offsets of each partition of ``topic`` (a fresh snapshot of one topic)."""
    with connection.connect(config) as conn:
        snap = metadata.snapshot(conn, topics=[topic], sizes=False, groups=False)
    return {p.partition: (p.start_offset or 0, p.end_offset or 0) for p in snap.partitions}


def read_topic(config: Mapping[str, str], topic: str, **kwargs: Any) -> list[Record]:
    """Every record of ``topic`` up to its end offsets now."""
    return list(read_ranges(config, topic, end_offsets(config, topic), **kwargs))


def sample(config: Mapping[str, str], topic: str, ranges: Mapping[int, tuple[int, int]], per_partition: int
           ) -> list[Record]:
    """Up to ``per_partition`` of the latest records of each partition in ``ranges``."""
    tail = {p: (max(s, e - per_partition), e) for p, (s, e) in ranges.items()}
    return list(read_ranges(config, topic, tail))


def headers_of(raw: Any) -> tuple[tuple[str, bytes | None], ...]:
    """A consumed record's headers as :class:`Record` keeps them: confluent-kafka gives a list of (name, value)
    pairs, or None; a value given as text is taken as UTF-8."""
    return tuple((name, value.encode() if isinstance(value, str) else value) for name, value in (raw or ()))
