"""Rekey backfill: copy a bounded snapshot of a topic into a target topic with a new partition count,
each record on the partition Kafka's Java producer would give its key, per-key order kept, every
record exactly once, also across re-runs and restarts after a crash.

    spark-submit ... rekey_backfill.py run --plan-artifact P --result-artifact R
        --store-config kafkaops-store.properties --kafka-config kafka.properties [--verify]
    python -m spark_apps.rekey_backfill verify --plan plan.json --bootstrap host:9092 --report out.json

:func:`kafkaops.platform.spark.run_spark_app` submits it (spark-submit through Airflow's Spark
provider): the plan and the result travel through the kafkaops store as artifacts (its URL in
``kafkaops-store.properties``), the cluster's librdkafka client config (the Airflow connection's,
SASL and SSL included) as ``kafka.properties``, both shipped with ``--files`` (mode 0600) and read
by their base names; the result is also printed as the ``kafkaops-result:`` line of the driver's
output. ``--plan`` takes the plan itself (JSON or a file of it) for local runs; ``--bootstrap``
alone reaches a cluster without security. Secrets never go on the command line. A plain
``python -m`` run (tests) starts local Spark itself.

Two copies, both reading exactly ``[start, end)`` of each source partition through Spark's Kafka
source (``startingOffsets``/``endingOffsets`` JSON of the :class:`~kafkaops.rekey.backfill.BackfillPlan`)
and writing through kafkaops' transactional sink (below) with a ``kafkaops.lineage`` header
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

**Exactly once by construction.** The copy is written in *slices*: in the direct copy one source
partition's records, in the merged copy one output partition's (the dead-letter topic is a slice of
its own); one Spark task writes one slice, in an order every attempt and every run repeats (offset
order; the merged copy's sort key is total and the snapshot bounded). The sink, jvm/spark-udf
``TransactionalKafkaSink`` (:data:`SINK`, a Spark DataSource V2 writer: no Python per row), gives each
slice a transactional producer whose ``transactional.id`` is the plan's
(:func:`kafkaops.rekey.backfill.backfill_id`) and the slice's, so a new attempt's ``initTransactions()``
fences every older one (a retried task, an executor lost but still running, a killed job) and aborts
its open transaction. The rows go out batched, in transactions of at most ``kafkaops.chunk.rows`` rows
and ``kafkaops.chunk.ms``; each commits, inside the same transaction, the slice's row count as the
offset of the slice's marker partition in the plan's consumer group (``sendOffsetsToTransaction``).
A new attempt reads its marker (read_committed: require-stable), skips that many rows and writes the
rest. So a read_committed consumer sees each record of the plan exactly once whatever failed, and
Spark may retry tasks.

Before writing, :func:`run` fences the plan's slices (a killed run's open transactions would hold
read_committed readers back) and checks what the target holds read_committed against the markers
(:func:`committed`, :func:`kafkaops.rekey.backfill.committed_output`): every record must carry a
lineage of this plan and each slice's records must number its marker, else it stops, naming the
partition (another writer, another plan). The markers also say which copy earlier runs began, and
the run resumes it: a re-run after success writes nothing, one after a crash the missing rows.
Records without a key under the rule go to partition 0 of the dead-letter topic (the merged copy:
in source (partition, offset) order), with the reason code in a ``kafkaops.dead_letter_code`` header
(``FIELD_MISSING``, ``NOT_JSON``, ...) and a free-text ``kafkaops.dead_letter_reason``. Every read of
the copy (the check above, ``verify``) is read_committed: what consumers see.

``verify`` checks the invariants of :func:`kafkaops.rekey.backfill.check_integrity` as Spark jobs over
the snapshot, the target and the dead-letter topic (:mod:`spark_apps.backfill_verify`); the report
(JSON) feeds the ``backfill`` gate.
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
from kafkaops.platform.spark import (add_exchange_arguments, deliver_result, read_client_config, read_input,
                                     spark_kafka_options, tuning_options)
from kafkaops.platform.paths import JARS, jar_dir
from kafkaops.rekey import backfill
from kafkaops.rekey.backfill import (CODE_HEADER, LINEAGE_HEADER, REASON_HEADER, BackfillPlan, OutputRecord,
                                     SourceRecord)

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

#: Producer settings of the sink (which makes it idempotent and transactional with acks=all whatever
#: these say): batching, order kept per partition.
PRODUCER_OPTIONS = {
    "kafka.acks": "all",
    "kafka.enable.idempotence": "true",
    "kafka.max.in.flight.requests.per.connection": "5",
    "kafka.linger.ms": "20",
    "kafka.batch.size": "524288",
    "kafka.compression.type": "none",
    "kafka.delivery.timeout.ms": "120000",
}


def spark_session(master: str | None = None, app: str = "kafkaops-rekey-backfill", *, driver_memory: str = "1g",
                  shuffle_partitions: int = 4, conf: Mapping[str, str] | None = None) -> Any:
    """The app's SparkSession. Under spark-submit (:mod:`kafkaops.platform.spark`) the master, the
    jars, the Python files and the driver's memory are spark-submit's: nothing here overrides them.
    A plain ``python -m spark_apps...`` run (tests, benchmarks) gets local Spark (``master``, else
    ``local[2]``) with the Kafka connector jars of :data:`JARS_DIR`; ``conf``: more settings for it (a
    session started after another in the same process reads no spark-defaults.conf again)."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app)
    if not launched_by_spark_submit():
        # Local Python workers, if a job ever starts one, run this interpreter (its venv has the project),
        # not whatever python3 is on PATH; PySpark reads the variable when the context starts. Executors
        # elsewhere run their own host's python3: this interpreter's path means nothing there.
        if (master or "local[2]").startswith("local"):
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        else:
            builder = builder.config("spark.pyspark.python", "python3")
        jars = sorted(str(p) for p in jar_dir("spark").glob("*.jar"))  # SetupError naming the setting when empty
        builder = (builder.master(master or "local[2]").config("spark.jars", ",".join(jars))
                   .config("spark.driver.memory", driver_memory)
                   # one machine: the merged copy's shuffle stays on local disk, where compressing it only
                   # costs CPU (measured: about 20 % of the merged copy's time on 2 cores)
                   .config("spark.shuffle.compress", "false")
                   .config("spark.shuffle.spill.compress", "false"))
        for name, value in (conf or {}).items():
            builder = builder.config(name, value)
    # A task attempt that dies (its executor lost, killed, fenced) is retried: the transactional sink
    # (TransactionalKafkaSink) makes a retry resume its slice from the committed marker, never write twice.
    return (builder
            .config("spark.task.maxFailures", "4")
            .config("spark.speculation", "false")
            .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.session.timeZone", "UTC")
            .getOrCreate())


