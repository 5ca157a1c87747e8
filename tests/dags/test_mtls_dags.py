"""The DAGs over mTLS: the session's role-provisioned nodes (``tls_nodes``: an SSL listener that requires a
client certificate), with the ``kafka_default`` connection holding the client certificate, its encrypted
key and the key's password (librdkafka's ``ssl.*`` settings). With dag.test():

- ``kafka_reassign`` rebalances a topic whose partitions all sit on broker 1: its Great Expectations
  gates, the throttles, the deferred batches (the trigger reads the connection by its id) and the
  verification all go over mTLS;
- ``kafka_capacity_review`` with the Spark key skew: the snapshot, history and report, and Spark's
  Java Kafka client reading the sample with the connection's certificate and key.

Afterwards neither the key's password nor the decrypted key is in any artifact of the two runs:
task logs, XCom, the trigger kwargs, Airflow's database, the store's events and artifacts, Spark's
event logs. Each search first proves it can fail (its text holds the topic)."""
from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from kafkaops.platform import store
from kafkaops.platform.kafka import connection, metadata
from tests.dags.conftest import kafka_default_connection
from tests.dags.test_operation_dags import run
from tests.dags.test_secured_dags import Recorder, _captured, airflow_rows, spark_event_logs
from tests.integration.cli.test_reassign import create
from tests.integration.conftest import throttles_left
from tests.integration.platform.secured_node import KEY_PASSWORD, SecuredNodes

pytestmark = pytest.mark.integration

TOPIC = "mtls-ledger"
RECORDS = 1_200


@pytest.fixture(scope="module")
def nodes(airflow_db, tls_nodes: SecuredNodes) -> Iterator[SecuredNodes]:
    """The mTLS listener as the DAGs' kafka_default connection, and TOPIC's 4 partitions on broker 1 only."""
    settings = {k: v for k, v in tls_nodes.mtls_client.items() if k != "bootstrap.servers"}
    with kafka_default_connection(tls_nodes.mtls_bootstrap, settings):
        with connection.connect(tls_nodes.mtls_client, timeout_s=30.0) as conn:
            create(conn, TOPIC, [[1], [1], [1], [1]], records=RECORDS)
        yield tls_nodes


@pytest.fixture(scope="module")
def runs(dagbag, nodes: SecuredNodes, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The rebalance, then the capacity review with its key skew, recorded (test_secured_dags.Recorder)."""
    recorder = Recorder()
    folder = tmp_path_factory.mktemp("mtls-dags")
    with pytest.MonkeyPatch.context() as monkeypatch, _captured() as logs:
        recorder.install(monkeypatch)
        events = spark_event_logs(folder, monkeypatch)
        rebalance = run(dagbag, "kafka_reassign", operation="rebalance", topics=[TOPIC], dry_run=False,
                        approval="auto_approve", throttle_mb_per_s=50)
        review = run(dagbag, "kafka_capacity_review", topics=[TOPIC], key_skew=True,
                     sample_records=4 * RECORDS)  # each of the 4 partitions read whole
    (folder / "runs.log").write_text("\n".join(logs))
    yield {"rebalance": rebalance, "review": review, "recorder": recorder, "logs": logs, "log": folder / "runs.log",
           "spark_events": events}


def test_a_rebalance_moves_replicas_with_its_gates_and_trigger_over_mtls(runs, nodes: SecuredNodes) -> None:
    dag_run, record = runs["rebalance"]
    assert str(dag_run.state) == "success" and record["outcome"] == "success", (runs["log"], record)
    assert [g["gate"] for g in record["gates"]] == ["preflight", "plan", "post_move"], record["gates"]
    assert all(g["ok"] for g in record["gates"])
    assert record["plan"]["replica_moves"] >= 1 and record["throttles_set"] and record["throttles_removed"]
    deferred = [json.loads(t) for t in runs["recorder"].triggers]
    assert deferred and all(kwargs["kafka_conn_id"] == "kafka_default" for _, kwargs in deferred), deferred
    with connection.connect(nodes.mtls_client) as conn:
        after = metadata.snapshot(conn, topics=[TOPIC], sizes=False, groups=False)
        assert throttles_left(conn) == {}
    assert after.replicas_per_broker().get(2, 0) >= 1, after.replicas_per_broker()
    assert sum(p.end_offset for p in after.partitions) == RECORDS and not after.under_replicated
    assert store.current().lease(record["before"]["cluster_id"]).free


def test_a_capacity_review_with_its_spark_key_skew_over_mtls(runs, nodes: SecuredNodes) -> None:
    dag_run, record = runs["review"]
    states = {ti.task_id: str(ti.state) for ti in dag_run.get_task_instances()}
    assert str(dag_run.state) == "success" and record["outcome"] == "success", (runs["log"], record, states)
    assert states["key_skew"] == "success" and states["report"] == "success", states
    [note] = [n for n in record["notes"] if "report" in n]
    st = store.current()
    assert st.artifact(note["report"]["html"]).body.startswith(b"<!")
    report = json.loads(st.artifact(note["report"]["json"]).body)
    with connection.connect(nodes.mtls_client) as conn:
        cluster_id = metadata.describe_cluster(conn)[0]
    assert report["review"]["cluster_id"] == cluster_id
    skew = report["key_skew"]  # Spark's Java client read every record of the sample over mTLS
    assert skew["topic"] == TOPIC and skew["records"] == RECORDS and skew["keys"] == 50, skew


def decrypted_key_lines(nodes: SecuredNodes) -> list[str]:
    """The base64 lines of the client key decrypted (what the Spark apps hand Kafka's Java client)."""
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(nodes.client_key.read_bytes(), KEY_PASSWORD.encode())
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    return [line for line in pem.splitlines() if line and not line.startswith("-----")]


def test_no_artifact_holds_the_key_password_or_the_key(runs, nodes: SecuredNodes) -> None:
    done = [runs["rebalance"][0], runs["review"][0]]
    st = store.current()
    events = [e.data for r in done for e in st.events(r.dag_id, r.run_id)]
    artifacts = [f"== {p}\n" + st.artifact(p).body.decode(errors="replace") for p in st.artifact_paths()]
    xcoms, database = airflow_rows([r.run_id for r in done])
    spark_events = "\n".join(p.read_text(errors="replace") for p in runs["spark_events"].rglob("*") if p.is_file())
    searched = {
        "the task logs (stdout, stderr, log records)": ("\n".join(runs["logs"]), TOPIC),
        "XCom values": (xcoms, TOPIC),
        "the trigger kwargs the operator deferred with": ("\n".join(runs["recorder"].triggers), TOPIC),
        "Airflow's metadata database": (database, TOPIC),
        "the store's audit events": (json.dumps(events, default=str), TOPIC),
        "the store's artifacts (Data Docs, the report)": ("\n".join(artifacts), TOPIC),
        "Spark's event logs": (spark_events, "kafkaops-key-skew"),
    }
    secrets = {"the key's password": KEY_PASSWORD, "the decrypted key": decrypted_key_lines(nodes)[0]}
    for where, (text, known) in searched.items():
        assert known in text, f"{where}: the search would find nothing ({len(text)} characters without {known!r})"
        for what, secret in secrets.items():
            assert secret not in text, f"{what} leaked into {where}"
