"""Rekey backfill: copy a bounded snapshot of a topic into a target topic with a new partition count,
each record on the partition Kafka's Java producer would give its key, per-key order kept, every
record exactly once, also across re-runs and restarts after a crash.

    python -m spark_apps.rekey_backfill run --plan plan.json --bootstrap host:9092 [--report out.json]
    python -m spark_apps.rekey_backfill verify --plan plan.json --bootstrap host:9092 --report out.json

Pipeline: Spark's Kafka source reads exactly ``[start, end)`` of each source partition
(``startingOffsets``/``endingOffsets`` JSON of the :class:`~kafkaops.backfill.BackfillPlan`) ->
a Python ``mapPartitions`` computes the new key (the plan's key rule), the target partition
(:func:`kafkaops.partitioner.partition_for`, bit-identical to Java), the per-key order timestamp
(:class:`~kafkaops.backfill.OrderClock`) or the dead-letter reason -> ``repartition`` (hash) on
the output topic and partition puts each output partition in exactly one Spark task (a range
repartition would run the Python step twice, once to sample its bounds), and
``sortWithinPartitions`` orders it by ``(order timestamp, source partition, source offset)`` ->
Spark's Kafka sink writes rows with explicit ``topic``/``partition`` columns and a
``kafkaops.lineage`` header (``source_topic/partition/offset``).

Why the Spark sink and not confluent-kafka in ``foreachPartition``: the sink's Java producer
writes the rows of one task in iterator order; with ``enable.idempotence=true`` and ``acks=all``
(at most 5 requests in flight) the broker appends a producer's batches to a partition in send
order and never twice, so whatever reaches a target partition is a *prefix* of that partition's
planned sequence, also when the process is killed mid-write. The sink is at-least-once only
across task attempts and runs; kafkaops makes it exactly-once:

* task retries are off (``spark.task.maxFailures=1``, the ``local[N]`` default; no speculation),
  so a failed write fails the job rather than writing a partition's rows twice;
* before writing, the job reads the lineage headers already in the target and dead-letter topics:
  per output partition the count and the last lineage. The planned rows up to and including that
  lineage must number exactly the count (else it stops, naming the partition: not a prefix, not
  ours), and are skipped; the rest is written. A re-run after success writes nothing; a re-run
  after a crash writes exactly the missing suffix.

This relies on the plan's sequence per output partition being deterministic: the snapshot is
bounded and the sort key is total (source partition and offset are unique). Records without an
extractable key go to partition 0 of the dead-letter topic, in source (partition, offset) order,
with a ``kafkaops.dead_letter_reason`` header; they resume the same way.

``verify`` reads the snapshot, the target and the dead-letter topic back and runs
:func:`kafkaops.backfill.check_integrity`; the report (JSON) feeds the ``backfill`` gate.
pyarrow is not installed in the project, so the Python step is an RDD ``mapPartitions`` over
pickled rows rather than ``mapInPandas``.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

_REPO = Path(__file__).resolve().parents[1]
if str(_REPO / "plugins") not in sys.path:  # spark-submit / python -m from the repository
    sys.path.insert(0, str(_REPO / "plugins"))

from kafkaops import backfill  # noqa: E402
from kafkaops.backfill import (LINEAGE_HEADER, REASON_HEADER, BackfillPlan, OrderClock, OutputRecord,  # noqa: E402
                               ResumePoint, SourceRecord)
from kafkaops.partitioner import partition_for  # noqa: E402

log = logging.getLogger("kafkaops.rekey_backfill")

JARS_DIR = Path(os.environ.get("KAFKAOPS_CACHE", _REPO / ".cache")) / "jars" / "spark"

#: Producer settings of the sink: no loss, no duplicates within a run, order kept per partition.
PRODUCER_OPTIONS = {
    "kafka.acks": "all",
    "kafka.enable.idempotence": "true",
    "kafka.max.in.flight.requests.per.connection": "5",
    "kafka.linger.ms": "20",
    "kafka.batch.size": "524288",
    "kafka.compression.type": "none",
    "kafka.delivery.timeout.ms": "120000",
}


def spark_session(master: str = "local[2]", app: str = "kafkaops-rekey-backfill", *, driver_memory: str = "1g",
                  shuffle_partitions: int = 4) -> Any:
    """A small local SparkSession with the Kafka connector jars of ``.cache/jars/spark``."""
    from pyspark.sql import SparkSession

    jars = sorted(str(p) for p in JARS_DIR.glob("*.jar"))
    if not jars:
        raise backfill.BackfillError(f"no Spark Kafka connector jars in {JARS_DIR}: run 'make setup'")
    return (SparkSession.builder.master(master).appName(app)
            .config("spark.jars", ",".join(jars))
            .config("spark.driver.memory", driver_memory)
            .config("spark.task.maxFailures", "1")
            .config("spark.speculation", "false")
            .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.session.timeZone", "UTC")
            .getOrCreate())


# -- the Python step -----------------------------------------------------------------------------------------

def rekey_rows(plan: BackfillPlan, rows: Iterable[Any]) -> Iterator[tuple[Any, ...]]:
    """Source rows ``(partition, offset, ts_ms, key, value)`` in offset order per partition ->
    ``(out_topic, out_partition, order_ts, src_partition, src_offset, key, value, reason)``."""
    rule = plan.rule
    n = plan.target_partitions
    target, dead = plan.target_topic, plan.dead_letter_topic
    clock = OrderClock()
    needs_value = rule.needs_value
    for partition, offset, ts, key, value in rows:
        key = bytes(key) if key is not None else None
        if needs_value:
            new_key, reason = backfill.extract_key_or_reason(key, value, rule)
        else:
            new_key, reason = (key, None) if key is not None else (None, "the record has no key")
        order_ts = clock.tick(partition, offset, ts, new_key)
        if new_key is None:
            yield dead, 0, 0, partition, offset, key, value, reason
        else:
            yield target, partition_for(new_key, n), order_ts, partition, offset, new_key, value, None


def _source(spark: Any, plan: BackfillPlan, bootstrap: str, options: dict[str, str]) -> Any:
    return (spark.read.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", plan.source_topic)
            .option("startingOffsets", plan.offsets_json("start"))
            .option("endingOffsets", plan.offsets_json("end"))
            .option("failOnDataLoss", "true")
            .options(**options)
            .load())


def planned_frame(spark: Any, plan: BackfillPlan, bootstrap: str, options: dict[str, str] | None = None) -> Any:
    """The rows to write, before resume: one per source record of the snapshot."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import BinaryType, IntegerType, LongType, StringType, StructField, StructType

    src = _source(spark, plan, bootstrap, options or {}).select(
        "partition", "offset", F.unix_millis("timestamp").alias("ts"), "key", "value")
    schema = StructType([
        StructField("out_topic", StringType(), False), StructField("out_partition", IntegerType(), False),
        StructField("order_ts", LongType(), False), StructField("src_partition", IntegerType(), False),
        StructField("src_offset", LongType(), False), StructField("key", BinaryType(), True),
        StructField("value", BinaryType(), True), StructField("reason", StringType(), True)])
    plan_json = plan.to_json()

    def step(rows: Iterable[Any]) -> Iterator[tuple[Any, ...]]:
        return rekey_rows(BackfillPlan.from_json(plan_json), rows)

    return spark.createDataFrame(src.rdd.mapPartitions(step), schema, verifySchema=False)


