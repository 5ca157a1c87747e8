"""The partition-increase DAG as tasks: kafkaops.rekey.steps' steps on the shared lifecycle.

    begin (setup) -> preflight gate -> plan (in_place: refuses a keyed topic unless accepted)
      -> approval -> execute (in_place: create_partitions; migrate: target topics + rekey backfill)
      -> verify (in_place: the new assignment; migrate: the backfill gate) -> cut-over (migrate, not live)
      -> [live: catch_up (the tail copy) -> quiesce (the quiesce, the last tail part, the gate over the whole copy and the
          cut-over with its groups settled, in one task: no scheduler hop inside the write window)
          -> switch (a person) -> confirm (observed)] -> abandon (live, before the switch: roll back)
      -> finish (teardown: outcome into the audit record, cluster lock released)

``dags/kafka_partition_increase.py`` calls :func:`build_partition_increase_dag`; nothing here
touches Kafka at import time.
"""
from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from typing import Any

from airflow.sdk import DAG, Param, TriggerRule, get_current_context, task
from airflow.providers.standard.operators.hitl import ApprovalOperator
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from kafkaops.errors import ConfigError
from kafkaops.platform import lifecycle, state
from kafkaops.platform import params as form
from kafkaops.rekey import migration, steps, streams_steps
from kafkaops.rekey.backfill import BackfillPlan
from kafkaops.rekey.streams import StreamsCut, StreamsPlan
from kafkaops.rekey.records import (Action, ActionNote, CatchUp, PassResult, StreamsBackfill, StreamsCatchUp,
                                    SwitchDecision, TargetReady)
from kafkaops.airflow import spark_submit
from kafkaops.airflow.hooks import KafkaOpsHook
from kafkaops.airflow.operation_dag import LONG_TASK_TIMEOUT, RETRIED, operation_dag, params_of, task_of, value_of
from kafkaops.airflow.operators import (KafkaOpsApprovalOperator, answer_by_param, answer_of, answered, failed_tasks,
                                        recorded, refuse_unread_params, refused_self_approval, run_fields)

PARAMS: dict[str, Param] = {
    **params_of((form.KAFKA_CONN_ID, steps.TOPIC, steps.NEW_PARTITION_COUNT, steps.MODE, steps.KEY_RULE,
                 steps.TARGET_TOPIC, steps.ACCEPT_ORDERING_BREAK, steps.SAMPLE_RECORDS, steps.CUTOVER_GROUP_SUFFIX,
                 migration.QUIESCE, migration.PRINCIPALS, migration.CATCH_UP_LAG, migration.CATCH_UP_BUDGET,
                 migration.QUIET, migration.QUIESCE_TIMEOUT, migration.SWITCH_TIMEOUT, migration.DELETE_TARGET,
                 steps.CUTOVER_GROUPS, steps.STREAMS_APPLICATION_ID, steps.STREAMS_NEW_APPLICATION_ID,
                 steps.STREAMS_STORE_KINDS, steps.STREAMS_STOP_TIMEOUT, steps.MAX_PARTITION_COUNT)),
    "spark_conn_id": spark_submit.SPARK_CONN_PARAM,
    **params_of((form.APPROVAL, steps.DRY_RUN)),
}
"""The form: the specs of kafkaops.rekey (the topic has no default: the form asks for it)."""


def context_of(context: Any) -> lifecycle.OperationContext:
    """The run's context: its params read first (a connection id that is no text a run can take is refused
    naming the param, not looked up), then its connection."""
    params = dict(context["params"])
    steps.PartitionParams.from_params(params)
    return steps.context(KafkaOpsHook(params.get("kafka_conn_id") or "kafka_default").get_config(), params,
                         **run_fields(context))


class PartitionApprovalOperator(KafkaOpsApprovalOperator):
    """:class:`KafkaOpsApprovalOperator` over the partition-increase params."""

    def operation_context(self, context: Any) -> lifecycle.OperationContext:
        return context_of(context)


