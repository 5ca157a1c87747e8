"""The operation record folded from its events in the store (SQLite here; both backends in
tests/integration/platform/test_store.py)."""
from __future__ import annotations

import pytest

from kafkaops.platform.state import AuditError, AuditEvent, AuditLog, list_records, summarize


def test_record_folds_events_into_steps_gates_and_outcome(local_store) -> None:
    local_store.start_operation("kafka_scale_out", "r1", kind="scale_out", triggered_by="alice", params={})
    log = AuditLog("kafka_scale_out", "r1", task_id="plan", try_number=1)
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

    record = AuditLog("kafka_scale_out", "r1").summary()
    assert record["triggered_by"] == "alice" and record["params"] == {"brokers": 1}
    assert record["before"] == {"cluster_id": "c1"}
    assert record["plan"]["moves"] == 3
    assert [(s["name"], s["status"], s["moves"], s["try_number"]) for s in record["steps"]] == [
        ("plan", "success", 3, 1)]
    assert record["steps"][0]["seconds"] >= 0
    assert record["gates"][0]["gate"] == "plan"
    assert "throttles_set" not in record and "batches" not in record  # the reassignment's fold (reassign.records)
    assert record["outcome"] == "success"
    assert [r["run_id"] for r in list_records("kafka_scale_out")] == ["r1"]
    assert {e.task_id for e in log.events()} == {"plan"}


def rerun_events() -> list[AuditEvent]:
    """A run whose first attempt submitted a batch and failed, then re-run (its ``begin`` again)."""
    return [AuditEvent(1, "started", {"operation": "x"}), AuditEvent(2, "step", {"name": "plan", "status": "failed",
                                                                                 "error": "boom"}),
            AuditEvent(3, "batch", {"index": 1}), AuditEvent(4, "outcome", {"outcome": "failed", "reason": "boom"}),
            AuditEvent(5, "started", {"operation": "x"}), AuditEvent(6, "step", {"name": "plan", "status": "started"})]


def test_a_rerun_shows_its_own_attempt_not_the_previous_outcome() -> None:
    record = summarize(rerun_events())
    assert record["outcome"] == "running" and record["ended_at"] is None and "outcome_reason" not in record
    assert record["attempt"] == 2 and [(s["name"], s["status"]) for s in record["steps"]] == [("plan", "running")]


def test_a_gates_data_docs_stored_after_its_verdict_point_its_entry_at_them() -> None:
    """A live cut-over records the gate's verdict without Data Docs, and the docs once the switch is asked."""
    record = summarize([AuditEvent(1, "gate", {"gate": "preflight", "ok": True, "docs_path": "docs/r/preflight/i.html"}),
                        AuditEvent(2, "gate", {"gate": "backfill", "ok": True, "docs_path": None}),
                        AuditEvent(3, "gate", {"gate": "backfill", "docs_of": True,
                                               "docs_path": "docs/r/backfill/index.html"})])
    assert [(g["gate"], g["ok"], g["docs_path"]) for g in record["gates"]] == [
        ("preflight", True, "docs/r/preflight/i.html"), ("backfill", True, "docs/r/backfill/index.html")]


def test_a_retried_step_is_one_row_counting_its_tries() -> None:
    record = summarize([AuditEvent(1, "step", {"name": "execute", "status": "started"}, "execute", 1),
                        AuditEvent(2, "step", {"name": "execute", "status": "failed", "error": "x"}, "execute", 1),
                        AuditEvent(3, "step", {"name": "execute", "status": "started"}, "execute", 2),
                        AuditEvent(4, "step", {"name": "execute", "status": "success"}, "execute", 2)])
    assert [(s["name"], s["status"], s["tries"], s["try_number"]) for s in record["steps"]] == [
        ("execute", "success", 2, 2)]


def test_a_step_started_again_in_the_same_try_is_one_try_and_earlier_tries_say_how_they_ended() -> None:
    wait = "wait_until_registered"
    record = summarize([AuditEvent(1, "step", {"name": wait, "status": "started"}, wait, 1),
                        AuditEvent(2, "step", {"name": wait, "status": "started"}, wait, 1),  # resumed after deferral
                        AuditEvent(3, "step", {"name": "plan", "status": "started"}, "plan", 1),
                        AuditEvent(4, "step", {"name": "plan", "status": "failed", "error": "timeout"}, "plan", 1),
                        AuditEvent(5, "step", {"name": "plan", "status": "started"}, "plan", 2),
                        AuditEvent(6, "step", {"name": "plan", "status": "success"}, "plan", 2),
                        AuditEvent(7, "step", {"name": wait, "status": "success"}, wait, 1)])
    assert [(s["name"], s["status"], s["tries"], s["earlier"]) for s in record["steps"]] == [
        (wait, "success", 1, []), ("plan", "success", 2, ["try 1: failed: timeout"])]
    assert record["steps"][0]["seconds"] == 6


