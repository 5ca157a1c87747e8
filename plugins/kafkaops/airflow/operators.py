"""Operators that wait (deferrable) or ask (human in the loop); the work is in kafkaops.reassign.steps."""
from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from airflow.configuration import conf
from airflow.providers.standard.operators.hitl import ApprovalOperator
from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowSkipException

from kafkaops.platform import lifecycle, render, state, store
from kafkaops.reassign import steps
from kafkaops.reassign.records import CordonLifted, ProgressEvent, ThrottleRemoved
from kafkaops.airflow.hooks import KafkaOpsHook, kafkaops_store
from kafkaops.airflow.triggers import ReassignmentProgressTrigger
from kafkaops.errors import KafkaOpsError


def use_store() -> store.Store:
    """Open the kafkaops store of the ``kafkaops_store`` connection and make it this process' store."""
    return store.use(kafkaops_store()) or store.current()


def run_ended(dag_id: str, run_id: str) -> bool:
    """Whether a DAG run has ended, asked of Airflow through the Task SDK (never its database)."""
    from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

    found = RuntimeTaskInstance.get_dagrun_state(dag_id=dag_id, run_id=run_id)
    state = getattr(found, "value", found)
    logging.getLogger(__name__).info("Airflow says run %s/%s is %s", dag_id, run_id, state)
    return state in ("success", "failed")


def failed_tasks(context: Any) -> list[str]:
    """The tasks of this run Airflow marks failed (asked through the Task SDK), whoever ran them."""
    dag_run = context["dag_run"]
    states = context["ti"].get_task_states(dag_id=dag_run.dag_id, run_ids=[dag_run.run_id])
    return sorted(t for t, s in (states.get(dag_run.run_id) or {}).items() if str(s) == "failed")


def run_fields(context: Any) -> dict[str, Any]:
    """The OperationContext fields every kafkaops task fills from Airflow's context."""
    dag_run, ti = context["dag_run"], context.get("ti")
    user = getattr(dag_run, "triggering_user_name", None) or f"({getattr(dag_run, 'run_type', 'unknown')})"
    use_store()
    return {"dag_id": dag_run.dag_id, "run_id": dag_run.run_id, "triggered_by": str(user),
            "task_id": getattr(ti, "task_id", None), "try_number": getattr(ti, "try_number", None),
            "run_ended": run_ended}


def kafka_conn_id(context: Any) -> str:
    """The id of the run's Kafka connection (param ``kafka_conn_id``): what a trigger carries, never the config."""
    return context["params"].get("kafka_conn_id") or "kafka_default"


def kind_of(context: Any, kind: str | None) -> str:
    """The run's kind of operation: the DAG's own, or (``kind`` None) its ``operation`` param's."""
    return kind or steps.OPERATION.read(context["params"]).value


def context_of(context: Any, kind: str) -> lifecycle.OperationContext:
    """The operation context of a running task: params validated (first: a connection id that is no text a run
    can take is refused naming the param, not looked up), connection and store resolved."""
    params = steps.OperationParams.from_params(kind, dict(context["params"]))
    return lifecycle.OperationContext(conn_config=KafkaOpsHook(kafka_conn_id(context)).get_config(), params=params,
                                      **run_fields(context))


def refuse_unread_params(context: Any, kind: str, err: Exception) -> None:
    """The begin of a run whose params were refused before its context could be made: the run is recorded as
    refused with ``err`` as its reason (the record page and ``records show`` say why), then ``err`` goes on. A
    store that cannot record it is logged; the task's own failure still says why."""
    dag_run = context["dag_run"]
    try:
        fields = run_fields(context)
        lifecycle.refuse_unread(fields["dag_id"], fields["run_id"], kind=kind, triggered_by=fields["triggered_by"],
                                raw_params=dict(context["params"]), reason=str(err), task_id=fields["task_id"],
                                try_number=fields["try_number"])
    except Exception as stored:  # the store's errors, whatever they are: the refusal itself is raised by the caller
        logging.getLogger(__name__).error("the refusal of run %s could not be recorded: %s", dag_run.run_id, stored)