def launched_by_spark_submit() -> bool:
    """True in a driver spark-submit started: its JVM is already up and hands PySpark its gateway."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


#: Spark SQL function (jvm/spark-udf ``NewKey``) of a value rule: :func:`register_functions`.
NEW_KEY = "kafkaops_new_key"
#: Spark SQL function (jvm/spark-udf ``OrderClock``), the merged copy's order timestamp.
ORDER_TS = "kafkaops_order_ts"
#: Spark SQL function (jvm/spark-udf ``OrderedNewKey``): ``kafkaops_new_key`` with the order timestamp,
#: what the merged copy by a value rule reads its keys with.
NEW_KEY_ORDERED = "kafkaops_new_key_ordered"


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
    * ``kafkaops_new_key_ordered(value, source_partition, offset, ts)`` (a value rule;
      ``OrderedNewKey``): the two above in one call, ``kafkaops_new_key``'s struct with ``order_ts``
      (non-deterministic too): the merged copy parses and copies each value once.
    """
    away = register_key_hash(spark, source_partition_count(plan))
    spark_udf = spark.sparkContext._jvm.io.kafkaops.spark
    if plan.rule.needs_value:
        register_new_key(spark, plan.rule, plan.target_partitions, spread)
        try:
            spark._jsparkSession.udf().register(NEW_KEY_ORDERED, spark_udf.OrderedNewKey.function(
                list(plan.rule.steps), plan.rule.text, plan.target_partitions))
        except Exception as err:  # py4j errors: the jar is missing or stale
            raise _stale_jar(NEW_KEY_ORDERED, err) from err
    try:
        spark._jsparkSession.udf().register(ORDER_TS, spark_udf.OrderClock.function())
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
    partitions (:func:`write_direct` checks that)."""
    from pyspark.sql import functions as F

    order = F.lit(0)
    if plan.rule.needs_value:
        # the struct in a column of its own: the projection below reads its fields, never calls it again
        new = (F.call_function(NEW_KEY_ORDERED, F.col("value"), F.col("partition"), F.col("offset"), F.col("ts"))
               if ordered else F.call_function(NEW_KEY, F.col("value"), F.col("partition")))
        rows = source.select("*", new.alias("new"))
        key, code, detail, out = F.col("new.key"), F.col("new.code"), F.col("new.detail"), F.col("new.partition")
        if ordered:
            order = F.col("new.order_ts")
    else:
        rows = source
        key = F.col("key")
        code = F.when(key.isNull(), F.lit(keyrules.NO_KEY))
        detail = F.when(key.isNull(), F.lit("the record has no key"))
        out = F.call_function(KAFKA_KEY_HASH, F.col("key"), F.col("partition")) % plan.target_partitions
        if ordered:
            order = F.call_function(ORDER_TS, key, F.col("partition"), F.col("offset"), F.col("ts"))
    return rows.select(
        F.when(key.isNotNull(), F.lit(plan.target_topic)).otherwise(F.lit(plan.dead_letter_topic)).alias("out_topic"),
        F.coalesce(out, F.lit(0)).alias("out_partition"), order.cast("long").alias("order_ts"),
        F.col("partition").alias("src_partition"), F.col("offset").alias("src_offset"), key.alias("key"), "value",
        code.cast("string").alias("code"), detail.cast("string").alias("detail"))


# -- what earlier runs committed ---------------------------------------------------------------------------

#: The exactly-once sink (jvm/spark-udf ``TransactionalKafkaSink``): each slice by transactional producers
#: of its own transactional id, its rows counted by a commit marker in the plan's consumer group.
SINK = "io.kafkaops.spark.TransactionalKafkaSink"
#: Options of reads of the copy: what consumers see, the records of committed transactions only.
READ_COMMITTED = {"kafka.isolation.level": "read_committed"}


def sink_options(plan: BackfillPlan, bootstrap: Kafka, options: dict[str, str] | None = None) -> dict[str, str]:
    """The options of :data:`SINK` for ``plan``: the cluster's Java client settings (secrets included:
    never log them), the producer's tuning, and the plan's transactional id prefix and marker group
    (:func:`kafkaops.rekey.backfill.backfill_id`)."""
    name = backfill.backfill_id(plan)
    return {**kafka_options(bootstrap), **PRODUCER_OPTIONS, **(options or {}),
            "kafkaops.transactional.id.prefix": name, "kafkaops.marker.group": name,
            # the sink builds each record's headers from the lineage columns (:func:`_sink_frame`)
            "kafkaops.lineage.topic": plan.source_topic, "kafkaops.header.lineage": LINEAGE_HEADER,
            "kafkaops.header.code": CODE_HEADER, "kafkaops.header.reason": REASON_HEADER}


def _sink(spark: Any, call: str, *args: Any) -> Any:
    """``TransactionalKafkaSink.<call>(*args)`` on the driver's JVM; its Kafka errors as BackfillError."""
    from py4j.protocol import Py4JJavaError

    method = getattr(spark.sparkContext._jvm.io.kafkaops.spark.TransactionalKafkaSink, call)
    try:
        return method(*args)
    except TypeError as err:  # py4j: a JavaPackage, not the class: the jar is missing or stale
        raise _stale_jar(SINK, err) from err
    except Py4JJavaError as err:  # the Java client's message names no setting's value
        raise backfill.BackfillError(f"TransactionalKafkaSink.{call} failed: {err.java_exception}; the output and the "
                                     "markers are as the last commit left them: run the backfill again once the "
                                     "cluster answers") from err


