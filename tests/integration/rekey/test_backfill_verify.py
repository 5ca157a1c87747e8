"""The backfill's verify as Spark jobs (spark_apps/backfill_verify.py) against check_integrity, the same
checks over records collected to Python: on records made in Python (every kind of damage, no broker),
the two reports are equal, failure texts included; on a real target topic with one failure planted per
test (a duplicate, a gap, a record on the wrong partition, one out of order, foreign records, a wrong
reason code), the Spark report names it and equals check_integrity's on the records read back with
confluent-kafka. One SparkSession and one broker per module."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest
from confluent_kafka import Producer

from kafkaops.cli import datagen
from kafkaops.platform import provision, waits
from kafkaops.platform.kafka import connection
from kafkaops.platform.partitioner import partition_for
from kafkaops.rekey import backfill
from kafkaops.rekey.backfill import BackfillPlan
from kafkaops.testing.integrity import OutputRecord, SourceRecord, check_integrity
from tests.integration.rekey.conftest import seed_source
from tests.integration.rekey.test_backfill import plan_for, read_back
from tests.unit.rekey.test_backfill import PLAN, WINDOWED, copy, damaged, source_records, window_records

pytestmark = pytest.mark.integration

SOURCE_COLUMNS = "partition int, offset long, ts long, key binary, value binary"
OUTPUT_COLUMNS = "topic string, partition int, offset long, key binary, value binary, lineage string, code string"


def frames(spark, source: list[SourceRecord], target: list[OutputRecord], dead_letters: list[OutputRecord]):
    """The snapshot and the output as the verify reads them from Kafka (:data:`SOURCE_COLUMNS`,
    :data:`OUTPUT_COLUMNS`), made from records in Python."""
    src = spark.createDataFrame([(r.partition, r.offset, r.timestamp, r.key, r.value) for r in source], SOURCE_COLUMNS)
    out = spark.createDataFrame([(r.topic, r.partition, r.offset, r.key, r.value, r.lineage, r.code)
                                 for r in (*target, *dead_letters)], OUTPUT_COLUMNS)
    return src, out


def spark_report(spark, plan: BackfillPlan, source: list[SourceRecord], target: list[OutputRecord],
                 dead_letters: list[OutputRecord]) -> backfill.IntegrityReport:
    from spark_apps import backfill_verify

    return backfill_verify.check(spark, plan, *frames(spark, source, target, dead_letters))


def spark_proof(spark, plan: BackfillPlan, source: list[SourceRecord], target: list[OutputRecord],
                dead_letters: list[OutputRecord]) -> backfill.IntegrityFindings | None:
    """What backfill_verify.proven, the verify's cheap path, makes of the same records: findings of a copy
    it shows clean, None when only the full check can judge."""
    from spark_apps import backfill_verify, common

    common.register_key_hash(spark, plan.target_partitions)
    src, out = frames(spark, source, target, dead_letters)
    return backfill_verify.proven(plan, src, backfill_verify.elements(plan, out))


def more_damage(kind: str, source: list[SourceRecord] | None = None) -> tuple[list[OutputRecord], list[OutputRecord]]:
    """Damage that tests/unit/rekey's ``damaged`` does not make, to a copy of ``source``."""
    target, dlq = copy(source_records() if source is None else source)
    if kind == "no lineage":
        target.append(replace(target[0], offset=30_000, lineage=None))
        dlq.append(replace(dlq[0], offset=30_000, lineage=None))
    elif kind == "unknown lineage":
        target.append(replace(target[1], offset=30_001, lineage="orders/0/99999"))
    elif kind == "beyond the plan":
        target.append(replace(target[2], partition=7, offset=0))
    elif kind == "keyed to the dead letters":
        moved = target.pop(4)
        dlq.append(replace(moved, topic=PLAN.dead_letter_topic, partition=0, offset=40_000, key=None, code="NOT_JSON"))
    elif kind == "dead letter to the target":
        moved = dlq.pop(1)
        target.append(replace(moved, topic=PLAN.target_topic, partition=3, offset=40_001, key=b"x", code=None))
    elif kind == "wrong key":
        r = target[6]
        target[6] = replace(r, key=r.key + b"!")
    elif kind == "split and out of order":  # a key's first record moved to the end of another partition
        r = target.pop(0)
        target.append(replace(r, partition=(r.partition + 1) % 6, offset=50_000))
    elif kind == "second dead-letter partition":
        dlq.append(replace(dlq.pop(), partition=1, offset=0))
    elif kind == "nothing copied":
        target, dlq = [], []
    return target, dlq


