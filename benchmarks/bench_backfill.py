"""Rekey backfill throughput (issue targets: >= 0.8x a plain Spark Kafka->Kafka copy, >= 0.5x
Kafka's producer perf test on the same cluster), and peak memory.

Starts its own one-broker cluster through the kafka_broker role, writes ``--records`` keyed JSON
records of ``--record-bytes`` (datagen, zipf keys) to a 3-partition topic, then in one local[2]
SparkSession times, ``--rounds`` times each in turn (the first round also warms the JVM up; each
job's best round is reported):
  - a plain Spark copy of the snapshot (read key/value, write into a 6-partition topic, so the
    producer's own partitioner gives the same layout as the rekey; the backfill's producer settings);
  - the rekey backfill of a partition increase, 3 -> 6 partitions by the record key
    (spark_apps.rekey_backfill.run; every key is in one source partition, so the direct copy);
  - the rekey backfill by a value field equal to the record key (``field:key``: each new key in one
    source partition, so the direct copy, with the JVM JSON step);
  - the rekey backfill by a value field whose values span source partitions (``field:seq``: the
    merged copy: JVM step, shuffle, per-key order sort);
  - a second reference for the merged copy: the plain copy with a shuffle in between
    (``repartition`` on the key into the 6 output partitions), the least any order-restoring
    regrouping of the values costs in Spark;
and then org.apache.kafka.tools.ProducerPerformance (tools jar) writing as many records of that
size with acks=all. Peak memory is the largest resident set of this process, the Spark JVM and
the Python workers together, sampled every 0.1 s during a job.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / "plugins"), str(Path(__file__).resolve().parents[1]),
                str(Path(__file__).resolve().parent)]

from results import publish  # noqa: E402


from kafkaops.cli import datagen  # noqa: E402

from kafkaops.platform import provision  # noqa: E402

from kafkaops.platform import admin  # noqa: E402
from kafkaops.rekey.backfill import BackfillPlan  # noqa: E402
from kafkaops.platform.paths import jar_dir  # noqa: E402
from spark_apps import rekey_backfill  # noqa: E402


def producer_perf(bootstrap: str, topic: str, n: int, size: int) -> float:
    cmd = ["java", "-Xmx512m", "-cp", f"{jar_dir('tools')}/*", "org.apache.kafka.tools.ProducerPerformance",
           "--topic", topic, "--num-records", str(n), "--record-size", str(size), "--throughput", "-1",
           "--producer-props", f"bootstrap.servers={bootstrap}", "acks=all", "linger.ms=20", "batch.size=524288"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    last = [line for line in out.splitlines() if "records sent" in line][-1]
    return float(re.search(r"([\d.]+) records/sec", last).group(1))


class PeakRss:
    """The largest summed RSS of this process and its descendants while the block runs."""

    def __init__(self) -> None:
        import psutil

        self._me = psutil.Process(os.getpid())
        self.peak = 0
        self._stop = threading.Event()

    def _sample(self) -> None:
        import psutil

        while not self._stop.is_set():
            total = 0
            for proc in [self._me, *self._me.children(recursive=True)]:
                try:
                    total += proc.memory_info().rss
                except psutil.Error:
                    pass
            self.peak = max(self.peak, total)
            self._stop.wait(0.1)

    def __enter__(self) -> PeakRss:
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def timed(job: Callable[[], object]) -> tuple[float, int]:
    with PeakRss() as rss:
        started = time.monotonic()
        job()
        seconds = time.monotonic() - started
    return seconds, rss.peak


JOBS = ("copy", "shuffled_copy", "record_key", "field:key", "field:seq")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--record-bytes", type=int, default=350, help="200-500 in the issue")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--verify", action="store_true",
                        help="check the integrity of each rekey's last round (reads everything back to the driver: "
                             "for a reduced --records only)")
    parser.add_argument("--no-results", action="store_true")
    parser.add_argument("--only", metavar="JOB,...",
                        help="time only these jobs (with --no-results; the table needs them all): " + ", ".join(JOBS))
    args = parser.parse_args(argv)
    if args.only and not args.no_results:
        parser.error("--only needs --no-results")
    base = Path(tempfile.mkdtemp(prefix="kafkaops-bench-backfill-"))
    spec = provision.local_cluster_spec(base, brokers=1, controllers=1)
    jobs = tuple(args.only.split(",")) if args.only else JOBS
    times: dict[str, list[float]] = {job: [] for job in jobs}
    peaks: dict[str, int] = dict.fromkeys(jobs, 0)
    modes: dict[str, str] = {}
    verified: dict[str, str] = {}
    try:
        provision.cluster_up(spec)
        config = {"bootstrap.servers": spec.bootstrap}
        conn = admin.connect(spec.bootstrap, timeout_s=60)
        with conn:
            admin.create_topic(conn, "src", 3, 1)
            admin.create_topic(conn, "perf", 3, 1)
        gen = datagen.produce(config, "src", datagen.DatagenSpec(records=args.records, keys=10_000,
                                                                 record_bytes=args.record_bytes))
        ranges = tuple((p, s, e) for p, (s, e) in sorted(admin.end_offsets(config, "src").items()))
        spark = rekey_backfill.spark_session("local[2]", driver_memory="1g")
        spark.sparkContext.setLogLevel("ERROR")
        for rnd in range(args.rounds):
            for job in jobs:
                target = f"out.{job.replace(':', '.')}.{rnd}"
                with admin.connect(spec.bootstrap, timeout_s=60) as conn:
                    admin.create_topic(conn, target, 6, 1)  # every job writes the same 6-partition layout
                    admin.create_topic(conn, f"{target}.dlq", 1, 1)
                if job in ("copy", "shuffled_copy"):
                    frame = rekey_backfill._source(spark, BackfillPlan("src", ranges, target, 6), spec.bootstrap, {})
                    frame = frame.selectExpr(f"'{target}' AS topic", "key", "value")
                    if job == "shuffled_copy":
                        frame = frame.repartition(6, "key")
                    sink = frame.write.format("kafka").options(**rekey_backfill.kafka_options(spec.bootstrap)) \
                        .options(**rekey_backfill.PRODUCER_OPTIONS)  # Spark's own Kafka sink, the reference
                    seconds, peak = timed(sink.save)
                else:
                    plan = BackfillPlan("src", ranges, target, 6, job)
                    result: dict = {}
                    seconds, peak = timed(lambda: result.update(rekey_backfill.run(spark, plan, spec.bootstrap)))
                    modes[job] = result["mode"]
                    if args.verify and rnd == args.rounds - 1:
                        report = rekey_backfill.verify(spark, plan, spec.bootstrap)
                        verified[job] = "ok" if report.ok else "FAILED: " + "; ".join(report.failures)
                print(f"round {rnd + 1}: {job} {seconds:.1f} s, peak RSS {peak / 2**20:.0f} MiB", flush=True)
                times[job].append(seconds)
                peaks[job] = max(peaks[job], peak)
        spark.stop()
        if args.only:
            return 0
        perf = producer_perf(spec.bootstrap, "perf", args.records, args.record_bytes)
    finally:
        try:
            provision.cluster_down(spec, purge=True)
        finally:
            provision.kill_strays(base)
            shutil.rmtree(base, ignore_errors=True)
    n = args.records
    best = {job: min(times[job]) for job in jobs}
    rate = {job: n / best[job] for job in jobs}

    def row(label: str, job: str) -> str:
        vs_copy, vs_perf = rate[job] / rate["copy"], rate[job] / perf
        return (f"| {label} | {best[job]:.1f} | {rate[job]:,.0f} | {peaks[job] / 2**20:,.0f} MiB "
                f"| {vs_copy:.2f} ({'met' if vs_copy >= 0.8 else 'MISSED'}) "
                f"| {vs_perf:.2f} ({'met' if vs_perf >= 0.5 else 'MISSED'}) "
                f"| {rate[job] / rate['shuffled_copy']:.2f} |")

    load = os.getloadavg()[0]
    lines = [
        f"{n} records of {args.record_bytes} bytes (10,000 zipf keys), source 3 partitions -> 6, 1 broker, "
        f"Spark local[2] driver 1g, best of {args.rounds} rounds per job (round 1 warms the JVM up), "
        f"load average {load:.1f} on {os.cpu_count()} cores"
        f"{' (reduced count: --records)' if n < 1_000_000 else ''}"
        + (f"; integrity {', '.join(f'{k} {v}' for k, v in verified.items())}" if verified else ""),
        "",
        "| job | seconds | records/s | peak RSS (driver JVM + Python) | vs Spark copy (>= 0.8) "
        "| vs ProducerPerformance (>= 0.5) | vs Spark copy with a shuffle |",
        "|---|---|---|---|---|---|---|",
        row(f"rekey by record key, partition increase ({modes['record_key']} copy)", "record_key"),
        row(f"rekey by value field equal to the key `field:key` ({modes['field:key']} copy)", "field:key"),
        row(f"rekey by value field spanning partitions `field:seq` ({modes['field:seq']} copy)", "field:seq"),
        f"| reference: plain Spark Kafka->Kafka copy into 6 partitions | {best['copy']:.1f} | {rate['copy']:,.0f} "
        f"| {peaks['copy'] / 2**20:,.0f} MiB | 1.00 | | |",
        f"| reference: the same copy with a shuffle (repartition by key) | {best['shuffled_copy']:.1f} "
        f"| {rate['shuffled_copy']:,.0f} | {peaks['shuffled_copy'] / 2**20:,.0f} MiB "
        f"| {rate['shuffled_copy'] / rate['copy']:.2f} | | 1.00 |",
        f"| reference: kafka ProducerPerformance (acks=all, own JVM) | | {perf:,.0f} | | | 1.00 | |",
        f"| (datagen, confluent-kafka, for scale) | {gen.seconds:.1f} | {gen.records_per_second:,.0f} | | | | |",
    ]
    publish("Rekey backfill", lines, save=not args.no_results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