def live_only(ctx: lifecycle.OperationContext, plan: steps.PartitionPlan, step: str) -> None:
    """Skip ``step`` unless the run is a live migration (migrate mode, quiesce manual or acl)."""
    if plan.mode != steps.Mode.MIGRATE or not ctx.params.policy.live:
        raise AirflowSkipException(f"{step}: only in a live migration (mode=migrate, quiesce manual or acl)")


class SwitchOperator(ApprovalOperator):
    """The switch, a person's step: the body names the topics and the offsets committed on the target (the
    quiesce task has asked for the switch in the record already). Approve once producers and consumers run
    on the target; Reject abandons the migration (the source stays authoritative). ``approval`` param
    auto_*: answered by the param, recorded as such."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(ignore_downstream_trigger_rules=False, **kwargs)

    def execute(self, context: Any) -> Any:
        ctx = context_of(context)
        live_only(ctx, steps.plan_of(context["ti"].xcom_pull(task_ids="plan")), "switch")
        return answer_by_param(self, ctx, context, ask=lambda: super(SwitchOperator, self).execute(context))

    def execute_complete(self, context: Any, event: dict[str, Any]) -> Any:
        ctx = context_of(context)
        if refused_self_approval(self, ctx, context, event):
            return ApprovalOperator.execute(self, context)  # the same question again; Airflow clears the answer
        chosen, by = answer_of(event)
        if answered(ctx, self.task_id) is None:  # the same answer delivered again is not recorded twice
            state.append_note(ctx.audit, SwitchDecision(chosen == self.APPROVE, by))
            ctx.step(self.task_id, "success", chosen=chosen)
        return super().execute_complete(context, event)

    @classmethod
    def answered(cls, returned: Mapping[str, Any] | None) -> bool | None:
        """The switch's answer from what the task returned: approved, refused, or None (not answered)."""
        return None if not returned else cls.APPROVE in (returned.get("chosen_options") or [])


def run_live(name: str, plan_data: dict[str, Any], step: Callable[[lifecycle.OperationContext], Any]) -> Any:
    """A live migration's step ``step(ctx)`` as task ``name``, recorded; skipped unless the run is live."""
    ctx = context_of(get_current_context())
    live_only(ctx, steps.plan_of(plan_data), name)
    with recorded(ctx, name):
        return step(ctx).to_dict()


@task
def begin() -> dict[str, Any]:
    context = get_current_context()
    try:
        ctx = context_of(context)
    except ConfigError as err:  # params that cannot be read: the run is refused, said in its record too
        refuse_unread_params(context, steps.KIND, err)
        raise
    return lifecycle.begin(ctx, dict(context["params"]),
                           cluster_checks=[lambda _brokers, conn: steps.check_topic(ctx.params, conn)])


@task(show_return_value_in_logs=False)  # a whole snapshot; the step logs a summary line
def preflight_gate() -> dict[str, Any]:
    ctx = context_of(get_current_context())
    with recorded(ctx, "preflight_gate"):
        before = steps.preflight(ctx)
        if ctx.params.mode == steps.Mode.MIGRATE:  # the copy's Spark master answers, before a plan is asked for
            spark_submit.launcher_of(get_current_context()).check()
        return before


@task(show_return_value_in_logs=False)  # the plan; make_plan logs its summary
def plan(before: dict[str, Any]) -> dict[str, Any]:
    ctx = context_of(get_current_context())
    with recorded(ctx, "plan"):
        if ctx.params.streams_application_id:  # a Kafka Streams application: all its inputs and stores
            return streams_steps.make_plan(ctx, before)
        return steps.make_plan(ctx, before)


