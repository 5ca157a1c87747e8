"""Rekey backfill: copy a bounded snapshot of a topic into a target topic with a new partition count,
each record on the partition Kafka's Java producer would give its key, per-key order kept, every
record exactly once, also across re-runs and restarts after a crash.

    spark-submit ... rekey_backfill.py run --plan-artifact P --result-artifact R
        --store-config kafkaops-store.properties --kafka-config kafka.properties [--verify]
    python -m spark_apps.rekey_backfill verify --plan plan.json --bootstrap host:9092 --report out.json

The design (how it is submitted, the direct and the merged copy, exactly once by construction, the
checks before writing, verify) is docs/rekey-backfill.md. Which copy a run writes is
:func:`kafkaops.rekey.backfill.choose_copy`'s choice (pure, unit-tested); this module reads and writes
with Spark: the rows on the JVM (:func:`rekey_rows`), the transactional sink (:data:`SINK`), the markers
(:func:`committed`), the passes (:func:`write_direct`, :func:`write_merged`) and :func:`run`. What the
Spark apps share is :mod:`spark_apps.common`.
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kafkaops.platform import keyrules
from kafkaops.platform.spark import (add_exchange_arguments, deliver_result, read_client_config, read_input,
                                     tuning_options)
from kafkaops.rekey import backfill
from kafkaops.rekey.backfill import CODE_HEADER, LINEAGE_HEADER, REASON_HEADER, BackfillPlan
from kafkaops.rekey.records import BackfillRun, CopiesResult, PassResult
from spark_apps import backfill_verify, common
from spark_apps.common import Kafka, kafka_options, spark_session

log = logging.getLogger("kafkaops.rekey_backfill")

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


# -- the rekey step (JVM) -------------------------------------------------------------------------------

def planned_frame(spark: Any, plan: BackfillPlan, bootstrap: Kafka, options: dict[str, str] | None = None) -> Any:
    """The rows of the merged copy, before resume: :func:`rekey_rows` with order timestamps.
    Register the functions first (:func:`spark_apps.common.register_functions`)."""
    return rekey_rows(common.snapshot(spark, plan, bootstrap, options, headers=True), plan, ordered=True)


def direct_frame(spark: Any, plan: BackfillPlan, bootstrap: Kafka, options: dict[str, str] | None = None) -> Any:
    """The rows of the direct copy, before resume: :func:`rekey_rows` in offset order. Register the
    functions first (:func:`spark_apps.common.register_functions`)."""
    return rekey_rows(common.snapshot(spark, plan, bootstrap, options, headers=True), plan)


def rekey_rows(source: Any, plan: BackfillPlan, *, ordered: bool = False) -> Any:
    """Source rows ``partition, offset, ts, key, value`` and optionally ``headers`` (one Spark task per
    source partition, in offset order) -> ``out_topic, out_partition, order_ts, src_partition, src_offset,
    key, place, value, code, detail, ts`` (and ``headers``): one projection on the JVM. The new key
    (``place``) is the record key, or the one the rule computes (``kafkaops_new_key``, given the value, or
    the key for ``window_key``/``session_key``); keyed records go to ``murmur2(new key) % N`` of the target,
    the others to partition 0 of the dead-letter topic with the reason code and detail. ``key`` is the key
    written (:attr:`kafkaops.platform.keyrules.KeyRule.keeps_record_key`): the record's own for
    ``record_key``, ``window_key`` and ``session_key`` (a changelog key keeps its window suffix; dead letters
    keep theirs too), the new key for a value rule (its dead letters: none). ``ts`` and ``headers`` are the
    source's, written with the record. ``order_ts`` is the merged copy's order timestamp
    (``kafkaops_order_ts``) when ``ordered``, else 0: the direct copy writes each source partition in offset
    order, which is per-key order only when no key has records in two source partitions (:func:`write_direct`
    checks that)."""
    from pyspark.sql import functions as F

    order = F.lit(0)
    if not plan.rule.is_record_key:
        # the struct in a column of its own: the projection below reads its fields, never calls it again
        reads = F.col(plan.rule.reads)
        new = (F.call_function(common.NEW_KEY_ORDERED, reads, F.col("partition"), F.col("offset"), F.col("ts"))
               if ordered else F.call_function(common.NEW_KEY, reads, F.col("partition")))
        rows = source.select("*", new.alias("new"))
        place, code, detail, out = F.col("new.key"), F.col("new.code"), F.col("new.detail"), F.col("new.partition")
        if ordered:
            order = F.col("new.order_ts")
    else:
        rows = source
        place = F.col("key")
        code = F.when(place.isNull(), F.lit(keyrules.NO_KEY))
        detail = F.when(place.isNull(), F.lit("the record has no key"))
        out = F.call_function(common.KAFKA_KEY_HASH, F.col("key"), F.col("partition")) % plan.target_partitions
        if ordered:
            order = F.call_function(common.ORDER_TS, place, F.col("partition"), F.col("offset"), F.col("ts"))
    key = F.col("key") if plan.rule.keeps_record_key else place
    return rows.select(
        F.when(place.isNotNull(), F.lit(plan.target_topic)).otherwise(F.lit(plan.dead_letter_topic)).alias("out_topic"),
        F.coalesce(out, F.lit(0)).alias("out_partition"), order.cast("long").alias("order_ts"),
        F.col("partition").alias("src_partition"), F.col("offset").alias("src_offset"), key.alias("key"),
        place.alias("place"), "value", code.cast("string").alias("code"), detail.cast("string").alias("detail"),
        F.col("ts").cast("long").alias("ts"), *(["headers"] if "headers" in source.columns else []))


# -- what earlier runs committed ---------------------------------------------------------------------------

#: The exactly-once sink (jvm/spark-udf ``TransactionalKafkaSink``): each slice by transactional producers
#: of its own transactional id, its rows counted by a commit marker in the plan's consumer group.
SINK = "io.kafkaops.spark.TransactionalKafkaSink"


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
        raise common.stale_jar(SINK, err) from err
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

    parts = common.lineage_parts(common.header(LINEAGE_HEADER))
    # a copy in passes: records of the source before this pass's start are earlier passes' (checked apart)
    starts = F.lit(-1)
    for p, start, _ in plan.source_offsets:
        starts = F.when((F.col("src_topic") == F.lit(plan.source_topic)) & (F.col("src_partition") == F.lit(p)),
                        F.lit(start)).otherwise(starts)
    frame = common.output(spark, plan, bootstrap)
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
    """``topic, partition, key, value, timestamp`` (the source's, epoch ms) for the sink, the source's
    ``headers`` when the frame has them, the lineage columns ``lineage_partition, lineage_offset, code,
    detail`` from which it builds the copy's own headers on the JVM, after the source's (the lineage
    header on every record, the reason code and detail on dead letters: the ``kafkaops.header.*`` options
    of :func:`sink_options` name them), and ``slice_topic, slice_partition``, the slice of ``mode`` the row belongs to
    (:func:`kafkaops.rekey.backfill.slices`: direct, its source partition; merged, its output
    partition), which the task writing it must hold alone."""
    from pyspark.sql import functions as F

    if mode == backfill.DIRECT:
        slice_topic, slice_partition = F.lit(plan.source_topic), F.col("src_partition")
    else:
        slice_topic, slice_partition = F.col("out_topic"), F.col("out_partition")
    return frame.select(F.col("out_topic").alias("topic"), F.col("out_partition").alias("partition"), "key", "value",
                        F.col("ts").cast("long").alias("timestamp"), *(["headers"] if "headers" in frame.columns else []),
                        F.col("src_partition").cast("int").alias("lineage_partition"),
                        F.col("src_offset").cast("long").alias("lineage_offset"), "code", "detail",
                        slice_topic.alias("slice_topic"), slice_partition.cast("int").alias("slice_partition"))


def output_frame(planned: Any, plan: BackfillPlan) -> Any:
    """The merged copy: each output partition in a Spark task of its own (target partition ``p`` in
    task ``p``, the dead letters in task ``N``: ``repartitionById``, no hash collisions to put two
    partitions' work in one task), in per-key order; sorting by the order timestamp first lets
    Spark sort on a long prefix."""
    from pyspark.sql import functions as F

    # a dead letter is exactly a row with a reason code: the topic names stay out of the shuffle and the
    # sort (fewer bytes moved and sorted), and come back after
    task = F.when(F.col("code").isNull(), F.col("out_partition")).otherwise(F.lit(plan.target_partitions))
    ordered = (planned.drop("out_topic", "place").repartitionById(plan.target_partitions + 1, task)
               .sortWithinPartitions("order_ts", "src_partition", "src_offset"))
    topic = F.when(F.col("code").isNull(), F.lit(plan.target_topic)).otherwise(F.lit(plan.dead_letter_topic))
    return _sink_frame(ordered.withColumn("out_topic", topic), plan, backfill.MERGED)


def keys_in_several_partitions(spark: Any, plan: BackfillPlan, bootstrap: Kafka,
                               options: dict[str, str] | None = None) -> int:
    """How many new keys of the snapshot have records in more than one source partition (by the
    record key: an earlier partition increase, or a producer with another partitioner; by a value
    field: whenever the field does not refine the record key; by a Streams store key: a changelog
    not partitioned by the store's key)."""
    from pyspark.sql import functions as F

    common.register_functions(spark, plan)
    keys = direct_frame(spark, plan, bootstrap, options).where(F.col("code").isNull())
    return keys.groupBy("place").agg(F.countDistinct("src_partition").alias("n")).where(F.col("n") > 1).count()


#: Records per source partition that :func:`sample_spans` reads to guess a value rule's copy.
SAMPLE_RECORDS = 2_000


def sample_spans(plan: BackfillPlan, bootstrap: Kafka, options: dict[str, str]) -> bool:
    """True when the first :data:`SAMPLE_RECORDS` records of each source partition already show a new
    key in two source partitions (so a direct copy by a value rule would be thrown away); False
    says nothing for sure, the direct copy then checks every key as it goes."""
    from kafkaops.platform.kafka import records

    head = {p: (s, min(e, s + SAMPLE_RECORDS)) for p, s, e in plan.source_offsets}
    home: dict[bytes, int] = {}
    for r in records.read_ranges(common.admin_config(bootstrap), plan.source_topic, head):
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


def write_direct(spark: Any, plan: BackfillPlan, bootstrap: Kafka, options: dict[str, str] | None = None
                 ) -> tuple[int, str, list[int]]:
    """The direct copy in one pass (each slice resumes from its marker); returns how many new keys
    have records in more than one source partition (zero: the copy kept per-key order), how that was
    found, and :func:`write`'s counts.

    The pass reads and places every record of the snapshot, also those of rows committed before, so
    its checks see them all. By the record key it counts records off their key's home partition under
    the source's count (constant memory); only when there are some are the keys counted exactly. By a
    rule that computes the key (a value rule, ``window_key``, ``session_key``) it collects each task's
    key hashes (:func:`spark_apps.common.spanning_keys_of`)."""
    options = options or {}
    spread = None if plan.rule.is_record_key else common.key_spread(spark)
    away = common.register_functions(spark, plan, spread)
    counts = write(_sink_frame(direct_frame(spark, plan, bootstrap, options), plan), plan, bootstrap, options)
    if spread is not None:
        spanning = common.spanning_keys_of(spark, spread)
        if spanning is not None:
            return spanning, "the copy's key hashes per source partition", counts
    elif not int(away.value()):
        return 0, "no record off its key's home partition", counts
    return (keys_in_several_partitions(spark, plan, bootstrap, options), "an exact count of keys per source partition",
            counts)


def write_merged(spark: Any, plan: BackfillPlan, bootstrap: Kafka, options: dict[str, str] | None = None
                 ) -> list[int]:
    """The merged copy (each slice resumes from its marker); returns :func:`write`'s counts."""
    common.register_functions(spark, plan)
    return write(output_frame(planned_frame(spark, plan, bootstrap, options), plan), plan, bootstrap, options)


def run(spark: Any, plan: BackfillPlan, bootstrap: Kafka, *, kafka_options: dict[str, str] | None = None
        ) -> BackfillRun:
    """Write what is missing of ``plan`` to its target and dead-letter topics; returns the counts.

    First what earlier runs committed (:func:`committed`): nothing, part or all of the direct copy,
    or of the merged copy; anything else there is refused. Then the copy
    :func:`kafkaops.rekey.backfill.choose_copy` chooses (a catch-up pass by an exact count of keys
    spanning source partitions, a value rule by a sample of the source: :func:`sample_spans`). A direct
    copy checks as it writes that every new key's records come from one source partition
    (:func:`write_direct`); if one does not (:func:`kafkaops.rekey.backfill.after_direct_pass`), the
    direct copy cannot have kept its order: it is deleted from the target (DeleteRecords), then its
    markers, and the merged copy writes it again (a run stopped between the two finds markers of
    records no longer there: it forgets them and starts afresh)."""
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
    choice = backfill.choose_copy(plan, before,
                                  spanning_keys=lambda: keys_in_several_partitions(spark, plan, bootstrap, options),
                                  sample_spans=lambda: sample_spans(plan, bootstrap, options))
    log.info("backfill %s -> %s: %s", plan.source_topic, plan.target_topic, choice.describe())
    if choice.mode == backfill.MERGED:
        counts = write_merged(spark, plan, bootstrap, options)
    elif not choice.checked_by_pass:
        counts = write_direct(spark, plan, bootstrap, options)[2]
    else:
        spanning, how, counts = write_direct(spark, plan, bootstrap, options)
        choice = backfill.after_direct_pass(plan, spanning, how)
        if choice.rewrite:
            log.warning("backfill %s -> %s: %s; the direct copy cannot keep their order: deleting it from "
                        "the target and writing the merged copy", plan.source_topic, plan.target_topic, choice.reason)
            _truncate_output(plan, bootstrap, options)
            forget_markers(spark, plan, bootstrap, options)
            counts = write_merged(spark, plan, bootstrap, options)
    seconds = time.monotonic() - started
    result = BackfillRun(plan=plan.to_dict(), written=counts[1], mode=choice.mode, seconds=round(seconds, 3),
                         mode_reason=choice.reason, rewritten=choice.rewrite, already_written=before.records,
                         slices=counts[0], skipped=counts[2])
    log.info("backfill %s -> %s done in %.1f s, %s copy: %d record(s) written, %d committed before",
             plan.source_topic, plan.target_topic, seconds, choice.mode, counts[1], before.records)
    return result


def _truncate_output(plan: BackfillPlan, bootstrap: Kafka, options: dict[str, str]) -> None:
    from kafkaops.platform.kafka import connection, topics

    with connection.connect(common.admin_config(bootstrap)) as conn:
        topics.truncate_topics(conn, [plan.target_topic, plan.dead_letter_topic])


def verify(spark: Any, plan: BackfillPlan, bootstrap: Kafka) -> backfill.IntegrityReport:
    """The integrity report of ``plan``'s output, measured by Spark jobs (:mod:`spark_apps.backfill_verify`;
    the test harness's :func:`kafkaops.testing.integrity.check_integrity` measures the same on the driver)."""
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
    plans, several = BackfillPlan.many_from_json(text)  # several: one Spark start for all (a Streams application)
    kafka: Kafka = read_client_config(args.kafka_config) if args.kafka_config else args.bootstrap
    passes = []
    for plan in plans:
        written = run(spark, plan, kafka, kafka_options=options) if args.command == "run" else None
        report = None
        if args.command == "verify" or args.verify:
            report = verify(spark, plan.whole_copy(), kafka)  # a catch-up pass: every pass so far, as one copy
            log.info("integrity of %s: %s", plan.target_topic, "ok" if report.ok else "; ".join(report.failures))
        passes.append(PassResult(run=written, integrity=None if report is None else report.to_dict()))
    result = CopiesResult(tuple(passes)).to_dict() if several else passes[0].to_dict()
    if args.report:
        Path(args.report).write_text(json.dumps(result, indent=2, sort_keys=True))
    deliver_result(args, result)
    failed = [p for p in passes if p.integrity is not None and not p.integrity.get("ok")]
    return 3 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