# -- resume ----------------------------------------------------------------------------------------------

def existing_output(spark: Any, plan: BackfillPlan, bootstrap: str) -> list[ResumePoint]:
    """Per output partition already written: the record count and the last record's lineage."""
    from pyspark.sql import functions as F

    frame = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
             .option("subscribe", f"{plan.target_topic},{plan.dead_letter_topic}")
             .option("startingOffsets", "earliest").option("endingOffsets", "latest")
             .option("includeHeaders", "true").load())
    lineage = F.filter("headers", lambda h: h["key"] == F.lit(LINEAGE_HEADER))
    rows = (frame.select("topic", "partition", "offset", F.element_at(lineage, 1)["value"].alias("lineage"))
            .groupBy("topic", "partition")
            .agg(F.count(F.lit(1)).alias("written"), F.max_by("lineage", "offset").alias("last"),
                 F.count("lineage").alias("with_lineage"))
            .collect())
    points = []
    for r in rows:
        if r["written"] != r["with_lineage"] or r["last"] is None:
            raise backfill.BackfillError(
                f"{r['topic']}-{r['partition']} holds {r['written'] - r['with_lineage']} record(s) without a "
                f"{LINEAGE_HEADER} header: something else wrote there; use an empty target topic")
        points.append(ResumePoint(r["topic"], r["partition"], r["written"], bytes(r["last"]).decode()))
    return sorted(points, key=lambda p: (p.topic, p.partition))


