"""What the Spark apps share: the session, the cluster's Kafka options, the JVM functions they register
(jvm/spark-udf, no Python worker per record), the reads of a backfill's snapshot and output, and the
lineage header as a Spark column.

Each constant and each read is written here once; :mod:`spark_apps.rekey_backfill`,
:mod:`spark_apps.backfill_verify` and :mod:`spark_apps.key_skew` import this module and never each
other's internals. Nothing here runs at import time: pyspark is imported by the functions that use it.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Mapping
from typing import Any

from kafkaops.platform import keyrules
from kafkaops.platform.paths import JARS, jar_dir
from kafkaops.platform.spark import spark_kafka_options
from kafkaops.rekey import backfill
from kafkaops.rekey.backfill import BackfillPlan

#: A cluster as the apps reach it: its librdkafka client config, or only its bootstrap servers.
Kafka = Mapping[str, str] | str

JARS_DIR = JARS / "spark"  # KAFKAOPS_JARS, else KAFKAOPS_CACHE/jars (kafkaops.platform.paths)

#: The source and sink option of every read of a backfill's output (and of the verify's snapshot): what a
#: consumer sees, the records of committed transactions only.
READ_COMMITTED = {"kafka.isolation.level": "read_committed"}


# -- the cluster -----------------------------------------------------------------------------------------

def admin_config(kafka: Kafka) -> dict[str, str]:
    """The librdkafka config of ``kafka`` (the admin calls and record reads of the driver)."""
    from kafkaops.platform.kafka import connection

    return connection.connection_config(kafka)


def kafka_options(kafka: Kafka) -> dict[str, str]:
    """Spark's Kafka source/sink options (``kafka.*``, the Java client's) for ``kafka``."""
    return spark_kafka_options(admin_config(kafka))


# -- the session -----------------------------------------------------------------------------------------

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
    builder = (builder
               .config("spark.task.maxFailures", "4")
               .config("spark.speculation", "false")
               .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.session.timeZone", "UTC"))
    # A new SparkContext in the main thread replaces the process's SIGINT handler with one that cancels its jobs,
    # and stop() leaves it there: a later Ctrl-C in the same process (a test worker's) then raised from a stopped
    # context. The process's own handler is put back; Ctrl-C still raises KeyboardInterrupt, and the app's
    # ``finally: spark.stop()`` ends the jobs.
    before = signal.getsignal(signal.SIGINT)
    session = builder.getOrCreate()
    if threading.current_thread() is threading.main_thread() and before is not None:
        signal.signal(signal.SIGINT, before)
    return session


def launched_by_spark_submit() -> bool:
    """True in a driver spark-submit started: its JVM is already up and hands PySpark its gateway."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


# -- the JVM functions (jvm/spark-udf) -------------------------------------------------------------------

#: Spark SQL function (jvm/spark-udf): ``Utils.toPositive(Utils.murmur2(key))`` of Kafka's Java client;
#: ``kafka_key_hash(key, source_partition) % n`` is the partition its producer gives the key in a topic of
#: ``n``. It also counts records off their key's home source partition (:func:`register_key_hash`).
KAFKA_KEY_HASH = "kafka_key_hash"
#: Spark SQL function (jvm/spark-udf ``NewKey``) of a rule that computes the key (all but ``record_key``):
#: :func:`register_functions`.
NEW_KEY = "kafkaops_new_key"
#: Spark SQL function (jvm/spark-udf ``OrderClock``), the merged copy's order timestamp.
ORDER_TS = "kafkaops_order_ts"
#: Spark SQL function (jvm/spark-udf ``OrderedNewKey``): ``kafkaops_new_key`` with the order timestamp,
#: what the merged copy by a value rule reads its keys with.
NEW_KEY_ORDERED = "kafkaops_new_key_ordered"


def stale_jar(what: str, err: Exception) -> backfill.BackfillError:
    """The error of a JVM class or function that does not load: the jar is missing or stale."""
    return backfill.BackfillError(f"cannot load {what} from kafkaops-spark-udf.jar in {JARS_DIR} "
                                  f"({str(err).splitlines()[0][:200]}): run 'make setup'")


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
        raise stale_jar(KAFKA_KEY_HASH, err) from err
    return away


def register_functions(spark: Any, plan: BackfillPlan, spread: Any = None) -> Any:
    """Register the JVM functions of ``plan``'s rows (:func:`spark_apps.rekey_backfill.rekey_rows`); a
    query uses the ones registered when it was built. Returns ``kafka_key_hash``'s accumulator
    (:func:`register_key_hash`).

    * ``kafkaops_new_key(input, source_partition)`` (a rule that computes the key, all but
      ``record_key``; :func:`register_new_key`): ``input`` is the column the rule reads
      (``KeyRule.reads``: the value, or the key for ``window_key`` and ``session_key``).
      ``spread`` (:func:`key_spread`) collects each task's key hashes while queries using it run.
    * ``kafkaops_order_ts(new_key, source_partition, offset, ts)`` (``OrderClock``): the order
      timestamp of :class:`kafkaops.rekey.backfill.OrderClock`; it keeps state per Spark task, so it is
      registered non-deterministic (evaluated once per row, in row order).
    * ``kafkaops_new_key_ordered(input, source_partition, offset, ts)`` (as ``kafkaops_new_key``;
      ``OrderedNewKey``): the two above in one call, ``kafkaops_new_key``'s struct with ``order_ts``
      (non-deterministic too): the merged copy reads and copies each record once.
    """
    away = register_key_hash(spark, source_partition_count(plan))
    spark_udf = spark.sparkContext._jvm.io.kafkaops.spark
    if not plan.rule.is_record_key:
        register_new_key(spark, plan.rule, plan.target_partitions, spread)
        try:
            spark._jsparkSession.udf().register(NEW_KEY_ORDERED, spark_udf.OrderedNewKey.function(
                list(plan.rule.steps), plan.rule.text, plan.target_partitions))
        except Exception as err:  # py4j errors: the jar is missing or stale
            raise stale_jar(NEW_KEY_ORDERED, err) from err
    try:
        spark._jsparkSession.udf().register(ORDER_TS, spark_udf.OrderClock.function())
    except Exception as err:  # py4j errors: the jar is missing or stale
        raise stale_jar(ORDER_TS, err) from err
    return away


