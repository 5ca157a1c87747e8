"""One DAG shape for every kafkaops operation: the lifecycle of ``kafkaops.reassign.steps`` as tasks.

    begin (setup) -> preflight_gate -> plan: plan (refused when a receiving broker lacks disk room), plan gate
      -> approval
      -> [provision (a scale-out, once approved): the plan's new brokers through the role, then the wait
         until registered, then their disk room; a rejected run starts no broker]
      -> execute_batches: set throttles, cordon a drain's brokers (Kafka 4.3+), batches (deferred), verify,
         remove throttles and lift cordons (also when any of these fails), elect preferred leaders
      -> post_move_gate -> [stop_drained]
      -> finish (teardown: throttles still set are removed, cordons lifted, outcome into the audit record, lock
         released)

Each step is its own row in the audit record; steps share a task where a task of their own would
only add Airflow's per-task cost (a process, the DAG file parsed, a round trip through the
scheduler and Celery) to the run. ``dags/*.py`` call :func:`build_operation_dag` with their
params; nothing here touches Kafka at import time, and importing it stays cheap: pandas and Great
Expectations are imported by the tasks that run a gate.
"""
from __future__ import annotations

import copy
import dataclasses
import datetime as dt
import logging
from collections.abc import Iterable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from typing import Any

from airflow.sdk import (DAG, BaseOperator, Connection, Param, RetryDecision, RetryPolicy, XComArg, get_current_context,
                        task)
from airflow.sdk.exceptions import AirflowNotFoundException, AirflowSkipException

from kafkaops.errors import ConfigError, ProvisionError
from kafkaops.platform import lifecycle
from kafkaops.platform import params as form
from kafkaops.platform import provision as provisioning
from kafkaops.platform.provision import SshLogin
from kafkaops.reassign import records, steps
from kafkaops.airflow.hooks import inventory_from_connection
from kafkaops.airflow.operators import (KafkaOpsApprovalOperator, ReassignmentBatchesOperator, context_of,
                                        failed_tasks, kind_of, recorded, refuse_unread_params, release)

log = logging.getLogger(__name__)

# Airflow's execution_timeout, the backstop behind each step's own deadlines (a Kafka wait's, Ansible's 900 s,
# a Spark run's timeout_s): Airflow 3.3's task runner arms a SIGALRM (airflow.sdk.execution_time.timeout) that
# raises AirflowTaskTimeout in the task's main thread, and nothing else stops a task that overran it (the
# supervisor kills a task only when the API server says it should not run, or heartbeats fail). A handler runs
# only between Python bytecodes, so kafkaops waits call Kafka in slices of at most a second
# (kafkaops.platform.waits). A deferred task's wait in the triggerer is not bounded by it (its trigger is:
# a stall timeout, an approval's response_timeout); each execute and resume is.
TASK_TIMEOUT = dt.timedelta(hours=1)
"""Every kafkaops task (:data:`DEFAULT_ARGS`): snapshots, gates, throttles, a provision (Ansible up to
900 s, then up to 300 s for the registration), a capacity review's key skew (Spark, up to 1,800 s)."""
LONG_TASK_TIMEOUT = dt.timedelta(hours=6)
"""A partition increase's tasks that run Spark passes (a backfill up to 3,600 s, a catch-up's passes within
its budget) or wait for producers to stop or move (quiesce_timeout_s, switch_timeout_s); their params
should stay well inside it."""

DEFAULT_ARGS = {"owner": "kafkaops", "retries": 0, "retry_delay": dt.timedelta(minutes=1),
                "execution_timeout": TASK_TIMEOUT}

# The tasks that wait on or touch the cluster (or the store) retry: Airflow 3.3 can mark a deferrable
# task failed although its trigger fired (apache/airflow#72716, #71580), and an API call, a broker
# or the store can blink. Their steps compare desired and observed state, and begin re-takes its own
# lock, so a retry resumes. An error a retry would meet again fails at once (FinalErrors). The
# approval is never retried: a new try would ask a new question, the answer to the first one lost.


class FinalErrors(RetryPolicy):
    """The one retry rule: an error its capability marks final (:attr:`kafkaops.errors.KafkaOpsError.final`)
    fails the task at once; any other takes the task's retries. Airflow evaluates it in the worker
    (the serialized DAG only notes that a policy is set)."""

    def evaluate(self, exception: BaseException, try_number: int, max_tries: int, context: Any = None
                 ) -> RetryDecision:
        if getattr(exception, "final", False):
            return RetryDecision.fail(f"a retry would end the same way ({type(exception).__name__} is final)")
        return RetryDecision.default()

    def serialize(self) -> dict[str, Any]:
        return {"__type": type(self).__name__}


