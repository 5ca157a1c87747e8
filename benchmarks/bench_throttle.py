"""Throttled move rate: does the executor's replication throttle bind, and how close to it does a
move run?

    .venv/bin/python -m benchmarks.bench_throttle [--mb 30] [--throttle-mb 2] [--no-results]

Starts 2 brokers through the kafka_broker role, fills two single-replica partitions on broker 1
with ``--mb`` MB each (datagen, 1000-byte records), then moves each to broker 2: the first
unthrottled (a bare reassignment: the reference, loopback speed), the second with
:class:`kafkaops.reassign.engine.Executor` at ``--throttle-mb`` MB/s. The copy is sampled through
``metadata.replica_sizes`` (bytes of the adding replica over time); the observed rate is the slope
of a least-squares fit between 10% and 90% copied, and the end-to-end rate counts from submit to
done. Prints observed / throttle (target >= 0.9 when the throttle binds) and observed /
unthrottled.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path


from confluent_kafka.admin import NewTopic
from benchmarks.results import publish

from kafkaops.platform.kafka import connection, metadata, reassignments

from kafkaops.cli import datagen

from kafkaops.reassign import engine

from kafkaops.platform import provision
from kafkaops.testing import clusters

MB = 1_000_000
Sample = tuple[float, int]  # seconds since submit, bytes copied


def slope(samples: list[Sample], size: int, low: float = 0.1, high: float = 0.9) -> float | None:
    """Bytes/s of a least-squares line through the samples between ``low`` and ``high`` of ``size``."""
    window = [(t, b) for t, b in samples if low * size <= b <= high * size]
    if len(window) < 3:
        return None
    n = len(window)
    mean_t = sum(t for t, _ in window) / n
    mean_b = sum(b for _, b in window) / n
    var = sum((t - mean_t) ** 2 for t, _ in window)
    return sum((t - mean_t) * (b - mean_b) for t, b in window) / var if var else None


def fill(conn: connection.KafkaConnection, topic: str, mb: int) -> int:
    """A one-partition topic on broker 1 holding about ``mb`` MB; returns its bytes on disk."""
    for future in conn.admin.create_topics([NewTopic(topic, 1, replica_assignment=[[1]])],
                                           request_timeout=30).values():
        future.result(60)
    time.sleep(1)  # the new partition's leader reaches the producer's metadata
    datagen.produce(conn.config, topic, datagen.DatagenSpec(records=mb * 1000, keys=100, skew="uniform",
                                                            record_bytes=1000, seed=3))
    return metadata.replica_sizes(conn, [(topic, 0)], [1])[(topic, 0, 1)]


def sample_until(conn: connection.KafkaConnection, topic: str, done: threading.Event | None, interval_s: float
                 ) -> tuple[list[Sample], float]:
    """Samples of the copy to broker 2 from now until the move is done; and the seconds it took."""
    started = time.monotonic()
    samples: list[Sample] = []
    while True:
        copied = metadata.replica_sizes(conn, [(topic, 0)], [2]).get((topic, 0, 2), 0)
        samples.append((time.monotonic() - started, copied))
        finished = done.is_set() if done is not None else not reassignments.list_partition_reassignments(conn, [(topic, 0)])
        if finished:
            return samples, time.monotonic() - started
        time.sleep(interval_s)


def unthrottled(conn: connection.KafkaConnection, topic: str) -> tuple[list[Sample], float]:
    reassignments.alter_partition_reassignments(conn, {(topic, 0): [2]})
    return sample_until(conn, topic, None, 0.02)


def throttled(conn: connection.KafkaConnection, topic: str, rate: int) -> tuple[list[Sample], float, engine.ThrottleRecord]:
    finished = threading.Event()
    outcome: list[object] = []
    run = engine.Executor(connection.connect(conn.config, timeout_s=30), {(topic, 0): (2,)}, throttle_bytes_per_s=rate,
                            dry_run=False, poll_interval_s=0.25)

    def target() -> None:
        try:
            outcome.append(run.execute())
        except BaseException as err:  # noqa: BLE001 - re-raised below
            outcome.append(err)
        finally:
            run.conn.close()
            finished.set()

    worker = threading.Thread(target=target, daemon=True)
    worker.start()
    while not reassignments.list_partition_reassignments(conn, [(topic, 0)]) and not finished.is_set():
        time.sleep(0.05)  # from the submit on, as the unthrottled move is timed
    samples, seconds = sample_until(conn, topic, finished, 0.25)
    worker.join()
    if isinstance(outcome[0], BaseException):
        raise outcome[0]
    return samples, seconds, run.throttles


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=30, help="MB in each partition (default 30)")
    parser.add_argument("--throttle-mb", type=float, default=2.0, help="throttle in MB/s (default 2)")
    parser.add_argument("--broker-config", action="append", default=[], metavar="KEY=VALUE",
                        help="extra broker config (repeatable), e.g. replica.fetch.backoff.ms=100")
    parser.add_argument("--no-results", action="store_true", help="do not append to RESULTS.md")
    args = parser.parse_args(argv)
    extra = dict(item.split("=", 1) for item in args.broker_config)
    rate = int(args.throttle_mb * MB)
    base = Path(tempfile.mkdtemp(prefix="kafkaops-bench-thr-"))
    spec = provision.local_cluster_spec(base, brokers=2, controllers=1, extra_config=extra)
    try:
        provision.cluster_up(spec)
        with connection.connect(spec.bootstrap, timeout_s=30) as conn:
            free_size = fill(conn, "reference", args.mb)
            slow_size = fill(conn, "throttled", args.mb)
            free_samples, free_s = unthrottled(conn, "reference")
            slow_samples, slow_s, record = throttled(conn, "throttled", rate)
    finally:
        provision.cluster_down(spec, purge=True)
        clusters.kill_strays(base)
        shutil.rmtree(base, ignore_errors=True)

    free_rate = free_size / free_s
    steady = slope(slow_samples, slow_size)
    end_to_end = slow_size / slow_s
    observed = steady if steady is not None else end_to_end
    binds = observed < 0.5 * free_rate
    lines = [
        f"move of one {slow_size / MB:.1f} MB partition, broker 1 -> 2, throttle {rate / MB:g} MB/s on brokers "
        f"{list(record.brokers)}{f' (brokers: {extra})' if extra else ''} (load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)",
        f"- observed {observed / MB:.2f} MB/s (slope 10-90% copied, {len(slow_samples)} samples); end to end "
        f"{end_to_end / MB:.2f} MB/s in {slow_s:.1f} s",
        f"- observed / throttle: {observed / rate:.2f} (target >= 0.9 when it binds: "
        f"{('met' if observed / rate >= 0.9 else 'MISSED') if binds else 'n/a, the throttle does NOT bind'})",
        f"- reference, unthrottled move of {free_size / MB:.1f} MB: {free_rate / MB:.1f} MB/s end to end in "
        f"{free_s:.2f} s; observed / unthrottled: {observed / free_rate:.3f}",
    ]
    publish("throttled move rate", lines, save=not args.no_results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
