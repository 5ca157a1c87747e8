"""Rekey backfill throughput on local Spark and on a Spark standalone cluster, side by side (issue 17's
targets: the direct copies >= 0.9x a plain Spark Kafka->Kafka copy, the merged copy >= 0.9x the same
copy with a shuffle by key, each measured in the same run on the same master), and peak memory.

Starts its own one-broker cluster, writes ``--records`` keyed JSON records of ``--record-bytes``
(datagen, zipf keys) to a 3-partition topic, then on each master (``--masters``: local[2], then a
standalone Master with two one-core Workers, started and stopped here) times, ``--rounds`` times
each in turn (the first round also warms the JVMs up; each job's best round is reported):
  - a plain Spark copy of the snapshot (read key/value, write into a 6-partition topic with Spark's
    own Kafka sink, so the producer's partitioner gives the same layout as the rekey; the backfill's
    producer settings);
  - the rekey backfill of a partition increase, 3 -> 6 partitions by the record key
    (spark_apps.rekey_backfill.run, exactly-once through its transactional sink; every key is in one
    source partition, so the direct copy);
  - the rekey backfill by a value field equal to the record key (``field:key``: each new key in one
    source partition, so the direct copy, with the JVM JSON step);
  - the rekey backfill by a value field whose values span source partitions (``field:seq``: the
    merged copy: JVM step, shuffle, per-key order sort);
  - the merged copy's reference: the plain copy with a shuffle in between (``repartition`` on the
    key into the 6 output partitions), the least any order-restoring regrouping costs in Spark;
and then org.apache.kafka.tools.ProducerPerformance (tools jar) writing as many records of that
size with acks=all. ``--brokers 3`` runs it all on the production-like shape (3 brokers, replication
factor 3, min.insync.replicas 2); ``--verify`` times each rekey's Spark verify (the gate's check) as a row of
its own, with copy plus verify against the plain copy (issue 32: within 1.3x), beside the full check alone
(the joins and windows the verify's proof avoids on a clean direct copy) as its reference; the Spark start-up (the
session to its first job's end, which every pass pays) is a row apart. Peak memory is the largest resident set of this process and every process
under it, sampled every 0.1 s during a job.
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
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from benchmarks.results import publish
from kafkaops.cli import datagen
from kafkaops.platform import provision
from kafkaops.platform.kafka import connection, records, topics
from kafkaops.platform.paths import jar_dir
from kafkaops.rekey.backfill import BackfillPlan
from kafkaops.rekey.records import BackfillRun
from kafkaops.testing import clusters
from spark_apps import backfill_verify, common, rekey_backfill


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


def broker_processes(spec: provision.ClusterSpec) -> list[Any]:
    """The cluster's node JVMs (daemons of their own, not under this process)."""
    import psutil

    base = str(spec.base_dir)
    return [p for p in psutil.process_iter(["cmdline"]) if any(base in arg for arg in (p.info["cmdline"] or []))
            and any("kafka.Kafka" in arg for arg in p.info["cmdline"])]


def tree_cpu(extra: Sequence[Any] = ()) -> float:
    """CPU seconds (user and system) so far of this process, every process under it (the driver and, on
    standalone, the Master, the Workers and the executors) and ``extra`` (the broker)."""
    import psutil

    total = 0.0
    me = psutil.Process(os.getpid())
    for proc in [me, *me.children(recursive=True), *extra]:
        try:
            times = proc.cpu_times()
            total += times.user + times.system
        except psutil.Error:
            pass
    return total


def timed(job: Callable[[], object], brokers: Sequence[Any] = ()) -> tuple[float, int, float]:
    """Seconds, peak RSS and CPU seconds (:func:`tree_cpu`, with ``brokers``) of ``job``."""
    with PeakRss() as rss:
        cpu = tree_cpu(brokers)
        started = time.monotonic()
        job()
        seconds = time.monotonic() - started
        cpu = tree_cpu(brokers) - cpu
    return seconds, rss.peak, cpu