def markers(spark: Any, plan: BackfillPlan, bootstrap: Kafka, options: dict[str, str] | None = None
            ) -> dict[tuple[str, int], int]:
    """The plan's commit markers: slice (its marker's topic partition) -> rows committed."""
    found = _sink(spark, "committed", sink_options(plan, bootstrap, options))
    return {(k.rsplit("/", 1)[0], int(k.rsplit("/", 1)[1])): int(v) for k, v in found.items()}


def fence(spark: Any, plan: BackfillPlan, bootstrap: Kafka, options: dict[str, str] | None = None) -> None:
    """Fence every slice of both copies: a transaction a killed run left open is aborted, so
    read_committed reads see past it at once, and no attempt of that run can commit any more."""
    names = backfill.slices(plan, backfill.DIRECT) + backfill.slices(plan, backfill.MERGED)
    _sink(spark, "fence", sink_options(plan, bootstrap, options), [t for t, _ in names], [p for _, p in names])


def forget_markers(spark: Any, plan: BackfillPlan, bootstrap: Kafka, options: dict[str, str] | None = None) -> None:
    """Delete the plan's marker group: every slice starts again from its first row."""
    _sink(spark, "forget", sink_options(plan, bootstrap, options))


def output_counts(spark: Any, plan: BackfillPlan, bootstrap: Kafka) -> list[backfill.OutputCount]:
    """The committed records of the target and dead-letter topics (read_committed) per output partition
    and lineage source partition, with their least and greatest source offsets: one Spark aggregation."""
    from pyspark.sql import functions as F

    frame = (spark.read.format("kafka").options(**kafka_options(bootstrap)).options(**READ_COMMITTED)
             .option("subscribe", f"{plan.target_topic},{plan.dead_letter_topic}")
             .option("startingOffsets", "earliest").option("endingOffsets", "latest")
             .option("includeHeaders", "true").load())
    lineage = F.element_at(F.filter("headers", lambda h: h["key"] == F.lit(LINEAGE_HEADER)), 1)["value"]
    # a topic name holds no '/': topic/partition/offset splits in three
    parts = F.split(lineage.cast("string"), "/")
    # a copy in passes: records of the source before this pass's start are earlier passes' (checked apart)
    starts = F.lit(-1)
    for p, start, _ in plan.source_offsets:
        starts = F.when((F.col("src_topic") == F.lit(plan.source_topic)) & (F.col("src_partition") == F.lit(p)),
                        F.lit(start)).otherwise(starts)
    rows = (frame.select("topic", "partition", parts.getItem(0).alias("src_topic"),
                         parts.getItem(1).cast("int").alias("src_partition"),
                         parts.getItem(2).cast("long").alias("src_offset"))
            .withColumn("earlier", F.coalesce(F.col("src_offset") < starts, F.lit(False)))
            .groupBy("topic", "partition", "src_topic", "src_partition", "earlier")
            .agg(F.count(F.lit(1)).alias("n"), F.min("src_offset").alias("first"), F.max("src_offset").alias("last"))
            .collect())
    return [backfill.OutputCount(r["topic"], r["partition"], r["src_topic"], r["src_partition"], r["n"], r["first"],
                                 r["last"], bool(r["earlier"])) for r in rows]


