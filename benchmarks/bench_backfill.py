"""Rekey backfill throughput (issue targets: >= 0.8x a plain Spark Kafka->Kafka copy, >= 0.5x
Kafka's producer perf test on the same cluster).

Starts its own one-broker cluster through the kafka_broker role, writes ``--records`` keyed JSON
records of ``--record-bytes`` (datagen, zipf keys) to a 3-partition topic, then in one run and one
local[2] SparkSession times:
  - the rekey backfill (spark_apps.rekey_backfill.run: read, rekey, order, write with lineage) into
    6 partitions;
  - a plain Spark copy of the same snapshot (read key/value, write; same producer settings);
  - org.apache.kafka.tools.ProducerPerformance (tools jar) writing as many records of that size
    with acks=all.
The copy runs first (it pays the JVM's warm-up); the backfill's integrity is checked afterwards
(not timed) when ``--verify`` is given.
"""
from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / "plugins"), str(Path(__file__).resolve().parents[1]),
                str(Path(__file__).resolve().parent)]

from results import publish  # noqa: E402

from kafkaops import admin, datagen, provision, records  # noqa: E402
from kafkaops.backfill import BackfillPlan  # noqa: E402
from kafkaops.paths import jar_dir  # noqa: E402
from spark_apps import rekey_backfill  # noqa: E402


def producer_perf(bootstrap: str, topic: str, n: int, size: int) -> float:
    cmd = ["java", "-Xmx512m", "-cp", f"{jar_dir('tools')}/*", "org.apache.kafka.tools.ProducerPerformance",
           "--topic", topic, "--num-records", str(n), "--record-size", str(size), "--throughput", "-1",
           "--producer-props", f"bootstrap.servers={bootstrap}", "acks=all", "linger.ms=20", "batch.size=524288"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    last = [line for line in out.splitlines() if "records sent" in line][-1]
    return float(re.search(r"([\d.]+) records/sec", last).group(1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--record-bytes", type=int, default=350, help="200-500 in the issue")
    parser.add_argument("--verify", action="store_true")
    parser.add_argument("--no-results", action="store_true")
    args = parser.parse_args(argv)
    base = Path(tempfile.mkdtemp(prefix="kafkaops-bench-backfill-"))
    spec = provision.local_cluster_spec(base, brokers=1, controllers=1)
    try:
        provision.cluster_up(spec)
        config = {"bootstrap.servers": spec.bootstrap}
        with admin.connect(spec.bootstrap, timeout_s=60) as conn:
            for name, n in (("src", 3), ("copy", 3), ("src.v2", 6), ("src.v2.dlq", 1), ("perf", 3)):
                admin.create_topic(conn, name, n, 1)
            gen = datagen.produce(config, "src", datagen.DatagenSpec(records=args.records, keys=10_000,
                                                                     record_bytes=args.record_bytes))
        ranges = records.end_offsets(config, "src")
        plan = BackfillPlan("src", tuple((p, s, e) for p, (s, e) in sorted(ranges.items())), "src.v2", 6,
                            "field:key")
        spark = rekey_backfill.spark_session("local[2]", driver_memory="1g")
        spark.sparkContext.setLogLevel("ERROR")

        started = time.monotonic()
        frame = rekey_backfill._source(spark, plan, spec.bootstrap, {}).select("key", "value")
        rekey_backfill.write(frame.selectExpr("'copy' AS topic", "key", "value"), spec.bootstrap)
        copy_s = time.monotonic() - started

        started = time.monotonic()
        rekey_backfill.run(spark, plan, spec.bootstrap)
        rekey_s = time.monotonic() - started
        verified = ""
        if args.verify:
            report = rekey_backfill.verify(spark, plan, spec.bootstrap)
            verified = f"; integrity {'ok' if report.ok else 'FAILED: ' + '; '.join(report.failures)}"
        spark.stop()
        perf = producer_perf(spec.bootstrap, "perf", args.records, args.record_bytes)
    finally:
        try:
            provision.cluster_down(spec, purge=True)
        finally:
            provision.kill_strays(base)
            shutil.rmtree(base, ignore_errors=True)
    n = args.records
    rekey, copy = n / rekey_s, n / copy_s
    lines = [
        f"{n} records of {args.record_bytes} bytes (10,000 zipf keys, field:key rule), 3 -> 6 partitions, "
        f"1 broker, Spark local[2] driver 1g, shared 2-core machine{' (reduced count: --records)' if n < 1_000_000 else ''}"
        f"{verified}",
        "",
        "| job | seconds | records/s | rekey / it | target |",
        "|---|---|---|---|---|",
        f"| rekey backfill (read, rekey, order, write + lineage) | {rekey_s:.1f} | {rekey:,.0f} | 1.00 | |",
        f"| plain Spark Kafka->Kafka copy | {copy_s:.1f} | {copy:,.0f} | {rekey / copy:.2f} | >= 0.8 "
        f"{'met' if rekey / copy >= 0.8 else 'MISSED'} |",
        f"| kafka ProducerPerformance (acks=all) | | {perf:,.0f} | {rekey / perf:.2f} | >= 0.5 "
        f"{'met' if rekey / perf >= 0.5 else 'MISSED'} |",
        f"| (datagen, confluent-kafka, for scale) | {gen.seconds:.1f} | {gen.records_per_second:,.0f} | | |",
    ]
    publish("Rekey backfill", lines, save=not args.no_results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