JOBS = ("copy", "shuffled_copy", "record_key", "field:key", "field:seq")
#: each rekey job's same-run reference and the ratio it must reach (issue 17: the direct copies keep
#: 0.9x a plain copy, the merged copy reaches 0.9x a copy that shuffles the same data by key)
REFERENCE = {"record_key": "copy", "field:key": "copy", "field:seq": "shuffled_copy"}
TARGET = 0.9
MASTERS = ("local", "standalone")
#: Seconds from asking for the SparkSession to its first job's end, per master: what every pass pays once.
STARTUP: dict[str, float] = {}


@contextmanager
def brokers_up(prefix: str, brokers: int) -> Iterator[provision.ClusterSpec]:
    """A cluster of ``brokers`` brokers and one controller in a temp folder, gone (with any stray process) when
    the block ends."""
    with clusters.temporary_cluster(prefix, brokers=brokers, controllers=1) as spec:
        yield spec


def topic_settings(brokers: int) -> tuple[int, dict[str, str]]:
    """The replication factor and config of every topic here: RF 1 on one broker; the production-like shape
    on three (RF 3, min.insync.replicas 2, so acks=all waits for a second replica)."""
    return (3, {"min.insync.replicas": "2"}) if brokers >= 3 else (1, {})


@contextmanager
def spark_on(master: str) -> Iterator[Any]:
    """The backfill's SparkSession (driver 1g) on ``master``: ``local`` is local[2]; ``standalone`` a Spark
    standalone Master and two Workers of one core and 1 GiB each (kafkaops.testing.spark, the test suite's cluster:
    each Worker as a user of its own when run as root), started here and stopped after."""
    with ExitStack() as stack:
        url, conf = "local[2]", {}
        if master == "standalone":
            from kafkaops.testing.spark import standalone_cluster

            cluster = stack.enter_context(standalone_cluster(Path(__file__).resolve().parents[1]))
            url = cluster.master_url
            os.environ.pop("PYSPARK_PYTHON", None)  # the local session's interpreter: not on the Workers' hosts
            # its spark-defaults.conf, given here: a second session in this process reads no conf folder
            conf = dict(line.split(None, 1) for line in (cluster.conf_dir / "spark-defaults.conf").read_text().splitlines()
                        if line.strip())
            conf.update(cluster.session_conf())  # its authentication: the cluster's secret, in this JVM only
        began = time.monotonic()
        spark = common.spark_session(url, driver_memory="1g", conf=conf)
        spark.sparkContext.setLogLevel("ERROR")
        spark.range(1).count()  # the first job: the executors are up
        STARTUP[master] = time.monotonic() - began
        if master == "standalone":  # the verify's Python pass runs on the Workers, which see no checkout
            from kafkaops.platform.spark import python_archive

            folder = Path(tempfile.mkdtemp(prefix="kafkaops-bench-apps-"))
            stack.callback(shutil.rmtree, folder, True)
            spark.sparkContext.addPyFile(str(python_archive(folder)))
        try:
            yield spark
        finally:
            spark.stop()