def committed(spark: Any, plan: BackfillPlan, bootstrap: Kafka, options: dict[str, str] | None = None
              ) -> backfill.CommittedOutput:
    """What earlier runs of ``plan`` committed, checked against its markers
    (:func:`kafkaops.rekey.backfill.committed_output`; raises when the output is not only this plan's
    work). Empty topics need no Spark job; otherwise the slices are fenced first (:func:`fence`)."""
    state = _sink(spark, "outputState", sink_options(plan, bootstrap, options),
                  [plan.target_topic, plan.dead_letter_topic])  # one Admin client: offsets and markers
    if state.isEmpty():
        return backfill.CommittedOutput(None, 0, stale=bool(dict(state.markers())))
    fence(spark, plan, bootstrap, options)
    return backfill.committed_output(plan, markers(spark, plan, bootstrap, options),
                                     output_counts(spark, plan, bootstrap))


# -- the job ---------------------------------------------------------------------------------------------

def _sink_frame(frame: Any, plan: BackfillPlan, mode: str = backfill.DIRECT) -> Any:
    """``topic, partition, key, value`` for the sink, the lineage columns ``lineage_partition,
    lineage_offset, code, detail`` from which it builds each record's headers on the JVM (the lineage
    header on every record, the reason code and detail on dead letters: :func:`with_headers` says
    which), and ``slice_topic, slice_partition``, the slice of ``mode`` the row belongs to
    (:func:`kafkaops.rekey.backfill.slices`: direct, its source partition; merged, its output
    partition), which the task writing it must hold alone."""
    from pyspark.sql import functions as F

    if mode == backfill.DIRECT:
        slice_topic, slice_partition = F.lit(plan.source_topic), F.col("src_partition")
    else:
        slice_topic, slice_partition = F.col("out_topic"), F.col("out_partition")
    return frame.select(F.col("out_topic").alias("topic"), F.col("out_partition").alias("partition"), "key", "value",
                        F.col("src_partition").cast("int").alias("lineage_partition"),
                        F.col("src_offset").cast("long").alias("lineage_offset"), "code", "detail",
                        slice_topic.alias("slice_topic"), slice_partition.cast("int").alias("slice_partition"))