def test_unknown_event_kind_is_refused(local_store) -> None:
    with pytest.raises(AuditError, match="kind 'oops' is unknown"):
        AuditLog("d", "r").append("oops")
    assert AuditLog("d", "r").events() == []


def record_events() -> list[AuditEvent]:
    return [AuditEvent(1, "started", {"operation": "scale_out"}),
            AuditEvent(2, "step", {"name": "plan", "status": "started"}),
            AuditEvent(3, "step", {"name": "plan", "status": "success"}),
            AuditEvent(4, "step", {"name": "execute_batches", "status": "started"})]  # then its worker died


def test_the_outcome_counts_tasks_airflow_marks_failed_even_without_a_recorded_failure() -> None:
    from kafkaops.platform.lifecycle import outcome_of

    record = summarize(record_events())
    outcome, reason = outcome_of(record, dry_run=False)
    assert outcome == "failed" and "execute_batches did not record its end (its task died)" in reason
    finished = summarize([*record_events(), AuditEvent(5, "step", {"name": "execute_batches", "status": "success"})])
    assert outcome_of(finished, dry_run=False) == ("success", "")
    outcome, reason = outcome_of(record, dry_run=True, failed_tasks=["remove_throttles"])
    assert outcome == "failed" and "before it recorded a step" in reason
    rejected = summarize([AuditEvent(1, "approval", {"approved": False, "by": "bob"})])
    assert outcome_of(rejected, dry_run=False)[0] == "rejected"


def test_a_final_error_in_a_check_step_refuses_the_run_and_any_other_failure_fails_it() -> None:
    from kafkaops.errors import ConfigError, KafkaUnreachable
    from kafkaops.platform.gates import GateFailed, GateResult
    from kafkaops.platform.lifecycle import outcome_of, refuses

    assert refuses("preflight_gate", ConfigError("quiesce=acl needs an authorizer"))
    assert refuses("plan_gate", GateFailed("plan gate failed", GateResult("plan", ok=False, failures=("too many bytes",))))
    assert not refuses("plan", KafkaUnreachable("no broker answered"))  # asking again may work: not final
    assert not refuses("execute", ConfigError("found only after the copy began"))  # something may have changed
    refused = summarize([AuditEvent(1, "step", {"name": "preflight_gate", "status": "started"}),
                         AuditEvent(2, "step", {"name": "preflight_gate", "status": "failed", "refusal": True,
                                                "error": "ConfigError: quiesce=acl cannot stop the producers"})])
    outcome, reason = outcome_of(refused, dry_run=False, failed_tasks=["preflight_gate"])
    assert outcome == "refused" and "refused at preflight_gate, before anything changed" in reason
    assert "quiesce=acl cannot stop the producers" in reason
    # a refusal beside a real failure (here a task that died unrecorded) is a failure
    assert outcome_of(refused, dry_run=False, failed_tasks=["preflight_gate", "finish"])[0] == "failed"
    unrefused = summarize([AuditEvent(1, "step", {"name": "plan", "status": "failed", "error": "KafkaUnreachable"})])
    assert outcome_of(unrefused, dry_run=False)[0] == "failed"


def test_a_task_failed_by_a_later_step_of_its_own_counts_once_and_a_refused_plan_gate_refuses() -> None:
    """The plan task records the step plan (success), then plan_gate (failed): Airflow marks the task plan
    failed, and the outcome names plan_gate alone."""
    from kafkaops.platform.lifecycle import outcome_of

    record = summarize([AuditEvent(1, "step", {"name": "plan", "status": "started"}),
                        AuditEvent(2, "step", {"name": "plan", "status": "success"}),
                        AuditEvent(3, "step", {"name": "plan_gate", "status": "started"}),
                        AuditEvent(4, "step", {"name": "plan_gate", "status": "failed", "refusal": True,
                                               "error": "GateFailed: gate plan failed"})])
    outcome, reason = outcome_of(record, dry_run=False, failed_tasks=["plan"])
    assert (outcome, reason) == ("refused", "refused at plan_gate, before anything changed: GateFailed: gate plan "
                                            "failed")
    # with no recorded failure, a task Airflow marks failed still fails the run
    fine = summarize([AuditEvent(1, "step", {"name": "plan", "status": "success"})])
    assert outcome_of(fine, dry_run=False, failed_tasks=["plan"])[0] == "failed"
