"""kafka_partition_increase's migrate with its rekey backfill submitted through the run's
``spark_conn_id``: on the Spark standalone cluster of kafkaops/testing/spark.py, and on a master that is not
there (refused before the target topic exists, naming the master and the connection)."""
from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest

from kafkaops.cli import datagen
from kafkaops.platform import provision, store
from kafkaops.platform.kafka import connection, topics as kafka_topics
from kafkaops.rekey import backfill
from tests.conftest import committed_copy
from tests.dags.conftest import run_partition_increase, with_keyed_topic
from kafkaops.testing.spark import StandaloneSpark

pytestmark = pytest.mark.integration

TOPIC = "invoices"
RECORDS = 2_000


@pytest.fixture(scope="module")
def cluster(one_broker_cluster: provision.ClusterSpec) -> Iterator[provision.ClusterSpec]:
    with with_keyed_topic(one_broker_cluster, TOPIC, RECORDS) as spec:
        yield spec


run = run_partition_increase


def topics(cluster: provision.ClusterSpec) -> set[str]:
    with connection.connect(cluster.bootstrap) as conn:
        return set(conn.admin.list_topics(timeout=10).topics)


def test_an_unreachable_spark_master_fails_before_the_target_topic_exists(dagbag, cluster, monkeypatch) -> None:
    port = provision.free_ports(1)[0]
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_GONE", json.dumps({"conn_type": "spark", "host": "spark://127.0.0.1",
                                                              "port": port}))
    dag_run, record = run(dagbag, topic=TOPIC, new_partition_count=6, mode="migrate", target_topic=f"{TOPIC}.gone",
                          spark_conn_id="spark_gone", dry_run=False, approval="auto_approve")
    assert str(dag_run.state) == "failed" and record["outcome"] != "success", record
    text = json.dumps(record)
    assert f"Spark master spark://127.0.0.1:{port} of connection 'spark_gone' is not reachable" in text, text[-3000:]
    assert not {f"{TOPIC}.gone", f"{TOPIC}.gone.dlq"} & topics(cluster)
    # found by the preflight, before the plan and the approval
    failed = {s["name"]: s for s in record["steps"] if s.get("status") == "failed"}
    assert "preflight_gate" in failed and "not reachable" in failed["preflight_gate"]["error"], record["steps"]
    assert "plan" not in {s["name"] for s in record["steps"]}, record["steps"]


def test_an_existing_target_with_another_partition_count_is_refused_before_the_approval(dagbag, cluster) -> None:
    with connection.connect(cluster.bootstrap) as conn:
        kafka_topics.create_topic(conn, f"{TOPIC}.taken", 4, 1)
    dag_run, record = run(dagbag, topic=TOPIC, new_partition_count=6, mode="migrate", target_topic=f"{TOPIC}.taken",
                          dry_run=False, approval="auto_approve")
    assert str(dag_run.state) == "failed", record
    failed = {s["name"]: s for s in record["steps"] if s.get("status") == "failed"}
    assert "plan" in failed, record["steps"]
    error = failed["plan"]["error"]
    assert f"target_topic {TOPIC}.taken exists with 4 partition(s), not 6" in error and "Nothing was changed" in error
    assert re.search(rf"the next free name is {TOPIC}\.v\d+\b", error), error
    assert record["approval"] is None and f"{TOPIC}.taken.dlq" not in topics(cluster)
    assert record["outcome"] == "refused", record["outcome"]  # before anything changed


def test_an_existing_target_holding_another_writers_records_is_refused_before_the_approval(dagbag, cluster) -> None:
    """Same partition count, but records no run of this copy wrote (no lineage header): refused at the plan,
    not after the approval when the backfill reads the target."""
    with connection.connect(cluster.bootstrap) as conn:
        kafka_topics.create_topic(conn, f"{TOPIC}.used", 6, 1)
    datagen.produce({"bootstrap.servers": cluster.bootstrap}, f"{TOPIC}.used", datagen.DatagenSpec(records=50, keys=10, seed=3))
    dag_run, record = run(dagbag, topic=TOPIC, new_partition_count=6, mode="migrate", target_topic=f"{TOPIC}.used",
                          dry_run=False, approval="auto_approve")
    assert str(dag_run.state) == "failed" and record["outcome"] == "refused", record
    error = {s["name"]: s for s in record["steps"] if s.get("status") == "failed"}["plan"]["error"]
    assert f"target_topic {TOPIC}.used exists and holds records that are not this copy's (50 offsets;" in error, error
    assert "carries no kafkaops.lineage header" in error and "Nothing was changed" in error, error
    assert record["approval"] is None and f"{TOPIC}.used.dlq" not in topics(cluster)


def test_migrate_runs_its_backfill_on_the_spark_standalone_cluster(dagbag, cluster, spark_standalone: StandaloneSpark,
                                                                   monkeypatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_STANDALONE", json.dumps(spark_standalone.connection()))
    monkeypatch.setenv("SPARK_CONF_DIR", str(spark_standalone.conf_dir))
    before = {a["id"] for a in spark_standalone.applications()}
    dag_run, record = run(dagbag, topic=TOPIC, new_partition_count=6, mode="migrate", key_rule="field:key",
                          target_topic=f"{TOPIC}.v2", spark_conn_id="spark_standalone", dry_run=False,
                          approval="auto_approve")
    assert str(dag_run.state) == "success", record
    assert [(g["gate"], g["ok"]) for g in record["gates"]] == [("preflight", True), ("backfill", True)]
    started = next(n for n in record["notes"] if n.get("text", "").startswith("backfill started"))
    assert started["argv"][:3] == ["spark-submit", "--master", spark_standalone.master_url], started
    assert "connection spark_standalone" in started["text"]
    # the plan went to the driver, and the report came back, through the store: no JSON on the command line
    argv, stored = started["argv"], store.current()
    assert not [a for a in argv if a.lstrip().startswith("{")], argv
    plan = json.loads(stored.artifact(argv[argv.index("--plan-artifact") + 1]).body)
    assert (plan["source_topic"], plan["target_topic"], plan["key_rule"]) == (TOPIC, f"{TOPIC}.v2", "field:key")
    report = json.loads(stored.artifact(argv[argv.index("--result-artifact") + 1]).body)
    assert report["integrity"]["ok"] and report["integrity"]["target_records"] == RECORDS, report
    # the Spark log: stored, linked from the record's note, and a path the artifact route serves to the DAG's readers
    from kafkaops.airflow.pages import artifact_href, render_record
    from kafkaops.airflow.ui import artifact_dag_id

    spark_log = stored.artifact(started["artifact"])
    assert spark_log is not None and b"kafkaops-rekey-backfill" in spark_log.body, started
    assert artifact_dag_id(started["artifact"]) == dag_run.dag_id
    assert f'href="{artifact_href(started["artifact"])}"' in render_record(record)
    ran = [a for a in spark_standalone.applications() if a["id"] not in before]
    assert [(a["name"], a["state"]) for a in ran] == [("kafkaops-rekey-backfill", "FINISHED")]
    # the records a consumer sees (read_committed; the end offsets also count each transaction's commit marker)
    copied, _ = committed_copy({"bootstrap.servers": cluster.bootstrap}, f"{TOPIC}.v2")
    assert len(copied) == len({r.header(backfill.LINEAGE_HEADER) for r in copied}) == RECORDS