def register_new_key(spark: Any, rule: keyrules.KeyRule, partitions: int, spread: Any = None) -> None:
    """Register ``kafkaops_new_key(input, source_partition)`` (jvm/spark-udf ``NewKey``) for a ``rule``
    that computes the key (all but ``record_key``; ``input`` is the column ``rule.reads``: the value,
    or the key for ``window_key`` and ``session_key``): ``struct<key, code, detail, partition>``, the
    new key by the key-rule contract (docs/key-rules.md; ``KeyRule``, on Jackson for a value rule) and its
    partition in a topic of ``partitions`` (Kafka's ``Utils.murmur2``), or a null key, the reason code
    and a free-text detail. The backfill and the key-skew job (spark_apps/key_skew.py) read keys with it."""
    jvm = spark.sparkContext._jvm
    try:
        function = jvm.io.kafkaops.spark.NewKey(list(rule.steps), rule.text, partitions, spread)
        spark._jsparkSession.udf().register(NEW_KEY, function, jvm.io.kafkaops.spark.NewKey.RESULT)
    except Exception as err:  # py4j errors: the jar is missing or stale
        raise stale_jar(NEW_KEY, err) from err


def key_spread(spark: Any) -> Any:
    """A JVM accumulator for :func:`register_functions`' ``spread``."""
    return spark.sparkContext._jsc.sc().collectionAccumulator("kafkaops.key_spread")


def spanning_keys_of(spark: Any, spread: Any) -> int | None:
    """Keys the direct copy saw in more than one source partition; ``None`` when a task saw too many
    distinct keys to track (count them with :func:`spark_apps.rekey_backfill.keys_in_several_partitions`)."""
    spanning = int(spark.sparkContext._jvm.io.kafkaops.spark.KeySpread.spanning(spread.value()))
    return None if spanning < 0 else spanning


def source_partition_count(plan: BackfillPlan) -> int:
    return max(p for p, _, _ in plan.source_offsets) + 1


# -- the reads of a backfill -----------------------------------------------------------------------------

def source(spark: Any, plan: BackfillPlan, kafka: Kafka, options: Mapping[str, str] | None = None) -> Any:
    """Spark's Kafka source over exactly ``[start, end)`` of each partition of ``plan``'s snapshot (one
    Spark task per source partition, in offset order); ``options``: more source options."""
    return (spark.read.format("kafka")
            .options(**kafka_options(kafka))
            .option("subscribe", plan.source_topic)
            .option("startingOffsets", plan.offsets_json("start"))
            .option("endingOffsets", plan.offsets_json("end"))
            .option("failOnDataLoss", "true")
            .options(**(options or {}))
            .load())


def snapshot(spark: Any, plan: BackfillPlan, kafka: Kafka, options: Mapping[str, str] | None = None, *,
             headers: bool = False) -> Any:
    """The snapshot as ``partition, offset, ts, key, value`` (``ts`` in epoch milliseconds), with
    ``headers`` (``array<struct<key string, value binary>>``, in order) when asked: what a copy writes."""
    from pyspark.sql import functions as F

    read = source(spark, plan, kafka, {**(options or {}), **({"includeHeaders": "true"} if headers else {})})
    return read.select("partition", "offset", F.unix_millis("timestamp").alias("ts"), "key", "value",
                       *(["headers"] if headers else []))


def output(spark: Any, plan: BackfillPlan, kafka: Kafka) -> Any:
    """The target and dead-letter topics of ``plan`` as Spark's Kafka source reads them, headers
    included, :data:`READ_COMMITTED`: from the earliest offset to the end offsets now."""
    return (spark.read.format("kafka").options(**kafka_options(kafka)).options(**READ_COMMITTED)
            .option("subscribe", f"{plan.target_topic},{plan.dead_letter_topic}")
            .option("startingOffsets", "earliest").option("endingOffsets", "latest")
            .option("includeHeaders", "true").load())


def header(name: str) -> Any:
    """The value (binary) of a record's **last** header ``name`` as a column of :func:`output`'s rows; null
    where the record lacks it (a keyed record has no reason code). A copy writes its own headers after the
    source record's, so the last lineage (reason code) is the copy's, also of a topic copied twice."""
    from pyspark.sql import functions as F

    return F.try_element_at(F.filter("headers", lambda h: h["key"] == F.lit(name)), F.lit(-1))["value"]


def lineage(source_topic: str, partition: Any, offset: Any) -> Any:
    """The lineage header's text, :func:`kafkaops.rekey.backfill.format_lineage`, as a Spark column of
    the ``partition`` and ``offset`` columns."""
    from pyspark.sql import functions as F

    sep = backfill.LINEAGE_SEPARATOR
    return F.concat(F.lit(f"{source_topic}{sep}"), partition.cast("string"), F.lit(sep), offset.cast("string"))


def lineage_parts(value: Any) -> Any:
    """A lineage header's value (a column) split into ``[topic, partition, offset]`` (text): a topic
    name holds no separator, so it splits in three (:func:`kafkaops.rekey.backfill.parse_lineage`)."""
    from pyspark.sql import functions as F

    return F.split(value.cast("string"), backfill.LINEAGE_SEPARATOR)
