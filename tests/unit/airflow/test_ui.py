"""The operation-record pages the plugin serves in Airflow's UI."""
from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from kafkaops.platform.state import AuditLog
from tests.unit.clusters import three_brokers_one_topic


@pytest.fixture
def client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> TestClient:
    monkeypatch.setenv("KAFKAOPS_STATE_DIR", str(tmp_path))
    from kafkaops.airflow.ui import app

    return TestClient(app)


def test_a_record_page_shows_who_what_gates_plan_and_clusters(client: TestClient) -> None:
    log = AuditLog.for_run("kafka_scale_out", "manual__2026-11-22T10:00:00+00:00")
    log.append("started", operation="scale_out", dag_id="kafka_scale_out", run_id="manual__2026-11-22T10:00:00+00:00",
               triggered_by="alice", params={"add_brokers": 1})
    log.append("snapshot", stage="before", cluster=three_brokers_one_topic().to_dict())
    log.append("plan", summary="scale-out: 3 partitions change", diff=["orders-0: [1,2,3] -> [4,2,3]"])
    log.append("gate", gate="preflight", ok=True, failures=[], docs_path="kafka_scale_out/x/preflight/index.html")
    log.append("approval", approved=True, by="bob", mode="manual")
    log.append("note", text="capacity report: /x/report.html", url="/kafkaops/capacity/c1/r1/report.html")
    log.append("outcome", outcome="success")

    page = client.get("/records/kafka_scale_out/manual__2026-11-22T10:00:00+00:00")
    assert page.status_code == 200
    for text in ("scale_out: success", "alice", "orders-0: [1,2,3] -&gt; [4,2,3]", "preflight", "Data Docs",
                 "Cluster before", "bob", 'href="/kafkaops/capacity/c1/r1/report.html"'):
        assert text in page.text
    as_json = client.get("/records/kafka_scale_out/manual__2026-11-22T10:00:00+00:00.json").json()
    assert as_json["outcome"] == "success" and as_json["triggered_by"] == "alice"
    assert "kafka_scale_out" in client.get("/records").text


def test_an_unknown_run_is_a_404(client: TestClient) -> None:
    response = client.get("/records/kafka_scale_out/nope")
    assert response.status_code == 404 and "no kafkaops record" in response.text


def test_the_plugin_adds_a_dag_run_tab() -> None:
    from kafkaops.airflow.plugin import KafkaOpsPlugin

    views = {v["name"]: v for v in KafkaOpsPlugin.external_views}
    assert views["Operation record"]["destination"] == "dag_run"
    assert "{RUN_ID}" in views["Operation record"]["href"]
    assert KafkaOpsPlugin().fastapi_apps[0]["url_prefix"] == "/kafkaops"