def with_headers(frame: Any, plan: BackfillPlan) -> Any:
    """:func:`_sink_frame`'s rows as Spark's own Kafka sink takes them, ``topic, partition, key, value,
    headers``, with the headers the transactional sink builds: ``kafkaops.lineage`` =
    ``<source topic>/<partition>/<offset>`` on every record, the reason code and detail on dead letters."""
    from pyspark.sql import functions as F

    def header(name: str, value: Any) -> Any:
        return F.struct(F.lit(name).alias("key"), value.cast("binary").alias("value"))

    lineage = F.concat(F.lit(f"{plan.source_topic}/"), F.col("lineage_partition").cast("string"), F.lit("/"),
                       F.col("lineage_offset").cast("string"))
    headers = F.when(F.col("code").isNull(), F.array(header(LINEAGE_HEADER, lineage))) \
        .otherwise(F.array(header(LINEAGE_HEADER, lineage), header(CODE_HEADER, F.col("code")),
                           header(REASON_HEADER, F.col("detail"))))
    return frame.select("topic", "partition", "key", "value", headers.alias("headers"))


def output_frame(planned: Any, plan: BackfillPlan) -> Any:
    """The merged copy: each output partition in a Spark task of its own (target partition ``p`` in
    task ``p``, the dead letters in task ``N``: ``repartitionById``, no hash collisions to put two
    partitions' work in one task), in per-key order; sorting by the order timestamp first lets
    Spark sort on a long prefix."""
    from pyspark.sql import functions as F

    # a dead letter is exactly a row with a reason code: the topic names stay out of the shuffle and the
    # sort (fewer bytes moved and sorted), and come back after
    task = F.when(F.col("code").isNull(), F.col("out_partition")).otherwise(F.lit(plan.target_partitions))
    ordered = (planned.drop("out_topic").repartitionById(plan.target_partitions + 1, task)
               .sortWithinPartitions("order_ts", "src_partition", "src_offset"))
    topic = F.when(F.col("code").isNull(), F.lit(plan.target_topic)).otherwise(F.lit(plan.dead_letter_topic))
    return _sink_frame(ordered.withColumn("out_topic", topic), plan, backfill.MERGED)


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
    from kafkaops.platform.kafka import records

    head = {p: (s, min(e, s + SAMPLE_RECORDS)) for p, s, e in plan.source_offsets}
    home: dict[bytes, int] = {}
    for r in records.read_ranges(_admin_config(bootstrap), plan.source_topic, head):
        key = keyrules.extract_key(r.key, r.value, plan.rule)
        if key is not None and home.setdefault(key, r.partition) != r.partition:
            return True
    return False


