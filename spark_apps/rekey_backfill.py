"""Rekey backfill: copy a bounded snapshot of a topic into a target topic with a new partition count,
each record on the partition Kafka's Java producer would give its key, per-key order kept, every
record exactly once, also across re-runs and restarts after a crash.

    python -m spark_apps.rekey_backfill run --plan plan.json --kafka-config kafka.json [--report out.json]
    python -m spark_apps.rekey_backfill verify --plan plan.json --bootstrap host:9092 --report out.json

``--kafka-config`` names a JSON file of the cluster's librdkafka client config (the Airflow
connection's, SASL and SSL included: :func:`kafkaops.platform.spark.run_spark_app` writes it, mode
0600); ``--bootstrap`` alone reaches a cluster without security. Secrets never go on the command line.

Two copies, both reading exactly ``[start, end)`` of each source partition through Spark's Kafka
source (``startingOffsets``/``endingOffsets`` JSON of the :class:`~kafkaops.rekey.backfill.BackfillPlan`)
and writing through Spark's Kafka sink with a ``kafkaops.lineage`` header
(``source_topic/partition/offset``) on every record:

* **direct** (every new key's records are in one source partition: a partition increase by the
  record key, or a value rule that refines the key, such as splitting a hot key). All on the JVM,
  one pass, no shuffle: each Spark task reads one source partition in offset order and writes each
  record to ``murmur2(new key) % N`` with Kafka's own ``Utils.murmur2`` (jvm/spark-udf). Offset
  order is per-key order, because a key's records all come from that one task. The same pass
  checks the precondition: by the record key it counts records off their key's home partition
  under the source's count (zero proves it; otherwise the keys are counted exactly); by a value
  rule each task reports the hashes of its keys. If some key spans source partitions, the direct
  output is deleted (DeleteRecords) and the merged copy runs. A value rule whose first records
  already show a key in two partitions (:func:`sample_spans`) goes merged at once.
* **merged** (keys spanning source partitions): the same projection (:func:`rekey_rows`) adds the
  order timestamp of :class:`~kafkaops.rekey.backfill.OrderClock` (``kafkaops_order_ts``) ->
  ``repartitionById`` puts each output partition in a Spark task of its own, and
  ``sortWithinPartitions`` orders the task by ``(order timestamp, source
  partition, source offset)``, so each output partition's records are in that order.

The new key, by the record key or by a value field or JSON path, follows the key-rule contract of
docs/key-rules.md: UTF-8 RFC 8259 JSON only, a string key is its UTF-8 bytes, a number its token
text as written, true/false themselves; anything else is a dead letter with a stable reason code.
``kafkaops_new_key`` (jvm/spark-udf ``KeyRule``, on Jackson's streaming parser) computes it, and the
target partition (Kafka's ``Utils.murmur2``), on the JVM as Spark SQL functions
(:func:`register_functions`): no Python worker touches a record. :mod:`kafkaops.platform.keyrules` is
the independent Python side of the same contract, which ``verify`` uses to check every key and
reason code the copy wrote.

Why the Spark sink and not confluent-kafka in ``foreachPartition``: the sink's Java producer
writes the rows of one task in iterator order; with ``enable.idempotence=true`` and ``acks=all``
(at most 5 requests in flight) the broker appends a producer's batches to a partition in send
order and never twice, so whatever reaches a target partition is a *prefix* of that partition's
planned sequence (in the direct copy: each source partition's share of it), also when the
process is killed mid-write. The sink is at-least-once only
across task attempts and runs; kafkaops makes it exactly-once:

* task retries are off (``spark.task.maxFailures=1``, the ``local[N]`` default; no speculation),
  so a failed write fails the job rather than writing a partition's rows twice;
* before writing, the job reads the lineage headers already in the target and dead-letter topics:
  per output partition (direct: per output partition and source partition) the count and the
  last lineage. The planned rows up to and including that lineage must number exactly the count
  (else it stops, naming the partition: not a prefix, not ours), and are skipped; the rest is
  written. A re-run after success writes nothing; a re-run
  after a crash writes exactly the missing suffix.

This relies on the plan's sequence per output partition being deterministic: the snapshot is
bounded and the sort key is total (source partition and offset are unique). Records without a key
under the rule go to partition 0 of the dead-letter topic, in source (partition, offset) order, with
the reason code in a ``kafkaops.dead_letter_code`` header (``FIELD_MISSING``, ``NOT_JSON``, ...) and a
free-text ``kafkaops.dead_letter_reason``; they resume the same way.

``verify`` reads the snapshot, the target and the dead-letter topic back and runs
:func:`kafkaops.rekey.backfill.check_integrity`; the report (JSON) feeds the ``backfill`` gate.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kafkaops.platform import keyrules
from kafkaops.platform.spark import read_kafka_config, spark_kafka_options, tuning_options
from kafkaops.platform.paths import JARS, jar_dir
from kafkaops.rekey import backfill
from kafkaops.rekey.backfill import (CODE_HEADER, LINEAGE_HEADER, REASON_HEADER, BackfillPlan, OutputRecord,
                                     ResumePoint, SourceRecord)

log = logging.getLogger("kafkaops.rekey_backfill")

#: A cluster as the apps reach it: its librdkafka client config, or only its bootstrap servers.
Kafka = Mapping[str, str] | str


def kafka_options(kafka: Kafka) -> dict[str, str]:
    """Spark's Kafka source/sink options (``kafka.*``, the Java client's) for ``kafka``."""
    return spark_kafka_options(_admin_config(kafka))


#: Spark SQL function (jvm/spark-udf): ``Utils.toPositive(Utils.murmur2(key))`` of Kafka's Java client;
#: ``kafka_key_hash(key, source_partition) % n`` is the partition its producer gives the key in a topic of
#: ``n``. It also counts records off their key's home source partition (:func:`register_key_hash`).
KAFKA_KEY_HASH = "kafka_key_hash"

JARS_DIR = JARS / "spark"  # KAFKAOPS_JARS, else KAFKAOPS_CACHE/jars (kafkaops.platform.paths)

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
    """A small local SparkSession with the Kafka connector jars of :data:`JARS_DIR`."""
    from pyspark.sql import SparkSession

    # Python workers, if a job ever starts one, run this interpreter (its venv has the project),
    # not whatever python3 is on PATH; PySpark reads the variable when the context starts.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    jars = sorted(str(p) for p in jar_dir("spark").glob("*.jar"))  # SetupError naming the setting when empty
    spark = (SparkSession.builder.master(master).appName(app)
            .config("spark.jars", ",".join(jars))
            .config("spark.driver.memory", driver_memory)
            .config("spark.task.maxFailures", "1")
            .config("spark.speculation", "false")
            .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
            # one machine: the merged copy's shuffle stays on local disk, where compressing it only
            # costs CPU (measured: about 20 % of the merged copy's time on 2 cores)
            .config("spark.shuffle.compress", "false")
            .config("spark.shuffle.spill.compress", "false")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.session.timeZone", "UTC")
            .getOrCreate())
    return spark


#: Spark SQL function (jvm/spark-udf ``NewKey``) of a value rule: :func:`register_functions`.
NEW_KEY = "kafkaops_new_key"
#: Spark SQL function (jvm/spark-udf ``OrderClock``), the merged copy's order timestamp.
ORDER_TS = "kafkaops_order_ts"


def register_key_hash(spark: Any, source_partitions: int) -> Any:
    """Register ``kafka_key_hash(key, source_partition)`` (jvm/spark-udf ``KafkaKeyHash``) for a
    source of ``source_partitions``; returns the JVM accumulator that counts records off their key's
    home partition while queries using it run."""
    jvm = spark.sparkContext._jvm
    try:
        away = spark.sparkContext._jsc.sc().longAccumulator("kafkaops.records_off_home_partition")
        function = jvm.io.kafkaops.spark.KafkaKeyHash(away, source_partitions)
        spark._jsparkSession.udf().register(KAFKA_KEY_HASH, function, jvm.org.apache.spark.sql.types.DataTypes.IntegerType)
    except Exception as err:  # py4j errors: the jar is missing or stale
        raise _stale_jar(KAFKA_KEY_HASH, err) from err
    return away


# -- the rekey step (JVM) -------------------------------------------------------------------------------

def _stale_jar(what: str, err: Exception) -> backfill.BackfillError:
    return backfill.BackfillError(f"cannot load {what} from kafkaops-spark-udf.jar in {JARS_DIR} "
                                  f"({str(err).splitlines()[0][:200]}): run 'make setup'")


def register_functions(spark: Any, plan: BackfillPlan, spread: Any = None) -> Any:
    """Register the JVM functions of ``plan``'s rows (:func:`rekey_rows`); a query uses the ones
    registered when it was built. Returns ``kafka_key_hash``'s accumulator (:func:`register_key_hash`).

    * ``kafkaops_new_key(value, source_partition)`` (a value rule; :func:`register_new_key`).
      ``spread`` (:func:`key_spread`) collects each task's key hashes while queries using it run.
    * ``kafkaops_order_ts(new_key, source_partition, offset, ts)`` (``OrderClock``): the order
      timestamp of :class:`kafkaops.rekey.backfill.OrderClock`; it keeps state per Spark task, so it is
      registered non-deterministic (evaluated once per row, in row order).
    """
    away = register_key_hash(spark, source_partition_count(plan))
    if plan.rule.needs_value:
        register_new_key(spark, plan.rule, plan.target_partitions, spread)
    try:
        spark._jsparkSession.udf().register(ORDER_TS, spark.sparkContext._jvm.io.kafkaops.spark.OrderClock.function())
    except Exception as err:  # py4j errors: the jar is missing or stale
        raise _stale_jar(ORDER_TS, err) from err
    return away


def register_new_key(spark: Any, rule: keyrules.KeyRule, partitions: int, spread: Any = None) -> None:
    """Register ``kafkaops_new_key(value, source_partition)`` (jvm/spark-udf ``NewKey``) for a value
    ``rule``: ``struct<key, code, detail, partition>``, the new key by the key-rule contract
    (docs/key-rules.md; ``KeyRule`` on Jackson) and its partition in a topic of ``partitions`` (Kafka's
    ``Utils.murmur2``), or a null key, the reason code and a free-text detail. The backfill and the
    key-skew job (spark_apps/key_skew.py) read value keys with it."""
    jvm = spark.sparkContext._jvm
    try:
        function = jvm.io.kafkaops.spark.NewKey(list(rule.steps), rule.text, partitions, spread)
        spark._jsparkSession.udf().register(NEW_KEY, function, jvm.io.kafkaops.spark.NewKey.RESULT)
    except Exception as err:  # py4j errors: the jar is missing or stale
        raise _stale_jar(NEW_KEY, err) from err


def key_spread(spark: Any) -> Any:
    """A JVM accumulator for :func:`register_functions`' ``spread``."""
    return spark.sparkContext._jsc.sc().collectionAccumulator("kafkaops.key_spread")


