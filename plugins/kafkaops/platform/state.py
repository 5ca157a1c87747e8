"""kafkaops run state as an operator reads it: the operation record of one run.

Each step appends an event to the run's trail in the kafkaops store (:mod:`kafkaops.platform.store`)
as it happens, with the task and try that wrote it, so a crash leaves a partial record rather than
none, and every Airflow component reads the same record. :func:`summarize` folds the generic events
into the record: who ran what with which params, the cluster before and after, the plan, steps with
timings, gate results, notes, the outcome; a capability folds its own events (a reassignment's
batches and throttles: :mod:`kafkaops.reassign.records`), given to :func:`read_record` as ``folds``.

A step is one row however often it ran: a retry (or a task resumed after deferral) that records
"started" again replaces the row, ``tries`` counts the Airflow tries seen and ``earlier`` keeps how
each earlier try ended.

A re-run of the same DAG run (its ``begin`` runs again) starts a new attempt: the record then shows
that attempt's steps, approval and outcome; the earlier attempts' notes (and a capability's cluster
changes) stay listed, since they happened.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, Self, TypeVar

from kafkaops.errors import KafkaOpsError
from kafkaops.platform import store as store_

EVENT_KINDS = frozenset({"started", "snapshot", "plan", "step", "batch", "throttle_set", "throttle_removed",
                         "cordon_set", "cordon_lifted",
                         "gate", "approval", "note", "outcome"})


class AuditError(KafkaOpsError):
    """An audit event that cannot be written or read."""


@dataclass(frozen=True)
class AuditEvent:
    ts: float
    kind: str
    data: Mapping[str, Any]
    task_id: str | None = None
    try_number: int | None = None


class AuditLog:
    """The record of one operation run in the store, written as task ``task_id`` try ``try_number``."""

    def __init__(self, dag_id: str, run_id: str, *, task_id: str | None = None, try_number: int | None = None,
                 store: store_.Store | None = None) -> None:
        self.dag_id, self.run_id = dag_id, run_id
        self.task_id, self.try_number = task_id, try_number
        self._store = store

    @classmethod
    def for_run(cls, dag_id: str, run_id: str, **kwargs: Any) -> AuditLog:
        return cls(dag_id, run_id, **kwargs)

    @property
    def store(self) -> store_.Store:
        return self._store or store_.current()

    @property
    def ref(self) -> str:
        """Where an operator reads this record: the plugin's page."""
        return f"/kafkaops/records/{self.dag_id}/{self.run_id}"

    def append(self, kind: str, **data: Any) -> AuditEvent:
        if kind not in EVENT_KINDS:
            raise AuditError(f"audit event kind {kind!r} is unknown; use one of {sorted(EVENT_KINDS)}")
        e = self.store.append_event(self.dag_id, self.run_id, kind, data, task_id=self.task_id,
                                    try_number=self.try_number)
        return AuditEvent(e.ts, e.kind, e.data, e.task_id, e.try_number)

    def events(self) -> list[AuditEvent]:
        return [AuditEvent(e.ts, e.kind, e.data, e.task_id, e.try_number)
                for e in self.store.events(self.dag_id, self.run_id)]

    def exists(self) -> bool:
        return self.store.operation(self.dag_id, self.run_id) is not None or bool(self.events())

    def summary(self) -> dict[str, Any]:
        return summarize(self.events())


class NoteValue(Protocol):
    """A capability's typed audit note (its ``records`` module): ``KEY`` is the key its stored JSON
    holds (a truthy value there marks a note of this kind), :meth:`to_dict` what is stored."""

    KEY: ClassVar[str]

    def to_dict(self) -> dict[str, Any]: ...

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self: ...


N = TypeVar("N", bound=NoteValue)


def append_note(audit: AuditLog, note: NoteValue) -> AuditEvent:
    """Write ``note`` into the record as a ``note`` event (its text and its own fields)."""
    return audit.append("note", **note.to_dict())


def holds(note: Mapping[str, Any], kind: type[NoteValue]) -> bool:
    """Whether a recorded note (stored JSON) is a ``kind`` note: its own ``in_note`` test, else a truthy ``KEY``."""
    test = getattr(kind, "in_note", None)
    return bool(test(note)) if test is not None else bool(note.get(kind.KEY))


def read_notes(notes: Iterable[Mapping[str, Any]], kind: type[N]) -> list[N]:
    """The notes of a record (the record's ``notes``, or events' data) that are ``kind`` notes, typed, in order."""
    return [kind.from_dict(n) for n in notes if holds(n, kind)]