def write(frame: Any, plan: BackfillPlan, bootstrap: Kafka, options: dict[str, str] | None = None) -> list[int]:
    """Write ``frame`` (:func:`_sink_frame`'s columns, one slice per Spark task) through :data:`SINK`:
    each slice skips the rows its marker counts and commits the rest with it. Returns ``[slices,
    rows written, rows skipped as committed before]``."""
    (frame.write.format(SINK).mode("append").options(**sink_options(plan, bootstrap, options)).save())
    return [int(n) for n in _sink(frame.sparkSession, "lastWrite")]


def source_partition_count(plan: BackfillPlan) -> int:
    return max(p for p, _, _ in plan.source_offsets) + 1


def write_direct(spark: Any, plan: BackfillPlan, bootstrap: Kafka, options: dict[str, str] | None = None
                 ) -> tuple[int, str, list[int]]:
    """The direct copy in one pass (each slice resumes from its marker); returns how many new keys
    have records in more than one source partition (zero: the copy kept per-key order), how that was
    found, and :func:`write`'s counts.

    The pass reads and places every record of the snapshot, also those of rows committed before, so
    its checks see them all. By the record key it counts records off their key's home partition under
    the source's count (constant memory); only when there are some are the keys counted exactly. By a
    value rule it collects each task's key hashes (:func:`spanning_keys_of`)."""
    options = options or {}
    spread = key_spread(spark) if plan.rule.needs_value else None
    away = register_functions(spark, plan, spread)
    counts = write(_sink_frame(direct_frame(spark, plan, bootstrap, options), plan), plan, bootstrap, options)
    if spread is not None:
        spanning = spanning_keys_of(spark, spread)
        if spanning is not None:
            return spanning, "the copy's key hashes per source partition", counts
    elif not int(away.value()):
        return 0, "no record off its key's home partition", counts
    return (keys_in_several_partitions(spark, plan, bootstrap, options), "an exact count of keys per source partition",
            counts)


def write_merged(spark: Any, plan: BackfillPlan, bootstrap: Kafka, options: dict[str, str] | None = None
                 ) -> list[int]:
    """The merged copy (each slice resumes from its marker); returns :func:`write`'s counts."""
    register_functions(spark, plan)
    return write(output_frame(planned_frame(spark, plan, bootstrap, options), plan), plan, bootstrap, options)