def spanning_keys_of(spark: Any, spread: Any) -> int | None:
    """Keys the direct copy saw in more than one source partition; ``None`` when a task saw too many
    distinct keys to track (count them with :func:`keys_in_several_partitions`)."""
    spanning = int(spark.sparkContext._jvm.io.kafkaops.spark.KeySpread.spanning(spread.value()))
    return None if spanning < 0 else spanning


def _source(spark: Any, plan: BackfillPlan, bootstrap: Kafka, options: dict[str, str]) -> Any:
    return (spark.read.format("kafka")
            .options(**kafka_options(bootstrap))
            .option("subscribe", plan.source_topic)
            .option("startingOffsets", plan.offsets_json("start"))
            .option("endingOffsets", plan.offsets_json("end"))
            .option("failOnDataLoss", "true")
            .options(**options)
            .load())


def _snapshot(spark: Any, plan: BackfillPlan, bootstrap: Kafka, options: dict[str, str] | None) -> Any:
    """The snapshot as ``partition, offset, ts, key, value`` (``ts`` in epoch milliseconds)."""
    from pyspark.sql import functions as F

    return _source(spark, plan, bootstrap, options or {}).select(
        "partition", "offset", F.unix_millis("timestamp").alias("ts"), "key", "value")


def planned_frame(spark: Any, plan: BackfillPlan, bootstrap: Kafka, options: dict[str, str] | None = None) -> Any:
    """The rows of the merged copy, before resume: :func:`rekey_rows` with order timestamps.
    Register the functions first (:func:`register_functions`)."""
    return rekey_rows(_snapshot(spark, plan, bootstrap, options), plan, ordered=True)