def summarize(events: Iterable[AuditEvent]) -> dict[str, Any]:
    """Fold the generic events into the operation record (pure): started, snapshot, plan, step, gate,
    approval, note, outcome. A ``started`` event opens a new attempt. A capability's own events
    (a reassignment's batches and throttles) are folded by its ``records`` module."""
    record: dict[str, Any] = {"operation": None, "triggered_by": None, "params": {}, "before": None, "after": None,
                              "plan": None, "steps": [], "gates": [], "approval": None, "notes": [],
                              "outcome": "running", "started_at": None, "ended_at": None, "attempt": 0}
    open_steps: dict[str, dict[str, Any]] = {}
    tries_seen: dict[str, list[int | None]] = {}  # per step, the Airflow try numbers that started it
    for e in events:
        d = dict(e.data)
        if e.kind == "started":
            record.update(operation=d.get("operation"), dag_id=d.get("dag_id"), run_id=d.get("run_id"),
                          triggered_by=d.get("triggered_by"), params=d.get("params", {}), started_at=e.ts,
                          outcome="running", ended_at=None, approval=None, steps=[], gates=[],
                          attempt=record["attempt"] + 1)
            record.pop("outcome_reason", None)
            record.pop("next_steps", None)
            open_steps.clear()
            tries_seen.clear()
        elif e.kind == "snapshot":
            record[d.get("stage", "before")] = d.get("cluster")
        elif e.kind == "plan":
            record["plan"] = d
        elif e.kind == "step":
            _fold_step(record, open_steps, tries_seen, e, d)
        elif e.kind == "gate" and d.get("docs_of"):  # a gate's Data Docs, stored after its verdict
            for entry in reversed(record["gates"]):
                if entry.get("gate") == d.get("gate") and entry.get("subject") == d.get("subject"):
                    entry["docs_path"] = d.get("docs_path")
                    break
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
            if d.get("next_steps"):
                record["next_steps"] = d["next_steps"]
    return record


def _fold_step(record: dict[str, Any], open_steps: dict[str, dict[str, Any]],
               tries_seen: dict[str, list[int | None]], e: AuditEvent, d: dict[str, Any]) -> None:
    """One row per step: a new try of a step replaces its row, keeping how the earlier tries ended."""
    name = d["name"]
    previous = next((s for s in record["steps"] if s["name"] == name), None)
    if d.get("status") == "started":
        if previous is not None and previous.get("status") == "running" and previous.get("try_number") == \
                e.try_number and e.try_number is not None:
            return  # the same try started again (a deferred task resumed): still one try, still running
        seen = tries_seen.setdefault(name, [])
        if e.try_number is None or e.try_number not in seen:
            seen.append(e.try_number)
        earlier = list((previous or {}).get("earlier", []))
        if previous is not None:
            earlier.append(_ended(previous))
        running = {"name": name, "started_at": e.ts, "status": "running", "try_number": e.try_number,
                   "tries": len(seen), "earlier": earlier}
        if previous is not None:
            record["steps"][record["steps"].index(previous)] = running
        else:
            record["steps"].append(running)
        open_steps[name] = running
        return
    step = open_steps.pop(name) if name in open_steps else previous
    if step is None:
        tries_seen[name] = [e.try_number]
        step = {"name": name, "started_at": None, "tries": 1, "earlier": [], "try_number": e.try_number}
        record["steps"].append(step)
    step.update(status=d.get("status"), ended_at=e.ts,
                seconds=None if step.get("started_at") is None else round(e.ts - step["started_at"], 3),
                **{k: v for k, v in d.items() if k not in ("name", "status")})


def _ended(step: Mapping[str, Any]) -> str:
    """How a replaced try of a step ended, in words."""
    label = f"try {step['try_number']}" if step.get("try_number") is not None else "an earlier try"
    status = "did not record its end" if step.get("status") == "running" else str(step.get("status"))
    return f"{label}: {status}" + (f": {step['error']}" if step.get("error") else "")


def list_records(dag_id: str | None = None, *, store: store_.Store | None = None, limit: int = 200,
                 dag_ids: Iterable[str] | None = None) -> list[dict[str, Any]]:
    """The operations rows, newest first (only ``dag_ids`` when given)."""
    return (store or store_.current()).list_operations(dag_id, limit=limit, dag_ids=dag_ids)


Fold = Callable[[list[AuditEvent]], Mapping[str, Any]]
"""A capability's fold of its own events into record keys (e.g. ``kafkaops.reassign.records.fold_record``)."""


def read_record(dag_id: str, run_id: str, *, store: store_.Store | None = None, folds: Sequence[Fold] = ()
                ) -> dict[str, Any] | None:
    """The record of one run as pages and the CLI show it: its events folded (:func:`summarize`, then
    each of ``folds``) with its operations row (``kind``, ``cluster_id``, ``state``); None when the
    store holds neither."""
    log = AuditLog(dag_id, run_id, store=store)
    row = log.store.operation(dag_id, run_id)
    events = log.events()
    if row is None and not events:
        return None
    record = summarize(events)
    for fold in folds:
        record.update(fold(events))
    record.update(dag_id=dag_id, run_id=run_id, kind=None, cluster_id=None, state=None)
    if row is not None:
        record.update(kind=row["kind"], cluster_id=row["cluster_id"], state=row["state"])
        record["operation"] = record["operation"] or row["kind"]
        record["triggered_by"] = record["triggered_by"] or row["triggered_by"]
        record["started_at"] = record["started_at"] or row["started_at"]
    return record