def run(spark: Any, plan: BackfillPlan, bootstrap: Kafka, *, kafka_options: dict[str, str] | None = None
        ) -> dict[str, Any]:
    """Write what is missing of ``plan`` to its target and dead-letter topics; returns counts.

    First what earlier runs committed (:func:`committed`): nothing, part or all of the direct copy,
    or of the merged copy; anything else there is refused. The merged copy resumes as merged. Else
    the direct copy runs, unless the target is fresh, the rule reads the value and a sample of the
    source already shows a new key in two source partitions. The direct pass checks that every new
    key's records come from one source partition (:func:`write_direct`); if one does not, the direct
    copy cannot have kept its order: it is deleted from the target (DeleteRecords), then its markers,
    and the merged copy writes it again (a run stopped between the two finds markers of records no
    longer there: it forgets them and starts afresh)."""
    started = time.monotonic()
    options = kafka_options or {}
    before = committed(spark, plan, bootstrap, options)
    if before.stale:
        log.info("backfill %s -> %s: the marker group counts records deleted when a run switched to the merged "
                 "copy; forgetting it", plan.source_topic, plan.target_topic)
        forget_markers(spark, plan, bootstrap, options)
    if before.records:
        log.info("backfill %s -> %s: %d record(s) of the %s copy were committed before; its slices resume",
                 plan.source_topic, plan.target_topic, before.records, before.mode)
    rewritten = False
    if before.mode is None and plan.continues:  # a catch-up pass: earlier passes' records stay, so no rewrite
        spanning = keys_in_several_partitions(spark, plan, bootstrap, options)
        mode, why = ((backfill.MERGED, f"{spanning} key(s) of this pass have records in more than one source "
                      "partition (an exact count before writing)") if spanning else
                     (backfill.DIRECT, "every key of this pass has its records in one source partition (an exact "
                      "count before writing)"))
        log.info("backfill %s -> %s: catch-up pass, %s copy (%s)", plan.source_topic, plan.target_topic, mode, why)
        if mode == backfill.MERGED:
            counts = write_merged(spark, plan, bootstrap, options)
        else:
            counts = write_direct(spark, plan, bootstrap, options)[2]
    elif before.mode == backfill.MERGED or (before.mode is None and plan.rule.needs_value
                                            and sample_spans(plan, bootstrap, options)):
        mode, why = backfill.MERGED, ("the merged copy was begun before" if before.mode else
                                      "a sample of the source has a key in two source partitions")
        log.info("backfill %s -> %s: merged copy (%s)", plan.source_topic, plan.target_topic, why)
        counts = write_merged(spark, plan, bootstrap, options)
    else:
        log.info("backfill %s -> %s: direct copy", plan.source_topic, plan.target_topic)
        spanning, how, counts = write_direct(spark, plan, bootstrap, options)
        mode, why = backfill.DIRECT, f"every key's records are in one source partition ({how})"
        if spanning and plan.continues:  # resuming a catch-up pass found direct: its count said no key spans
            raise backfill.BackfillError(f"catch-up pass into {plan.target_topic}: {spanning} key(s) span source "
                                         "partitions after the pass began as the direct copy; the pass's records "
                                         "stay as written. Delete the target and start the migration again")
        if spanning:
            mode, why = backfill.MERGED, f"{spanning} key(s) have records in more than one source partition ({how})"
            log.warning("backfill %s -> %s: %s; the direct copy cannot keep their order: deleting it from "
                        "the target and writing the merged copy", plan.source_topic, plan.target_topic, why)
            _truncate_output(plan, bootstrap, options)
            forget_markers(spark, plan, bootstrap, options)
            rewritten = True
            counts = write_merged(spark, plan, bootstrap, options)
    seconds = time.monotonic() - started
    result = {"plan": plan.to_dict(), "mode": mode, "mode_reason": why, "rewritten": rewritten,
              "already_written": before.records, "slices": counts[0], "written": counts[1],
              "skipped": counts[2], "seconds": round(seconds, 3)}
    log.info("backfill %s -> %s done in %.1f s, %s copy: %d record(s) written, %d committed before",
             plan.source_topic, plan.target_topic, seconds, mode, counts[1], before.records)
    return result


def _admin_config(kafka: Kafka) -> dict[str, str]:
    """The librdkafka config of ``kafka`` (the admin calls and record reads of the driver)."""
    from kafkaops.platform.kafka import connection

    return connection.connection_config(kafka)