def direct_frame(spark: Any, plan: BackfillPlan, bootstrap: Kafka, options: dict[str, str] | None = None) -> Any:
    """The rows of the direct copy, before resume: :func:`rekey_rows` in offset order. Register the
    functions first (:func:`register_functions`)."""
    return rekey_rows(_snapshot(spark, plan, bootstrap, options), plan)


def rekey_rows(source: Any, plan: BackfillPlan, *, ordered: bool = False) -> Any:
    """Source rows ``partition, offset, ts, key, value`` (one Spark task per source partition, in
    offset order) -> ``out_topic, out_partition, order_ts, src_partition, src_offset, key, value,
    code, detail``: one projection on the JVM. The new key is the record key, or the value rule's
    (``kafkaops_new_key``); keyed records go to ``murmur2(new key) % N`` of the target, the others to
    partition 0 of the dead-letter topic with the reason code and detail. ``order_ts`` is the merged copy's order
    timestamp (``kafkaops_order_ts``) when ``ordered``, else 0: the direct copy writes each source
    partition in offset order, which is per-key order only when no key has records in two source
    partitions (:func:`choose_mode`)."""
    from pyspark.sql import functions as F

    if plan.rule.needs_value:
        # the struct in a column of its own: the projection below reads its fields, never calls it again
        rows = source.select("*", F.call_function(NEW_KEY, F.col("value"), F.col("partition")).alias("new"))
        key, code, detail, out = F.col("new.key"), F.col("new.code"), F.col("new.detail"), F.col("new.partition")
    else:
        rows = source
        key = F.col("key")
        code = F.when(key.isNull(), F.lit(keyrules.NO_KEY))
        detail = F.when(key.isNull(), F.lit("the record has no key"))
        out = F.call_function(KAFKA_KEY_HASH, F.col("key"), F.col("partition")) % plan.target_partitions
    order = F.call_function(ORDER_TS, key, F.col("partition"), F.col("offset"), F.col("ts")) if ordered else F.lit(0)
    return rows.select(
        F.when(key.isNotNull(), F.lit(plan.target_topic)).otherwise(F.lit(plan.dead_letter_topic)).alias("out_topic"),
        F.coalesce(out, F.lit(0)).alias("out_partition"), order.cast("long").alias("order_ts"),
        F.col("partition").alias("src_partition"), F.col("offset").alias("src_offset"), key.alias("key"), "value",
        code.cast("string").alias("code"), detail.cast("string").alias("detail"))


