"""Keyed JSON test data: deterministic by seed, with configurable key skew and record size.

:func:`generate_records` is pure (the same spec gives the same records, byte for byte);
:func:`produce` writes them with acks=all, idempotence and the Java-compatible murmur2
partitioner, so a key lands where Kafka's Java client would put it. ``kafkaops datagen`` is
:func:`add_arguments` and :func:`run`.
"""
from __future__ import annotations

import argparse
import bisect
import json
import logging
import random
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from kafkaops.cli.options import add_local_connection, kafka_config
from kafkaops.errors import ConfigError, KafkaOpsError
from kafkaops.platform import waits

log = logging.getLogger(__name__)

SKEWS = ("uniform", "zipf", "hot")


@dataclass(frozen=True)
class DatagenSpec:
    """What to generate. ``skew``: ``uniform``; ``zipf`` (weight of the k-th key ∝ 1/k^zipf_s);
    ``hot`` (key 0 takes ``hot_share`` of the records, the rest share the remainder evenly)."""

    records: int
    keys: int = 1000
    skew: str = "zipf"
    zipf_s: float = 1.1
    hot_share: float = 0.4
    record_bytes: int = 256
    seed: int = 42
    key_prefix: str = "account"

    def __post_init__(self) -> None:
        problems = []
        if self.records < 0:
            problems.append(f"records is {self.records}; give 0 or more")
        if self.keys < 1:
            problems.append(f"keys is {self.keys}; give at least 1")
        if self.skew not in SKEWS:
            problems.append(f"skew {self.skew!r} is unknown; use one of {', '.join(SKEWS)}")
        if self.skew == "hot" and not 0.0 <= self.hot_share <= 1.0:
            problems.append(f"hot_share is {self.hot_share}; give a share between 0 and 1")
        if self.skew == "zipf" and self.zipf_s <= 0:
            problems.append(f"zipf_s is {self.zipf_s}; give an exponent above 0")
        if self.record_bytes < 64:
            problems.append(f"record_bytes is {self.record_bytes}; records need at least 64 bytes for their fields")
        if problems:
            raise ConfigError("bad data generator spec: " + "; ".join(problems))

    def key(self, index: int) -> str:
        return f"{self.key_prefix}-{index:06d}"


def _key_sampler(spec: DatagenSpec, rng: random.Random) -> Any:
    if spec.skew == "uniform":
        return lambda: rng.randrange(spec.keys)
    if spec.skew == "hot":
        def hot() -> int:
            if spec.keys == 1 or rng.random() < spec.hot_share:
                return 0
            return 1 + rng.randrange(spec.keys - 1)
        return hot
    cumulative, total = [], 0.0
    for rank in range(1, spec.keys + 1):
        total += 1.0 / rank ** spec.zipf_s
        cumulative.append(total)
    return lambda: min(bisect.bisect_left(cumulative, rng.random() * total), spec.keys - 1)


def generate_records(spec: DatagenSpec) -> Iterator[tuple[bytes, bytes]]:
    """Yield ``(key, value)`` pairs. The value is JSON with a global ``id`` and a per-key ``seq``
    (0, 1, 2, ... for each key), so order and completeness can be checked downstream."""
    rng = random.Random(spec.seed)
    # Padding is random letters (not one repeated character), so it compresses as real data does.
    pool = "".join(rng.choices("abcdefghijklmnopqrstuvwxyz0123456789", k=65_536))
    sample = _key_sampler(spec, rng)
    seq: Counter[int] = Counter()
    for i in range(spec.records):
        k = sample()
        key = spec.key(k)
        body = {"id": i, "key": key, "seq": seq[k], "amount_cents": rng.randrange(1, 1_000_000),
                "ts": 1_700_000_000_000 + i, "pad": ""}
        seq[k] += 1
        raw = json.dumps(body, separators=(",", ":"))
        need = max(0, spec.record_bytes - len(raw))
        start = (i * 7919) % (len(pool) - need) if need < len(pool) else 0
        body["pad"] = pool[start:start + need]
        yield key.encode(), json.dumps(body, separators=(",", ":")).encode()


