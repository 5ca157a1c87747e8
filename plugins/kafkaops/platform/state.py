"""kafkaops run state: the operation record, the cluster lock and the throttle ledger.

The operation record: one append-only JSON Lines file per operation run.

Each step appends an event as it happens (fsync'd), so a crash leaves a partial record rather
than none, and the record survives restarts of Airflow. :func:`summarize` folds the events into
the record an operator reads: who ran what with which params, the cluster before and after,
the plan, steps with timings, batches, throttles set and removed, gate results, the outcome.
"""
from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kafkaops.errors import KafkaOpsError
from kafkaops.platform.paths import safe_name, state_dir

EVENT_KINDS = frozenset({"started", "snapshot", "plan", "step", "batch", "throttle_set", "throttle_removed",
                         "gate", "approval", "note", "outcome"})


class AuditError(KafkaOpsError):
    """An audit record that cannot be written or read."""


@dataclass(frozen=True)
class AuditEvent:
    ts: float
    kind: str
    data: Mapping[str, Any]


class AuditLog:
    """The record of one operation run, e.g. ``AuditLog.for_run("kafka_scale_out", run_id)``."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def for_run(cls, dag_id: str, run_id: str, root: Path | None = None) -> AuditLog:
        return cls((root or state_dir() / "audit") / safe_name(dag_id) / f"{safe_name(run_id)}.jsonl")

    def append(self, kind: str, **data: Any) -> AuditEvent:
        if kind not in EVENT_KINDS:
            raise AuditError(f"audit event kind {kind!r} is unknown; use one of {sorted(EVENT_KINDS)}")
        event = AuditEvent(ts=time.time(), kind=kind, data=data)
        line = json.dumps({"ts": event.ts, "kind": kind, "data": data}, default=str, sort_keys=True)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as f:
                f.write(line + "\n")
                f.flush()
                os.fsync(f.fileno())
        except OSError as err:
            raise AuditError(f"cannot append to audit record {self.path}: {err}; check the state dir "
                             "(KAFKAOPS_STATE_DIR) is writable") from err
        return event

    def events(self) -> list[AuditEvent]:
        if not self.path.exists():
            return []
        events = []
        for number, line in enumerate(self.path.read_text(encoding="utf-8").splitlines(), start=1):
            if not line.strip():
                continue
            try:
                raw = json.loads(line)
            except json.JSONDecodeError:
                if number == len(self.path.read_text(encoding="utf-8").splitlines()):
                    break  # a torn last line from a crash mid-write; the rest of the record stands
                raise AuditError(f"{self.path}:{number} is not JSON; the audit record is damaged") from None
            events.append(AuditEvent(raw["ts"], raw["kind"], raw["data"]))
        return events

    def summary(self) -> dict[str, Any]:
        return summarize(self.events())


def summarize(events: Iterable[AuditEvent]) -> dict[str, Any]:
    """Fold events into the operation record (pure)."""
    record: dict[str, Any] = {"operation": None, "triggered_by": None, "params": {}, "before": None, "after": None,
                              "plan": None, "steps": [], "batches": [], "throttles_set": [],
                              "throttles_removed": [], "gates": [], "approval": None, "notes": [],
                              "outcome": "running", "started_at": None, "ended_at": None}
    open_steps: dict[str, dict[str, Any]] = {}
    for e in events:
        d = dict(e.data)
        if e.kind == "started":
            record.update(operation=d.get("operation"), dag_id=d.get("dag_id"), run_id=d.get("run_id"),
                          triggered_by=d.get("triggered_by"), params=d.get("params", {}), started_at=e.ts)
        elif e.kind == "snapshot":
            record[d.get("stage", "before")] = d.get("cluster")
        elif e.kind == "plan":
            record["plan"] = d
        elif e.kind == "step":
            name = d["name"]
            if d.get("status") == "started":
                open_steps[name] = {"name": name, "started_at": e.ts, "status": "running"}
                record["steps"].append(open_steps[name])
            else:
                step = open_steps.pop(name, None)
                if step is None:
                    step = {"name": name, "started_at": None}
                    record["steps"].append(step)
                step.update(status=d.get("status"), ended_at=e.ts,
                            seconds=None if step["started_at"] is None else round(e.ts - step["started_at"], 3),
                            **{k: v for k, v in d.items() if k not in ("name", "status")})
        elif e.kind == "batch":
            record["batches"].append({"ts": e.ts, **d})
        elif e.kind == "throttle_set":
            record["throttles_set"].append({"ts": e.ts, **d})
        elif e.kind == "throttle_removed":
            record["throttles_removed"].append({"ts": e.ts, **d})
        elif e.kind == "gate":
            record["gates"].append({"ts": e.ts, **d})
        elif e.kind == "approval":
            record["approval"] = {"ts": e.ts, **d}
        elif e.kind == "note":
            record["notes"].append({"ts": e.ts, **d})
        elif e.kind == "outcome":
            record["outcome"] = d.get("outcome")
            record["ended_at"] = e.ts
            if d.get("reason"):
                record["outcome_reason"] = d["reason"]
    return record


def list_records(dag_id: str | None = None, root: Path | None = None) -> list[Path]:
    base = root or state_dir() / "audit"
    pattern = f"{safe_name(dag_id)}/*.jsonl" if dag_id else "*/*.jsonl"
    return sorted(base.glob(pattern), key=lambda p: p.stat().st_mtime, reverse=True)


# -- the cluster lock ------------------------------------------------------------------------------------
# One operation per cluster at a time: a lock file per cluster, shared by every kafkaops DAG. Taking
# the lock is atomic (O_CREAT|O_EXCL). A refused run is told which run holds the cluster and since
# when. Releasing checks the holder, so a run never frees another's lock.


class ClusterBusy(KafkaOpsError):
    """Another operation holds the cluster."""


@dataclass(frozen=True)
class LockHolder:
    cluster: str
    holder: str
    since: float


def _lock_path(cluster: str, root: Path | None) -> Path:
    return (root or state_dir() / "locks") / f"{safe_name(cluster)}.lock"


def lock_holder(cluster: str, root: Path | None = None) -> LockHolder | None:
    path = _lock_path(cluster, root)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as err:
        raise KafkaOpsError(f"lock file {path} is unreadable ({err}); if no kafkaops run is active on "
                            f"{cluster}, delete it") from err
    return LockHolder(cluster, data["holder"], data["since"])


def acquire_lock(cluster: str, holder: str, root: Path | None = None) -> LockHolder:
    """Take the cluster for ``holder`` (e.g. ``kafka_scale_out/manual__2026-...``); idempotent for
    the same holder, so a retried task does not lock itself out."""
    path = _lock_path(cluster, root)
    path.parent.mkdir(parents=True, exist_ok=True)
    record = LockHolder(cluster, holder, time.time())
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError as err:
        current = lock_holder(cluster, root)
        if current is not None and current.holder == holder:
            return current
        since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(current.since)) if current else "?"
        raise ClusterBusy(f"cluster {cluster} is busy: run {current.holder if current else '?'} holds it since "
                          f"{since}; wait for that run to finish (its teardown releases the lock) or, if it is "
                          f"dead, delete {path}") from err
    with os.fdopen(fd, "w") as f:
        json.dump({"holder": holder, "since": record.since}, f)
    return record


def release_lock(cluster: str, holder: str, root: Path | None = None) -> bool:
    """Free the cluster if ``holder`` holds it; False when it held nothing."""
    current = lock_holder(cluster, root)
    if current is None or current.holder != holder:
        return False
    _lock_path(cluster, root).unlink(missing_ok=True)
    return True


# -- the throttle ledger ---------------------------------------------------------------------------------

def _ledger_path(cluster_id: str) -> Path:
    return state_dir() / "throttles" / f"{safe_name(cluster_id)}.json"


def throttle_ledger(cluster_id: str) -> dict[str, list[str]]:
    """Broker throttle rates kafkaops set but could not remove (a broker was down): the next
    run on the cluster deletes them instead of restoring them as someone else's values."""
    try:
        return json.loads(_ledger_path(cluster_id).read_text())
    except (OSError, ValueError):
        return {}


def save_throttle_ledger(cluster_id: str, ledger: Mapping[str, list[str]]) -> None:
    path = _ledger_path(cluster_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({b: keys for b, keys in ledger.items() if keys}, indent=2))