# -- resume ----------------------------------------------------------------------------------------------

def existing_output(spark: Any, plan: BackfillPlan, bootstrap: Kafka, *, per_source: bool = False
                    ) -> list[ResumePoint]:
    """Per output partition already written (``per_source``: per output partition and source
    partition): the record count and the last record's lineage."""
    from pyspark.sql import functions as F

    frame = (spark.read.format("kafka").options(**kafka_options(bootstrap))
             .option("subscribe", f"{plan.target_topic},{plan.dead_letter_topic}")
             .option("startingOffsets", "earliest").option("endingOffsets", "latest")
             .option("includeHeaders", "true").load())
    lineage = F.filter("headers", lambda h: h["key"] == F.lit(LINEAGE_HEADER))
    lineage = F.element_at(lineage, 1)["value"]
    # a topic name holds no '/', so the source partition is the middle of topic/partition/offset
    source = F.split(lineage.cast("string"), "/").getItem(1).cast("int") if per_source else F.lit(None)
    rows = (frame.select("topic", "partition", "offset", lineage.alias("lineage"), source.alias("source"))
            .groupBy("topic", "partition", "source")
            .agg(F.count(F.lit(1)).alias("written"), F.max_by("lineage", "offset").alias("last"),
                 F.count("lineage").alias("with_lineage"))
            .collect())
    points = []
    for r in rows:
        if r["written"] != r["with_lineage"] or r["last"] is None:
            raise backfill.BackfillError(
                f"{r['topic']}-{r['partition']} holds {r['written'] - r['with_lineage']} record(s) without a "
                f"{LINEAGE_HEADER} header: something else wrote there; use an empty target topic")
        points.append(ResumePoint(r["topic"], r["partition"], r["written"], bytes(r["last"]).decode(), r["source"]))
    return sorted(points, key=lambda p: (p.topic, p.partition, p.source_partition or 0))


