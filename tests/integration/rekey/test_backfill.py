"""The rekey backfill on a real cluster of its own (one broker): 3 -> 6 partitions with skewed keys,
every invariant checked on the target read back with confluent-kafka; a re-run writes nothing; a
run killed half-way (SIGKILL of its process group) and run again gives the exact result; records
without the key field land in the dead-letter topic with the reason code of docs/key-rules.md. Both
copies are covered: the
direct one (every new key in one source partition: by the record key, or by a value field equal to
it) and the merged one (by a value field whose values span source partitions; and when a direct
copy finds keys spanning source partitions, where it is deleted and done again merged). One
SparkSession per module."""
from __future__ import annotations

import contextlib
import json
from collections import Counter
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from confluent_kafka import Producer

from kafkaops.platform import admin
from kafkaops.platform import keyrules
from kafkaops.rekey import backfill
from kafkaops.cli import datagen
from kafkaops.platform import provision
from kafkaops.rekey.backfill import BackfillPlan, OutputRecord, SourceRecord
from kafkaops.platform.partitioner import partition_for
from tests.conftest import TEST_BROKER_CONFIG, wait_for

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]
SOURCE = "payments"
RECORDS = 20_000
BAD = [b'{"id": -1, "note": "no key field"}', b"not json at all", b'{"id": -2, "key": null}']
#: A record without a key but with a key field: a dead letter by the record key, a record by field:key.
KEYLESS = b'{"id": -3, "key": "k-keyless"}'
#: rule -> (copy, target records, dead letters). The value's ``key`` is the record key (each key in one
#: source partition: the direct copy); ``seq`` counts per key from 0, so its values span partitions.
RULES = {"field:key": ("direct", RECORDS + 1, 3), "field:seq": ("merged", RECORDS, 4),
         "record_key": ("direct", RECORDS + 3, 1)}


@pytest.fixture(scope="module")
def cluster() -> Iterator[provision.ClusterSpec]:
    with provision.temporary_cluster("kafkaops-backfill-", brokers=1, controllers=1,
                                     extra_config=TEST_BROKER_CONFIG) as spec:
        with admin.connect(spec.bootstrap) as conn:
            admin.create_topic(conn, SOURCE, 3, 1)
            datagen.produce(conn.config, SOURCE, datagen.DatagenSpec(records=RECORDS, keys=300, skew="zipf",
                                                                     record_bytes=250))
            producer = Producer(admin.client_config({"bootstrap.servers": spec.bootstrap}))
            for i, value in enumerate(BAD):
                producer.produce(SOURCE, key=f"bad-{i}".encode(), value=value, partition=i % 3)
            producer.produce(SOURCE, key=None, value=KEYLESS, partition=1)
            assert producer.flush(30) == 0
        yield spec


def plan_for(spec: provision.ClusterSpec, target: str, rule: str = "field:key", source: str = SOURCE) -> BackfillPlan:
    ranges = admin.end_offsets({"bootstrap.servers": spec.bootstrap}, source)
    plan = BackfillPlan(source, tuple((p, s, e) for p, (s, e) in sorted(ranges.items())), target, 6, rule)
    with admin.connect(spec.bootstrap) as conn:
        admin.create_topic(conn, plan.target_topic, 6, 1)
        admin.create_topic(conn, plan.dead_letter_topic, 1, 1)
    return plan


def read_back(spec: provision.ClusterSpec, plan: BackfillPlan
              ) -> tuple[list[SourceRecord], list[OutputRecord], list[OutputRecord]]:
    config = {"bootstrap.servers": spec.bootstrap}
    source = [SourceRecord(r.partition, r.offset, r.timestamp, r.key, r.value) for r in
              admin.read_ranges(config, plan.source_topic, {p: (s, e) for p, s, e in plan.source_offsets})]

    def out(topic: str) -> list[OutputRecord]:
        return [OutputRecord(r.topic, r.partition, r.offset, r.key, r.value,
                             (r.header(backfill.LINEAGE_HEADER) or b"").decode() or None,
                             (r.header(backfill.CODE_HEADER) or b"").decode() or None)
                for r in admin.read_topic(config, topic)]

    return source, out(plan.target_topic), out(plan.dead_letter_topic)


def written(spec: provision.ClusterSpec, plan: BackfillPlan) -> int:
    config = {"bootstrap.servers": spec.bootstrap}
    return sum(e - s for topic in (plan.target_topic, plan.dead_letter_topic)
               for s, e in admin.end_offsets(config, topic).values())