def measure(spark: Any, spec: provision.ClusterSpec, ranges: tuple, jobs: Sequence[str], rounds: int, tag: str,
            verify: bool, brokers_n: int = 1) -> dict[str, Any]:
    """Each job ``rounds`` times in turn (round 1 also warms up); its times, CPU seconds, peak memory, copy
    mode, integrity, and (``verify``) the seconds of each rekey's Spark verify after its last round."""
    rf, config = topic_settings(brokers_n)
    verify_s: dict[str, float] = {}
    full_s: dict[str, float] = {}
    times: dict[str, list[float]] = {job: [] for job in jobs}
    cpus: dict[str, list[float]] = {job: [] for job in jobs}
    peaks: dict[str, int] = dict.fromkeys(jobs, 0)
    modes: dict[str, str] = {}
    verified: dict[str, str] = {}
    brokers = broker_processes(spec)
    for rnd in range(rounds):
        for job in jobs:
            target = f"out.{tag}.{job.replace(':', '.')}.{rnd}"
            with connection.connect(spec.bootstrap, timeout_s=60) as conn:
                topics.create_topic(conn, target, 6, rf, config)  # every job writes the same 6-partition layout
                topics.create_topic(conn, f"{target}.dlq", 1, rf, config)
            if job in ("copy", "shuffled_copy"):
                frame = common.source(spark, BackfillPlan("src", ranges, target, 6), spec.bootstrap, {})
                frame = frame.selectExpr(f"'{target}' AS topic", "key", "value")
                if job == "shuffled_copy":
                    frame = frame.repartition(6, "key")
                sink = frame.write.format("kafka").options(**common.kafka_options(spec.bootstrap)) \
                    .options(**rekey_backfill.PRODUCER_OPTIONS)  # Spark's own Kafka sink, the reference
                seconds, peak, cpu = timed(sink.save, brokers)
            else:
                plan = BackfillPlan("src", ranges, target, 6, job)
                done: list[BackfillRun] = []
                seconds, peak, cpu = timed(lambda: done.append(rekey_backfill.run(spark, plan, spec.bootstrap)),
                                           brokers)
                modes[job] = done[0].mode
                if verify and rnd == rounds - 1:
                    began = time.monotonic()
                    report = rekey_backfill.verify(spark, plan, spec.bootstrap)
                    verify_s[job] = time.monotonic() - began
                    verified[job] = "ok" if report.ok else "FAILED: " + "; ".join(report.failures)
                    print(f"{tag}: verify of {job} {verify_s[job]:.1f} s ({verified[job]})", flush=True)
                    began = time.monotonic()  # its reference: the full check alone (joins and windows)
                    backfill_verify.check(spark, plan, backfill_verify.read_source(spark, plan, spec.bootstrap),
                                          backfill_verify.read_output(spark, plan, spec.bootstrap), proof=False)
                    full_s[job] = time.monotonic() - began
                    print(f"{tag}: full check of {job} {full_s[job]:.1f} s", flush=True)
            print(f"{tag} round {rnd + 1}: {job} {seconds:.1f} s, {cpu:.1f} CPU s, peak RSS {peak / 2**20:.0f} MiB",
                  flush=True)
            times[job].append(seconds)
            cpus[job].append(cpu)
            peaks[job] = max(peaks[job], peak)
    return {"times": times, "cpus": cpus, "peaks": peaks, "modes": modes, "verified": verified, "verify_s": verify_s,
            "full_s": full_s}