def skip_written(spark: Any, planned: Any, plan: BackfillPlan, points: Sequence[ResumePoint]) -> Any:
    """``planned`` without the rows earlier runs wrote, after checking each written partition (or,
    for points with a source partition, each source partition's share of it) is a prefix of the
    plan."""
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
                f"{point.name} ends with lineage {point.last_lineage}, which this plan "
                f"{'does not hold' if row is None else 'puts elsewhere'}: the topic was written by another plan; "
                "delete the target and dead-letter topics (or pick a new target) and run again")
        resume_rows.append((point.topic, point.partition, row["order_ts"], sp, so))
    resume = spark.createDataFrame(resume_rows, "r_topic string, r_partition int, r_ts long, r_sp int, r_so long")
    per_source = points[0].source_partition is not None
    on = (planned.out_topic == resume.r_topic) & (planned.out_partition == resume.r_partition)
    if per_source:
        on = on & (planned.src_partition == resume.r_sp)
    joined = planned.join(F.broadcast(resume), on, "left")
    done = (F.col("r_ts").isNotNull()
            & (F.struct("order_ts", "src_partition", "src_offset") <= F.struct("r_ts", "r_sp", "r_so")))
    stream = ["out_topic", "out_partition"] + (["src_partition"] if per_source else [])
    counts = {tuple(r[c] for c in stream): r["n"] for r in
              joined.filter(done).groupBy(*stream).agg(F.count(F.lit(1)).alias("n")).collect()}
    for point in points:
        at = (point.topic, point.partition) + ((point.source_partition,) if per_source else ())
        backfill.check_prefix(point, counts.get(at, 0))
    return joined.filter(~done).drop("r_topic", "r_partition", "r_ts", "r_sp", "r_so")


# -- the job ---------------------------------------------------------------------------------------------

def _sink_frame(frame: Any, plan: BackfillPlan) -> Any:
    """``topic, partition, key, value, headers`` for the Kafka sink: the lineage header on every
    record, the reason code and detail on dead letters."""
    from pyspark.sql import functions as F

    def header(name: str, value: Any) -> Any:
        return F.struct(F.lit(name).alias("key"), value.cast("binary").alias("value"))

    lineage = F.concat(F.lit(f"{plan.source_topic}/"), F.col("src_partition").cast("string"), F.lit("/"),
                       F.col("src_offset").cast("string"))
    headers = F.when(F.col("code").isNull(), F.array(header(LINEAGE_HEADER, lineage))) \
        .otherwise(F.array(header(LINEAGE_HEADER, lineage), header(CODE_HEADER, F.col("code")),
                           header(REASON_HEADER, F.col("detail"))))
    return frame.select(F.col("out_topic").alias("topic"), F.col("out_partition").alias("partition"), "key", "value",
                        headers.alias("headers"))


def output_frame(planned: Any, plan: BackfillPlan) -> Any:
    """The merged copy: each output partition in a Spark task of its own (target partition ``p`` in
    task ``p``, the dead letters in task ``N``: ``repartitionById``, no hash collisions to put two
    partitions' work in one task), in per-key order; sorting by the order timestamp first lets
    Spark sort on a long prefix."""
    from pyspark.sql import functions as F

    task = F.when(F.col("out_topic") == F.lit(plan.target_topic), F.col("out_partition")) \
        .otherwise(F.lit(plan.target_partitions))
    return _sink_frame(planned.repartitionById(plan.target_partitions + 1, task)
                       .sortWithinPartitions("order_ts", "src_partition", "src_offset"), plan)


def keys_in_several_partitions(spark: Any, plan: BackfillPlan, bootstrap: Kafka,
                               options: dict[str, str] | None = None) -> int:
    """How many new keys of the snapshot have records in more than one source partition (by the
    record key: an earlier partition increase, or a producer with another partitioner; by a value
    field: whenever the field does not refine the record key)."""
    from pyspark.sql import functions as F

    register_functions(spark, plan)
    keys = direct_frame(spark, plan, bootstrap, options).where(F.col("code").isNull())
    return keys.groupBy("key").agg(F.countDistinct("src_partition").alias("n")).where(F.col("n") > 1).count()


