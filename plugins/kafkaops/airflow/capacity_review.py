"""The scheduled capacity review as tasks: kafkaops.capacity.steps's steps.

    begin (setup: the record, the cluster lock) -> snapshot -> history_append -> key_skew (optional,
      Spark) | load (the brokers' load from Prometheus, kafkaops.capacity.load) -> review -> report -> scale_out_proposal -> finish (teardown: outcome, lock released)
      -> propose_scale_out (TriggerDagRunOperator: a kafka_scale_out run with approval=manual,
         dry_run=false, which waits at its approval for a person; after finish, so the lock is free)

The schedule is the builder's ``schedule`` argument; ``dags/kafka_capacity_review.py`` takes it from
the Airflow Variable ``kafkaops_capacity_review_schedule`` in its environment form
(``AIRFLOW_VAR_KAFKAOPS_CAPACITY_REVIEW_SCHEDULE``, read without a metadata-DB call), default daily.
It runs at the cron's coming ticks only (:func:`timetable_of`): triggering the review by hand, which
unpauses it, starts no scheduled run besides the one asked for.
Nothing here touches Kafka at import time.
"""
from __future__ import annotations

import datetime as dt
import os
from typing import Any

from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator
from airflow.sdk import DAG, CronTriggerTimetable, Param, get_current_context, task
from airflow.sdk.exceptions import AirflowSkipException

from kafkaops.capacity import steps
from kafkaops.errors import ConfigError
from kafkaops.platform import lifecycle
from kafkaops.platform import params as form
from kafkaops.airflow import spark_submit
from kafkaops.airflow.hooks import KafkaOpsHook, prometheus_url
from kafkaops.airflow.operation_dag import RETRIED, operation_dag, params_of, task_of, value_of
from kafkaops.airflow.operators import failed_tasks, refuse_unread_params, run_fields



class ProposeScaleOut(TriggerDagRunOperator):
    """The provider's TriggerDagRunOperator whose ``note`` is a template too (the provider renders only
    its run id, dag id, conf and dates): the proposed run's note names the review run that proposed it."""

    template_fields = (*TriggerDagRunOperator.template_fields, "note")


SCHEDULE_VARIABLE = "kafkaops_capacity_review_schedule"
DEFAULT_SCHEDULE = "@daily"

PARAMS: dict[str, Param] = {
    **params_of((form.KAFKA_CONN_ID, steps.TOPICS, steps.TARGET_RECORDS, steps.PER_CONSUMER, steps.MAX_CONSUMERS,
                 steps.PER_BROKER, steps.DISK_PER_BROKER, steps.KEY_SKEW)),
    "spark_conn_id": spark_submit.SPARK_CONN_PARAM,
    **params_of((steps.SKEW_TOPIC, steps.SAMPLE_RECORDS, steps.CANDIDATE_KEY_FIELD, steps.CANDIDATE_PARTITIONS,
                 steps.PROPOSE_SCALE_OUT, steps.SCALE_OUT_INVENTORY, steps.PROMETHEUS_CONN_ID, steps.PROMETHEUS_URL,
                 steps.PROMETHEUS_SELECTOR, steps.HOST_NETWORK_DEVICES, steps.LOAD_WINDOW_HOURS, steps.MAX_CPU, steps.MAX_NETWORK,
                 steps.NETWORK_CAPACITY, steps.MIN_HANDLER_IDLE, steps.MAX_PRODUCE_P99)),
}
"""The form: the specs of kafkaops.capacity.steps."""


def schedule_from_env() -> str | None:
    """The schedule: the Variable's environment form, else daily; ``none`` turns it off."""
    value = os.environ.get("AIRFLOW_VAR_" + SCHEDULE_VARIABLE.upper(), DEFAULT_SCHEDULE).strip()
    return None if value.lower() in ("", "none", "null") else value


def timetable_of(schedule: str | None) -> CronTriggerTimetable | None:
    """The review's timetable for a cron ``schedule``: a run at each coming tick (UTC), none for a
    tick already past. Airflow's catch-up-less scheduling runs the latest past tick at once when a
    DAG with a start date is unpaused (and the Trigger button unpauses it); without a start date,
    ``run_immediately=timedelta(0)`` makes the first run the next tick (airflow/timetables/trigger.py,
    ``_TriggerTimetable.next_dagrun_info`` and ``CronTriggerTimetable._calc_first_run``)."""
    if schedule is None:
        return None
    return CronTriggerTimetable(schedule, timezone="UTC", run_immediately=dt.timedelta(0))


def _run() -> tuple[Any, steps.CapacityParams, str, str]:
    context = get_current_context()
    dag_run = context["dag_run"]
    run_fields(context)  # opens the kafkaops store of this deployment
    return context, steps.CapacityParams.from_params(dict(context["params"])), dag_run.dag_id, dag_run.run_id


def _record(context: Any) -> Any:
    ti = context["ti"]
    return steps.record(context["dag_run"].dag_id, context["dag_run"].run_id, task_id=ti.task_id,
                        try_number=ti.try_number)


def _context() -> tuple[Any, lifecycle.OperationContext]:
    context = get_current_context()
    params = steps.CapacityParams.from_params(dict(context["params"]))
    return context, lifecycle.OperationContext(conn_config=KafkaOpsHook(params.kafka_conn_id).get_config(),
                                               params=params, **run_fields(context))  # type: ignore[arg-type]


