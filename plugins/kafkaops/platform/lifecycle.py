"""The lifecycle every kafkaops operation shares, as plain functions over an :class:`OperationContext`.

    begin (lock) -> preflight gate -> ... the capability's steps ... -> approval -> ... -> finish

Each step takes the context and JSON-safe values and returns JSON-safe values, so Airflow passes
them through XCom unchanged; each appends what it did to the run's audit record. The context is
generic over the capability's params: anything with a ``kind`` and a ``dry_run``. Nothing here
imports Airflow or a capability.

Run state lives in the kafkaops store (:mod:`kafkaops.platform.store`), never on local disk: the
record, the cluster lock (taken by ``begin``; every change to the cluster first calls
:meth:`OperationContext.fence`), the Data Docs of the gates.
"""
from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from kafkaops.errors import KafkaOpsError
from kafkaops.platform import gates, state, store
from kafkaops.platform.kafka import connection, metadata, reassignments
from kafkaops.platform.paths import safe_name

log = logging.getLogger(__name__)


#: The outcomes of a run that did what it was asked: every other one (failed, rejected, refused, abandoned)
#: fails the run in Airflow.
APPLIED = frozenset({"success", "dry_run"})


class OperationNotApplied(KafkaOpsError):
    """The run ended without doing what it was asked (failed, rejected, refused, abandoned): raised by its
    finish after the record is concluded, so Airflow's state of the run is the record's outcome (a rejected
    run is not a green one beside the applied runs)."""

    final = True


def not_applied(concluded: Mapping[str, Any]) -> OperationNotApplied | None:
    """The error a finish raises after concluding ``concluded`` (:func:`conclude`'s value) when the outcome is
    not one of :data:`APPLIED`; None when it is."""
    outcome = str(concluded.get("outcome"))
    if outcome in APPLIED:
        return None
    if outcome == "rejected":
        return OperationNotApplied(f"{concluded.get('reason') or 'rejected'}. The run is marked failed so that "
                                   "Airflow's run list tells it from an applied one; its record says rejected")
    return OperationNotApplied(f"the run ended {outcome}: {concluded.get('reason') or 'see its record'}")


class OperationParams(Protocol):
    """What the lifecycle needs of a capability's params."""

    @property
    def kind(self) -> str: ...

    @property
    def dry_run(self) -> bool: ...


P = TypeVar("P", bound=OperationParams)


@dataclass(frozen=True)
class OperationContext(Generic[P]):
    """Who runs what against which cluster: built by each task from Airflow's context."""

    dag_id: str
    run_id: str
    conn_config: Mapping[str, str]
    params: P
    triggered_by: str = "unknown"
    extra: Mapping[str, Any] = field(default_factory=dict)
    task_id: str | None = None
    try_number: int | None = None
    run_ended: store.RunEnded | None = None
    """Asks Airflow whether another run has ended (lock takeover); None outside Airflow."""

    @property
    def holder(self) -> str:
        return store.holder_of(self.dag_id, self.run_id)

    @property
    def store(self) -> store.Store:
        return store.current()

    @property
    def audit(self) -> state.AuditLog:
        return state.AuditLog(self.dag_id, self.run_id, task_id=self.task_id, try_number=self.try_number)

    @property
    def artifact_prefix(self) -> str:
        return f"{safe_name(self.dag_id)}/{safe_name(self.run_id)}"

    def connect(self) -> connection.KafkaConnection:
        return connection.connect(self.conn_config, timeout_s=15.0)

    def fence(self, action: str) -> int:
        """Check, just before ``action`` changes the cluster, that this run still holds its lock
        (raises :class:`kafkaops.platform.store.LockLost` otherwise); renews the lease."""
        op = self.store.operation(self.dag_id, self.run_id) or {}
        if not op.get("cluster_id"):
            raise store.LockLost(f"run {self.holder} took no cluster lock, so it may not {action}; run the DAG "
                                 "from its begin task")
        return self.store.check_fence(op["cluster_id"], self.dag_id, self.run_id, op.get("lock_token"),
                                      action=action)

    def step(self, name: str, status: str, **data: Any) -> None:
        self.audit.append("step", name=name, status=status, **data)


