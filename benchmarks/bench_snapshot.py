"""Snapshot speed on 10,000 partitions (target: at most 2 s).

Starts its own 3-broker cluster through the kafka_broker role, creates 200 topics of 50
partitions (RF 1, a few records each), and times ``metadata.snapshot`` (metadata, start and end
offsets, log-dir sizes, consumer groups) against two references measured in the same run:
  - a bare metadata request (confluent-kafka list_topics): the floor of any snapshot;
  - Kafka's own ``kafka-topics --describe`` (org.apache.kafka.tools.TopicCommand, from the
    tools jar, JVM start included), which reports less (no offsets, sizes or lag).
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic
from benchmarks.results import publish

from kafkaops.platform.kafka import connection, metadata

from kafkaops.platform import provision, waits
from kafkaops.testing import clusters
from kafkaops.platform.paths import jar_dir


def timed(fn, repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=200)
    parser.add_argument("--partitions", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--no-results", action="store_true")
    args = parser.parse_args(argv)
    total = args.topics * args.partitions
    base = Path(tempfile.mkdtemp(prefix="kafkaops-bench-"))
    spec = provision.local_cluster_spec(base, brokers=3, extra_config={"log.segment.bytes": 1 << 20,
                                                                       "log.index.size.max.bytes": 1 << 16})
    try:
        provision.cluster_up(spec)
        with connection.connect(spec.bootstrap, timeout_s=60) as conn:
            names = [f"bench-{i:04d}" for i in range(args.topics)]
            for chunk in range(0, len(names), 50):
                futures = conn.admin.create_topics([NewTopic(n, args.partitions, 1) for n in names[chunk:chunk + 50]])
                for f in futures.values():
                    f.result()
            producer = Producer(connection.client_config({"bootstrap.servers": spec.bootstrap, "linger.ms": 50}))
            for n in names:
                for p in range(0, args.partitions, 5):
                    producer.produce(n, value=b"x" * 100, partition=p)
            left = waits.close_producer(producer, waits.Deadline(120))  # flushed in 1 s slices, then released
            assert not left, f"{left} records unacknowledged after 120 s"
            deadline = time.monotonic() + 120
            while True:  # created topics reach every broker's metadata cache a little later
                first = metadata.snapshot(conn)
                complete = sum(1 for p in first.partitions if p.end_offset is not None)
                if complete == total or time.monotonic() > deadline:
                    break
                time.sleep(1)
            assert complete == total, f"expected {total} partitions with offsets, snapshot has {complete}"
            ours = timed(lambda: metadata.snapshot(conn), args.repeat)
            bare = timed(lambda: conn.admin.list_topics(timeout=60), args.repeat)
            cmd = ["java", "-Xmx512m", "-cp", f"{jar_dir('tools')}/*", "org.apache.kafka.tools.TopicCommand",
                   "--bootstrap-server", spec.bootstrap, "--describe"]
            kafka = timed(lambda: subprocess.run(cmd, check=True, capture_output=True), max(1, args.repeat // 2))
        lines = [
            f"snapshot of {total} partitions ({args.topics} topics x {args.partitions}, 3 brokers): "
            f"median {ours:.3f} s over {args.repeat} runs (target <= 2 s: {'met' if ours <= 2 else 'MISSED'}; "
            f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)",
            f"- vs bare metadata request ({bare:.3f} s): {ours / bare:.1f}x",
            f"- vs kafka-topics --describe ({kafka:.3f} s, JVM start included): {ours / kafka:.2f}x",
        ]
        publish("snapshot", lines, save=not args.no_results)
    finally:
        provision.cluster_down(spec, purge=True)
        clusters.kill_strays(base)
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