@task(execution_timeout=LONG_TASK_TIMEOUT, show_return_value_in_logs=False)  # the step logs its summary line
def execute(plan_data: dict[str, Any]) -> dict[str, Any]:
    ctx = context_of(get_current_context())
    plan = steps.plan_of(plan_data)
    with recorded(ctx, "execute"):
        if plan.mode == steps.Mode.IN_PLACE:
            return steps.execute_in_place(ctx, plan)
        launcher = spark_submit.launcher_of(get_current_context())
        launcher.check()  # an unreachable master fails here, before the target topic exists
        if plan.streams and ctx.params.policy.live:  # copies and gates while the application runs; tails follow
            return {"streams_backfill": streams_steps.copy_running(ctx, StreamsPlan.from_dict(plan.streams),
                                                                   launcher=launcher).to_dict()}
        if plan.streams:  # waits for the application to stop, then copies, gates and commits its offsets
            return {"streams_cut": streams_steps.cut(ctx, StreamsPlan.from_dict(plan.streams), launcher=launcher,
                                                     stop_timeout_s=float(ctx.params.streams_stop_timeout_s)
                                                     ).to_dict()}
        steps.create_target(ctx, plan)
        # live too: the backfill checks its copy here, the tail each of its parts (the gate adds them up)
        return steps.run_backfill(ctx, BackfillPlan.from_dict(plan.backfill or {}), launcher=launcher).to_dict()


def first_plan(plan_data: dict[str, Any], result: dict[str, Any]) -> BackfillPlan:
    """The backfill's plan (the tail copy's name and start), from its result or else the run's plan."""
    run = PassResult.from_dict(result).run
    return run.backfill if run else BackfillPlan.from_dict(steps.plan_of(plan_data).backfill or {})


@task(execution_timeout=LONG_TASK_TIMEOUT, show_return_value_in_logs=False, trigger_rule=TriggerRule.NONE_FAILED)
def catch_up(plan_data: dict[str, Any], result: dict[str, Any] | None) -> dict[str, Any]:
    """After verify and cutover (both skip in a live migration): once they are done, nothing is left between
    the quiesce task and the switch."""
    if result is None:  # execute did not run (a dry run, a rejected plan)
        raise AirflowSkipException("nothing was executed: no tail to follow")
    if "streams_backfill" in result:  # every input and changelog of a Kafka Streams application
        return run_live("catch_up", plan_data, lambda ctx: streams_steps.follow(
            ctx, StreamsBackfill.from_dict(result["streams_backfill"]), ctx.params.policy))
    return run_live("catch_up", plan_data, lambda ctx: migration.follow(ctx, first_plan(plan_data, result),
                                                                         ctx.params.policy))


@task(execution_timeout=LONG_TASK_TIMEOUT, show_return_value_in_logs=False)  # the steps log their summary lines
def quiesce(plan_data: dict[str, Any], before: dict[str, Any], result: dict[str, Any], caught: dict[str, Any]
            ) -> dict[str, Any]:
    """Live: the quiesce, the last tail part, the gate over the whole copy and the cut-over, one step of the
    record each, in this one task (:func:`kafkaops.rekey.steps.ready_target`); then the request to switch,
    from here: the applications can move while the switch task, a scheduler hop later, asks its question."""
    ctx = context_of(get_current_context())
    plan = steps.plan_of(plan_data)
    live_only(ctx, plan, "quiesce")
    if plan.streams:  # the inputs quiesced, the application stopped, the last parts, gates, offsets: one step
        with recorded(ctx, "quiesce"):
            cut = streams_steps.live_cut(ctx, StreamsPlan.from_dict(plan.streams),
                                         StreamsBackfill.from_dict(result["streams_backfill"]),
                                         StreamsCatchUp.from_dict(caught), ctx.params.policy)
        return {"streams_cut": cut.to_dict(), "switch_text": cut.switch_text()}
    ready = steps.ready_target(ctx, plan, before, first_plan(plan_data, result), CatchUp.from_dict(caught),
                               PassResult.from_dict(result), lambda name: recorded(ctx, name))
    state.append_note(ctx.audit, ActionNote(migration.switch_request(ready.cutover), Action.SWITCH,
                                            switch=ready.cutover))
    steps.publish_gate_docs(ctx, ready)  # the gate's Data Docs, now that the window is over for kafkaops
    return ready.to_dict()


