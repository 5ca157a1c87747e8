"""The capacity-review DAG (its import without Kafka access: test_dag_integrity): daily by default; proposes a scale-out
only as a run that waits for a person (approval=manual, dry_run=false)."""
from __future__ import annotations

from pathlib import Path

import pytest

from kafkaops.capacity import review as capacity
from kafkaops.capacity import steps as capacity_run

REPO = Path(__file__).resolve().parents[2]
DAG_ID = "kafka_capacity_review"


def test_shape_schedule_and_params(dagbag) -> None:
    assert dagbag.import_errors == {}
    dag = dagbag.dags[DAG_ID]
    assert "kafkaops" in dag.tags and dag.max_active_runs == 1
    assert (dag.schedule.expression, str(dag.schedule.timezone)) == ("0 0 * * *", "UTC")  # daily, future ticks only
    assert [t.task_id for t in sorted(dag.tasks, key=lambda t: len(t.upstream_task_ids))][:1] == ["begin"]
    assert dag.get_task("snapshot").upstream_task_ids == {"begin"}
    assert dag.get_task("finish").is_teardown and dag.get_task("begin").is_setup
    # the proposed scale-out starts after finish released the cluster lock
    assert dag.get_task("propose_scale_out").upstream_task_ids == {"scale_out_proposal", "finish"}
    assert dag.get_task("review").upstream_task_ids == {"snapshot", "history_append", "key_skew", "load"}
    assert dag.get_task("load").upstream_task_ids == {"snapshot"} and dag.get_task("load").retries == 0
    for name in ("prometheus_conn_id", "prometheus_url", "network_capacity_mb_per_s", "max_cpu_percent"):
        assert name in dag.params
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


@pytest.mark.parametrize("now", ["2026-11-23T00:30:00", "2026-11-23T16:00:00"])
def test_unpausing_it_schedules_the_next_tick_not_the_one_just_past(dagbag, monkeypatch, now: str) -> None:
    """What the scheduler asks the serialized DAG when the Trigger button unpauses it (no scheduled
    run yet): the next daily tick, tomorrow 00:00 UTC; never a run for today's 00:00 beside the
    manual one. With a start date, catch-up-less scheduling would run today's 00:00 at once."""
    import datetime as dt

    import airflow.timetables.trigger as trigger
    from airflow.serialization.serialized_objects import DagSerialization
    from airflow.timetables.base import DagRunInfo

    from kafkaops.airflow.capacity_review import build_capacity_review_dag

    monkeypatch.setattr(trigger, "utcnow", lambda: dt.datetime.fromisoformat(now).replace(tzinfo=dt.timezone.utc))
    tomorrow, today = (dt.datetime(2026, 11, d, tzinfo=dt.timezone.utc) for d in (24, 23))

    def scheduled(dag, last=None):
        info = DagSerialization.from_dict(DagSerialization.to_dict(dag)).next_dagrun_info(last_automated_run_info=last)
        return info.run_after

    assert scheduled(dagbag.dags[DAG_ID]) == tomorrow
    yesterday = DagRunInfo.interval(today - dt.timedelta(days=1), today - dt.timedelta(days=1))
    assert scheduled(dagbag.dags[DAG_ID], yesterday) == today  # a daily run that ran yesterday runs today
    with_start = build_capacity_review_dag("with_start", description="d", tags=["t"], doc_md="d")
    with_start.start_date = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    assert scheduled(with_start) == today  # the extra run this timetable avoids


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