#: Records per source partition that :func:`sample_spans` reads to guess a value rule's copy.
SAMPLE_RECORDS = 2_000


def sample_spans(plan: BackfillPlan, bootstrap: Kafka, options: dict[str, str]) -> bool:
    """True when the first :data:`SAMPLE_RECORDS` records of each source partition already show a new
    key in two source partitions (so a direct copy by a value rule would be thrown away); False
    says nothing for sure, the direct copy then checks every key as it goes."""
    from kafkaops.platform import admin

    head = {p: (s, min(e, s + SAMPLE_RECORDS)) for p, s, e in plan.source_offsets}
    home: dict[bytes, int] = {}
    for r in admin.read_ranges(_admin_config(bootstrap), plan.source_topic, head):
        key = keyrules.extract_key(r.key, r.value, plan.rule)
        if key is not None and home.setdefault(key, r.partition) != r.partition:
            return True
    return False


def choose_mode(spark: Any, plan: BackfillPlan, bootstrap: Kafka, options: dict[str, str] | None = None
                ) -> tuple[str, str]:
    """``direct`` when each new key's records all come from one source partition (so offset
    order is per-key order and no shuffle is needed), else ``merged``; and why. The choice depends
    on the snapshot only, so a re-run makes the same one."""
    if len(plan.source_offsets) == 1:
        return "direct", "one source partition"
    spanning = keys_in_several_partitions(spark, plan, bootstrap, options)
    if spanning:
        return "merged", f"{spanning} key(s) have records in more than one source partition"
    return "direct", "every key's records are in one source partition"


def write(frame: Any, bootstrap: Kafka, options: dict[str, str] | None = None) -> None:
    (frame.write.format("kafka").options(**kafka_options(bootstrap))
     .options(**{**PRODUCER_OPTIONS, **(options or {})}).save())


def source_partition_count(plan: BackfillPlan) -> int:
    return max(p for p, _, _ in plan.source_offsets) + 1


def write_direct(spark: Any, plan: BackfillPlan, bootstrap: Kafka, options: dict[str, str] | None = None
                 ) -> tuple[int, str]:
    """The direct copy of a fresh target, in one pass; returns how many new keys have records in
    more than one source partition (zero: the copy kept per-key order) and how that was found.

    By the record key the pass counts records off their key's home partition under the source's
    count (constant memory); only when there are some are the keys counted exactly. By a value
    rule the pass collects each task's key hashes (:func:`spanning_keys_of`)."""
    options = options or {}
    spread = key_spread(spark) if plan.rule.needs_value else None
    away = register_functions(spark, plan, spread)
    write(_sink_frame(direct_frame(spark, plan, bootstrap, options), plan), bootstrap, options)
    if spread is not None:
        spanning = spanning_keys_of(spark, spread)
        if spanning is not None:
            return spanning, "the copy's key hashes per source partition"
    elif not int(away.value()):
        return 0, "no record off its key's home partition"
    return keys_in_several_partitions(spark, plan, bootstrap, options), "an exact count of keys per source partition"