DAMAGED = ["none", "duplicate", "lost", "misplaced", "reordered", "changed value", "dead letter lost", "wrong code",
           "no code"]
MORE = ["no lineage", "unknown lineage", "beyond the plan", "keyed to the dead letters", "dead letter to the target",
        "wrong key", "split and out of order", "second dead-letter partition", "nothing copied"]


@pytest.mark.parametrize("kind", DAMAGED + MORE)
def test_the_spark_report_equals_check_integrity(spark, kind: str) -> None:
    source = source_records()
    target, dlq = (copy(source) if kind == "none" else damaged(kind)) if kind in DAMAGED else more_damage(kind)
    want = check_integrity(PLAN, source, target, dlq)
    assert want.ok == (kind in ("none", "second dead-letter partition")), want.failures
    got = spark_report(spark, PLAN, source, target, dlq)
    assert got.to_dict() == want.to_dict()
    # (a proof that passed damage would have made the report above ok.) A clean merged copy (these keys span
    # the source partitions) is shown by the proof alone, as the full check shows it
    if kind == "none":
        proof = spark_proof(spark, PLAN, source, target, dlq)
        assert proof is not None and backfill.integrity_report(PLAN, proof).to_dict() == want.to_dict()


def direct_source(n: int = 300) -> list[SourceRecord]:
    """:func:`source_records`' records, each key's in one source partition (a direct copy's source)."""
    out, next_offset = [], [0, 0, 0]
    for r in source_records(n):
        key = json.loads(r.value).get("key")
        p = r.partition if key is None else int(key.split("-")[1]) % 3
        out.append(replace(r, partition=p, offset=next_offset[p]))
        next_offset[p] += 1
    return out


@pytest.mark.parametrize("kind", DAMAGED + MORE)
def test_the_cheap_path_shows_a_clean_direct_copy_and_no_damaged_one(spark, kind: str) -> None:
    source = direct_source()
    target, dlq = (copy(source) if kind == "none" else damaged(kind, source)) if kind in DAMAGED \
        else more_damage(kind, source)
    want = check_integrity(PLAN, source, target, dlq)
    proof = spark_proof(spark, PLAN, source, target, dlq)
    assert (proof is not None) == want.ok, (kind, want.failures)
    if proof is not None:
        assert backfill.integrity_report(PLAN, proof).to_dict() == want.to_dict()


@pytest.mark.parametrize("kind", ["none", "placed by the whole changelog key", "written with the store key"])
def test_a_window_store_copy_is_checked_by_its_store_keys_in_spark_too(spark, kind: str) -> None:
    """window_key writes each changelog key whole and places it by its store key: the Spark verify reads the
    store key back from the written key (placement, split keys, order, keys per partition), as check_integrity
    does; a record placed by its whole key (as record_key would) fails placement, one written with the store
    key fails the key check, and the proof shows neither clean."""
    source = window_records()
    target, dlq = copy(source, WINDOWED)
    i = next(i for i, r in enumerate(target) if partition_for(r.key or b"", 6) != r.partition)
    r = target[i]
    if kind == "placed by the whole changelog key":
        target[i] = replace(r, partition=partition_for(r.key or b"", 6), offset=30_000)
    elif kind == "written with the store key":
        target[i] = replace(r, key=(r.key or b"")[:-12])
    want = check_integrity(WINDOWED, source, target, dlq)
    assert want.ok == (kind == "none"), want.failures
    if kind == "placed by the whole changelog key":
        assert sum(p.misplaced for p in want.partitions) == 1, want.failures
    assert spark_report(spark, WINDOWED, source, target, dlq).to_dict() == want.to_dict()
    proof = spark_proof(spark, WINDOWED, source, target, dlq)
    assert (proof is not None) == want.ok
    if proof is not None:
        assert backfill.integrity_report(WINDOWED, proof).to_dict() == want.to_dict()