# -- begin and finish ------------------------------------------------------------------------------------

ClusterCheck = Callable[[Sequence[int], connection.KafkaConnection], None]
"""A check of a run's params against the cluster (its registered broker ids, a connection to ask more), at
the begin before the lock is taken: one that raises refuses the run."""


def begin(ctx: OperationContext[Any], raw_params: Mapping[str, Any],
          checks: Iterable[Callable[[], None]] = (), cluster_checks: Iterable[ClusterCheck] = ()) -> dict[str, Any]:
    """Record the run, find the cluster and take its lock (refused, naming the holder, if busy).

    The store is reached first: an unreachable store fails here, before anything touches Kafka.
    ``checks`` run next (e.g. the SSH login a later step needs), then ``cluster_checks`` with the cluster's
    brokers (e.g. that the brokers and topics the params name exist); one that raises refuses the run.

    A dry run takes no lock (:func:`look_at_lock`): it changes nothing, so it must not hold back a real
    operation for as long as it plans; it records who holds the cluster, if anyone, and every change it might
    attempt is fenced off (:meth:`OperationContext.fence` finds no lock of its own)."""
    ctx.store.start_operation(ctx.dag_id, ctx.run_id, kind=ctx.params.kind, triggered_by=ctx.triggered_by,
                              params=raw_params)
    ctx.audit.append("started", operation=ctx.params.kind, dag_id=ctx.dag_id, run_id=ctx.run_id,
                     triggered_by=ctx.triggered_by, params=dict(raw_params))
    try:
        for check in checks:
            check()
        with ctx.connect() as conn:
            cluster_id, controller, brokers = metadata.describe_cluster(conn)
            ids = sorted(b.id for b in brokers)
            for cluster_check in cluster_checks:
                cluster_check(ids, conn)
        if ctx.params.dry_run:
            return {"cluster_id": cluster_id, "controller": controller, "brokers": ids, "lock_token": None,
                    "busy_with": look_at_lock(ctx, cluster_id)}
        lease = ctx.store.acquire(cluster_id, ctx.dag_id, ctx.run_id, run_ended=ctx.run_ended)
    except KafkaOpsError as err:
        conclude(ctx, "refused", str(err))
        raise
    ctx.audit.append("note", text=f"lock on cluster {cluster_id} taken by {ctx.holder} (fencing token {lease.token})")
    return {"cluster_id": cluster_id, "controller": controller, "brokers": ids, "lock_token": lease.token}


def look_at_lock(ctx: OperationContext[Any], cluster_id: str) -> str | None:
    """A dry run's begin: the cluster's lock read, not taken (the holder, None when free), and said in the
    record. The run's row names the cluster without a fencing token, so a change it attempted would be refused.
    Its numbers stay sane: its plan is made on a snapshot whose preflight gate refuses a cluster with
    reassignments in flight, so a dry run beside a real operation that moves data is refused, not planned on a
    half-moved cluster."""
    ctx.store.update_operation(ctx.dag_id, ctx.run_id, cluster_id=cluster_id)
    lease = ctx.store.lease(cluster_id)
    holder = None if lease is None or lease.free else lease.holder
    if holder:
        text = (f"dry run: no lock taken on cluster {cluster_id}; {holder} holds it, so the plan is of the cluster as "
                "that run leaves it at this moment (a real run would wait for it)")
    else:
        text = f"dry run: no lock taken on cluster {cluster_id} (it is free): a dry run changes nothing"
    ctx.audit.append("note", text=text, lock="not_taken", busy_with=holder)
    log.info("%s", text)
    return holder