def run(spark: Any, plan: BackfillPlan, bootstrap: Kafka, *, kafka_options: dict[str, str] | None = None
        ) -> dict[str, Any]:
    """Write what is missing of ``plan`` to its target and dead-letter topics; returns counts.

    A fresh backfill copies directly in one pass, unless the rule reads the value and a sample of
    the source already shows a new key in two source partitions. The pass checks that every new
    key's records come from one source partition (:func:`write_direct`); if one does not, the
    direct copy cannot have kept its order: it is deleted from the target (DeleteRecords) and the
    merged copy writes it again. A backfill with output already in the target (a re-run or a
    resume) decides by the exact count first (:func:`choose_mode`); when that says merged and the
    target holds part of this plan's direct copy instead (a crash before the pass found keys in
    several source partitions), that part is deleted and the merged copy written."""
    started = time.monotonic()
    options = kafka_options or {}
    points = [] if _output_is_empty(plan, bootstrap, options) else \
        existing_output(spark, plan, bootstrap, per_source=True)
    truncated = False
    if not points and not (plan.rule.needs_value and sample_spans(plan, bootstrap, options)):
        log.info("backfill %s -> %s: direct copy of a fresh target", plan.source_topic, plan.target_topic)
        spanning, how = write_direct(spark, plan, bootstrap, options)
        mode, why = "direct", f"every key's records are in one source partition ({how})"
        if spanning:
            mode, why = "merged", f"{spanning} key(s) have records in more than one source partition ({how})"
            log.warning("backfill %s -> %s: %s; the direct copy cannot keep their order: deleting it from "
                        "the target and writing the merged copy", plan.source_topic, plan.target_topic, why)
            _truncate_output(plan, bootstrap, options)
            truncated = True
            register_functions(spark, plan)
            write(output_frame(planned_frame(spark, plan, bootstrap, options), plan), bootstrap, options)
    else:
        mode, why = ("merged", "a sample of the source has a key in two source partitions") if not points else \
            choose_mode(spark, plan, bootstrap, options)
        log.info("backfill %s -> %s: %s copy (%s)", plan.source_topic, plan.target_topic, mode, why)
        direct = mode == "direct"
        per_source = points
        if not direct and points:  # per output partition, not per source partition
            points = existing_output(spark, plan, bootstrap)
        register_functions(spark, plan)
        planned = (direct_frame if direct else planned_frame)(spark, plan, bootstrap, options)
        try:
            todo = skip_written(spark, planned, plan, points)
        except backfill.BackfillError:
            if direct or not _holds_direct_prefix(spark, plan, bootstrap, options, per_source):
                raise
            log.warning("backfill %s -> %s: the target holds part of this plan's direct copy (a run stopped "
                        "before it found keys in several source partitions): deleting it and writing the merged "
                        "copy", plan.source_topic, plan.target_topic)
            _truncate_output(plan, bootstrap, options)
            truncated, points = True, []
            register_functions(spark, plan)
            todo = planned_frame(spark, plan, bootstrap, options)
        if points:
            log.info("resuming: %d output stream(s) hold %d record(s) already", len(points),
                     sum(p.written for p in points))
        write(_sink_frame(todo, plan) if direct else output_frame(todo, plan), bootstrap, options)
    seconds = time.monotonic() - started
    result = {"plan": plan.to_dict(), "mode": mode, "mode_reason": why, "rewritten": truncated,
              "already_written": sum(p.written for p in points),
              "resumed_partitions": sorted({f"{p.topic}-{p.partition}" for p in points}), "seconds": round(seconds, 3)}
    log.info("backfill %s -> %s done in %.1f s, %s copy (%d record(s) were already there)", plan.source_topic,
             plan.target_topic, seconds, mode, result["already_written"])
    return result


def _holds_direct_prefix(spark: Any, plan: BackfillPlan, bootstrap: Kafka, options: dict[str, str],
                         points: Sequence[ResumePoint]) -> bool:
    """True when ``points`` (per output and source partition) are exactly a prefix of ``plan``'s
    direct copy: output that this backfill's own direct pass left behind, which the merged copy
    may replace."""
    register_functions(spark, plan)
    try:
        skip_written(spark, direct_frame(spark, plan, bootstrap, options), plan, points)
    except backfill.BackfillError:
        return False
    return True


def _admin_config(kafka: Kafka) -> dict[str, str]:
    """The librdkafka config of ``kafka`` (the admin calls and record reads of the driver)."""
    from kafkaops.platform import admin

    return admin.connection_config(kafka)


def _output_is_empty(plan: BackfillPlan, bootstrap: Kafka, options: dict[str, str]) -> bool:
    """True when the target and dead-letter topics hold no record (their watermarks say so: a
    metadata request, not a Spark job)."""
    from kafkaops.platform import admin

    topics = [plan.target_topic, plan.dead_letter_topic]
    with admin.connect(_admin_config(bootstrap)) as conn:
        # a topic created a moment ago may not be in the metadata yet: UnknownTopic is asked again
        snap = admin.retrying(f"the metadata of {' and '.join(topics)}", attempts=None, deadline_s=10.0,
                              first_wait_s=0.1, max_wait_s=1.0)(
            admin.snapshot, conn, topics=topics, sizes=False, groups=False)
    return all((p.end_offset or 0) == (p.start_offset or 0) for p in snap.partitions)


