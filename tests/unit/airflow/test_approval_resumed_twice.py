"""An approval's answer delivered twice (Airflow 3.3's deferred-task race resumes a task again) is recorded once."""
from __future__ import annotations

import datetime as dt
from types import SimpleNamespace

from kafkaops.airflow.operators import KafkaOpsApprovalOperator
from kafkaops.platform import lifecycle
from kafkaops.reassign import steps


def test_the_same_answer_delivered_again_is_recorded_once(local_store, monkeypatch) -> None:
    local_store.start_operation("kafka_reassign", "r1", kind="rebalance", triggered_by="t", params={})
    ctx = lifecycle.OperationContext(dag_id="kafka_reassign", run_id="r1", conn_config={}, task_id="approval",
                                     try_number=1, params=steps.OperationParams(kind="rebalance", approval="manual"))
    ctx.audit.append("started", operation="rebalance", dag_id="kafka_reassign", run_id="r1", params={})
    op = KafkaOpsApprovalOperator(task_id="approval", kind="rebalance", subject="Approve", body="the plan")
    monkeypatch.setattr(op, "operation_context", lambda context: ctx)
    context = {"dag_run": SimpleNamespace(triggering_user_name="operator"), "params": {}}
    event = {"chosen_options": [op.APPROVE], "params_input": {}, "responded_at": dt.datetime.now(dt.timezone.utc),
             "responded_by_user": {"id": "anna", "name": "anna"}}
    first = op.execute_complete(context, event)
    events = ctx.audit.events()
    again = op.execute_complete(context, dict(event))
    assert again == first and first["chosen_options"] == [op.APPROVE]
    assert ctx.audit.events() == events  # nothing recorded the second time
    record = ctx.audit.summary()
    assert record["approval"]["approved"] is True and record["approval"]["by"] == "anna"
    assert [s["status"] for s in record["steps"] if s["name"] == "approval"] == ["success"]