def refuse_unread(dag_id: str, run_id: str, *, kind: str, triggered_by: str, raw_params: Mapping[str, Any],
                  reason: str, task_id: str | None = None, try_number: int | None = None) -> None:
    """Record a run whose params were refused before an :class:`OperationContext` could be made of them: its
    operation row and record, started and concluded ``refused`` with ``reason``; no lock was taken."""
    current = store.current()
    current.start_operation(dag_id, run_id, kind=kind, triggered_by=triggered_by, params=raw_params)
    audit = state.AuditLog(dag_id, run_id, task_id=task_id, try_number=try_number)
    audit.append("started", operation=kind, dag_id=dag_id, run_id=run_id, triggered_by=triggered_by,
                 params=dict(raw_params))
    audit.append("outcome", outcome="refused", reason=reason, next_steps=next_steps_of("refused"))
    current.update_operation(dag_id, run_id, state="finished", outcome="refused", reason=reason, ended_at=time.time())


#: The steps that only read the cluster and decide, before anything changes: a final error in one of them
#: (a setting that cannot work, a failed preflight gate, a plan that cannot be made) refuses the run.
CHECK_STEPS = frozenset({"preflight_gate", "plan", "plan_gate"})


def refuses(step: str, err: BaseException) -> bool:
    """Whether ``err``, raised by ``step``, is a refusal: a final error (a retry would end the same way)
    in one of :data:`CHECK_STEPS`, so nothing has changed and the operator must change something first."""
    return step in CHECK_STEPS and bool(getattr(err, "final", False))


def outcome_of(record: Mapping[str, Any], *, dry_run: bool, failed_tasks: Iterable[str] = ()) -> tuple[str, str]:
    """The outcome of the current attempt (pure): from its steps' last tries and the tasks Airflow
    marked failed (a task killed before it could record its failure counts too). A step still
    "running" when the run finishes never recorded its end: its process died, so it counts as failed.
    A run whose only failed steps are refusals (:func:`refuses`, recorded as ``refusal``) is ``refused``."""
    final = {s["name"]: s for s in record["steps"]}
    failed = [name for name, s in final.items() if s.get("status") in ("failed", "running")]
    # a task Airflow marks failed whose own step succeeded failed in a later step it ran (the plan task's
    # plan_gate): that recorded failure explains it
    failed += [t for t in failed_tasks if t not in failed
               and not (failed and final.get(t, {}).get("status") == "success")]
    if record.get("approval") and record["approval"].get("approved") is False:
        return "rejected", f"rejected by {record['approval'].get('by')}; nothing changed"
    if failed:
        errors = [final[name].get("error") or f"{name} did not record its end (its task died)"
                  if name in final else "failed in Airflow before it recorded a step" for name in failed]
        if all(final.get(name, {}).get("refusal") for name in failed):
            return "refused", f"refused at {', '.join(failed)}, before anything changed: {'; '.join(errors)[:2000]}"
        return "failed", f"failed steps: {', '.join(failed)}: {'; '.join(errors)[:2000]}"
    if dry_run:
        return "dry_run", "dry run: planned and gated, nothing changed"
    return "success", ""