RETRIED: dict[str, Any] = {
    "retries": 3, "retry_delay": dt.timedelta(seconds=10), "retry_exponential_backoff": 2.0,
    "max_retry_delay": dt.timedelta(minutes=1), "retry_policy": FinalErrors()}

def param_of(spec: form.Spec[Any]) -> Param:
    """The Trigger form's Param of a capability's param spec (:mod:`kafkaops.platform.params`: its default,
    its JSON schema, its title and description). A required spec has no default: the form asks for it."""
    if spec.required:
        return Param(description=spec.described, **spec.schema())
    return Param(spec.initial, description=spec.described, **spec.schema())


def params_of(specs: Iterable[form.Spec[Any]]) -> dict[str, Param]:
    """The form of ``specs``, in their order."""
    return {spec.name: param_of(spec) for spec in specs}


COMMON_PARAMS: dict[str, Param] = params_of(steps.PARAMS)
#: The scale-out's own form fields (dags/kafka_scale_out.py), and the rebalance or drain's (dags/kafka_reassign.py).
SCALE_OUT_PARAMS: dict[str, Param] = params_of(steps.SCALE_OUT_PARAMS)
REASSIGN_PARAMS: dict[str, Param] = params_of(steps.REASSIGN_PARAMS)


def ssh_login(context: Any) -> SshLogin | None:
    """The login of the run's ``ssh_conn_id`` param (an Airflow SSH connection), if it names one; a
    connection that is missing or cannot log in is a ConfigError (a retry would meet it again)."""
    conn_id = context["params"].get("ssh_conn_id")
    if not conn_id:
        return None
    try:
        return SshLogin.from_connection(Connection.get(conn_id))
    except AirflowNotFoundException as err:
        raise ConfigError(f"the ssh_conn_id param names SSH connection '{conn_id}', which Airflow does not have; "
                          "create it (type ssh: login, port, key_file or private_key in its extra) or leave the "
                          "param empty to use the inventory's settings; nothing was changed") from err
    except ProvisionError as err:
        raise ConfigError(str(err)) from err


def ssh_checks(context: Any, params: steps.OperationParams) -> list[Any]:
    """What ``begin`` checks, before any change, of the SSH login a later step of the run needs: the
    ``ssh_conn_id`` connection exists and is usable (any run naming one); and the hosts the run logs in
    to later take the login now (:func:`kafkaops.reassign.steps.check_login`)."""
    if not (context["params"].get("ssh_conn_id") or steps.login_hosts(params)):
        return []
    return [lambda: steps.check_login(params, ssh_login(context))]


@contextmanager
def inventory_read(ctx: lifecycle.OperationContext, needed: bool = True) -> Iterator[lifecycle.OperationContext]:
    """``ctx`` for a step that reads the inventory: when the ``inventory`` param names an Airflow connection
    (``conn:<conn_id>``) and ``needed``, its inventory is read now (:func:`kafkaops.airflow.hooks.
    inventory_from_connection`, a ConfigError naming the param and the connection) into a private file, removed
    when the block ends, also on failure (:func:`kafkaops.platform.provision.materialized_inventory`); the
    context's params read it from there (:attr:`kafkaops.reassign.steps.OperationParams.inventory_file`). Any
    other inventory: ``ctx`` as it is."""
    conn_id = ctx.params.inventory_conn_id
    if conn_id is None or not needed:
        yield ctx
        return
    inventory = inventory_from_connection(conn_id)
    with provisioning.materialized_inventory(inventory) as path:
        log.info("inventory of Airflow connection '%s' (%s, %d host(s)) read for this step", conn_id,
                 "a cluster spec" if inventory.is_spec else "an Ansible inventory", len(inventory.hosts))
        yield dataclasses.replace(ctx, params=dataclasses.replace(ctx.params, inventory_file=str(path)))


def begin_checks(context: Any, ctx: lifecycle.OperationContext) -> None:
    """``begin``'s checks of the inventory and the SSH login, in one block that has the inventory read (a
    connection's, :func:`inventory_read`): :func:`ssh_checks`, then
    :func:`kafkaops.reassign.steps.check_inventory_file`. Dry runs too: a wrong inventory refuses the run here."""
    with inventory_read(ctx, ctx.params.uses_inventory) as ready:
        for check in ssh_checks(context, ready.params):
            check()
        steps.check_inventory_file(ready.params)


def value_of(output: XComArg) -> Any:
    """``output``, an upstream task's, where a task function takes that task's value: Airflow pulls the value
    when the task runs. The TaskFlow decorator types a call with the function's own parameters (the value's
    type, a dict), so the DAG's wiring passes each output through here, which says so once."""
    return output