@dataclass(frozen=True)
class DatagenResult:
    topic: str
    records: int
    bytes: int
    seconds: float
    per_partition: Mapping[int, int] = field(default_factory=dict)
    per_key_top: tuple[tuple[str, int], ...] = ()

    @property
    def records_per_second(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else float("inf")


def producer_config(connection: Mapping[str, str]) -> dict[str, Any]:
    """Producer settings kafkaops uses for keyed data: no loss, no duplicates, Java placement."""
    from kafkaops.platform.kafka.connection import client_config

    return client_config({**connection, "acks": "all", "enable.idempotence": True,
                          "partitioner": "murmur2_random", "linger.ms": 20, "batch.size": 1_000_000,
                          "compression.type": "none", "message.timeout.ms": 120_000})


#: How long :func:`produce` waits for the last acknowledgements (librdkafka gives up on a record after
#: its ``message.timeout.ms``, 120 s, so a longer wait would not help).
FLUSH_TIMEOUT_S = 120.0


def produce(connection: Mapping[str, str], topic: str, spec: DatagenSpec, *,
            flush_timeout_s: float = FLUSH_TIMEOUT_S) -> DatagenResult:
    """Write ``spec``'s records to ``topic``; raise if any record was not acknowledged. The final
    wait for acknowledgements ends after ``flush_timeout_s`` (:class:`kafkaops.errors.WaitTimedOut`),
    in slices of at most a second (:mod:`kafkaops.platform.waits`)."""
    from confluent_kafka import Producer

    producer = Producer(producer_config(connection))
    failures: list[str] = []
    per_partition: Counter[int] = Counter()

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            failures.append(str(err))
        else:
            per_partition[msg.partition()] += 1

    started = time.monotonic()
    total_bytes = 0
    keys: Counter[str] = Counter()
    try:
        for key, value in generate_records(spec):
            total_bytes += len(key) + len(value)
            keys[key.decode()] += 1
            while True:
                try:
                    producer.produce(topic, key=key, value=value, on_delivery=on_delivery)
                    break
                except BufferError:
                    producer.poll(0.05)
            producer.poll(0)
        deadline = waits.Deadline(flush_timeout_s)
        remaining = waits.flush(producer, deadline)
    finally:  # closed here, also when producing or the wait failed: what is left is purged, not flushed
        waits.close_producer(producer, waits.Deadline(0))
    seconds = time.monotonic() - started
    if remaining:
        raise deadline.timed_out(
            f"the acknowledgements of {spec.records} datagen record(s) to {topic} at "
            f"{connection.get('bootstrap.servers')}",
            state=f"{remaining} record(s) were still unacknowledged and were purged ({len(failures)} failed, "
                  f"first: {failures[:1]}); the others may be in {topic}",
            then="check that the brokers are up and reachable and min.insync.replicas, then run the same datagen "
                 "again (the same seed writes the same records)")
    if failures:
        raise KafkaOpsError(f"datagen to {topic}: {len(failures)} of {spec.records} records failed "
                            f"(first: {failures[:1]}); check the cluster's health and min.insync.replicas")
    log.info("datagen: %d records, %d bytes to %s in %.2f s", spec.records, total_bytes, topic, seconds)
    return DatagenResult(topic=topic, records=spec.records, bytes=total_bytes, seconds=seconds,
                         per_partition=dict(sorted(per_partition.items())), per_key_top=tuple(keys.most_common(5)))


# -- the command ------------------------------------------------------------------------------------------

def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``kafkaops datagen``."""
    add_local_connection(parser)
    parser.add_argument("--topic", required=True, help="the topic to write to")
    parser.add_argument("--records", type=int, default=10_000, metavar="N", help="records to write (default 10000)")
    parser.add_argument("--partitions", type=int, metavar="N",
                        help="create the topic with this many partitions first (kept if it exists)")
    parser.add_argument("--replication-factor", type=int, default=3, metavar="N",
                        help="with --partitions: replicas of each partition (default 3)")
    parser.add_argument("--keys", type=int, default=1000, metavar="N", help="distinct keys (default 1000)")
    parser.add_argument("--skew", default="zipf", choices=SKEWS,
                        help="uniform; zipf: the k-th key weighs 1/k^s; hot: key 0 takes --hot-share (default zipf)")
    parser.add_argument("--zipf-s", type=float, default=1.1, metavar="S", help="with --skew zipf: s (default 1.1)")
    parser.add_argument("--hot-share", type=float, default=0.4, metavar="SHARE",
                        help="with --skew hot: the hot key's share of the records, 0..1 (default 0.4)")
    parser.add_argument("--record-bytes", type=int, default=256, metavar="BYTES",
                        help="size of each JSON value (default 256)")
    parser.add_argument("--seed", type=int, default=42, help="the same seed writes the same records (default 42)")


def run(args: argparse.Namespace) -> int:
    """Create the topic (with --partitions), write the records, print where they went."""
    from kafkaops.platform.kafka import connection, topics

    spec = DatagenSpec(records=args.records, keys=args.keys, skew=args.skew, zipf_s=args.zipf_s,
                       hot_share=args.hot_share, record_bytes=args.record_bytes, seed=args.seed)
    with connection.connect(kafka_config(args), timeout_s=args.timeout) as conn:
        if args.partitions:
            topics.create_topic(conn, args.topic, args.partitions, args.replication_factor)
        result = produce(conn.config, args.topic, spec)
    print(f"produced {result.records} records ({result.bytes} bytes) to {result.topic} in {result.seconds:.2f} s; "
          f"per partition {dict(result.per_partition)}; hottest keys {list(result.per_key_top)}")
    return 0
