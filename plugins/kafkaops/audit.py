"""The operation record: one append-only JSON Lines file per operation run.

Each step appends an event as it happens (fsync'd), so a crash leaves a partial record rather
than none, and the record survives restarts of Airflow. :func:`summarize` folds the events into
the record an operator reads: who ran what with which params, the cluster before and after,
the plan, steps with timings, batches, throttles set and removed, gate results, the outcome.
"""
from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kafkaops.errors import KafkaOpsError
from kafkaops.paths import state_dir

EVENT_KINDS = frozenset({"started", "snapshot", "plan", "step", "batch", "throttle_set", "throttle_removed",
                         "gate", "approval", "note", "outcome"})


class AuditError(KafkaOpsError):
    """An audit record that cannot be written or read."""


@dataclass(frozen=True)
class AuditEvent:
    ts: float
    kind: str
    data: Mapping[str, Any]


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)[:200]


class AuditLog:
    """The record of one operation run, e.g. ``AuditLog.for_run("kafka_scale_out", run_id)``."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def for_run(cls, dag_id: str, run_id: str, root: Path | None = None) -> AuditLog:
        return cls((root or state_dir() / "audit") / _safe(dag_id) / f"{_safe(run_id)}.jsonl")

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
    pattern = f"{_safe(dag_id)}/*.jsonl" if dag_id else "*/*.jsonl"
    return sorted(base.glob(pattern), key=lambda p: p.stat().st_mtime, reverse=True)