def task_of(output: XComArg) -> BaseOperator:
    """The task whose output ``output`` is: ``as_teardown(setups=...)`` takes tasks."""
    from airflow.sdk.definitions.xcom_arg import PlainXComArg

    if not isinstance(output, PlainXComArg) or not isinstance(output.operator, BaseOperator):
        raise TypeError(f"{output!r} is not the output of one task")
    return output.operator


def operation_dag(dag_id: str, *, description: str, params: Mapping[str, Param], tags: list[str], doc_md: str,
                  schedule: Any = None, start_date: dt.datetime | None = dt.datetime(2026, 1, 1)) -> DAG:
    """The DAG object every kafkaops DAG uses: one run at a time, native XCom templates, no catch-up.
    Each DAG gets copies of the params: Airflow resolves a run's values into the Param objects, and a
    shared one would carry one run's choice (dry_run off, a topic) into every DAG built after it."""
    return DAG(dag_id=dag_id, description=description, schedule=schedule, start_date=start_date,
               catchup=False, max_active_runs=1, default_args=DEFAULT_ARGS, params={k: copy.copy(v) for k, v in params.items()},
               tags=tags,
               doc_md=doc_md, render_template_as_native_obj=True)


def run_step(kind: str | None, name: str, step: Any, *args: Any) -> Any:
    """Run ``step(ctx, *args)`` of kafkaops.reassign.steps as this task, recorded in the audit."""
    context = get_current_context()
    ctx = context_of(context, kind_of(context, kind))
    with recorded(ctx, name):
        return step(ctx, *args)


# Each task returns its dict as one XCom (multiple_outputs=False): for a dict return type Airflow
# would also push each key as an XCom of its own, a call to the api-server per key, none read.
# ``kind``: the DAG's kind of operation, None when its ``operation`` param chooses.

def finish_login(context: Any, ctx: lifecycle.OperationContext) -> SshLogin | None:
    """The SSH login a finish needs to remove the brokers its scale-out provisioned (none otherwise); a
    connection that no longer works is logged, and the finish names the brokers it could not remove."""
    if not steps.provisioned_brokers(ctx):
        return None
    try:
        return ssh_login(context)
    except ConfigError as err:
        log.error("no SSH login to remove the brokers this run provisioned: %s", err)
        return None


@contextmanager
def finish_inventory(ctx: lifecycle.OperationContext) -> Iterator[lifecycle.OperationContext]:
    """:func:`inventory_read` for a finish that removes the brokers its scale-out provisioned (none read
    otherwise); a connection that can no longer be read is logged, and the finish names the brokers it could not
    remove (its removal meets the unread inventory)."""
    if not steps.provisioned_brokers(ctx):
        yield ctx
        return
    with ExitStack() as stack:
        try:
            ready = stack.enter_context(inventory_read(ctx))
        except ConfigError as err:
            log.error("the inventory to remove the brokers this run provisioned could not be read: %s", err)
            ready = ctx
        yield ready


@task(multiple_outputs=False)
def begin(kind: str | None) -> dict[str, Any]:
    context = get_current_context()
    try:
        ctx = context_of(context, kind_of(context, kind))
    except ConfigError as err:  # params that cannot be read: the run is refused, said in its record too
        refuse_unread_params(context, kind or str(context["params"].get("operation") or "reassignment"), err)
        raise
    checks = [lambda: begin_checks(context, ctx)]
    return lifecycle.begin(ctx, dict(context["params"]), checks=checks,
                           cluster_checks=[lambda brokers, conn: steps.check_cluster(ctx.params, brokers, conn)])


@task(show_return_value_in_logs=False, multiple_outputs=False)  # a whole snapshot; the step logs a summary line
def preflight_gate(kind: str | None) -> dict[str, Any]:
    return run_step(kind, "preflight_gate", lifecycle.preflight)


@task(show_return_value_in_logs=False, multiple_outputs=False)  # the plan with its cluster; make_plan logs its summary
def plan(kind: str | None, before: dict[str, Any]) -> dict[str, Any]:
    """The plan, then its gate: the approval shows a plan that passed it (a scale-out's onto the brokers it
    will provision once approved)."""
    context = get_current_context()
    ctx = context_of(context, kind_of(context, kind))
    with recorded(ctx, "plan"), inventory_read(ctx, ctx.params.uses_inventory) as ready:
        planned = steps.make_plan(ready, before)
    with recorded(ctx, "plan_gate"):
        steps.plan_gate(ctx, planned)
    return planned


