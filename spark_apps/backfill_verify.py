"""Verify a rekey backfill inside Spark: the invariants of the test harness's oracle
:func:`kafkaops.testing.integrity.check_integrity`, measured as Spark aggregations over the snapshot, the
target and the dead-letter topic, so that only counts and the first failures of each kind
(:data:`~kafkaops.rekey.backfill.SAMPLE`) reach the driver. The findings are worded by
:func:`~kafkaops.rekey.backfill.integrity_report`, so the report equals check_integrity's on the same
records (``tests/integration/rekey/test_backfill_verify.py`` holds them to it).

Reads are ``read_committed``: the records a consumer of the target sees.

* **The key re-check** stays independent of the JVM side that wrote the copy: the new key and reason
  code of every snapshot record come from :mod:`kafkaops.platform.keyrules` (Python) in a
  ``mapInArrow`` pass over Arrow batches, which also digests each value (:func:`~kafkaops.rekey.
  backfill.digest_halves`; the checksums are sums of the two 32-bit halves). The values go no
  further than that pass.
* **Order**: per new key, the planned position of each lineage (``row_number`` over the key by the
  copy's pass, the order timestamp: a running ``max`` of the source timestamp per key, source
  partition and pass, then source partition and offset) against the position found in the target (``row_number`` over the key
  by target partition and offset); a key breaks order where a position holds another lineage or
  nothing. A key is split when its records sit in more than one target partition.
* **Lineages**: a window over each lineage counts its copies (duplicates), a join with the snapshot
  finds lineages of no snapshot record (foreign records) and, as an anti join, snapshot records
  that reached neither topic (gaps).
* **Placement**: ``kafka_key_hash(place) % N`` (jvm/spark-udf, Kafka's own ``Utils.murmur2``) against
  the record's target partition, ``place`` being the key the record is placed by, read from the key it was
  written with by the Python key rules (:func:`kafkaops.platform.keyrules.placement_key`: the store key of
  a ``window_key``/``session_key`` copy, which writes the whole changelog key; else the written key). Order,
  split keys and the keys per partition are per placement key too.
* **Headers**: the lineage and reason code are a record's *last* headers of those names: the copy writes
  them after the source record's own headers (a topic copied twice carries the first copy's lineage too).

**Proof first, the full check only to name what failed.** The joins and windows above cost several times
the copy itself. :func:`proven` shows a clean copy clean without them (:func:`check` runs it first):

* every snapshot record becomes one element (its lineage; target or dead letter; the key the copy writes
  on it, or its reason code; its value digest), and so does every output record (lineage header; its topic; its key, or
  its reason-code header; its value digest). The two multisets are compared by their sizes and by sums
  of two 64-bit hashes of the elements (:func:`_element_sums`). Equal sums say, but for a chance of about
  2^-64 per accidental match, that the output holds every snapshot record exactly once, in the right
  topic, with the Python key rules' key or reason code and the same value: no gap, duplicate, foreign
  record, wrong key, wrong code or dead letter in the wrong place;
* **placement** as above, counted without a join: with every target record on its key's home partition,
  no key is split;
* **order** of a direct copy: in each target partition, each key's records by target offset come from
  one source partition at rising offsets (a window over the target's small columns; a copy in passes
  keeps that order too, a pass starts where the last ended). Where that does not hold (a merged copy,
  or a key out of order), every (key, position, lineage) of the planned order and of the target's order
  is summed as the elements are (:func:`_sequence_sums`): equal sums, equal sequences, without the
  full check's join of the two.

Any of these not shown, and :func:`check` runs the full check, whose findings name the failures; a report
the proof gives equals the full check's on the same records (the tests compare them).
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from kafkaops.platform import keyrules
from kafkaops.rekey import backfill
from kafkaops.rekey.backfill import (CODE_HEADER, LINEAGE_HEADER, SAMPLE, BackfillPlan, IntegrityFindings,
                                     IntegrityReport, PartitionIntegrity)
from spark_apps import common
from spark_apps.common import READ_COMMITTED, Kafka

#: Each snapshot record after the Python pass: its new key (the key it is placed and ordered by), the key
#: the copy writes on it when it has one (``written_key``: the record's own for ``record_key``, ``window_key``
#: and ``session_key``, the new key for a value rule) and reason code by the Python key rules, and the
#: halves of its value digest.
SOURCE_SCHEMA = ("partition int, offset long, ts long, new_key binary, written_key binary, code string, "
                 "digest_high long, digest_low long")
#: Each target and dead-letter record after the Python pass (its value digested and dropped), with ``place``,
#: the key it is placed and ordered by, read from its key by the Python key rules
#: (:func:`kafkaops.platform.keyrules.placement_key`: the store key of a changelog key, else the key).
OUTPUT_SCHEMA = ("topic string, partition int, offset long, key binary, place binary, lineage string, code string, "
                 "digest_high long, digest_low long")
#: The columns of :data:`OUTPUT_SCHEMA`, what the full check reads of :func:`elements`' rows (with ``is_target``).
OUTPUT_SCHEMA_COLUMNS = tuple(c.split()[0] for c in OUTPUT_SCHEMA.split(", "))


def verify(spark: Any, plan: BackfillPlan, kafka: Kafka) -> IntegrityReport:
    """The integrity report of ``plan``'s output in ``kafka`` (a librdkafka config or bootstrap servers)."""
    return check(spark, plan, read_source(spark, plan, kafka), read_output(spark, plan, kafka))