def test_kafka_key_hash_on_the_jvm_is_partition_for(spark) -> None:
    """The direct copy's Spark SQL function (Kafka's own Utils.murmur2) against the Java-generated
    vectors that kafkaops.platform.partitioner is checked with."""
    from spark_apps import rekey_backfill
    from tests.unit.data.gen_murmur2_vectors import VECTORS

    vectors = json.loads(VECTORS.read_text())["vectors"]
    rows = [(bytes.fromhex(v["key_hex"]), i % 3) for i, v in enumerate(vectors)] + [(None, 0)]
    away = rekey_backfill.register_key_hash(spark, 3)
    frame = spark.createDataFrame(rows, "key binary, partition int")
    got = [r["hash"] for r in frame.selectExpr(f"{rekey_backfill.KAFKA_KEY_HASH}(key, partition) AS hash").collect()]
    assert got[-1] is None
    for vector, value in zip(vectors, got):
        assert value == vector["murmur2"] & 0x7FFFFFFF
        for n, partition in vector["partition_for"].items():
            assert value % int(n) == partition == partition_for(bytes.fromhex(vector["key_hex"]), int(n))
    off_home = sum(1 for i, v in enumerate(vectors) if v["partition_for"]["3"] != i % 3)
    assert away.value() == off_home > 0


@pytest.mark.parametrize("rule", list(RULES))
def test_rekey_3_to_6_partitions_keeps_every_invariant_and_a_rerun_writes_nothing(cluster, spark, rule) -> None:
    from spark_apps import rekey_backfill

    copy, target_records, dead_letters = RULES[rule]
    plan = plan_for(cluster, f"{SOURCE}.v2.{rule.replace(':', '.')}", rule)
    first = rekey_backfill.run(spark, plan, cluster.bootstrap)
    assert (first["already_written"], first["mode"], first["rewritten"]) == (0, copy, False)
    source, target, dlq = read_back(cluster, plan)
    report = backfill.check_integrity(plan, source, target, dlq)
    assert report.ok, report.failures
    assert (report.source_records, report.target_records, report.dead_letters) == \
        (RECORDS + 4, target_records, dead_letters)
    assert len({r.partition for r in target}) == 6
    reasons = {r.lineage: r for r in dlq}
    assert len(reasons) == dead_letters
    assert report.dead_letter_codes == {"field:key": {"FIELD_MISSING": 1, "NOT_JSON": 1, "NULL_VALUE": 1},
                                        "field:seq": {"FIELD_MISSING": 3, "NOT_JSON": 1},
                                        "record_key": {keyrules.NO_KEY: 1}}[rule]
    raw = admin.read_topic({"bootstrap.servers": cluster.bootstrap}, plan.dead_letter_topic)
    codes = Counter(r.header(backfill.CODE_HEADER).decode() for r in raw)
    assert codes == report.dead_letter_codes and report.wrong_codes == 0  # as written by the JVM side
    assert all(r.header(backfill.REASON_HEADER) for r in raw)  # and a free-text detail beside each code

    again = rekey_backfill.run(spark, plan, cluster.bootstrap)
    assert (again["already_written"], again["mode"]) == (RECORDS + 4, copy)
    assert written(cluster, plan) == RECORDS + 4
    assert backfill.check_integrity(plan, *read_back(cluster, plan)).ok
    spark_report = rekey_backfill.verify(spark, plan, cluster.bootstrap)  # Spark's own read-back agrees
    assert spark_report.ok and spark_report.totals() == report.totals()


@pytest.mark.parametrize("rule", list(RULES))
def test_a_run_killed_half_way_and_run_again_gives_the_exact_result(cluster, spark, tmp_path, rule) -> None:
    from spark_apps import rekey_backfill

    plan = plan_for(cluster, f"{SOURCE}.killed.{rule.replace(':', '.')}", rule)
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(plan.to_json())
    slow = ["--kafka-option", "kafka.batch.size=2048", "--kafka-option", "kafka.linger.ms=0",
            "--kafka-option", "kafka.max.in.flight.requests.per.connection=1"]
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'plugins'}{os.pathsep}{REPO}"}
    log = (tmp_path / "spark.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "spark_apps.rekey_backfill", "run", "--plan", str(plan_file),
                             "--bootstrap", cluster.bootstrap, "--driver-memory", "512m", *slow],
                            cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for(lambda: written(cluster, plan) >= 2000 or proc.poll() is not None, timeout=240,
                 what="the backfill subprocess to write 2000 records", interval=0.2)
    finally:
        with contextlib.suppress(ProcessLookupError):  # the job's own process group: its Python and its JVM
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    time.sleep(1.0)
    partial = written(cluster, plan)
    log.close()
    tail = "\n".join((tmp_path / "spark.log").read_text(errors="replace").splitlines()[-15:])
    assert 0 < partial < RECORDS + 4, \
        f"the kill came at {partial} records; the test needs a partial write. The job's log ends:\n{tail}"

    resumed = rekey_backfill.run(spark, plan, cluster.bootstrap)
    assert (resumed["already_written"], resumed["mode"]) == (partial, RULES[rule][0])
    report = backfill.check_integrity(plan, *read_back(cluster, plan))
    assert report.ok, report.failures
    assert report.target_records + report.dead_letters == RECORDS + 4