@task(trigger_rule=TriggerRule.NONE_FAILED)
def verify(plan_data: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
    ctx = context_of(get_current_context())
    plan = steps.plan_of(plan_data)
    if result is None:  # execute did not run (a dry run, a rejected plan)
        raise AirflowSkipException("nothing was executed: nothing to verify")
    if plan.mode == steps.Mode.MIGRATE and ctx.params.policy.live:
        raise AirflowSkipException("live: the quiesce task gates the whole copy after its last part (its step "
                                   "'verify' in the record)")
    if plan.streams:
        raise AirflowSkipException("a Kafka Streams application: the cut (execute) gated each copy before it "
                                   "committed the new application's offsets")
    with recorded(ctx, "verify"):
        if plan.mode == steps.Mode.IN_PLACE:
            return steps.verify_in_place(ctx, plan)
        return steps.backfill_gate(ctx, PassResult.from_dict(result)).to_dict()


@task(trigger_rule=TriggerRule.NONE_FAILED)
def cutover(plan_data: dict[str, Any], before: dict[str, Any], verified: dict[str, Any] | None) -> dict[str, Any]:
    ctx = context_of(get_current_context())
    plan = steps.plan_of(plan_data)
    if verified is None:
        raise AirflowSkipException("the copy was not verified (a dry run, a live migration, or it was not made): "
                                   "no cut-over here (a live migration's is in its quiesce task)")
    if plan.mode == steps.Mode.IN_PLACE:
        raise AirflowSkipException("in_place: consumers keep their topic; nothing to cut over")
    if plan.streams:
        raise AirflowSkipException("a Kafka Streams application: its offsets were committed by the cut (execute)")
    with recorded(ctx, "cutover"):
        return steps.cutover(ctx, plan, before).to_dict()


@task(execution_timeout=LONG_TASK_TIMEOUT, show_return_value_in_logs=False)  # the step logs its summary line
def confirm(plan_data: dict[str, Any], ready: dict[str, Any], switched: dict[str, Any]) -> dict[str, Any]:
    if "streams_cut" in ready:  # a Kafka Streams application: its new inputs written, its new group running
        cut = StreamsCut.from_dict(ready["streams_cut"])

        def observe_streams(ctx: lifecycle.OperationContext) -> Any:
            try:
                return streams_steps.confirm(ctx, cut, ctx.params.policy)
            finally:
                streams_steps.release_input_writes(ctx, cut.plan, ctx.params.policy)
        return run_live("confirm", plan_data, observe_streams)
    target = TargetReady.from_dict(ready)
    done = target.final

    def observe(ctx: lifecycle.OperationContext) -> Any:
        bf = BackfillPlan.from_dict(done.run.plan if done.run else {})
        try:
            return migration.confirm_switch(ctx, bf, target.quiesced, done.target_ends or {}, ctx.params.policy)
        finally:
            migration.release_writes(ctx, bf.source_topic, ctx.params.policy)
    return run_live("confirm", plan_data, observe)


def abandon_streams(ctx: lifecycle.OperationContext, made: StreamsPlan, decision: migration.AbandonDecision,
                    ready: Mapping[str, Any]) -> None:
    """The abandon step for a live Kafka Streams migration: the inputs' ACLs removed once the switch was made
    (``decision.release``); before it, rolled back (:func:`kafkaops.rekey.streams_steps.abandon`), and the
    step fails; else it ends as :func:`kafkaops.rekey.migration.abandon_decision` says."""
    if decision.release:
        streams_steps.release_input_writes(ctx, made, ctx.params.policy)
    if not decision.roll_back:
        raise (AirflowFailException if decision.fails else AirflowSkipException)(decision.text)
    cut = StreamsCut.from_dict(ready["streams_cut"]) if ready.get("streams_cut") else None
    with recorded(ctx, "abandon"):
        done = streams_steps.abandon(ctx, made, ctx.params.policy, decision.reason, cut=cut)
    raise AirflowFailException(done.outcome)


@task(trigger_rule=TriggerRule.ALL_DONE)
def abandon(plan_data: dict[str, Any] | None) -> dict[str, Any]:
    """The last step before finish (so the run's state is this step's): a live migration that stopped
    before the switch is rolled back (:func:`kafkaops.rekey.migration.abandon_decision`); any failed step
    fails the run."""
    context = get_current_context()
    ctx = context_of(context)
    plan = steps.plan_of(plan_data) if plan_data else None
    decision = migration.abandon_decision(
        planned=plan is not None, dry_run=ctx.params.dry_run, live=plan is not None and plan.mode == steps.Mode.MIGRATE and
        ctx.params.policy.live, failed=[t for t in failed_tasks(context) if t != "abandon"],
        switch=SwitchOperator.answered(context["ti"].xcom_pull(task_ids="switch")),
        steps=ctx.audit.summary()["steps"])
    bf = BackfillPlan.from_dict(plan.backfill) if plan and plan.backfill else None  # an in-place plan has none
    if plan is not None and plan.streams and ctx.params.policy.live:
        abandon_streams(ctx, StreamsPlan.from_dict(plan.streams), decision,
                        context["ti"].xcom_pull(task_ids="quiesce") or {})
    if decision.release and bf is not None:
        migration.release_writes(ctx, bf.source_topic, ctx.params.policy)
    if not decision.roll_back or bf is None:
        raise (AirflowFailException if decision.fails else AirflowSkipException)(decision.text)
    final = TargetReady.from_dict(context["ti"].xcom_pull(task_ids="quiesce") or {}).final
    with recorded(ctx, "abandon"):
        done = migration.abandon(ctx, bf, ctx.params.policy, decision.reason, copied_ends=final.target_ends)
    raise AirflowFailException(done.outcome)  # rolled back as planned, but the migration did not happen


@task
def finish(started: dict[str, Any]) -> dict[str, Any]:
    context = get_current_context()
    concluded = steps.finish(context_of(context), (started or {}).get("cluster_id"), failed_tasks=failed_tasks(context))
    failure = lifecycle.not_applied(concluded)  # the run's state in Airflow is its record's outcome
    if failure is not None:
        raise failure
    return concluded


def build_partition_increase_dag(dag_id: str, *, description: str, tags: list[str], doc_md: str) -> DAG:
    with operation_dag(dag_id, description=description, params=PARAMS, tags=tags, doc_md=doc_md) as dag:
        started = begin.override(**RETRIED)()
        before = preflight_gate.override(**RETRIED)()
        started >> before
        planned = plan.override(**RETRIED)(value_of(before))
        approval = PartitionApprovalOperator(
            task_id="approval", kind=steps.KIND, subject="Approve the kafkaops partition increase",
            body="{{ ti.xcom_pull(task_ids='plan')['approval'] }}", response_timeout=dt.timedelta(hours=24))
        planned >> approval
        result = execute.override(**RETRIED)(value_of(planned))
        approval >> result
        verified = verify.override(**RETRIED)(value_of(planned), value_of(result))
        translated = cutover.override(**RETRIED)(value_of(planned), value_of(before), value_of(verified))
        # retried: the tail resumes at its last committed part
        caught = catch_up.override(**RETRIED)(value_of(planned), value_of(result))
        translated >> caught
        # not retried: a retry would ask the operator again
        ready = quiesce(value_of(planned), value_of(before), value_of(result), value_of(caught))
        switch = SwitchOperator(
            task_id="switch", subject="Switch producers and consumers to the target topic",
            body="{{ (ti.xcom_pull(task_ids='quiesce') or {}).get('switch_text') or ((ti.xcom_pull(task_ids='quiesce') "
                 "or {}).get('cutover') or {}).get('switch_text', '') }}",
            response_timeout=dt.timedelta(hours=24))
        ready >> switch
        # waits on people: once
        confirmed = confirm(value_of(planned), value_of(ready), value_of(switch.output))
        rolled_back = abandon(value_of(planned))
        # not downstream of the switch itself: a rejected switch skips its direct downstream tasks
        [confirmed, ready, caught, verified, translated] >> rolled_back
        done = finish.override(**RETRIED)(value_of(started))
        rolled_back >> done.as_teardown(setups=task_of(started), on_failure_fail_dagrun=True)
    return dag