@task(multiple_outputs=False)
def provision(kind: str | None, plan_data: dict[str, Any]) -> dict[str, Any]:
    """The approved plan's new brokers through the role, then the wait until the controller registers them, then
    their room for what the plan copies onto them (:func:`kafkaops.reassign.steps.check_new_brokers_room`)."""
    context = get_current_context()
    ctx = context_of(context, kind_of(context, kind))
    if ctx.params.dry_run:
        raise AirflowSkipException("dry run: no broker is provisioned; the plan uses the brokers it would add")
    planned = records.PlannedReassignment.from_dict(plan_data).provisioned.new_brokers
    with recorded(ctx, "provision"), inventory_read(ctx) as ready:
        result = steps.provision_brokers(ready, ssh=ssh_login(context), planned=planned)
    ctx.step("wait_until_registered", "started", brokers=result.ids)
    try:
        registered = steps.wait_until_registered(ctx, result.new_brokers)
    except Exception as err:
        ctx.step("wait_until_registered", "failed", error=f"{type(err).__name__}: {err}"[:2000])
        raise
    ctx.step("wait_until_registered", "success", registered=registered)
    with recorded(ctx, "check_room"):  # their log dirs answer now: the plan could not read them
        steps.check_new_brokers_room(ctx, plan_data, result.ids)
    return result.to_dict()


@task(multiple_outputs=False)
def post_move_gate(kind: str | None, plan_data: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    return run_step(kind, "post_move_gate", steps.post_move_gate, plan_data, before)


@task(multiple_outputs=False)
def stop_drained(kind: str | None) -> dict[str, Any]:
    context = get_current_context()
    ctx = context_of(context, kind_of(context, kind))
    with recorded(ctx, "stop_drained"), inventory_read(ctx, ctx.params.stops_brokers) as ready:
        return steps.stop_drained(ready, ssh_login(context) if ctx.params.stops_brokers else None).to_dict()


@task(multiple_outputs=False)
def finish(kind: str | None, started: dict[str, Any]) -> dict[str, Any]:
    """Remove the throttles still set and lift the cordons still in place (a worker died inside
    execute_batches), then record the outcome and release the lock. A removal that fails is in the
    record and fails the outcome."""
    context = get_current_context()
    ctx = context_of(context, kind_of(context, kind))
    try:
        release(ctx)
    except Exception as err:  # recorded as the failed step remove_throttles / lift_cordons; the lock must still go
        log.error("throttles or cordons left after the run: %s", err)
    with finish_inventory(ctx) as ready:
        concluded = steps.finish(ready, (started or {}).get("cluster_id"), failed_tasks=failed_tasks(context),
                                 ssh=finish_login(context, ctx))
    failure = lifecycle.not_applied(concluded)  # the run's state in Airflow is its record's outcome
    if failure is not None:
        raise failure
    return concluded


def build_operation_dag(dag_id: str, *, kind: str | None, description: str, extra_params: Mapping[str, Param],
                        tags: list[str], doc_md: str) -> DAG:
    """A DAG running one kafkaops operation. ``kind`` None: the ``operation`` param chooses it."""
    params = {**COMMON_PARAMS, **extra_params}
    with operation_dag(dag_id, description=description, params=params, tags=tags, doc_md=doc_md) as dag:
        started = begin.override(**RETRIED)(kind)
        before = preflight_gate.override(**RETRIED)(kind)
        started >> before
        planned = plan(kind, value_of(before))
        approval = KafkaOpsApprovalOperator(
            task_id="approval", kind=kind, subject=f"Approve the kafkaops {kind or 'reassignment'} plan",
            body="{{ ti.xcom_pull(task_ids='plan')['approval'] }}", response_timeout=dt.timedelta(hours=24))
        planned >> approval
        # Resume-safe, so a retry (e.g. after a stalled broker was restarted) continues the moves.
        executed = ReassignmentBatchesOperator(task_id="execute_batches", kind=kind,
                                               plan_data=planned, before=before, **RETRIED)
        if kind == "scale_out":  # after the approval: a rejected run leaves no broker behind
            provisioned = provision.override(**RETRIED)(kind, value_of(planned))
            approval >> provisioned >> executed
        else:
            approval >> executed
        post = post_move_gate.override(**RETRIED)(kind, value_of(planned), value_of(before))
        executed >> post
        last = post
        if kind != "scale_out":
            last = stop_drained.override(**RETRIED)(kind)
            post >> last
        done = finish.override(**RETRIED)(kind, value_of(started))
        last >> done.as_teardown(setups=task_of(started), on_failure_fail_dagrun=True)
    return dag
