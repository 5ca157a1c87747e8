"""The rekey backfill on a real cluster of its own (one broker): 3 -> 6 partitions with skewed keys,
every invariant checked on the target read back with confluent-kafka; a re-run writes nothing; a
run killed half-way (SIGKILL of its process group) and run again gives the exact result; records
without the key field land in the dead-letter topic with the reason. One SparkSession per module."""
from __future__ import annotations

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

from kafkaops import admin, backfill, datagen, provision, records
from kafkaops.backfill import BackfillPlan, OutputRecord, SourceRecord
from tests.conftest import TEST_BROKER_CONFIG, wait_for

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
SOURCE = "payments"
RECORDS = 20_000
BAD = [b'{"id": -1, "note": "no key field"}', b"not json at all", b'{"id": -2, "key": null}']


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
            assert producer.flush(30) == 0
        yield spec


@pytest.fixture(scope="module")
def spark():
    from spark_apps import rekey_backfill

    session = rekey_backfill.spark_session("local[2]", driver_memory="1g")
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def plan_for(spec: provision.ClusterSpec, target: str) -> BackfillPlan:
    ranges = records.end_offsets({"bootstrap.servers": spec.bootstrap}, SOURCE)
    plan = BackfillPlan(SOURCE, tuple((p, s, e) for p, (s, e) in sorted(ranges.items())), target, 6, "field:key")
    with admin.connect(spec.bootstrap) as conn:
        admin.create_topic(conn, plan.target_topic, 6, 1)
        admin.create_topic(conn, plan.dead_letter_topic, 1, 1)
    return plan


def read_back(spec: provision.ClusterSpec, plan: BackfillPlan
              ) -> tuple[list[SourceRecord], list[OutputRecord], list[OutputRecord]]:
    config = {"bootstrap.servers": spec.bootstrap}
    source = [SourceRecord(r.partition, r.offset, r.timestamp, r.key, r.value) for r in
              records.read_ranges(config, SOURCE, {p: (s, e) for p, s, e in plan.source_offsets})]

    def out(topic: str) -> list[OutputRecord]:
        return [OutputRecord(r.topic, r.partition, r.offset, r.key, r.value,
                             (r.header(backfill.LINEAGE_HEADER) or b"").decode() or None)
                for r in records.read_topic(config, topic)]

    return source, out(plan.target_topic), out(plan.dead_letter_topic)


def written(spec: provision.ClusterSpec, plan: BackfillPlan) -> int:
    config = {"bootstrap.servers": spec.bootstrap}
    return sum(e - s for topic in (plan.target_topic, plan.dead_letter_topic)
               for s, e in records.end_offsets(config, topic).values())


def test_rekey_3_to_6_partitions_keeps_every_invariant_and_a_rerun_writes_nothing(cluster, spark) -> None:
    from spark_apps import rekey_backfill

    plan = plan_for(cluster, f"{SOURCE}.v2")
    first = rekey_backfill.run(spark, plan, cluster.bootstrap)
    assert first["already_written"] == 0
    source, target, dlq = read_back(cluster, plan)
    report = backfill.check_integrity(plan, source, target, dlq)
    assert report.ok, report.failures
    assert (report.source_records, report.target_records, report.dead_letters) == (RECORDS + 3, RECORDS, 3)
    assert len({r.partition for r in target}) == 6
    reasons = {r.lineage: r for r in dlq}
    assert len(reasons) == 3
    raw = records.read_topic({"bootstrap.servers": cluster.bootstrap}, plan.dead_letter_topic)
    why = sorted(r.header(backfill.REASON_HEADER).decode() for r in raw)
    assert any("no field 'key'" in w for w in why) and any("not JSON" in w for w in why) \
        and any("null" in w for w in why), why

    again = rekey_backfill.run(spark, plan, cluster.bootstrap)
    assert again["already_written"] == RECORDS + 3
    assert written(cluster, plan) == RECORDS + 3
    assert backfill.check_integrity(plan, *read_back(cluster, plan)).ok
    spark_report = rekey_backfill.verify(spark, plan, cluster.bootstrap)  # Spark's own read-back agrees
    assert spark_report.ok and spark_report.totals() == report.totals()


def test_a_run_killed_half_way_and_run_again_gives_the_exact_result(cluster, spark, tmp_path) -> None:
    from spark_apps import rekey_backfill

    plan = plan_for(cluster, f"{SOURCE}.killed")
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
        os.killpg(proc.pid, signal.SIGKILL)  # the job's own process group: its Python and its JVM
        proc.wait(30)
    time.sleep(1.0)
    partial = written(cluster, plan)
    assert 0 < partial < RECORDS + 3, f"the kill came at {partial} records; the test needs a partial write"

    resumed = rekey_backfill.run(spark, plan, cluster.bootstrap)
    assert resumed["already_written"] == partial
    report = backfill.check_integrity(plan, *read_back(cluster, plan))
    assert report.ok, report.failures
    assert report.target_records + report.dead_letters == RECORDS + 3


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