def finish(ctx: OperationContext[Any], cluster_id: str | None, *, failed_tasks: Iterable[str] = (),
           next_steps: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Write the outcome of this attempt (its recorded steps and the tasks Airflow marked failed), with
    what to do now (``next_steps`` by outcome, else :data:`NEXT_STEPS`), and release the lock; always runs."""
    outcome, reason = outcome_of(ctx.audit.summary(), dry_run=ctx.params.dry_run, failed_tasks=failed_tasks)
    return conclude(ctx, outcome, reason, cluster_id, next_steps=(next_steps or {}).get(outcome, ""))


#: What an operator does after a run ended with each outcome, when its capability says nothing more precise.
NEXT_STEPS = {
    "success": "Nothing: the change is applied and checked. \"Cluster after\" below is the cluster as this run "
               "left it.",
    "dry_run": "Nothing changed. To apply the change, trigger the DAG again with the same parameters and dry_run "
               "off: it plans again on the cluster as it is then, and its approval shows that plan.",
    "rejected": "Nothing changed, and nothing needs undoing. Trigger the DAG again when the change should be made: "
                "it plans again on the cluster as it is then.",
    "refused": "Nothing changed. Change what the reason above names, then trigger the DAG again.",
    "failed": "Read the reason above: it names the failed step, what stays and how to go on. Once that is fixed, "
              "trigger the DAG again: it plans again on the cluster as it is then (\"Cluster after\" below).",
    "abandoned": "The run was rolled back; the reason above names what stays. Trigger the DAG again to retry.",
}


def next_steps_of(outcome: str) -> str:
    """:data:`NEXT_STEPS` of ``outcome`` (a closing sentence for every outcome)."""
    return NEXT_STEPS.get(outcome, "Read the reason above: it names what stays.")


def conclude(ctx: OperationContext[Any], outcome: str, reason: str, cluster_id: str | None = None, *,
             next_steps: str = "") -> dict[str, Any]:
    """Record ``outcome`` as the run's (event and operations row), with what to do now (``next_steps``, or
    :func:`next_steps_of` the outcome), and release its lock."""
    ctx.audit.append("outcome", outcome=outcome, reason=reason, next_steps=next_steps or next_steps_of(outcome))
    ctx.store.update_operation(ctx.dag_id, ctx.run_id, state="finished", outcome=outcome, reason=reason or None,
                               ended_at=time.time())
    released = ctx.store.release(cluster_id, ctx.dag_id, ctx.run_id) if cluster_id else False
    log.info("operation %s: %s (%s); lock released: %s", ctx.holder, outcome, reason or "-", released)
    return {"outcome": outcome, "reason": reason, "record": ctx.audit.ref}



# -- gates -----------------------------------------------------------------------------------------------

def gate(ctx: OperationContext[Any], name: str, frames: Any, *, docs_after: bool = False,
         subject: str | None = None) -> dict[str, Any]:
    """Run the suite ``name`` over ``frames``, record the result with its Data Docs, and raise
    :class:`kafkaops.platform.gates.GateFailed` when an expectation failed. A retried task whose
    gate had passed in this attempt does not record the pass again. ``docs_after``: the verdict alone (no
    Data Docs: rendering and storing them takes most of a gate's time), where every tenth of a second counts
    (a live cut-over's write window); the caller then calls :func:`publish_docs` once that part is over.
    ``subject``: what the suite gates, when a run gates several things with one suite (each copy of a Kafka
    Streams application's topics): each is recorded, with Data Docs of its own."""
    docs = None
    if docs_after:
        result = gates.run(name, frames)
    else:
        with tempfile.TemporaryDirectory(prefix="kafkaops-docs-") as tmp:
            result = gates.run(name, frames, docs_dir=tmp)
            docs = _store_docs(ctx, name, Path(tmp), result, subject)
    if not (result.ok and _passed_before(ctx, name, subject)):
        about = {} if subject is None else {"subject": subject}
        ctx.audit.append("gate", gate=name, ok=result.ok, failures=list(result.failures), docs_path=docs,
                         statistics=dict(result.statistics), **about)
    log.info("%s", result)
    gates.require(result)
    return {**result.to_dict(), "docs_path": docs}


def publish_docs(ctx: OperationContext[Any], name: str, frames: Any, *, subject: str | None = None) -> str | None:
    """The Data Docs of a gate run with ``docs_after`` (:func:`gate`): ``frames`` validated again (the same
    verdict) with its docs rendered, stored, and the gate's entry in the record pointed at them. Never
    raises: the run goes on without them (a note says why), as the verdict was recorded already."""
    try:
        with tempfile.TemporaryDirectory(prefix="kafkaops-docs-") as tmp:
            docs = _store_docs(ctx, name, Path(tmp), gates.run(name, frames, docs_dir=tmp), subject)
    except Exception as err:  # GX's and the store's errors alike: the docs are a record, not a verdict
        log.warning("gate %s: its Data Docs could not be built or stored: %s", name, err)
        ctx.audit.append("note", text=f"gate {name}: its Data Docs could not be built or stored ({err}); its "
                                      "verdict above stands")
        return None
    ctx.audit.append("gate", gate=name, docs_of=True, docs_path=docs, **({} if subject is None else {"subject": subject}))
    return docs


def _store_docs(ctx: OperationContext[Any], name: str, tmp: Path, result: gates.GateResult,
                subject: str | None = None) -> str | None:
    """The Data Docs ``gates.run`` rendered under ``tmp``, put into the store (where the api-server reads
    them); their index page's path there (a folder of its own per ``subject``)."""
    if not result.docs_path:
        return None
    site = tmp.resolve() / name
    prefix = f"docs/{ctx.artifact_prefix}/{name}" + ("" if subject is None else f"/{safe_name(subject, limit=120)}")
    ctx.store.put_tree(prefix, site)
    return f"{prefix}/{Path(result.docs_path).resolve().relative_to(site).as_posix()}"


def _passed_before(ctx: OperationContext[Any], name: str, subject: str | None = None) -> bool:
    """Whether the gate ``name`` (of ``subject``) passed earlier in this attempt of the run (an earlier try of
    the task)."""
    return any(g.get("gate") == name and g.get("subject") == subject and g.get("ok")
               for g in ctx.audit.summary()["gates"])


def preflight(ctx: OperationContext[Any]) -> dict[str, Any]:
    """The cluster before: snapshot it, record it, and gate it (online, replicated, idle)."""
    with ctx.connect() as conn:
        cluster = metadata.snapshot(conn, include_internal=True)
        in_flight = reassignments.list_partition_reassignments(conn)
    ctx.audit.append("snapshot", stage="before", cluster=cluster.to_dict())
    log.info("cluster before: %d broker(s), %d online; %d topic(s), %d partition(s); %d reassignment(s) in flight",
             len(cluster.brokers), len(cluster.online_broker_ids), len(cluster.topics), len(cluster.partitions),
             len(in_flight))
    gate(ctx, "preflight", gates.preflight_frames(cluster, in_flight))
    return cluster.to_dict()


def record_approval(ctx: OperationContext[Any], approved: bool, by: str, mode: str) -> None:
    ctx.audit.append("approval", approved=approved, by=by, mode=mode)


class FourEyesError(KafkaOpsError):
    """The four-eyes rule refuses an approval step's setting: nothing has changed."""


def four_eyes_auto_approve(run: str, triggered_by: str) -> FourEyesError:
    """The refusal of ``approval=auto_approve`` under the four-eyes rule, before the step answers."""
    return FourEyesError(f"run {run}: four eyes is on ([kafkaops] four_eyes), so {triggered_by} cannot approve "
                         "this run, and approval=auto_approve would approve it without a second person. Nothing "
                         "changed: the cluster is as before. Trigger it again with approval=manual and let "
                         "another user approve it")


def four_eyes_rule(triggered_by: str) -> str:
    """The approval's paragraph saying who may answer under the four-eyes rule."""
    return (f"**Four eyes:** {triggered_by} triggered this run and may reject it, but only another user may "
            f"approve it: an approval by {triggered_by} is refused, recorded, and this question is asked again.")


def self_approval(*, four_eyes: bool, approved: bool, triggered_by: str | None,
                  answered_by: tuple[str | None, ...], at: str) -> str | None:
    """Why an answer breaks the four-eyes rule (``None``: it stands). Only an approval is refused, and only
    when its user (any of ``answered_by``: the user's id and name) is the one who triggered the run; a
    rejection by that user stands, since it changes nothing. A run without a triggering user (scheduled,
    or triggered by another DAG) has no one to exclude."""
    if not four_eyes or not approved or not triggered_by or triggered_by not in answered_by:
        return None
    return (f"four eyes: {triggered_by} triggered this run and approved it at {at}; that approval is refused "
            "(another user must approve) and the approval is asked again. Nothing changed")


def now() -> float:
    return time.time()