def _truncate_output(plan: BackfillPlan, bootstrap: Kafka, options: dict[str, str]) -> None:
    from kafkaops.platform import admin

    with admin.connect(_admin_config(bootstrap)) as conn:
        admin.truncate_topics(conn, [plan.target_topic, plan.dead_letter_topic])


def read_back(spark: Any, plan: BackfillPlan, bootstrap: Kafka
              ) -> tuple[list[SourceRecord], list[OutputRecord], list[OutputRecord]]:
    """The snapshot, the target and the dead-letter topic, collected to the driver (for verify)."""
    from pyspark.sql import functions as F

    source = [SourceRecord(r["partition"], r["offset"], r["ts"], _b(r["key"]), _b(r["value"]))
              for r in _source(spark, plan, bootstrap, {}).select(
                  "partition", "offset", F.unix_millis("timestamp").alias("ts"), "key", "value").collect()]
    frame = (spark.read.format("kafka").options(**kafka_options(bootstrap))
             .option("subscribe", f"{plan.target_topic},{plan.dead_letter_topic}")
             .option("startingOffsets", "earliest").option("endingOffsets", "latest")
             .option("includeHeaders", "true").load())
    def header(name: str) -> Any:  # null where the record lacks it (a keyed record has no code)
        return F.try_element_at(F.filter("headers", lambda h: h["key"] == F.lit(name)), F.lit(1))["value"]

    out = [OutputRecord(r["topic"], r["partition"], r["offset"], _b(r["key"]), _b(r["value"]), _text(r["lineage"]),
                        _text(r["code"]))
           for r in frame.select("topic", "partition", "offset", "key", "value", header(LINEAGE_HEADER).alias("lineage"),
                                 header(CODE_HEADER).alias("code")).collect()]
    return (source, [r for r in out if r.topic == plan.target_topic],
            [r for r in out if r.topic == plan.dead_letter_topic])


def _b(value: Any) -> bytes | None:
    return None if value is None else bytes(value)


def _text(value: Any) -> str | None:
    return None if value is None else bytes(value).decode()


def verify(spark: Any, plan: BackfillPlan, bootstrap: Kafka) -> backfill.IntegrityReport:
    return backfill.check_integrity(plan, *read_back(spark, plan, bootstrap))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rekey_backfill", description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("run", "verify"))
    parser.add_argument("--plan", required=True, help="a BackfillPlan JSON file (or the JSON itself)")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--kafka-config", metavar="FILE", help="JSON file of the cluster's librdkafka client config "
                       "(bootstrap.servers, security.protocol, sasl.*, ssl.*)")
    where.add_argument("--bootstrap", help="bootstrap.servers of a cluster without security settings")
    parser.add_argument("--report", help="write the result (and with verify/--verify the integrity report) here")
    parser.add_argument("--verify", action="store_true", help="run: verify after writing")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--driver-memory", default="1g")
    parser.add_argument("--kafka-option", action="append", default=[], metavar="kafka.KEY=VALUE",
                        help="a Java client option of the source and sink that tunes it (batch size ...); "
                             "secrets are refused here: they come with --kafka-config")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    text = args.plan if args.plan.lstrip().startswith("{") else Path(args.plan).read_text()
    plan = BackfillPlan.from_json(text)
    options = tuning_options(args.kafka_option)
    kafka: Kafka = read_kafka_config(args.kafka_config) if args.kafka_config else args.bootstrap
    spark = spark_session(args.master, driver_memory=args.driver_memory)
    spark.sparkContext.setLogLevel("WARN")
    result: dict[str, Any] = {}
    if args.command == "run":
        result["run"] = run(spark, plan, kafka, kafka_options=options)
    if args.command == "verify" or args.verify:
        report = verify(spark, plan, kafka)
        result["integrity"] = report.to_dict()
        log.info("integrity of %s: %s", plan.target_topic, "ok" if report.ok else "; ".join(report.failures))
    if args.report:
        Path(args.report).write_text(json.dumps(result, indent=2, sort_keys=True))
    ok = result.get("integrity", {}).get("ok", True)
    return 0 if ok else 3


if __name__ == "__main__":
    sys.exit(main())
