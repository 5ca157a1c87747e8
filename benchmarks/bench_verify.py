"""Backfill verify inside Spark (spark_apps/backfill_verify.py) against the driver-side verify it
replaces (every record collected, then kafkaops.testing.integrity.check_integrity), on the same data.

Starts its own one-broker cluster, writes ``--records`` keyed JSON
records of ``--record-bytes`` (datagen, 10,000 zipf keys) to a 3-partition topic, rekeys it into 6
partitions by the value field ``key`` (``field:key``: the direct copy, the JSON key rule, so the
Python key re-check parses every value), then in one local[2] SparkSession (driver 1g) times:
  - the verify as Spark jobs, and its peak memory;
  - its Python pass alone: the snapshot through the key re-check (kafkaops.platform.keyrules, in
    mapInArrow) into Spark's ``noop`` sink, against the same read without it;
  - the reference, the driver-side verify (read_back + check_integrity) on the same target;
and says whether the two reports are equal. Peak memory is the largest resident set of this
process, the Spark JVM and the Python workers together, sampled every 0.1 s during a job.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import kafkaops
import spark_apps
from benchmarks.bench_backfill import brokers_up, timed
from benchmarks.results import publish
from kafkaops.cli import datagen
from kafkaops.platform.kafka import connection, records, topics
from kafkaops.rekey.backfill import BackfillPlan
from kafkaops.testing import integrity
from spark_apps import backfill_verify, common, rekey_backfill

# Spark's Python workers import kafkaops and spark_apps from where this process does (this checkout)
os.environ["PYTHONPATH"] = os.pathsep.join([str(Path(kafkaops.__file__).parents[1]),
                                            str(Path(spark_apps.__file__).parents[1]),
                                            *filter(None, [os.environ.get("PYTHONPATH")])])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--record-bytes", type=int, default=350)
    parser.add_argument("--no-reference", action="store_true", help="skip the driver-side verify")
    parser.add_argument("--no-results", action="store_true")
    args = parser.parse_args(argv)
    with brokers_up("kafkaops-bench-verify-", 1) as spec:
        config = {"bootstrap.servers": spec.bootstrap}
        with connection.connect(spec.bootstrap, timeout_s=60) as conn:
            topics.create_topic(conn, "src", 3, 1)
            topics.create_topic(conn, "out", 6, 1)
            topics.create_topic(conn, "out.dlq", 1, 1)
        datagen.produce(config, "src", datagen.DatagenSpec(records=args.records, keys=10_000,
                                                           record_bytes=args.record_bytes))
        ranges = tuple((p, s, e) for p, (s, e) in sorted(records.end_offsets(config, "src").items()))
        plan = BackfillPlan("src", ranges, "out", 6, "field:key")
        spark = common.spark_session("local[2]", driver_memory="1g")
        spark.sparkContext.setLogLevel("ERROR")
        copy_s, _, _ = timed(lambda: rekey_backfill.run(spark, plan, spec.bootstrap))
        print(f"backfill (direct copy) {copy_s:.1f} s", flush=True)

        def noop(frame) -> None:
            frame.write.format("noop").mode("overwrite").save()

        snapshot = backfill_verify.read_source(spark, plan, spec.bootstrap)
        noop(snapshot)  # warm-up: JVM, connector, page cache
        read_s, _, _ = timed(lambda: noop(snapshot))
        python_s, python_peak, _ = timed(lambda: noop(snapshot.mapInArrow(backfill_verify.rekeyed(plan.key_rule),
                                                                       backfill_verify.SOURCE_SCHEMA)))
        print(f"snapshot read {read_s:.1f} s, with the Python key re-check {python_s:.1f} s", flush=True)
        got: dict = {}
        spark_s, spark_peak, _ = timed(lambda: got.update(report=rekey_backfill.verify(spark, plan, spec.bootstrap)))
        report = got["report"]
        print(f"verify in Spark {spark_s:.1f} s, peak {spark_peak / 2**20:.0f} MiB, ok={report.ok}", flush=True)
        reference = "| skipped (--no-reference) | | |"
        if not args.no_reference:
            try:
                ref_s, ref_peak, _ = timed(lambda: got.update(
                    reference=integrity.check_integrity(plan, *integrity.read_back(
                        plan, common.snapshot(spark, plan, spec.bootstrap),
                        backfill_verify.read_output(spark, plan, spec.bootstrap)))))
                same = "equal to" if got["reference"].to_dict() == report.to_dict() else "DIFFERENT from"
                reference = (f"| {ref_s:.1f} | {args.records / ref_s:,.0f} | {ref_peak / 2**20:,.0f} MiB |\n"
                             f"(the driver-side report is {same} the Spark one)")
            except Exception as err:  # the driver-side verify runs out of memory at some size: that is the finding
                reference = f"| failed: {type(err).__name__}: {str(err).splitlines()[0][:200]} | | |"
            print(f"driver-side verify {reference}", flush=True)
        spark.stop()
    n = args.records
    rows = [
        f"{n} records of {args.record_bytes} bytes (10,000 zipf keys), rekeyed 3 -> 6 partitions by `field:key` "
        f"(direct copy, {copy_s:.1f} s), 1 broker, Spark local[2] driver 1g, one run, load average "
        f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; integrity {'ok' if report.ok else 'FAILED'}",
        "",
        "| job | seconds | records/s | peak RSS (driver JVM + Python) |",
        "|---|---|---|---|",
        f"| verify as Spark jobs (counts and samples to the driver) | {spark_s:.1f} | {n / spark_s:,.0f} "
        f"| {spark_peak / 2**20:,.0f} MiB |",
        f"| its Python key re-check alone (keyrules + value digest in mapInArrow, minus the read) "
        f"| {python_s - read_s:.1f} | {n / max(python_s - read_s, 1e-9):,.0f} | {python_peak / 2**20:,.0f} MiB |",
        f"| (the snapshot read alone, Spark Kafka source into noop) | {read_s:.1f} | {n / read_s:,.0f} | |",
        f"| reference: driver-side verify (collect + check_integrity) {reference}",
    ]
    publish("Backfill verify", rows, save=not args.no_results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
