"""A run's record as pages and the CLI show it: its events folded, with its operations row."""
from __future__ import annotations

from pathlib import Path

from kafkaops.platform import store as store_
from kafkaops.platform.state import AuditLog, read_record


def test_the_record_joins_the_events_and_the_operations_row(tmp_path: Path) -> None:
    store = store_.open_store(f"sqlite:///{tmp_path / 'k.db'}")
    assert read_record("d", "r", store=store) is None
    store.start_operation("d", "r", kind="drain", triggered_by="alice", params={"drain": [3]}, at=100.0)
    only_row = read_record("d", "r", store=store)
    assert only_row is not None and only_row["operation"] == "drain" and only_row["triggered_by"] == "alice"
    assert only_row["state"] == "running" and only_row["started_at"] == 100.0 and only_row["steps"] == []
    store.update_operation("d", "r", cluster_id="c1", state="finished", outcome="success")
    log = AuditLog("d", "r", store=store)
    log.append("started", operation="drain", dag_id="d", run_id="r", triggered_by="alice", params={"drain": [3]})
    log.append("outcome", outcome="success")
    record = read_record("d", "r", store=store)
    assert record is not None and record["cluster_id"] == "c1" and record["outcome"] == "success"
    assert record["params"] == {"drain": [3]} and record["state"] == "finished"
