from __future__ import annotations

import json
from pathlib import Path

import pytest

from kafkaops.platform.state import AuditError, AuditLog, list_records


def test_record_folds_events_into_steps_gates_and_outcome(tmp_path: Path) -> None:
    log = AuditLog.for_run("kafka_scale_out", "manual__2026-11-22T10:00", root=tmp_path)
    log.append("started", operation="scale_out", dag_id="kafka_scale_out", run_id="r1", triggered_by="alice",
               params={"brokers": 1})
    log.append("snapshot", stage="before", cluster={"cluster_id": "c1"})
    log.append("step", name="plan", status="started")
    log.append("plan", moves=3, kafka_json={"version": 1, "partitions": []})
    log.append("step", name="plan", status="success", moves=3)
    log.append("gate", gate="plan", ok=True, failures=[])
    log.append("throttle_set", brokers=[1, 4], rate=1_000_000)
    log.append("throttle_removed", brokers=[1, 4])
    log.append("outcome", outcome="success")

    record = AuditLog(log.path).summary()
    assert record["triggered_by"] == "alice" and record["params"] == {"brokers": 1}
    assert record["before"] == {"cluster_id": "c1"}
    assert record["plan"]["moves"] == 3
    assert [(s["name"], s["status"], s["moves"]) for s in record["steps"]] == [("plan", "success", 3)]
    assert record["steps"][0]["seconds"] >= 0
    assert record["gates"][0]["gate"] == "plan"
    assert record["throttles_set"][0]["brokers"] == record["throttles_removed"][0]["brokers"]
    assert record["outcome"] == "success"
    assert list_records("kafka_scale_out", root=tmp_path) == [log.path]


def test_a_torn_last_line_keeps_the_rest_of_the_record(tmp_path: Path) -> None:
    log = AuditLog.for_run("d", "r", root=tmp_path)
    log.append("started", operation="x")
    with log.path.open("a") as f:
        f.write('{"ts": 1, "kind": "step", "da')
    assert log.summary()["operation"] == "x"
    assert log.summary()["outcome"] == "running"


def test_damage_in_the_middle_is_an_error(tmp_path: Path) -> None:
    log = AuditLog.for_run("d", "r", root=tmp_path)
    log.path.parent.mkdir(parents=True)
    log.path.write_text("garbage\n" + json.dumps({"ts": 1, "kind": "note", "data": {}}) + "\n")
    with pytest.raises(AuditError, match=r"r.jsonl:1 is not JSON"):
        log.events()


def test_unknown_event_kind_is_refused(tmp_path: Path) -> None:
    with pytest.raises(AuditError, match="kind 'oops' is unknown"):
        AuditLog.for_run("d", "r", root=tmp_path).append("oops")
