"""A capacity review on a small real cluster of its own: a skewed topic and a lagging group."""
from __future__ import annotations

import json
import math
import time

import pytest
from confluent_kafka import Consumer, TopicPartition

from kafkaops.platform.kafka import connection, topics
from kafkaops.capacity import review as capacity
from kafkaops.capacity import steps as capacity_run
from kafkaops.cli import datagen
from kafkaops.capacity import skew
from kafkaops.model import Cluster
from kafkaops.platform.partitioner import partition_for
from kafkaops.capacity.history import ReviewHistory
from kafkaops.testing.dag_runs import run_dag


pytestmark = pytest.mark.integration

TOPIC, GROUP, PARTITIONS = "payments", "billing", 3
HOT_KEY = b"account-000000"


@pytest.fixture(scope="module")
def cluster(own_cluster) -> dict[str, str]:
    """Three brokers of this module only (``own_cluster``: started through the role, torn down after)."""
    return own_cluster.config


def consume_and_commit(config: dict[str, str], count: int) -> int:
    consumer = Consumer({**config, "group.id": GROUP, "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([TOPIC])
    consumed, deadline = 0, time.monotonic() + 60
    while consumed < count and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            consumed += 1
    consumer.commit(asynchronous=False)
    consumer.close()
    return consumed


def read_sample(config: dict[str, str], start: dict[int, int], end: dict[int, int], topic: str = TOPIC
                ) -> list[tuple]:
    consumer = Consumer({**config, "group.id": "capacity-sample", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, o) for p, o in start.items() if end[p] > o])
    want, out, deadline = sum(end[p] - start[p] for p in start), [], time.monotonic() + 60
    while len(out) < want and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None and msg.offset() < end[msg.partition()]:
            out.append((msg.key(), msg.value(), msg.partition()))
    consumer.close()
    return out


def test_review_names_the_hot_partition_hot_key_lagging_group_and_the_formulas(cluster, local_store) -> None:
    with connection.connect(cluster) as conn:
        topics.create_topic(conn, TOPIC, PARTITIONS, 2)
    spec = datagen.DatagenSpec(records=3000, keys=50, skew="hot", hot_share=0.7, record_bytes=200, seed=1)
    datagen.produce(cluster, TOPIC, spec)
    consume_and_commit(cluster, 500)
    params = capacity_run.CapacityParams.from_params({
        "topics": [TOPIC], "target_records_per_s": 5000, "per_consumer_records_per_s": 700,
        "per_broker_mb_per_s": 0.0001, "propose_scale_out": True, "scale_out_inventory": "spec.json"})

    first = capacity_run.take_snapshot(cluster, params)
    capacity_run.append_history(first, "run-1")
    time.sleep(1.0)
    datagen.produce(cluster, TOPIC, datagen.DatagenSpec(records=1500, keys=50, skew="hot", hot_share=0.7,
                                                        record_bytes=200, seed=2))
    second = capacity_run.take_snapshot(cluster, params)
    stored = capacity_run.append_history(second, "run-2")
    assert stored["points"] == 2

    now = Cluster.from_dict(second)
    start, end = skew.sample_offsets(now, TOPIC, 1200)
    sample = read_sample(cluster, start, end)
    assert len(sample) == sum(end[p] - start[p] for p in start)
    skew_result = skew.analyze(TOPIC, sample, partitions=PARTITIONS, candidate_field="id")
    review = capacity.Review.from_dict(capacity_run.make_review(second, params, skew_result))

    hot_partition = partition_for(HOT_KEY, PARTITIONS)
    hot = [f for f in review.findings if f.rule == "hot_partition"]
    assert hot and {f.subject for f in hot} == {f"{TOPIC}-{hot_partition}"}, review.findings
    assert skew_result["top_keys"][0]["key"] == HOT_KEY.decode()
    key_change = review.recommendation("key_change")
    assert key_change is not None and key_change.inputs["key"] == HOT_KEY.decode()
    [lagging] = [f for f in review.findings if f.rule == "lag_growing"]
    before = Cluster.from_dict(first)
    grew = now.group(GROUP).total_lag - before.group(GROUP).total_lag  # partitions it committed on
    assert lagging.subject == f"group {GROUP}" and lagging.value == grew > 0

    # partitions: max(ceil(5000 / 700), max consumers 0) = 8 -> multiple of 3 brokers = 9
    assert review.recommendation("partitions").value == 9
    total = sum(p.size_bytes * len(p.replicas) for p in now.partitions)
    disk = min(b.disk_total_bytes for b in now.brokers)
    ingress = sum(p.size_bytes - q.size_bytes for p, q in zip(now.partitions, before.partitions))
    seconds = now.taken_at - before.taken_at
    expected = max(math.ceil(total / (disk * 0.7)), math.ceil(ingress / seconds / 100), 1)
    brokers = review.recommendation("brokers")
    assert brokers.value == expected and brokers.inputs["add"] == expected - 3, brokers
    assert expected > 3
    conf = capacity_run.scale_out_proposal(review.to_dict(), params)
    assert conf["add_brokers"] == expected - 3 and conf["approval"] == "manual" and conf["dry_run"] is False

    paths = capacity_run.make_report(review.to_dict(), skew_result, "run-2")
    page = local_store.artifact(paths["html"]).body.decode()
    assert page.count("data:image/png;base64,") == 4 and f"group {GROUP}" in page
    assert json.loads(local_store.artifact(paths["json"]).body)["review"]["cluster_id"] == now.cluster_id


def test_an_unreachable_cluster_leaves_the_history_unchanged(local_store) -> None:
    from kafkaops.platform import provision
    from kafkaops.errors import KafkaUnreachable

    history = ReviewHistory("some-cluster")
    history.append(capacity.ReviewPoint(1.0, {("t", 0): 1}, cluster_id="some-cluster"))
    before = history.points()
    port = provision.free_ports(1)[0]
    with pytest.raises(KafkaUnreachable):
        snap = capacity_run.take_snapshot({"bootstrap.servers": f"127.0.0.1:{port}"},
                                          capacity_run.CapacityParams(), None)
        capacity_run.append_history(snap, "run-x")
    assert history.points() == before


@pytest.mark.slow
def test_the_spark_key_skew_job_matches_the_pure_helper(cluster) -> None:
    topic = "skewed"
    with connection.connect(cluster) as conn:
        topics.create_topic(conn, topic, PARTITIONS, 1)
    datagen.produce(cluster, topic, datagen.DatagenSpec(records=900, keys=30, skew="hot", hot_share=0.6,
                                                        record_bytes=120, seed=9))
    params = capacity_run.CapacityParams.from_params({"topics": [topic], "key_skew": True, "sample_records": 600,
                                                      "candidate_key_field": "id", "candidate_partitions": [3, 6]})
    snap = capacity_run.take_snapshot(cluster, params)
    from kafkaops.airflow.spark_submit import SparkSubmitLauncher

    spark_result = capacity_run.run_key_skew(cluster, snap, params, "spark-check", launcher=SparkSubmitLauncher())
    start, end = skew.sample_offsets(Cluster.from_dict(snap), topic, 600)
    sample = read_sample(cluster, start, end, topic)
    expected = skew.analyze(topic, sample, partitions=PARTITIONS, candidates=(3, 6), candidate_field="id")
    assert spark_result.pop("sample") == {"start": {str(p): o for p, o in start.items()},
                                          "end": {str(p): o for p, o in end.items()}}
    assert spark_result == json.loads(json.dumps(expected))
    assert spark_result["top_keys"][0]["key"] == HOT_KEY.decode()


def test_the_dag_runs_a_review_and_proposes_a_scale_out_run(cluster, airflow_db, dagbag, monkeypatch) -> None:
    from kafkaops.platform import state, store

    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT",
                       json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": cluster["bootstrap.servers"]}}))
    with connection.connect(cluster) as conn:
        topics.create_topic(conn, "dag-topic", PARTITIONS, 1)
    datagen.produce(cluster, "dag-topic", datagen.DatagenSpec(records=300, keys=10, skew="hot", record_bytes=100))
    # run_dag: the session's mTLS and SASL_SSL tests ran this DAG with key_skew on; dag.test() would keep it
    run = run_dag(dagbag, "kafka_capacity_review", topics=["dag-topic"], propose_scale_out=True,
                  disk_per_broker_gb=1e-6, scale_out_inventory="spec.json")
    record = state.AuditLog.for_run("kafka_capacity_review", run.run_id).summary()
    assert record["outcome"] == "success", record
    [note] = [n for n in record["notes"] if "report" in n]
    assert store.current().artifact(note["report"]["html"]).body.startswith(b"<!")
    assert note["url"] == "/kafkaops/artifacts/" + note["report"]["html"]
    # the run's record page links the report first and carries its verdict, which asks for brokers like the proposal
    from kafkaops.airflow.pages import render_record

    page = render_record(record)
    assert f'<a class="button" href="{note["url"]}">Open the capacity report</a>' in page
    assert note["verdict"] and "add " in note["verdict"] and note["verdict"].replace("'", "&#39;") in page
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert states["key_skew"] == "skipped" and states["report"] == "success", states
    assert states["scale_out_proposal"] == "success" and states["propose_scale_out"] == "success", states
    from airflow.models import DagRun
    from airflow.utils.session import create_session

    # other tests of the session ran kafka_scale_out too, some with approval=manual: the proposed run is the one
    # whose note names this review's run
    with create_session() as session:
        runs = session.query(DagRun).filter(DagRun.dag_id == "kafka_scale_out").all()
        [proposed_run] = [r for r in runs if run.run_id in (r.note or "")]
        session.expunge(proposed_run)
    assert proposed_run.conf["approval"] == "manual" and proposed_run.conf["dry_run"] is False
    assert proposed_run.conf["add_brokers"] >= 1
    proposed = [n for n in record["notes"] if "proposed kafka_scale_out" in n["text"]]
    assert proposed and proposed[0]["conf"]["approval"] == "manual" and proposed[0]["conf"]["dry_run"] is False


def test_a_review_with_params_it_cannot_read_is_refused_in_its_record(airflow_db, dagbag) -> None:
    """A refusal of the params is the run's record, as for the operations: the record page and `records show` say
    why, not only the begin task's log. Nothing after the begin runs."""
    from kafkaops.platform import state

    run = run_dag(dagbag, "kafka_capacity_review", max_cpu_percent=150, target_records_per_s=1000)
    record = state.AuditLog.for_run("kafka_capacity_review", run.run_id).summary()
    assert record["outcome"] == "refused", record
    reason = record["outcome_reason"]
    assert "max_cpu_percent" in reason and "per_consumer_records_per_s" in reason, record
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert states["begin"] == "failed" and not [t for t, s in states.items() if s == "success"], states
