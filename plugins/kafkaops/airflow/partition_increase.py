"""The partition-increase DAG as tasks: kafkaops.rekey.steps' steps on the shared lifecycle.

    begin (setup) -> preflight gate -> plan (in_place: refuses a keyed topic unless accepted)
      -> approval -> execute (in_place: create_partitions; migrate: target topics + rekey backfill)
      -> verify (in_place: the new assignment; migrate: the backfill gate) -> cut-over (migrate)
      -> finish (teardown: outcome into the audit record, cluster lock released)

``dags/kafka_partition_increase.py`` calls :func:`build_partition_increase_dag`; nothing here
touches Kafka at import time.
"""
from __future__ import annotations

import datetime as dt
from typing import Any

from airflow.sdk import DAG, Param, get_current_context, task
from airflow.sdk.exceptions import AirflowSkipException

from kafkaops.platform import lifecycle
from kafkaops.rekey import steps
from kafkaops.airflow import spark
from kafkaops.airflow.hooks import KafkaOpsHook
from kafkaops.airflow.lifecycle import COMMON_PARAMS, RETRIED, operation_dag, text_param
from kafkaops.airflow.operators import KafkaOpsApprovalOperator, failed_tasks, recorded, run_fields

PARAMS: dict[str, Param] = {
    "kafka_conn_id": COMMON_PARAMS["kafka_conn_id"],
    # the operator's choice: no default, so the form asks for it
    "topic": Param(type="string", minLength=1, title="Topic", description="The topic whose partition count grows."),
    "new_partition_count": Param(6, type="integer", minimum=1, title="New partition count",
                                 description="The topic's total partition count afterwards (larger than now)."),
    "mode": Param("migrate", type="string", enum=list(steps.MODES), title="Mode",
                  description="in_place: add partitions to the topic (keys move: per-key order breaks). migrate: "
                              "rekey into a new topic with the new count, order kept, then cut consumers over."),
    "key_rule": Param("record_key", type="string", title="Key rule",
                      description="Where the key comes from: record_key, field:<name> (a top-level JSON field) or "
                                  "jsonpath:$.a.b. Records without a key go to the dead-letter topic."),
    "target_topic": text_param("Target topic", "migrate: the new topic; empty for <topic>.v2 or the next free "
                                               "version."),
    "accept_ordering_break": Param(False, type="boolean", title="Accept the ordering break",
                                   description="in_place on a keyed topic: go ahead although records of a key end "
                                               "up in two steps. Refused otherwise."),
    "sample_records": Param(1000, type="integer", minimum=1, title="Sample size",
                            description="Records read (latest, spread over the partitions) to measure how many keys "
                                        "would change partition."),
    "cutover_group_suffix": text_param("Cut-over group suffix", "migrate: when set, commit each source group's "
                                                                "translated offsets on the target for group "
                                                                "<group><suffix>; empty: only record them."),
    "spark_conn_id": spark.SPARK_CONN_PARAM,
    "approval": COMMON_PARAMS["approval"],
    "dry_run": Param(True, type="boolean", title="Dry run",
                     description="Plan only (sample, target name, backfill plan): nothing is created or written."),
}


def context_of(context: Any) -> lifecycle.OperationContext:
    params = dict(context["params"])
    return steps.context(KafkaOpsHook(params.get("kafka_conn_id") or "kafka_default").get_config(), params,
                         **run_fields(context))


class PartitionApprovalOperator(KafkaOpsApprovalOperator):
    """:class:`KafkaOpsApprovalOperator` over the partition-increase params."""

    def operation_context(self, context: Any) -> lifecycle.OperationContext:
        return context_of(context)


def build_partition_increase_dag(dag_id: str, *, description: str, tags: list[str], doc_md: str) -> DAG:
    with operation_dag(dag_id, description=description, params=PARAMS, tags=tags, doc_md=doc_md) as dag:

        @task
        def begin() -> dict[str, Any]:
            context = get_current_context()
            return lifecycle.begin(context_of(context), dict(context["params"]))

        @task
        def preflight_gate() -> dict[str, Any]:
            ctx = context_of(get_current_context())
            with recorded(ctx, "preflight_gate"):
                return lifecycle.preflight(ctx)

        @task
        def plan(before: dict[str, Any]) -> dict[str, Any]:
            ctx = context_of(get_current_context())
            with recorded(ctx, "plan"):
                return steps.make_plan(ctx, before)

        @task
        def execute(plan_data: dict[str, Any]) -> dict[str, Any]:
            ctx = context_of(get_current_context())
            plan = steps.plan_of(plan_data)
            with recorded(ctx, "execute"):
                if plan.mode == "in_place":
                    return steps.execute_in_place(ctx, plan)
                launcher = spark.launcher_of(get_current_context())
                launcher.check()  # an unreachable master fails here, before the target topic exists
                steps.create_target(ctx, plan)
                return steps.run_backfill(ctx, plan, launcher=launcher)

        @task
        def verify(plan_data: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
            ctx = context_of(get_current_context())
            plan = steps.plan_of(plan_data)
            with recorded(ctx, "verify"):
                if plan.mode == "in_place":
                    return steps.verify_in_place(ctx, plan)
                return steps.backfill_gate(ctx, result)

        @task
        def cutover(plan_data: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
            ctx = context_of(get_current_context())
            plan = steps.plan_of(plan_data)
            if plan.mode == "in_place":
                raise AirflowSkipException("in_place: consumers keep their topic; nothing to cut over")
            with recorded(ctx, "cutover"):
                return steps.cutover(ctx, plan, before)

        @task
        def finish(started: dict[str, Any]) -> dict[str, Any]:
            context = get_current_context()
            return steps.finish(context_of(context), (started or {}).get("cluster_id"),
                                failed_tasks=failed_tasks(context))

        started = begin.override(**RETRIED)()
        before = preflight_gate.override(**RETRIED)()
        started >> before
        planned = plan.override(**RETRIED)(before)
        approval = PartitionApprovalOperator(
            task_id="approval", kind=steps.KIND, subject="Approve the kafkaops partition increase",
            body="{{ ti.xcom_pull(task_ids='plan')['summary'] }}", response_timeout=dt.timedelta(hours=24))
        planned >> approval
        result = execute.override(**RETRIED)(planned)
        approval >> result
        verified = verify.override(**RETRIED)(planned, result)
        switched = cutover.override(**RETRIED)(planned, before)
        verified >> switched
        done = finish.override(**RETRIED)(started)
        switched >> done.as_teardown(setups=started)
    return dag