def read_source(spark: Any, plan: BackfillPlan, kafka: Kafka) -> Any:
    """The snapshot as ``partition, offset, ts, key, value`` (``ts`` in epoch milliseconds), read_committed."""
    return common.snapshot(spark, plan, kafka, READ_COMMITTED)


def read_output(spark: Any, plan: BackfillPlan, kafka: Kafka) -> Any:
    """The target and dead-letter topics as ``topic, partition, offset, key, value, lineage, code``
    (the last lineage and reason-code headers as text, the copy's own, after the source record's headers;
    null where a record lacks one), read_committed."""
    return common.output(spark, plan, kafka).select(
        "topic", "partition", "offset", "key", "value", common.header(LINEAGE_HEADER).cast("string").alias("lineage"),
        common.header(CODE_HEADER).cast("string").alias("code"))


# -- the Python passes (run in Spark's Python workers) ----------------------------------------------------

def rekeyed(rule: str) -> Any:
    """The ``mapInArrow`` function of the snapshot (:data:`SOURCE_SCHEMA`) under key rule ``rule``."""

    def rekey(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        key_rule = keyrules.rule_of(rule)
        for batch in batches:
            keys, written, codes, high, low = [], [], [], [], []
            for key, value in zip(batch.column("key").to_pylist(), batch.column("value").to_pylist()):
                found = keyrules.extract(key, value, key_rule)
                keys.append(found.key)
                written.append(None if found.key is None else keyrules.written_key(key, found.key, key_rule))
                codes.append(found.code)
                h, lo = backfill.digest_halves(value)
                high.append(h)
                low.append(lo)
            yield pa.RecordBatch.from_arrays(
                [batch.column("partition"), batch.column("offset"), batch.column("ts"), pa.array(keys, pa.binary()),
                 pa.array(written, pa.binary()), pa.array(codes, pa.string()), pa.array(high, pa.int64()),
                 pa.array(low, pa.int64())],
                names=["partition", "offset", "ts", "new_key", "written_key", "code", "digest_high", "digest_low"])

    return rekey


def digested(rule: str) -> Any:
    """The ``mapInArrow`` function of the output (:data:`OUTPUT_SCHEMA`) under key rule ``rule``: each
    value's digest halves, and each record's placement key."""

    def digest(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        key_rule = keyrules.rule_of(rule)
        for batch in batches:
            halves = [backfill.digest_halves(v) for v in batch.column("value").to_pylist()]
            place = (pa.array([keyrules.placement_key(k, key_rule) for k in batch.column("key").to_pylist()],
                              pa.binary()) if key_rule.keeps_record_key and not key_rule.is_record_key
                     else batch.column("key"))
            yield pa.RecordBatch.from_arrays(
                [batch.column(c) for c in ("topic", "partition", "offset", "key")] + [place]
                + [batch.column(c) for c in ("lineage", "code")]
                + [pa.array([h for h, _ in halves], pa.int64()), pa.array([lo for _, lo in halves], pa.int64())],
                names=["topic", "partition", "offset", "key", "place", "lineage", "code", "digest_high", "digest_low"])

    return digest


# -- the checks --------------------------------------------------------------------------------------------

def check(spark: Any, plan: BackfillPlan, source: Any, output: Any, *, proof: bool = True) -> IntegrityReport:
    """The integrity report of ``source`` (``partition, offset, ts, key, value``) copied into ``output``
    (``topic, partition, offset, key, value, lineage, code``), as Spark jobs: :func:`proven` first, the
    full check when that does not show the copy clean (at once without ``proof``: the benchmark's
    reference)."""
    from pyspark import StorageLevel

    n = plan.target_partitions
    common.register_key_hash(spark, n)
    out = elements(plan, output).persist(StorageLevel.MEMORY_AND_DISK)
    cached = [out]
    try:
        found = proven(plan, source, out) if proof else None
        if found is not None:
            return backfill.integrity_report(plan, found)
        # not proven: the full check, whose findings name what failed
        snap = _snapshot(plan, source).persist(StorageLevel.MEMORY_AND_DISK)
        cached.append(snap)
        out = out.select(*OUTPUT_SCHEMA_COLUMNS, "is_target")
        per_key, positions = _keys(snap, out)
        keyed = (per_key.persist(StorageLevel.MEMORY_AND_DISK), positions)
        cached.append(per_key)
        records = _records(snap, out, keyed, n).persist(StorageLevel.MEMORY_AND_DISK)
        cached.append(records)
        return backfill.integrity_report(plan, _findings(plan, snap, out, keyed, records))
    finally:
        for frame in cached:
            frame.unpersist()


def _snapshot(plan: BackfillPlan, source: Any) -> Any:
    """The snapshot after the Python pass (:data:`SOURCE_SCHEMA`) with each record's ``lineage``, its
    ``copy_pass`` and its ``order_ts``: the running maximum of the source timestamp per source partition,
    new key and pass (a copy in passes, BackfillPlan.pass_starts: each pass has a clock of its own and
    comes after the last)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    copy_pass = F.lit(0)
    for p, start in plan.pass_starts:
        copy_pass = copy_pass + F.when((F.col("partition") == F.lit(p)) & (F.col("offset") >= F.lit(start)),
                                       F.lit(1)).otherwise(F.lit(0))
    clock = (Window.partitionBy("partition", "new_key", "copy_pass").orderBy("offset")
             .rowsBetween(Window.unboundedPreceding, 0))
    return (source.select("partition", "offset", "ts", "key", "value")
            .mapInArrow(rekeyed(plan.key_rule), SOURCE_SCHEMA)
            .withColumn("copy_pass", copy_pass)
            .select("*", common.lineage(plan.source_topic, F.col("partition"), F.col("offset")).alias("lineage"),
                    F.max("ts").over(clock).alias("order_ts")))


def _planned_order() -> Any:
    """The order the copy writes each new key's records in (over :func:`_snapshot`'s rows)."""
    from pyspark.sql import Window

    return Window.partitionBy("new_key").orderBy("copy_pass", "order_ts", "partition", "offset")


def _found_order() -> Any:
    """The order a consumer of the target reads each key's records in (over the output's rows), by the
    key each record is placed by."""
    from pyspark.sql import Window

    return Window.partitionBy("place").orderBy("partition", "offset")


def elements(plan: BackfillPlan, output: Any) -> Any:
    """``output`` (``topic, partition, offset, key, value, lineage, code``) digested (:data:`OUTPUT_SCHEMA`),
    with ``is_target`` and each record's element of :func:`proven`'s multiset (:data:`ELEMENT_SUMS`)."""
    from pyspark.sql import functions as F

    col = F.col
    digests = (output.select("topic", "partition", "offset", "key", "value", "lineage", "code")
               .mapInArrow(digested(plan.key_rule), OUTPUT_SCHEMA)
               .withColumn("is_target", col("topic") == F.lit(plan.target_topic)))
    # a dead letter without a code header matches no snapshot record's element
    return digests.select("*", *_element_sums(col("lineage"), ~col("is_target"), col("key"),
                                              F.coalesce("code", F.lit("\u0000none")), col("digest_high"),
                                              col("digest_low")))


def proven(plan: BackfillPlan, source: Any, out: Any) -> IntegrityFindings | None:
    """The findings of a clean copy of ``source`` into ``out`` (the output's :func:`elements`), shown
    without a join (the module's "Proof first"), or None when the copy is not shown clean this way: then
    the full check says what is wrong. The output's checks come first: a damaged output costs no pass over
    the source. Needs ``kafka_key_hash`` registered."""
    from pyspark.sql import functions as F

    col, n = F.col, plan.target_partitions
    home = F.call_function(common.KAFKA_KEY_HASH, col("place"), col("partition")) % F.lit(n)
    parts = out.groupBy("topic", "partition", "is_target").agg(
        F.count(F.lit(1)).alias("records"),
        F.sum("digest_high").alias("high"), F.sum("digest_low").alias("low"),
        _count(col("lineage").isNull()).alias("no_lineage"),
        _count(col("is_target") & (col("place").isNull() | (home != col("partition")))).alias("off_home"),
        *[F.sum(c).alias(c) for c in ELEMENT_SUMS]).collect()
    if any(r["no_lineage"] or r["off_home"] or (r["is_target"] and not 0 <= r["partition"] < n) for r in parts):
        return None
    keys, direct = _keys_and_order(out)
    parts = [{**r.asDict(), "keys": keys.get((r["topic"], r["partition"]), 0)} for r in parts]
    snap = _snapshot(plan, source)
    elements = _element_sums(col("lineage"), col("new_key").isNull(), col("written_key"),
                             F.coalesce("code", F.lit("")), col("digest_high"), col("digest_low"))
    sums = [F.sum(c).alias(c) for c in ELEMENT_SUMS]
    if direct:  # the order is shown: the snapshot's elements only (Spark drops the unused clock window)
        codes = snap.select("new_key", "code", "digest_high", "digest_low", *elements)
    else:  # a merged copy, or out of order: each key's planned sequence against the one found
        positions = _sequence_sums(col("new_key"), col("lineage"), F.row_number().over(_planned_order()))
        codes = snap.select("new_key", "code", "digest_high", "digest_low", *elements, *positions)
        sums += [F.sum(F.when(col("new_key").isNotNull(), col(c))).alias(c) for c in SEQUENCE_SUMS]
    codes = codes.groupBy(col("new_key").isNull().alias("dead"), "code").agg(
        F.count(F.lit(1)).alias("n"), F.sum("digest_high").alias("high"), F.sum("digest_low").alias("low"),
        *sums).collect()
    if not _same_elements(codes, parts):
        return None
    if not direct:
        found = out.where(col("is_target")).select(*_sequence_sums(
            col("place"), col("lineage"), F.row_number().over(_found_order())))
        got = found.agg(*[F.sum(c).alias(c) for c in SEQUENCE_SUMS]).first()
        if any((sum(r[c] or 0 for r in codes)) != (got[c] or 0) for c in SEQUENCE_SUMS):
            return None
    return _clean_findings(plan, codes, parts)


#: The columns of :func:`_sequence_sums`: a key's record at a position, summed as :data:`ELEMENT_SUMS` are.
SEQUENCE_SUMS = ("s1_high", "s1_low", "s2_high", "s2_low")


def _sequence_sums(key: Any, lineage: Any, position: Any) -> list[Any]:
    """(key, position, lineage) as the halves of two 64-bit hashes (:data:`SEQUENCE_SUMS`): summed over the
    planned order and over the target, equal sums say that every key holds the same lineages at the same
    positions (:func:`_keys`' check, without its join)."""
    from pyspark.sql import functions as F

    return _hash_halves(SEQUENCE_SUMS, [F.lit("kafkaops.sequence")], [F.lit("kafkaops.sequence.2")],
                        [key, position.cast("long"), lineage.cast("string")])


def _hash_halves(names: tuple[str, ...], first_salt: list[Any], second_salt: list[Any], parts: list[Any]) -> list[Any]:
    """Two 64-bit hashes (``xxhash64``) of ``parts``, each after its salt columns, as four columns
    ``names``: each hash's high and low 32 bits, so that sums of them do not overflow a long."""
    from pyspark.sql import functions as F

    out = []
    for i, salt in enumerate((first_salt, second_salt)):
        h = F.xxhash64(*salt, *parts)
        out += [F.shiftrightunsigned(h, 32).alias(names[2 * i]), h.bitwiseAND(F.lit(0xFFFFFFFF)).alias(names[2 * i + 1])]
    return out


#: The columns of :func:`_element_sums`: two 64-bit hashes of an element, each summed as two 32-bit halves
#: (a sum of 64-bit values would overflow a long; of 32-bit ones, not before 2^31 records).
ELEMENT_SUMS = ("e1_high", "e1_low", "e2_high", "e2_low")


def _element_sums(lineage: Any, dead: Any, key: Any, code: Any, high: Any, low: Any) -> list[Any]:
    """One record as an element of the multisets :func:`proven` compares (lineage; dead letter or not;
    the key of a target record, the reason code of a dead letter; its value digest), as the halves of two
    independent 64-bit hashes (:data:`ELEMENT_SUMS`)."""
    from pyspark.sql import functions as F

    said = F.when(dead, code.cast("binary")).otherwise(key)
    return _hash_halves(ELEMENT_SUMS, [], [F.lit("kafkaops.element")],
                        [lineage.cast("string"), dead.cast("boolean"), said, high, low])


def _same_elements(codes: list[Any], parts: list[Any]) -> bool:
    """Whether the snapshot (``codes``: :func:`proven`'s rows per dead-or-not and reason code) and the
    output (``parts``: its rows per topic and partition) hold the same elements: as many of each kind
    (target, dead letter) and the same :data:`ELEMENT_SUMS`."""
    keyed = sum(r["n"] for r in codes if not r["dead"])
    dead = sum(r["n"] for r in codes if r["dead"])
    if (keyed, dead) != (sum(r["records"] for r in parts if r["is_target"]),
                         sum(r["records"] for r in parts if not r["is_target"])):
        return False
    return all(sum(r[c] or 0 for r in codes) == sum(r[c] or 0 for r in parts) for c in ELEMENT_SUMS)


def _keys_and_order(out: Any) -> tuple[dict[tuple[str, int], int], bool]:
    """The keys of each output partition (a null key counting as one), and whether each key, in each target
    partition, has all its records from one source partition at rising offsets by target offset: a direct
    copy in order (a copy in passes keeps that order too: a pass starts where the last ended). False for a
    merged copy or a key out of order, which :func:`_sequence_sums` then judges. One window, no join."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    col = F.col
    lineage = common.lineage_parts(col("lineage"))
    by_key = Window.partitionBy("topic", "partition", "place").orderBy("offset")
    steps = out.select("topic", "partition", "place", "offset", "is_target", lineage[1].try_cast("int").alias("from_partition"),
                       lineage[2].try_cast("long").alias("from_offset"))
    steps = steps.select("*", F.lag("from_partition").over(by_key).alias("before_partition"),
                         F.lag("from_offset").over(by_key).alias("before_offset"))
    broken = col("is_target") & col("before_partition").isNotNull() & (
        ~col("from_partition").eqNullSafe(col("before_partition")) | col("from_offset").isNull()
        | (col("from_offset") <= col("before_offset")))
    rows = steps.groupBy("topic", "partition").agg(_count(col("before_partition").isNull()).alias("keys"),
                                                   _count(broken).alias("broken")).collect()
    return {(r["topic"], r["partition"]): r["keys"] for r in rows}, not any(r["broken"] for r in rows)


def _clean_findings(plan: BackfillPlan, codes: list[Any], parts: list[Any]) -> IntegrityFindings:
    """:func:`_findings` of a copy :func:`proven` showed clean: the counts, no failure."""
    by_partition = {(r["topic"], r["partition"]): r for r in parts}

    def row(topic: str, partition: int) -> PartitionIntegrity:
        r = by_partition.get((topic, partition))
        return PartitionIntegrity(topic, partition, r["records"] if r else 0, r["keys"] if r else 0, 0, 0, 0, 0, 0)

    dead_parts = sorted(p for t, p in by_partition if t == plan.dead_letter_topic)
    return IntegrityFindings(
        source_records=sum(r["n"] for r in codes),
        target_records=sum(r["records"] for r in parts if r["is_target"]),
        dead_letters=sum(r["records"] for r in parts if not r["is_target"]),
        expected_dead_letters=sum(r["n"] for r in codes if r["dead"]),
        source_checksum=backfill.checksum_of_sums(sum(r["high"] or 0 for r in codes), sum(r["low"] or 0 for r in codes)),
        output_checksum=backfill.checksum_of_sums(sum(r["high"] or 0 for r in parts), sum(r["low"] or 0 for r in parts)),
        partitions=tuple([row(plan.target_topic, p) for p in range(plan.target_partitions)]
                         + [row(plan.dead_letter_topic, p) for p in dead_parts or [0]]),
        dead_letter_codes={r["code"] or "": r["n"] for r in codes if r["dead"]})


def _keys(snap: Any, out: Any) -> Any:
    """Per new key (planned or found in the target): ``n_want`` planned and ``n_got`` found records,
    ``first_bad`` (1-based position of the first difference, null when none), ``low``/``high`` target
    partition; and the positions themselves (``positions``: key, pos, want, got) for the example."""
    from pyspark.sql import functions as F

    planned = (snap.where(F.col("new_key").isNotNull())
               .select(F.col("new_key").alias("key"), F.col("lineage").alias("want"),
                       F.row_number().over(_planned_order()).alias("pos")))
    found = (out.where(F.col("is_target") & F.col("place").isNotNull())
             .select(F.col("place").alias("key"), "partition", F.coalesce("lineage", F.lit("?")).alias("got"),
                     F.row_number().over(_found_order()).alias("pos")))
    positions = planned.join(found, ["key", "pos"], "full")
    differ = F.col("want").isNull() | F.col("got").isNull() | (F.col("want") != F.col("got"))
    per_key = positions.groupBy("key").agg(
        F.count("want").alias("n_want"), F.count("got").alias("n_got"),
        F.min(F.when(differ, F.col("pos"))).alias("first_bad"),
        F.min("partition").alias("low"), F.max("partition").alias("high"))
    return per_key, positions


def _records(snap: Any, out: Any, keyed: Any, n: int) -> Any:
    """Each output record with what the checks need: its snapshot record (``s_found``, ``s_key``,
    ``s_code``, ``s_dead``), its lineage's copies (``seen``; ``first``: the first copy, ``first_here``:
    the first in its topic), its key's ``split``/``broken`` and whether it sits off its key's partition."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    per_key, _ = keyed
    origin = snap.select("lineage", F.col("written_key").alias("s_key"), F.col("code").alias("s_code"),
                         F.col("new_key").isNull().alias("s_dead"), F.lit(True).alias("s_found"))
    lineage = Window.partitionBy("lineage")
    flags = per_key.select(F.col("key").alias("place"), (F.col("low") != F.col("high")).alias("split"),
                           F.col("first_bad").isNotNull().alias("broken"))
    home = F.call_function(common.KAFKA_KEY_HASH, F.col("place"), F.col("partition")) % F.lit(n)
    return (out.join(origin, "lineage", "left")
            .select("*", F.count(F.lit(1)).over(lineage).alias("seen"),
                    F.row_number().over(lineage.orderBy("topic", "partition", "offset")).alias("copy"),
                    F.row_number().over(Window.partitionBy("lineage", "is_target").orderBy("partition", "offset"))
                    .alias("copy_here"))
            .join(flags, "place", "left")
            .select("*", (F.col("lineage").isNotNull() & (F.col("copy") == 1)).alias("first"),
                    (F.col("lineage").isNotNull() & (F.col("copy_here") == 1)).alias("first_here"),
                    (F.col("is_target") & (F.col("place").isNull() | (home != F.col("partition")))).alias("off_home"),
                    F.coalesce("s_found", F.lit(False)).alias("known"),
                    F.coalesce(F.col("s_found") & F.col("s_dead"), F.lit(False)).alias("dead_in_source")))


def _count(condition: Any) -> Any:
    from pyspark.sql import functions as F

    return F.sum(F.when(condition, 1).otherwise(0))


def _at(row: Any) -> str:
    return f"{row['topic']}-{row['partition']}@{row['offset']}"


def _b(value: Any) -> bytes | None:
    return None if value is None else bytes(value)


def _findings(plan: BackfillPlan, snap: Any, out: Any, keyed: Any, records: Any) -> IntegrityFindings:
    """What :func:`~kafkaops.rekey.backfill.integrity_report` words: the counts of every check and, for
    each check that fails, its first failures (the same fields ``check_integrity`` fills)."""
    per_key, _ = keyed
    codes = _source_codes(snap)
    dead_codes = {r["code"] or "": r["n"] for r in codes if r["dead"]}
    rows = _partition_rows(plan, records)
    total = _totals(records, plan.target_partitions)
    order_breaks, split_keys = _key_failures(per_key)
    lost = _lost(snap, out)
    n_lost = lost.count()
    found = {**_lineage_examples(records, total, lost, n_lost),
             **_key_examples(plan, records, keyed, any(p.misplaced for p in rows), split_keys, order_breaks)}
    return IntegrityFindings(
        source_records=sum(r["n"] for r in codes), target_records=total["target"], dead_letters=total["dead"],
        expected_dead_letters=sum(dead_codes.values()),
        source_checksum=backfill.checksum_of_sums(sum(r["high"] or 0 for r in codes), sum(r["low"] or 0 for r in codes)),
        output_checksum=backfill.checksum_of_sums(total["high"], total["low"]),
        partitions=rows, dead_letter_codes=dead_codes, no_lineage=total["no_lineage"],
        extra_partitions=tuple(total["extra"]), duplicates=total["duplicates"], unknown=total["unknown"],
        lost=n_lost, wrong_dead=total["wrong_dead"], dead_in_target=total["dead_in_target"],
        wrong_codes=total["wrong_codes"], wrong_keys=total["wrong_keys"], split_keys=split_keys,
        order_breaks=order_breaks, **found)


def _source_codes(snap: Any) -> list[Any]:
    """The snapshot per reason code (``dead``: no new key; ``code`` null where keyed): its records ``n``
    and the sums of its digest halves ``high``/``low``. Every snapshot record is in exactly one row."""
    from pyspark.sql import functions as F

    return snap.groupBy(F.col("new_key").isNull().alias("dead"), "code").agg(
        F.count(F.lit(1)).alias("n"), F.sum("digest_high").alias("high"), F.sum("digest_low").alias("low")).collect()


def _partition_rows(plan: BackfillPlan, records: Any) -> tuple[PartitionIntegrity, ...]:
    """One row per target partition ``0..N-1`` (empty ones too) and per dead-letter partition found
    (partition 0 when none): counted first per key, then per partition, a null key counting as one key
    (as in Python). Placement, split keys and order are target checks: zero on dead-letter rows."""
    from pyspark.sql import functions as F

    col = F.col
    by_key = records.groupBy("topic", "partition", "is_target", "place").agg(
        F.count(F.lit(1)).alias("records"), _count(col("off_home")).alias("misplaced"),
        F.max(F.coalesce("split", F.lit(False))).alias("split"), F.max(F.coalesce("broken", F.lit(False))).alias("broken"),
        _count(col("lineage").isNotNull() & (col("seen") > 1)).alias("duplicates"),
        _count(col("lineage").isNotNull() & ~col("known")).alias("unknown"))
    parts = {(r["topic"], r["partition"]): r for r in by_key.groupBy("topic", "partition", "is_target").agg(
        F.sum("records").alias("records"), F.count(F.lit(1)).alias("keys"), F.sum("misplaced").alias("misplaced"),
        _count(col("split") & col("place").isNotNull()).alias("split_keys"),
        _count(col("broken") & col("place").isNotNull()).alias("order_breaks"),
        F.sum("duplicates").alias("duplicates"), F.sum("unknown").alias("unknown")).collect()}

    def row(topic: str, partition: int, is_target: bool) -> PartitionIntegrity:
        r = parts.get((topic, partition))
        if r is None:
            return PartitionIntegrity(topic, partition, 0, 0, 0, 0, 0, 0, 0)
        return PartitionIntegrity(topic=topic, partition=partition, records=r["records"], keys=r["keys"],
                                  misplaced=r["misplaced"] if is_target else 0,
                                  split_keys=r["split_keys"] if is_target else 0,
                                  order_breaks=r["order_breaks"] if is_target else 0,
                                  duplicate_lineages=r["duplicates"], unknown_lineages=r["unknown"])

    dead_parts = sorted(p for t, p in parts if t == plan.dead_letter_topic)
    return tuple([row(plan.target_topic, p, True) for p in range(plan.target_partitions)]
                 + [row(plan.dead_letter_topic, p, False) for p in dead_parts or [0]])


def _totals(records: Any, n: int) -> dict[str, Any]:
    """The whole output's counts in one aggregation (a lineage counted once, at its first copy, or at its
    first copy in a topic for the dead-letter checks), ``extra``: the target partitions outside ``0..n-1``.
    A sum over no record is 0, not null."""
    from pyspark.sql import functions as F

    col, target = F.col, F.col("is_target")
    total = records.agg(
        _count(target).alias("target"), _count(~target).alias("dead"),
        F.sum("digest_high").alias("high"), F.sum("digest_low").alias("low"),
        _count(col("lineage").isNull()).alias("no_lineage"),
        _count(col("first") & (col("seen") > 1)).alias("duplicates"),
        _count(col("first") & ~col("known")).alias("unknown"),
        _count(col("first_here") & ~target & ~col("dead_in_source")).alias("wrong_dead"),
        _count(col("first_here") & target & col("dead_in_source")).alias("dead_in_target"),
        _count(_wrong_code()).alias("wrong_codes"),
        _count(_wrong_key()).alias("wrong_keys"),
        F.sort_array(F.collect_set(F.when(target & ((col("partition") >= n) | (col("partition") < 0)),
                                          col("partition")))).alias("extra"),
    ).first().asDict()
    return {k: 0 if v is None else v for k, v in total.items()}


def _wrong_code() -> Any:
    """A dead letter of a dead snapshot record whose reason code differs from the Python key rules'."""
    from pyspark.sql import functions as F

    return ~F.col("is_target") & F.col("dead_in_source") & ~F.col("code").eqNullSafe(F.coalesce("s_code", F.lit("")))


def _wrong_key() -> Any:
    """A target record of a known lineage whose key differs from the Python key rules' new key."""
    from pyspark.sql import functions as F

    return F.col("is_target") & F.col("known") & ~F.col("key").eqNullSafe(F.col("s_key"))


def _key_failures(per_key: Any) -> tuple[int, int]:
    """``(order_breaks, split_keys)``: the keys whose target order differs from the plan somewhere, and
    the keys found in more than one target partition."""
    from pyspark.sql import functions as F

    counts = per_key.agg(_count(F.col("first_bad").isNotNull()).alias("broken"),
                         _count(F.col("low") != F.col("high")).alias("split")).first()
    return counts[0] or 0, counts[1] or 0


def _lost(snap: Any, out: Any) -> Any:
    """The snapshot records whose lineage reached neither the target nor the dead-letter topic (gaps)."""
    from pyspark.sql import functions as F

    return snap.join(out.where(F.col("lineage").isNotNull()).select("lineage"), "lineage", "left_anti")


def _first(frame: Any, *order: Any) -> Any:
    return frame.orderBy(*order).first()


def _lineage_examples(records: Any, total: dict[str, Any], lost: Any, n_lost: int) -> dict[str, Any]:
    """The first failures of the lineage checks that fail (absent keys where a check passes): up to
    :data:`SAMPLE` lineages each, in lineage order (lost ones in snapshot order)."""
    from pyspark.sql import functions as F

    col, target = F.col, F.col("is_target")

    def lineages(condition: Any) -> tuple[str, ...]:
        return tuple(r["lineage"] for r in records.where(condition).select("lineage").distinct()
                     .orderBy("lineage").limit(SAMPLE).collect())

    found: dict[str, Any] = {}
    if total["no_lineage"]:
        found["no_lineage_at"] = _at(_first(records.where(col("lineage").isNull()), target.desc(), "partition", "offset"))
    if total["duplicates"]:
        found["duplicate_sample"] = lineages(col("first") & (col("seen") > 1))
    if total["unknown"]:
        found["unknown_sample"] = lineages(col("first") & ~col("known"))
    if n_lost:
        found["lost_sample"] = tuple(r["lineage"] for r in lost.orderBy("partition", "offset").limit(SAMPLE).collect())
    if total["wrong_dead"]:
        found["wrong_dead_sample"] = lineages(col("first_here") & ~target & ~col("dead_in_source"))
    if total["dead_in_target"]:
        found["dead_in_target_sample"] = lineages(col("first_here") & target & col("dead_in_source"))
    if total["wrong_codes"]:
        r = _first(records.where(_wrong_code()), "partition", "offset")
        found["wrong_code"] = (_at(r), r["lineage"], r["code"], r["s_code"] or "")
    if total["wrong_keys"]:
        r = _first(records.where(_wrong_key()), "partition", "offset")
        found["wrong_key"] = (_at(r), _b(r["key"]), _b(r["s_key"]))
    return found


def _key_examples(plan: BackfillPlan, records: Any, keyed: Any, misplaced: bool, split_keys: int,
                  order_breaks: int) -> dict[str, Any]:
    """The first failure of each per-key check that fails (absent keys where a check passes): the first
    misplaced record with its home partition, the least split key with its partitions, and the least key
    out of order with its first differing position (0-based), found and planned lineage and counts."""
    from pyspark.sql import functions as F

    col, n = F.col, plan.target_partitions
    per_key, positions = keyed
    found: dict[str, Any] = {}
    if misplaced:
        r = _first(records.where(col("off_home")), "partition", "offset")
        key = _b(r["place"])
        found["misplaced"] = (key, _at(r), None if key is None else backfill.target_partition(key, n))
    if split_keys:
        k = _b(_first(per_key.where(col("low") != col("high")), "key")["key"])
        found["split"] = (k, tuple(r["partition"] for r in records.where(col("is_target") & (col("place") == F.lit(k)))
                                       .select("partition").distinct().orderBy("partition").collect()))
    if order_breaks:
        k = _first(per_key.where(col("first_bad").isNotNull()), "key")
        at = positions.where((col("key") == F.lit(_b(k["key"]))) & (col("pos") == k["first_bad"])).first()
        found["order"] = (_b(k["key"]), k["first_bad"] - 1, at["got"], at["want"], k["n_got"], k["n_want"])
    return found