def _truncate_output(plan: BackfillPlan, bootstrap: Kafka, options: dict[str, str]) -> None:
    from kafkaops.platform.kafka import connection, topics

    with connection.connect(_admin_config(bootstrap)) as conn:
        topics.truncate_topics(conn, [plan.target_topic, plan.dead_letter_topic])


def read_back(spark: Any, plan: BackfillPlan, bootstrap: Kafka
              ) -> tuple[list[SourceRecord], list[OutputRecord], list[OutputRecord]]:
    """The snapshot, the target and the dead-letter topic, collected to the driver (for verify)."""
    from pyspark.sql import functions as F

    source = [SourceRecord(r["partition"], r["offset"], r["ts"], _b(r["key"]), _b(r["value"]))
              for r in _source(spark, plan, bootstrap, {}).select(
                  "partition", "offset", F.unix_millis("timestamp").alias("ts"), "key", "value").collect()]
    frame = (spark.read.format("kafka").options(**kafka_options(bootstrap)).options(**READ_COMMITTED)
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
    """The integrity report of ``plan``'s output, measured by Spark jobs (:mod:`spark_apps.backfill_verify`;
    :func:`read_back` and :func:`kafkaops.rekey.backfill.check_integrity` measure the same on the driver)."""
    from spark_apps import backfill_verify

    return backfill_verify.verify(spark, plan, bootstrap)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rekey_backfill", description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("run", "verify"))
    given = parser.add_mutually_exclusive_group(required=True)
    given.add_argument("--plan", help="the BackfillPlan as JSON (or a file of it, for local runs)")
    add_exchange_arguments(parser, "plan", group=given)
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--kafka-config", metavar="FILE", help="the cluster's librdkafka client config "
                       "(bootstrap.servers, security.protocol, sasl.*, ssl.*): kafka.properties shipped with "
                       "--files, found by its base name, or a local .properties or JSON file")
    where.add_argument("--bootstrap", help="bootstrap.servers of a cluster without security settings")
    parser.add_argument("--report", help="also write the result (and with verify/--verify the integrity report) to "
                                         "this local file; the result is always printed as the kafkaops-result line")
    parser.add_argument("--verify", action="store_true", help="run: verify after writing")
    parser.add_argument("--master", default=None, help="local runs only (python -m): the Spark master, default "
                                                       "local[2]; spark-submit's --master wins")
    parser.add_argument("--driver-memory", default="1g", help="local runs only; spark-submit's --driver-memory wins")
    parser.add_argument("--kafka-option", action="append", default=[], metavar="kafka.KEY=VALUE",
                        help="a Java client option of the source and sink that tunes it (batch size ...); "
                             "secrets are refused here: they come with --kafka-config")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    options = tuning_options(args.kafka_option)
    spark = spark_session(args.master, driver_memory=args.driver_memory)
    spark.sparkContext.setLogLevel("WARN")
    if args.plan is None:
        text = read_input(args, "plan")  # from the store (after the session: its URL is a shipped file)
    else:
        text = args.plan if args.plan.lstrip().startswith("{") else Path(args.plan).read_text()
    plan = BackfillPlan.from_json(text)
    kafka: Kafka = read_client_config(args.kafka_config) if args.kafka_config else args.bootstrap
    result: dict[str, Any] = {}
    if args.command == "run":
        result["run"] = run(spark, plan, kafka, kafka_options=options)
    if args.command == "verify" or args.verify:
        report = verify(spark, plan.whole_copy(), kafka)  # a catch-up pass: every pass so far, as one copy
        result["integrity"] = report.to_dict()
        log.info("integrity of %s: %s", plan.target_topic, "ok" if report.ok else "; ".join(report.failures))
    if args.report:
        Path(args.report).write_text(json.dumps(result, indent=2, sort_keys=True))
    deliver_result(args, result)
    ok = result.get("integrity", {}).get("ok", True)
    return 0 if ok else 3


if __name__ == "__main__":
    sys.exit(main())
