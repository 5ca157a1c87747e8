"""The capacity-review DAG (its import without Kafka access: test_dag_integrity): daily by default; proposes a scale-out
only as a run that waits for a person (approval=manual, dry_run=false)."""
from __future__ import annotations

from pathlib import Path

from kafkaops.capacity import review as capacity
from kafkaops.capacity import steps as capacity_run

REPO = Path(__file__).resolve().parents[2]
DAG_ID = "kafka_capacity_review"


def test_shape_schedule_and_params(dagbag) -> None:
    assert dagbag.import_errors == {}
    dag = dagbag.dags[DAG_ID]
    assert "kafkaops" in dag.tags and dag.max_active_runs == 1
    assert str(getattr(dag, "schedule", None) or dag.timetable.summary) in ("@daily", "0 0 * * *")
    assert [t.task_id for t in sorted(dag.tasks, key=lambda t: len(t.upstream_task_ids))][:1] == ["begin"]
    assert dag.get_task("snapshot").upstream_task_ids == {"begin"}
    assert dag.get_task("finish").is_teardown and dag.get_task("begin").is_setup
    # the proposed scale-out starts after finish released the cluster lock
    assert dag.get_task("propose_scale_out").upstream_task_ids == {"scale_out_proposal", "finish"}
    assert dag.get_task("review").upstream_task_ids == {"snapshot", "history_append", "key_skew"}
    assert dag.params["propose_scale_out"] is False and dag.params["key_skew"] is False
    assert all(dag.params.get_param(k).description for k in dag.params)
    trigger = dag.get_task("propose_scale_out")
    assert trigger.trigger_dag_id == "kafka_scale_out" and trigger.wait_for_completion is False


def test_schedule_comes_from_the_variable_env_form(monkeypatch) -> None:
    from kafkaops.airflow.capacity_review import schedule_from_env

    monkeypatch.delenv("AIRFLOW_VAR_KAFKAOPS_CAPACITY_REVIEW_SCHEDULE", raising=False)
    assert schedule_from_env() == "@daily"
    monkeypatch.setenv("AIRFLOW_VAR_KAFKAOPS_CAPACITY_REVIEW_SCHEDULE", "0 6 * * 1")
    assert schedule_from_env() == "0 6 * * 1"
    monkeypatch.setenv("AIRFLOW_VAR_KAFKAOPS_CAPACITY_REVIEW_SCHEDULE", "none")
    assert schedule_from_env() is None


def test_the_proposal_asks_for_manual_approval_and_a_real_run() -> None:
    rec = capacity.recommend_brokers(10_000, 1_000, current=3)  # ceil(10000 / 700) = 15 -> add 12
    review = capacity.Review(cluster_id="c", taken_at=1.0, previous_taken_at=None, findings=(),
                             recommendations=(rec,), broker_load=(), throughput=(), lag=())
    params = capacity_run.CapacityParams.from_params({"propose_scale_out": True, "scale_out_inventory": "inv.json"})
    conf = capacity_run.scale_out_proposal(review.to_dict(), params)
    assert conf == {"kafka_conn_id": "kafka_default", "add_brokers": 12, "inventory": "inv.json", "topics": [],
                    "approval": "manual", "dry_run": False}
    enough = capacity.recommend_brokers(10, 1_000, current=3)
    assert capacity_run.scale_out_proposal(
        capacity.Review("c", 1.0, None, (), (enough,), (), (), ()).to_dict(), params) is None
