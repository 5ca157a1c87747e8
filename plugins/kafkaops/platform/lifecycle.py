"""The lifecycle every kafkaops operation shares, as plain functions over an :class:`OperationContext`.

    begin (lock) -> preflight gate -> ... the capability's steps ... -> approval -> ... -> finish

Each step takes the context and JSON-safe values and returns JSON-safe values, so Airflow passes
them through XCom unchanged; each appends what it did to the run's audit record. The context is
generic over the capability's params: anything with a ``kind`` and a ``dry_run``. Nothing here
imports Airflow or a capability.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from kafkaops.errors import KafkaOpsError
from kafkaops.platform import admin, gates, state
from kafkaops.platform.paths import safe_name, state_dir

log = logging.getLogger(__name__)

APPROVAL_MODES = ("manual", "auto_approve", "auto_reject")


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

    @property
    def holder(self) -> str:
        return f"{self.dag_id}/{self.run_id}"

    @property
    def audit(self) -> state.AuditLog:
        return state.AuditLog.for_run(self.dag_id, self.run_id)

    @property
    def docs_dir(self) -> Path:
        return state_dir() / "docs" / safe_name(self.dag_id) / safe_name(self.run_id)

    def connect(self) -> admin.KafkaConnection:
        return admin.connect(self.conn_config, timeout_s=15.0)

    def step(self, name: str, status: str, **data: Any) -> None:
        self.audit.append("step", name=name, status=status, **data)


# -- begin and finish ------------------------------------------------------------------------------------

def begin(ctx: OperationContext[Any], raw_params: Mapping[str, Any]) -> dict[str, Any]:
    """Record the run, find the cluster and take its lock (refused, naming the holder, if busy)."""
    ctx.audit.append("started", operation=ctx.params.kind, dag_id=ctx.dag_id, run_id=ctx.run_id,
                     triggered_by=ctx.triggered_by, params=dict(raw_params))
    try:
        with ctx.connect() as conn:
            cluster_id, controller, brokers = admin.describe_cluster(conn)
        state.acquire_lock(cluster_id, ctx.holder)
    except KafkaOpsError as err:
        ctx.audit.append("outcome", outcome="refused", reason=str(err))
        raise
    ctx.audit.append("note", text=f"lock on cluster {cluster_id} taken by {ctx.holder}")
    return {"cluster_id": cluster_id, "controller": controller, "brokers": sorted(b.id for b in brokers)}


def finish(ctx: OperationContext[Any], cluster_id: str | None) -> dict[str, Any]:
    """Write the outcome (from the steps the record holds) and release the lock; always runs."""
    record = ctx.audit.summary()
    final: dict[str, dict[str, Any]] = {}
    for s in record["steps"]:  # a step retried to success counts as its last attempt
        final[s["name"]] = s
    failed = [name for name, s in final.items() if s.get("status") == "failed"]
    if record.get("approval") and record["approval"].get("approved") is False:
        outcome, reason = "rejected", f"rejected by {record['approval'].get('by')}; nothing changed"
    elif failed:
        errors = [final[name].get("error", "") for name in failed]
        outcome, reason = "failed", f"failed steps: {', '.join(failed)}: {'; '.join(errors)[:2000]}"
    elif ctx.params.dry_run:
        outcome, reason = "dry_run", "dry run: planned and gated, nothing changed"
    else:
        outcome, reason = "success", ""
    ctx.audit.append("outcome", outcome=outcome, reason=reason)
    released = state.release_lock(cluster_id, ctx.holder) if cluster_id else False
    log.info("operation %s: %s (%s); lock released: %s", ctx.holder, outcome, reason or "-", released)
    return {"outcome": outcome, "reason": reason, "record": str(ctx.audit.path)}


# -- gates -----------------------------------------------------------------------------------------------

def gate(ctx: OperationContext[Any], name: str, frames: Any) -> dict[str, Any]:
    """Run the suite ``name`` over ``frames``, record the result with its Data Docs, and raise
    :class:`kafkaops.platform.gates.GateFailed` when an expectation failed."""
    result = gates.run(name, frames, docs_dir=ctx.docs_dir)
    docs = None
    if result.docs_path:
        docs = str(Path(result.docs_path).relative_to(state_dir() / "docs"))
    ctx.audit.append("gate", gate=name, ok=result.ok, failures=list(result.failures), docs_path=docs,
                     statistics=dict(result.statistics))
    log.info("%s", result)
    gates.require(result)
    return {**result.to_dict(), "docs_path": docs}


def preflight(ctx: OperationContext[Any]) -> dict[str, Any]:
    """The cluster before: snapshot it, record it, and gate it (online, replicated, idle)."""
    with ctx.connect() as conn:
        cluster = admin.snapshot(conn, include_internal=True)
        in_flight = admin.list_partition_reassignments(conn)
    ctx.audit.append("snapshot", stage="before", cluster=cluster.to_dict())
    gate(ctx, "preflight", gates.preflight_frames(cluster, in_flight))
    return cluster.to_dict()


def record_approval(ctx: OperationContext[Any], approved: bool, by: str, mode: str) -> None:
    ctx.audit.append("approval", approved=approved, by=by, mode=mode)



def now() -> float:
    return time.time()