def skip_written(spark: Any, planned: Any, plan: BackfillPlan, points: Sequence[ResumePoint]) -> Any:
    """``planned`` without the rows earlier runs wrote, after checking each written partition is a
    prefix of the plan."""
    from pyspark.sql import functions as F

    if not points:
        return planned
    wanted = {(backfill.parse_lineage(p.last_lineage)[1], backfill.parse_lineage(p.last_lineage)[2]): p
              for p in points}
    cond = F.lit(False)
    for sp, so in wanted:
        cond = cond | ((F.col("src_partition") == sp) & (F.col("src_offset") == so))
    found = {(r["src_partition"], r["src_offset"]): r for r in
             planned.filter(cond).select("src_partition", "src_offset", "order_ts", "out_topic", "out_partition")
             .collect()}
    resume_rows = []
    for (sp, so), point in wanted.items():
        row = found.get((sp, so))
        if row is None or (row["out_topic"], row["out_partition"]) != (point.topic, point.partition):
            raise backfill.BackfillError(
                f"{point.topic}-{point.partition} ends with lineage {point.last_lineage}, which this plan "
                f"{'does not hold' if row is None else 'puts elsewhere'}: the topic was written by another plan; "
                "delete the target and dead-letter topics (or pick a new target) and run again")
        resume_rows.append((point.topic, point.partition, row["order_ts"], sp, so))
    resume = spark.createDataFrame(resume_rows, "r_topic string, r_partition int, r_ts long, r_sp int, r_so long")
    joined = planned.join(F.broadcast(resume), (planned.out_topic == resume.r_topic)
                          & (planned.out_partition == resume.r_partition), "left")
    done = (F.col("r_ts").isNotNull()
            & (F.struct("order_ts", "src_partition", "src_offset") <= F.struct("r_ts", "r_sp", "r_so")))
    counts = {(r["out_topic"], r["out_partition"]): r["n"] for r in
              joined.filter(done).groupBy("out_topic", "out_partition").agg(F.count(F.lit(1)).alias("n")).collect()}
    for point in points:
        backfill.check_prefix(point, counts.get((point.topic, point.partition), 0))
    return joined.filter(~done).drop("r_topic", "r_partition", "r_ts", "r_sp", "r_so")


# -- the job ---------------------------------------------------------------------------------------------

def output_frame(planned: Any, plan: BackfillPlan) -> Any:
    """Rows for the Kafka sink, one target partition per Spark partition, in per-key order."""
    from pyspark.sql import functions as F

    lineage = F.concat(F.lit(f"{plan.source_topic}/"), F.col("src_partition").cast("string"), F.lit("/"),
                       F.col("src_offset").cast("string")).cast("binary")
    headers = F.when(F.col("reason").isNull(), F.array(F.struct(F.lit(LINEAGE_HEADER).alias("key"),
                                                                lineage.alias("value")))) \
        .otherwise(F.array(F.struct(F.lit(LINEAGE_HEADER).alias("key"), lineage.alias("value")),
                           F.struct(F.lit(REASON_HEADER).alias("key"), F.col("reason").cast("binary").alias("value"))))
    outputs = plan.target_partitions + 1
    return (planned.repartition(outputs, "out_topic", "out_partition")
            .sortWithinPartitions("out_topic", "out_partition", "order_ts", "src_partition", "src_offset")
            .select(F.col("out_topic").alias("topic"), F.col("out_partition").alias("partition"), "key", "value",
                    headers.alias("headers")))


def write(frame: Any, bootstrap: str, options: dict[str, str] | None = None) -> None:
    (frame.write.format("kafka").option("kafka.bootstrap.servers", bootstrap)
     .options(**{**PRODUCER_OPTIONS, **(options or {})}).save())