def test_keys_spanning_source_partitions_are_ordered_by_time_in_spark_too(spark) -> None:
    plan = replace(PLAN, key_rule="record_key")
    source = [SourceRecord(0, 0, 10, b"k", b"a"), SourceRecord(0, 1, 50, b"k", b"b"),
              SourceRecord(1, 0, 100, b"k", b"c"), SourceRecord(1, 1, 90, b"k", b"d"), SourceRecord(2, 0, 5, None, b"e")]
    p = partition_for(b"k", plan.target_partitions)
    right = [OutputRecord(plan.target_topic, p, i, b"k", v, lin) for i, (v, lin) in
             enumerate([(b"a", "orders/0/0"), (b"b", "orders/0/1"), (b"c", "orders/1/0"), (b"d", "orders/1/1")])]
    dlq = [OutputRecord(plan.dead_letter_topic, 0, 0, None, b"e", "orders/2/0", "NO_KEY")]
    assert spark_report(spark, plan, source, right, dlq).ok
    proof = spark_proof(spark, plan, source, right, dlq)  # by the planned sequence: a key from two partitions
    assert proof is not None and backfill.integrity_report(plan, proof).ok
    wrong = [replace(r, offset=3 - r.offset) for r in right]  # offset order instead of time order
    assert spark_proof(spark, plan, source, wrong, dlq) is None
    report = spark_report(spark, plan, source, wrong, dlq)
    assert report == check_integrity(plan, source, wrong, dlq)
    assert report.failures == ("1 key(s) are out of per-key source order, e.g. b'k': position 0 holds orders/1/1, "
                               "source order has orders/0/0 (4 vs 4 records)",)


# -- planted in a real target topic ------------------------------------------------------------------------------

SOURCE = "ledger"
RECORDS = 3_000
BAD = [b'{"id": -1}', b"not json", b'{"id": -2, "key": null}']


@pytest.fixture(scope="module")
def cluster(rekey_cluster: provision.ClusterSpec) -> provision.ClusterSpec:
    seed_source(rekey_cluster, SOURCE, datagen.DatagenSpec(records=RECORDS, keys=60, record_bytes=120), BAD)
    return rekey_cluster


def with_headers(frame, plan: BackfillPlan):
    """:func:`rekey_backfill._sink_frame`'s rows as Spark's own Kafka sink takes them, ``topic, partition,
    key, value, headers``, with the headers the transactional sink builds: ``kafkaops.lineage`` =
    ``<source topic>/<partition>/<offset>`` on every record, the reason code and detail on dead letters."""
    from pyspark.sql import functions as F

    from spark_apps import common

    def header(name: str, value):
        return F.struct(F.lit(name).alias("key"), value.cast("binary").alias("value"))

    lineage = common.lineage(plan.source_topic, F.col("lineage_partition"), F.col("lineage_offset"))
    headers = F.when(F.col("code").isNull(), F.array(header(backfill.LINEAGE_HEADER, lineage))) \
        .otherwise(F.array(header(backfill.LINEAGE_HEADER, lineage), header(backfill.CODE_HEADER, F.col("code")),
                           header(backfill.REASON_HEADER, F.col("detail"))))
    return frame.select("topic", "partition", "key", "value", headers.alias("headers"))


def plain_write(frame, plan: BackfillPlan, bootstrap: str) -> None:
    """Rows of :func:`rekey_backfill._sink_frame` through Spark's own (non-transactional) Kafka sink: the
    damage must land as written, which the backfill's transactional sink would refuse or skip."""
    from spark_apps import rekey_backfill

    (with_headers(rekey_backfill._sink_frame(frame, plan), plan)
     .write.format("kafka").option("kafka.bootstrap.servers", bootstrap).save())