def _snapshot() -> dict[str, Any]:
    context, params, _, _ = _run()
    return steps.take_snapshot(KafkaOpsHook(params.kafka_conn_id).get_config(), params, _record(context))


def _load(cluster: dict[str, Any]) -> dict[str, Any]:
    _, params, _, _ = _run()
    url = params.prometheus_url or prometheus_url(params.prometheus_conn_id)
    why = (f"no Prometheus: there is no Airflow connection '{params.prometheus_conn_id}' (type http, the server that "
           "scrapes the brokers' JMX exporters) and no prometheus_url")
    return steps.take_load(url, cluster, params, why_none=why)


def _key_skew(cluster: dict[str, Any]) -> dict[str, Any] | None:
    _, params, _, run = _run()
    if not params.key_skew:
        raise AirflowSkipException("key_skew is off: no Spark sample this run")
    return steps.run_key_skew(KafkaOpsHook(params.kafka_conn_id).get_config(), cluster, params, run,
                              launcher=spark_submit.launcher_of(get_current_context()))


def _scale_out_proposal(review_data: dict[str, Any], scale_out_dag_id: str) -> dict[str, Any]:
    context, params, _, _ = _run()
    if not params.propose_scale_out:
        raise AirflowSkipException("propose_scale_out is off")
    conf = steps.scale_out_proposal(review_data, params)
    if conf is None:
        raise AirflowSkipException("the review does not call for more brokers")
    _record(context).append("note", text=f"proposed {scale_out_dag_id}: add "
                                         f"{conf['add_brokers']} broker(s); waits for manual approval",
                                         conf=conf)
    return conf


def _finish(started: dict[str, Any]) -> dict[str, Any]:
    context, ctx = _context()
    return lifecycle.finish(ctx, (started or {}).get("cluster_id"), failed_tasks=failed_tasks(context),
                            next_steps={"success": steps.NEXT_STEPS})


def _skew_or_none(skew: Any) -> dict[str, Any] | None:
    """The key-skew task's result; None when it was skipped (Airflow passes no dict then)."""
    return skew if isinstance(skew, dict) else None


def build_capacity_review_dag(dag_id: str, *, schedule: str | None = DEFAULT_SCHEDULE, description: str,
                              tags: list[str], doc_md: str, scale_out_dag_id: str = "kafka_scale_out") -> DAG:
    """Wiring only: each task calls a step of :mod:`kafkaops.capacity.steps` (through the helpers above)."""
    with operation_dag(dag_id, description=description, params=PARAMS, tags=tags, doc_md=doc_md,
                       schedule=timetable_of(schedule), start_date=None) as dag:

        @task
        def begin() -> dict[str, Any]:
            try:
                context, ctx = _context()
            except ConfigError as err:  # params that cannot be read: the run is refused, said in its record too
                refuse_unread_params(get_current_context(), steps.KIND, err)
                raise
            return lifecycle.begin(ctx, dict(context["params"]))

        @task
        def snapshot() -> dict[str, Any]:
            return _snapshot()

        @task
        def history_append(cluster: dict[str, Any]) -> dict[str, Any]:
            return steps.append_history(cluster, _run()[3])

        @task
        def key_skew(cluster: dict[str, Any]) -> dict[str, Any] | None:
            return _key_skew(cluster)

        @task
        def load(cluster: dict[str, Any]) -> dict[str, Any]:
            return _load(cluster)

        @task(trigger_rule="none_failed")
        def review(cluster: dict[str, Any], history: dict[str, Any], load: dict[str, Any],
                   skew: Any = None) -> dict[str, Any]:
            return steps.make_review(cluster, _run()[1], _skew_or_none(skew), load)

        @task(trigger_rule="none_failed")
        def report(review_data: dict[str, Any], skew: Any = None) -> dict[str, str]:
            context, _, _, run = _run()
            return steps.make_report(review_data, _skew_or_none(skew), run, _record(context))

        @task
        def scale_out_proposal(review_data: dict[str, Any]) -> dict[str, Any]:
            return _scale_out_proposal(review_data, scale_out_dag_id)

        @task
        def finish(started: dict[str, Any]) -> dict[str, Any]:
            return _finish(started)

        started = begin.override(**RETRIED)()
        cluster = snapshot.override(**RETRIED)()
        started >> cluster
        history = history_append(value_of(cluster))
        skew = key_skew.override(**RETRIED)(value_of(cluster))
        history >> skew
        brokers_load = load(value_of(cluster))  # never raises for Prometheus: what it cannot read, it names
        reviewed = review(value_of(cluster), value_of(history), value_of(brokers_load), value_of(skew))
        reported = report(value_of(reviewed), value_of(skew))
        proposal = scale_out_proposal(value_of(reviewed))
        reported >> proposal
        trigger = ProposeScaleOut(
            task_id="propose_scale_out", trigger_dag_id=scale_out_dag_id,
            conf=value_of(proposal), wait_for_completion=False,
            note="proposed by the capacity review {{ run_id }}: approve or reject it in its approval step")
        done = finish.override(**RETRIED)(value_of(started))
        [reported, proposal] >> done.as_teardown(setups=task_of(started))
        [proposal, done] >> trigger  # skipped with the proposal
    return dag