@contextmanager
def recorded(ctx: lifecycle.OperationContext, name: str) -> Iterator[None]:
    """Record a step's start and its end (success, skipped or failed with the error; a refusal marked, see
    :func:`kafkaops.platform.lifecycle.refuses`) in the audit."""
    ctx.step(name, "started")
    try:
        yield
    except AirflowSkipException as err:
        ctx.step(name, "skipped", reason=str(err))
        raise
    except Exception as err:
        refusal = {"refusal": True} if lifecycle.refuses(name, err) else {}
        ctx.step(name, "failed", error=f"{type(err).__name__}: {err}"[:2000], **refusal)
        raise
    ctx.step(name, "success")


def unthrottle(ctx: lifecycle.OperationContext) -> ThrottleRemoved | None:
    """Remove the throttles this attempt of the run set and has not removed yet, as the step
    ``remove_throttles``; None when there are none (:func:`kafkaops.reassign.steps.throttles_in_place`)."""
    throttles = steps.throttles_in_place(ctx)
    if throttles is None:
        return None
    with recorded(ctx, "remove_throttles"):
        return steps.remove_throttles(ctx, throttles, None)


def uncordon(ctx: lifecycle.OperationContext) -> CordonLifted | None:
    """Lift the cordons this attempt of the run set and has not lifted yet (a drain's), as the step
    ``lift_cordons``; None when there are none (:func:`kafkaops.reassign.steps.cordons_in_place`)."""
    cordoned = steps.cordons_in_place(ctx)
    if cordoned is None:
        return None
    with recorded(ctx, "lift_cordons"):
        return steps.lift_cordons(ctx, cordoned)


def release(ctx: lifecycle.OperationContext) -> None:
    """Remove the throttles and lift the cordons still in place (:func:`unthrottle`, :func:`uncordon`): both
    are tried whatever the other does; the first failure is raised after both ran."""
    try:
        unthrottle(ctx)
    finally:
        uncordon(ctx)