def copy_with(spark, spec: provision.ClusterSpec, plan: BackfillPlan, damage: str) -> tuple[int, int]:
    """Write ``plan``'s direct copy with ``damage``; returns the (source partition, offset) it touched."""
    from pyspark.sql import functions as F

    from spark_apps import common, rekey_backfill

    common.register_functions(spark, plan)
    rows = rekey_backfill.direct_frame(spark, plan, spec.bootstrap)
    # the record to damage: the second record of a key that has at least three
    keyed = rows.where(F.col("code").isNull()).groupBy("key").agg(
        F.sort_array(F.collect_list(F.struct("src_partition", "src_offset"))).alias("at"))
    victim = keyed.where(F.size("at") >= 3).orderBy("key").first()["at"][1]
    at = (victim["src_partition"], victim["src_offset"])
    this = (F.col("src_partition") == at[0]) & (F.col("src_offset") == at[1])
    if damage == "wrong code":
        rows = rows.withColumn("code", F.when(F.col("code").isNotNull(), F.lit("NOT_A_SCALAR")))
    first = rows if damage in ("duplicate", "foreign", "wrong code") else rows.where(~this)
    plain_write(first, plan, spec.bootstrap)
    if damage in ("duplicate", "out of order"):
        plain_write(rows.where(this), plan, spec.bootstrap)
    elif damage == "wrong partition":
        moved = rows.where(this).withColumn("out_partition", (F.col("out_partition") + 1) % plan.target_partitions)
        plain_write(moved, plan, spec.bootstrap)
    elif damage == "foreign":
        producer = Producer(connection.client_config({"bootstrap.servers": spec.bootstrap}))
        producer.produce(plan.target_topic, key=b"intruder", value=b"{}", partition=0)
        producer.produce(plan.target_topic, key=b"intruder", value=b"{}", partition=0,
                         headers=[(backfill.LINEAGE_HEADER, f"{SOURCE}/0/999999".encode())])
        assert waits.close_producer(producer, waits.Deadline(30)) == 0
    return at


@pytest.mark.parametrize("damage, words, column", [
    ("duplicate", "1 source record(s) were written more than once, e.g. ['{lineage}']", "duplicate_lineages"),
    ("gap", "1 source record(s) are in neither the target nor the dead-letter topic, e.g. ['{lineage}']", None),
    ("wrong partition", "1 target record(s) sit off their key's partition", "misplaced"),
    ("out of order", "1 key(s) are out of per-key source order", "order_breaks"),
    ("foreign", "1 record(s) carry no kafkaops.lineage header, e.g. ledger.v2.foreign-0@", "unknown_lineages"),
    ("wrong code", "3 dead letter(s) carry another kafkaops.dead_letter_code than rule 'field:key' gives", None),
])
def test_a_planted_failure_is_named(cluster, spark, damage: str, words: str, column: str | None) -> None:
    from spark_apps import rekey_backfill

    plan = plan_for(cluster, f"{SOURCE}.v2.{damage.replace(' ', '-')}", source=SOURCE)
    at = copy_with(spark, cluster, plan, damage)
    report = rekey_backfill.verify(spark, plan, cluster.bootstrap)
    lineage = backfill.format_lineage(SOURCE, *at)
    assert not report.ok
    assert any(words.format(lineage=lineage) in f for f in report.failures), report.failures
    if column:
        assert sum(row[column] for row in report.rows()) >= 1, report.rows()
    assert report.to_dict() == check_integrity(plan, *read_back(cluster, plan)).to_dict()


def test_a_clean_copy_verifies_and_counts_its_dead_letters(cluster, spark) -> None:
    from spark_apps import rekey_backfill

    plan = plan_for(cluster, f"{SOURCE}.v2.clean", source=SOURCE)
    rekey_backfill.run(spark, plan, cluster.bootstrap)
    report = rekey_backfill.verify(spark, plan, cluster.bootstrap)
    assert report.ok, report.failures
    assert (report.source_records, report.target_records, report.dead_letters) == (RECORDS + 3, RECORDS, 3)
    assert report.dead_letter_codes == {"FIELD_MISSING": 1, "NOT_JSON": 1, "NULL_VALUE": 1}
    assert report.to_dict() == check_integrity(plan, *read_back(cluster, plan)).to_dict()
    # the verify's cheap path showed it (a direct copy, read from Kafka), no join needed
    from spark_apps import backfill_verify, common

    common.register_key_hash(spark, plan.target_partitions)
    output = backfill_verify.elements(plan, backfill_verify.read_output(spark, plan, cluster.bootstrap))
    assert backfill_verify.proven(plan, backfill_verify.read_source(spark, plan, cluster.bootstrap), output) is not None