@pytest.mark.parametrize("spanning", [True, False])
def test_record_keys_off_their_home_partition(cluster, spark, spanning) -> None:
    """Keys placed by hand off their murmur2 home. Consistently (each key in one partition, as a
    producer with another partitioner does): the direct copy stands. Spread over partitions (as
    after an earlier increase): the direct copy is deleted from the target and the merged copy,
    which orders each key by time across source partitions, replaces it; a re-run writes nothing."""
    from spark_apps import rekey_backfill

    topic = f"moved.{'spanning' if spanning else 'consistent'}"
    with admin.connect(cluster.bootstrap) as conn:
        admin.create_topic(conn, topic, 3, 1)
    producer = Producer(admin.client_config({"bootstrap.servers": cluster.bootstrap}))
    for i in range(600):
        key = f"acct-{i % 40}".encode()
        home = partition_for(key, 3)
        partition = (home + 1 + (i // 40) % 2) % 3 if spanning else (home + 1) % 3
        producer.produce(topic, key=key, value=json.dumps({"i": i}).encode(), partition=partition)
        producer.poll(0)
    assert producer.flush(30) == 0
    plan = plan_for(cluster, f"{topic}.v2", "record_key", source=topic)
    first = rekey_backfill.run(spark, plan, cluster.bootstrap)
    assert (first["mode"], first["rewritten"]) == (("merged", True) if spanning else ("direct", False)), first
    report = backfill.check_integrity(plan, *read_back(cluster, plan))
    assert report.ok, report.failures
    assert (report.target_records, report.dead_letters) == (600, 0)
    again = rekey_backfill.run(spark, plan, cluster.bootstrap)
    assert (again["already_written"], again["mode"]) == (600, first["mode"])
    assert report.totals() == backfill.check_integrity(plan, *read_back(cluster, plan)).totals()


def test_a_value_rule_whose_keys_span_partitions_past_the_sample_is_redone_merged(cluster, spark, monkeypatch
                                                                                 ) -> None:
    """With no sample, a value rule starts with the direct copy; its key hashes show keys in several
    source partitions, so the direct output is deleted and the merged copy written instead."""
    from spark_apps import rekey_backfill

    monkeypatch.setattr(rekey_backfill, "SAMPLE_RECORDS", 0)
    plan = plan_for(cluster, f"{SOURCE}.unsampled", "field:seq")
    first = rekey_backfill.run(spark, plan, cluster.bootstrap)
    assert (first["mode"], first["rewritten"]) == ("merged", True), first
    assert "hashes" in first["mode_reason"]
    report = backfill.check_integrity(plan, *read_back(cluster, plan))
    assert report.ok, report.failures
    assert (report.target_records, report.dead_letters) == (RECORDS, 4)


def test_a_partial_direct_copy_of_keys_spanning_partitions_is_replaced_by_the_merged_copy(cluster, spark) -> None:
    """A run that stopped during its direct copy, before it found keys in several source partitions,
    leaves part of the direct copy in the target. The re-run chooses the merged copy, recognises
    that output as this plan's own direct prefix, deletes it and writes the merged copy."""
    from pyspark.sql import functions as F

    from spark_apps import rekey_backfill

    plan = plan_for(cluster, f"{SOURCE}.stopped.direct", "field:seq")
    rekey_backfill.register_functions(spark, plan)
    partial = rekey_backfill.direct_frame(spark, plan, cluster.bootstrap).where(
        (F.col("src_partition") == 0) & (F.col("src_offset") < 3000))  # source partition 0's first records
    rekey_backfill.write(rekey_backfill._sink_frame(partial, plan), cluster.bootstrap)
    left = written(cluster, plan)
    assert 0 < left < RECORDS
    result = rekey_backfill.run(spark, plan, cluster.bootstrap)
    assert (result["mode"], result["rewritten"], result["already_written"]) == ("merged", True, 0), result
    report = backfill.check_integrity(plan, *read_back(cluster, plan))
    assert report.ok, report.failures
    assert (report.target_records, report.dead_letters) == (RECORDS, 4)


def test_a_target_written_by_something_else_is_refused(cluster, spark) -> None:
    from spark_apps import rekey_backfill

    plan = plan_for(cluster, f"{SOURCE}.foreign")
    producer = Producer(admin.client_config({"bootstrap.servers": cluster.bootstrap}))
    producer.produce(plan.target_topic, key=b"x", value=b"y", partition=2,
                     headers=[(backfill.LINEAGE_HEADER, b"payments/0/999999")])
    assert producer.flush(30) == 0
    with pytest.raises(backfill.BackfillError, match="another plan"):
        rekey_backfill.run(spark, plan, cluster.bootstrap)
    assert written(cluster, replace(plan)) == 1