def run(spark: Any, plan: BackfillPlan, bootstrap: str, *, kafka_options: dict[str, str] | None = None
        ) -> dict[str, Any]:
    """Write what is missing of ``plan`` to its target and dead-letter topics; returns counts."""
    started = time.monotonic()
    points = existing_output(spark, plan, bootstrap)
    planned = planned_frame(spark, plan, bootstrap, kafka_options)
    todo = skip_written(spark, planned, plan, points)
    if points:
        log.info("resuming: %d output partition(s) hold %d record(s) already", len(points),
                 sum(p.written for p in points))
    write(output_frame(todo, plan), bootstrap, kafka_options)
    seconds = time.monotonic() - started
    result = {"plan": plan.to_dict(), "already_written": sum(p.written for p in points),
              "resumed_partitions": [f"{p.topic}-{p.partition}" for p in points], "seconds": round(seconds, 3)}
    log.info("backfill %s -> %s done in %.1f s (%d record(s) were already there)", plan.source_topic,
             plan.target_topic, seconds, result["already_written"])
    return result


def read_back(spark: Any, plan: BackfillPlan, bootstrap: str
              ) -> tuple[list[SourceRecord], list[OutputRecord], list[OutputRecord]]:
    """The snapshot, the target and the dead-letter topic, collected to the driver (for verify)."""
    from pyspark.sql import functions as F

    source = [SourceRecord(r["partition"], r["offset"], r["ts"], _b(r["key"]), _b(r["value"]))
              for r in _source(spark, plan, bootstrap, {}).select(
                  "partition", "offset", F.unix_millis("timestamp").alias("ts"), "key", "value").collect()]
    frame = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
             .option("subscribe", f"{plan.target_topic},{plan.dead_letter_topic}")
             .option("startingOffsets", "earliest").option("endingOffsets", "latest")
             .option("includeHeaders", "true").load())
    lineage = F.element_at(F.filter("headers", lambda h: h["key"] == F.lit(LINEAGE_HEADER)), 1)["value"]
    out = [OutputRecord(r["topic"], r["partition"], r["offset"], _b(r["key"]), _b(r["value"]),
                        None if r["lineage"] is None else bytes(r["lineage"]).decode())
           for r in frame.select("topic", "partition", "offset", "key", "value", lineage.alias("lineage")).collect()]
    return (source, [r for r in out if r.topic == plan.target_topic],
            [r for r in out if r.topic == plan.dead_letter_topic])


def _b(value: Any) -> bytes | None:
    return None if value is None else bytes(value)


def verify(spark: Any, plan: BackfillPlan, bootstrap: str) -> backfill.IntegrityReport:
    return backfill.check_integrity(plan, *read_back(spark, plan, bootstrap))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rekey_backfill", description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("run", "verify"))
    parser.add_argument("--plan", required=True, help="a BackfillPlan JSON file (or the JSON itself)")
    parser.add_argument("--bootstrap", required=True, help="bootstrap.servers of the cluster")
    parser.add_argument("--report", help="write the result (and with verify/--verify the integrity report) here")
    parser.add_argument("--verify", action="store_true", help="run: verify after writing")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--driver-memory", default="1g")
    parser.add_argument("--kafka-option", action="append", default=[], metavar="kafka.KEY=VALUE",
                        help="extra Kafka client option of the source and sink (e.g. security settings)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    text = args.plan if args.plan.lstrip().startswith("{") else Path(args.plan).read_text()
    plan = BackfillPlan.from_json(text)
    options = dict(o.split("=", 1) for o in args.kafka_option)
    spark = spark_session(args.master, driver_memory=args.driver_memory)
    spark.sparkContext.setLogLevel("WARN")
    result: dict[str, Any] = {}
    if args.command == "run":
        result["run"] = run(spark, plan, args.bootstrap, kafka_options=options)
    if args.command == "verify" or args.verify:
        report = verify(spark, plan, args.bootstrap)
        result["integrity"] = report.to_dict()
        log.info("integrity of %s: %s", plan.target_topic, "ok" if report.ok else "; ".join(report.failures))
    if args.report:
        Path(args.report).write_text(json.dumps(result, indent=2, sort_keys=True))
    ok = result.get("integrity", {}).get("ok", True)
    return 0 if ok else 3


if __name__ == "__main__":
    sys.exit(main())