def table(n: int, runs: Mapping[str, Mapping[str, Any]], perf: float) -> list[str]:
    """One row per job and master: best seconds, the CPU seconds of that round (every process: driver,
    broker, Spark's), records/s, peak memory, the ratio to the job's same-run reference on the same master
    (:data:`REFERENCE`, :data:`TARGET`) and to ProducerPerformance."""
    labels = {"copy": "reference: plain Spark Kafka->Kafka copy into 6 partitions",
              "shuffled_copy": "reference: the same copy with a shuffle (repartition by key)",
              "record_key": "rekey by record key, partition increase",
              "field:key": "rekey by value field equal to the key `field:key`",
              "field:seq": "rekey by value field spanning partitions `field:seq`"}
    lines = ["| Spark | job | seconds | CPU s (all processes) | records/s | peak RSS | vs its reference (>= 0.9) "
             "| vs ProducerPerformance |",
             "|---|---|---|---|---|---|---|---|"]
    for master, run in runs.items():
        best = {job: min(t) for job, t in run["times"].items()}
        for job in JOBS:
            if job not in best:
                continue
            rate = n / best[job]
            label = labels[job] + (f" ({run['modes'][job]} copy)" if job in run["modes"] else "")
            vs = ""
            if job in REFERENCE and REFERENCE[job] in best:
                ratio = best[REFERENCE[job]] / best[job]
                vs = f"{ratio:.2f} x {REFERENCE[job].replace('_', ' ')} ({'met' if ratio >= TARGET else 'MISSED'})"
            cpu = run["cpus"][job][run["times"][job].index(best[job])]
            lines.append(f"| {master} | {label} | {best[job]:.1f} | {cpu:.1f} | {rate:,.0f} "
                         f"| {run['peaks'][job] / 2**20:,.0f} MiB "
                         f"| {vs} | {rate / perf:.2f} |")
        for job, seconds in run.get("verify_s", {}).items():  # the check of the copy, as its own row
            copy = best.get("copy")
            both = (f"copy + verify {(best[job] + seconds) / copy:.2f} x the plain copy (target <= 1.3)"
                    if copy else "")
            lines.append(f"| {master} | the Spark verify of {labels[job]} | {seconds:.1f} | | {n / seconds:,.0f} | "
                         f"| {both} | |")
            full = run.get("full_s", {}).get(job)
            if full:
                lines.append(f"| {master} | reference: the full check alone (joins and windows), {labels[job]} | "
                             f"{full:.1f} | | {n / full:,.0f} | | verify {seconds / full:.2f} x the full check | |")
        if master in STARTUP:
            lines.append(f"| {master} | Spark start-up (session to its first job's end; every pass pays it) | "
                         f"{STARTUP[master]:.1f} | | | | | |")
    lines.append(f"| | reference: kafka ProducerPerformance (acks=all, own JVM) | | | {perf:,.0f} | | | 1.00 |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--record-bytes", type=int, default=350, help="200-500 in the issue")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--masters", default=",".join(MASTERS), help="local, standalone or both (comma-separated)")
    parser.add_argument("--verify", action="store_true",
                        help="check the integrity of each rekey's last round with the Spark verify")
    parser.add_argument("--brokers", type=int, default=1, choices=(1, 3),
                        help="1 (RF 1), or 3: the production-like shape, RF 3 and min.insync.replicas 2")
    parser.add_argument("--no-results", action="store_true")
    parser.add_argument("--only", metavar="JOB,...",
                        help="time only these jobs (with --no-results; the table needs them all): " + ", ".join(JOBS))
    args = parser.parse_args(argv)
    if args.only and not args.no_results:
        parser.error("--only needs --no-results")
    masters = [m for m in args.masters.split(",") if m]
    if set(masters) - set(MASTERS):
        parser.error(f"--masters takes {', '.join(MASTERS)}")
    jobs = tuple(args.only.split(",")) if args.only else JOBS
    runs: dict[str, dict[str, Any]] = {}
    rf, topic_config = topic_settings(args.brokers)
    with brokers_up("kafkaops-bench-backfill-", args.brokers) as spec:
        config = {"bootstrap.servers": spec.bootstrap}
        with connection.connect(spec.bootstrap, timeout_s=60) as conn:
            topics.create_topic(conn, "src", 3, rf, topic_config)
            topics.create_topic(conn, "perf", 3, rf, topic_config)
        gen = datagen.produce(config, "src", datagen.DatagenSpec(records=args.records, keys=10_000,
                                                                 record_bytes=args.record_bytes))
        ranges = tuple((p, s, e) for p, (s, e) in sorted(records.end_offsets(config, "src").items()))
        for master in masters:
            with spark_on(master) as spark:
                runs[master] = measure(spark, spec, ranges, jobs, args.rounds, master, args.verify, args.brokers)
        if args.only:
            return 0
        perf = producer_perf(spec.bootstrap, "perf", args.records, args.record_bytes)
    n = args.records
    verified = {f"{m} {job}": v for m, run in runs.items() for job, v in run["verified"].items()}
    lines = [
        f"{n} records of {args.record_bytes} bytes (10,000 zipf keys), source 3 partitions -> 6, "
        f"{'3 brokers, RF 3, min.insync.replicas 2' if args.brokers >= 3 else '1 broker'}, "
        f"Spark driver 1g; local: local[2]; standalone: a Master and 2 Workers of 1 core and 1 GiB (kafkaops.testing.spark), "
        f"shuffle read over the block managers; best of {args.rounds} rounds per job (round 1 warms up), "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
        f"{' (reduced count: --records)' if n < 1_000_000 else ''}"
        + (f"; integrity {', '.join(f'{k} {v}' for k, v in verified.items())}" if verified else ""),
        "Peak RSS: this process and every process under it (local: the driver JVM running the tasks; standalone: "
        "the driver, the Master, the Workers and their executors). CPU s: the user and system seconds of those "
        "processes and the broker during the best round: on 2 cores the jobs share the CPU with the broker.",
        "",
        *table(n, runs, perf),
        f"| | (datagen, confluent-kafka, for scale) | {gen.seconds:.1f} | | {gen.records_per_second:,.0f} | | | |",
    ]
    publish("Rekey backfill, local and standalone Spark", lines, save=not args.no_results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