class ReassignmentBatchesOperator(BaseOperator):
    """The moves as one task: set the throttles (and a drain's cordons), submit the plan batch by batch and, after each,
    defer to a trigger that polls progress (the task log shows % done and ETA), then verify, remove
    the throttles and elect the preferred leaders. Each part is a step of its own in the audit record.

    Resume-safe: every pass observes the cluster first, so moves already in flight are waited for,
    never resubmitted; a retry re-applies the throttles an earlier try of the attempt set (their
    record comes from the audit, not from the rates it finds). The throttles are removed whenever
    the task ends without deferring: after the verification, or on the error that fails it. A worker
    killed mid-task removes nothing: ``finish`` (a teardown) removes what the record says is left.

    Contained against Airflow 3.3's deferred-task race (apache/airflow#71580, #72716; docs/operations.md): the
    task defers only while moves are still copying (a batch already done is not waited for), and once the
    record says this attempt finished the moves (:func:`kafkaops.reassign.steps.moves_finished`), ``execute``
    and ``resume`` return that result, whatever event they get, repeating nothing."""

    template_fields = ("plan_data", "before")

    def __init__(self, *, kind: str | None, plan_data: Any, before: Any, poll_interval_s: float = 2.0,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.kind = kind
        self.plan_data = plan_data
        self.before = before
        self.poll_interval_s = poll_interval_s

    def execute(self, context: Any) -> Any:
        ctx = context_of(context, kind_of(context, self.kind))
        finished = self._finished(ctx)
        if finished is not None:
            return finished
        try:
            with recorded(ctx, "set_throttles"):
                steps.set_throttles(ctx, self.plan_data)
            if ctx.params.kind == steps.Kind.DRAIN:
                with recorded(ctx, "set_cordons"):
                    steps.set_cordons(ctx)
            ctx.step(self.task_id, "started")
            return self._next_batch(ctx, kafka_conn_id(context))
        except Exception:
            self._unthrottle_failing(ctx)
            raise

    def resume(self, context: Any, event: dict[str, Any]) -> Any:
        ctx = context_of(context, kind_of(context, self.kind))
        finished = self._finished(ctx)
        if finished is not None:  # the event came again, or after a retry finished the moves: nothing to repeat
            return finished
        try:
            fired = ProgressEvent.from_dict(event)
            if fired.stalled:
                moving = ", ".join(fired.polled.in_flight) if fired.polled is not None else ""
                receivers = fired.polled.stall_text() if fired.polled is not None else ""
                error = (f"reassignment stalled: no progress for {fired.stalled_for_s or 0:.0f} s; still moving: "
                         f"{moving or '?'} ({fired.describe()}); "
                         + (f"{receivers}; " if receivers else "check that every broker of those partitions is up, ")
                         + "then clear this task to resume (nothing is resubmitted; the throttles are removed as this "
                         "task fails and set again by the retry)")
                ctx.step(self.task_id, "failed", error=error)
                raise KafkaOpsError(error)
            self.log.info("batch done: %s", fired.describe())
            return self._next_batch(ctx, kafka_conn_id(context))
        except Exception:
            self._unthrottle_failing(ctx)
            raise

    def _next_batch(self, ctx: lifecycle.OperationContext, conn_id: str) -> Any:
        """Submit (or wait for) the next batch and defer (the trigger gets the Kafka connection's id
        ``conn_id``, never its config), or, when every move is done, finish the moves."""
        while True:
            try:
                step = steps.next_batch(ctx, self.plan_data)
            except Exception as err:
                ctx.step(self.task_id, "failed", error=f"{type(err).__name__}: {err}"[:2000])
                raise
            if not step.wait_for:
                break
            spec = steps.wait_spec(self.plan_data, step.wait_for, self.before)
            if not steps.moves_done(ctx.conn_config, spec):  # done already: no trigger to wait for, no race to lose
                self.defer(trigger=ReassignmentProgressTrigger(conn_id, spec.to_dict(), lifecycle.now(),
                                                               poll_interval_s=self.poll_interval_s,
                                                               stall_timeout_s=ctx.params.stall_timeout_s),
                           method_name="resume")
            self.log.info("%d move(s) done before the wait began: not deferring", len(step.wait_for))
        ctx.step(self.task_id, "success")
        try:
            with recorded(ctx, "verify"):
                steps.verify_moves(ctx, self.plan_data, self.before)
        finally:
            release(ctx)
        with recorded(ctx, "elect_leaders"):
            elected = steps.elect_leaders(ctx, self.plan_data)
        return {"done": True, "leaders": elected.to_dict()}

    def _finished(self, ctx: lifecycle.OperationContext) -> dict[str, Any] | None:
        """The task's result when this attempt of the run has finished the moves already (the record), else None."""
        elected = steps.moves_finished(ctx)
        if elected is None:
            return None
        self.log.info("the record says this run's moves are done, verified and their leaders elected (%d asked, "
                      "%d changed): nothing is repeated", elected.asked, elected.changed)
        return {"done": True, "leaders": elected.to_dict()}

    def _unthrottle_failing(self, ctx: lifecycle.OperationContext) -> None:
        """While the task fails: remove the throttles and lift the cordons, without hiding the error that
        fails it (a removal that fails too is in the record, the log and the throttle ledger)."""
        try:
            release(ctx)
        except Exception as err:
            self.log.error("while failing, could not remove the throttles or lift the cordons: %s", err)


def four_eyes() -> bool:
    """The four-eyes rule, Airflow setting ``[kafkaops] four_eyes`` (``AIRFLOW__KAFKAOPS__FOUR_EYES``), off by
    default: the user who triggered a run may reject it but not approve it, and ``approval=auto_approve``
    is refused (:func:`kafkaops.platform.lifecycle.self_approval`)."""
    return conf.getboolean("kafkaops", "four_eyes", fallback=False)


def triggering_user(context: Any) -> str | None:
    """Who triggered the run (Airflow's user name), or None for a scheduled or DAG-triggered run."""
    return getattr(context["dag_run"], "triggering_user_name", None) or None


def answer_by_param(op: ApprovalOperator, ctx: lifecycle.OperationContext, context: Any, *, ask: Callable[[], Any]
                    ) -> Any:
    """An approval step's start, recorded: with ``approval=manual`` it asks a person (``ask``: the
    operator's own ``execute``, which defers); ``auto_approve`` / ``auto_reject`` answer at once, by
    the param, through the operator's ``execute_complete`` as a person's answer would. Under the
    four-eyes rule (:func:`four_eyes`) the question names who may approve, and ``auto_approve`` is refused."""
    ctx.step(op.task_id, "started", mode=ctx.params.approval)
    user = triggering_user(context)
    if four_eyes() and ctx.params.approval == "auto_approve":
        refused = lifecycle.four_eyes_auto_approve(ctx.run_id, user or "the trigger")
        ctx.step(op.task_id, "failed", error=f"{type(refused).__name__}: {refused}")
        raise refused
    if ctx.params.approval == "manual":
        if four_eyes() and user:
            op.body = f"{op.body}\n\n{lifecycle.four_eyes_rule(user)}"
        return ask()
    choice = op.APPROVE if ctx.params.approval == "auto_approve" else op.REJECT
    event = {"chosen_options": [choice], "params_input": {}, "responded_at": dt.datetime.now(dt.timezone.utc),
             "responded_by_user": {"id": "kafkaops", "name": f"param approval={ctx.params.approval}"}}
    return op.execute_complete(context, event)


def refused_self_approval(op: ApprovalOperator, ctx: lifecycle.OperationContext, context: Any,
                          event: Mapping[str, Any]) -> bool:
    """Whether ``event`` is an approval the four-eyes rule refuses; if so it is recorded and logged, and the
    caller asks again (Airflow clears the step's answer when it asks again)."""
    user = event.get("responded_by_user") or {}
    at = event.get("responded_at")
    reason = lifecycle.self_approval(
        four_eyes=four_eyes(), approved=op.APPROVE in (event.get("chosen_options") or ()),
        triggered_by=triggering_user(context), answered_by=(user.get("id"), user.get("name")),
        at=render.utc_time(at.timestamp()) if isinstance(at, dt.datetime) else str(at))
    if reason is None:
        return False
    ctx.audit.append("note", text=reason)
    op.log.warning("%s", reason)
    return True


def answer_of(event: Mapping[str, Any]) -> tuple[str, str]:
    """The option chosen at an approval step and who chose it (a person's name, or the param)."""
    user = event.get("responded_by_user") or {}
    return (event.get("chosen_options") or ["?"])[0], str(user.get("name") or user.get("id"))


def answered(ctx: lifecycle.OperationContext, task_id: str) -> str | None:
    """The option this attempt of the run recorded as the answer of approval step ``task_id``, else None: an
    ``execute_complete`` called again with the answer (the deferred-task race) records nothing more."""
    steps_ = state.summarize(ctx.audit.events())["steps"]
    row = next((s for s in steps_ if s["name"] == task_id), None)
    return str(row.get("chosen")) if row and row.get("status") == "success" and row.get("chosen") else None


class KafkaOpsApprovalOperator(ApprovalOperator):
    """Airflow's approval step, showing the plan. ``approval`` param: ``manual`` (a person answers
    in the UI), ``auto_approve`` or ``auto_reject`` (answered by the param; recorded as such).
    In a dry run it skips: nothing after it runs, nothing changes."""

    def __init__(self, *, kind: str | None, **kwargs: Any) -> None:
        super().__init__(ignore_downstream_trigger_rules=True, **kwargs)
        self.kind = kind  # None: the run's operation param says (kafka_reassign: rebalance or drain)

    def operation_context(self, context: Any) -> lifecycle.OperationContext:
        """The run's context; DAGs with params of their own override this."""
        return context_of(context, kind_of(context, self.kind))

    def execute(self, context: Any) -> Any:
        ctx = self.operation_context(context)
        if ctx.params.dry_run:
            ctx.step(self.task_id, "skipped", reason="dry run")
            raise AirflowSkipException("dry run: the plan was made and gated; nothing will change")
        return answer_by_param(self, ctx, context, ask=lambda: super(KafkaOpsApprovalOperator, self).execute(context))

    def execute_complete(self, context: Any, event: dict[str, Any]) -> Any:
        ctx = self.operation_context(context)
        if refused_self_approval(self, ctx, context, event):
            return ApprovalOperator.execute(self, context)  # the same question again; Airflow clears the answer
        chosen, by = answer_of(event)
        if answered(ctx, self.task_id) is None:  # the same answer delivered again is not recorded twice
            lifecycle.record_approval(ctx, approved=chosen == self.APPROVE, by=by, mode=ctx.params.approval)
            ctx.step(self.task_id, "success", chosen=chosen)
        return super().execute_complete(context, event)
