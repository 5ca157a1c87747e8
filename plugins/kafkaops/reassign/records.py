"""The reassignment capability's data contract: the events its steps write into a run's record (a
batch submitted, throttles set and removed) as typed frozen values, and their fold into what the
record page and the CLI show (:func:`fold`): each batch with its status, the throttles.

    BatchSubmitted    a batch of moves submitted (``batch`` event)
    ThrottleSet       replication throttles set (``throttle_set``), with the engine's ThrottleRecord
    ThrottleRemoved   throttles removed (``throttle_removed``), with those a down broker kept (``left``)
    Reassignment      the fold: batches (:class:`Batch`: submitted, done, failed or unfinished), throttles

A batch is "submitted" until its end is known: "done" once a later batch is submitted or the step
that submitted it succeeds, "failed" when that step fails (a retry that then completes it makes it
"done"), "unfinished" when the run ended without either. A re-run of the same DAG run (its
``begin`` again) keeps the earlier attempts' batches and throttles listed: they happened.

Invariant: the stored JSON of each event is the shape written before these types, and
:meth:`Reassignment.to_dict` gives the record the keys it had (``batches``, ``throttles_set``,
``throttles_removed``), so pages read old records too. Nothing here does I/O.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from kafkaops.platform import state
from kafkaops.platform.state import AuditEvent


@dataclass(frozen=True)
class BatchSubmitted:
    """Batch ``index`` of the plan submitted: its partitions (``keys``: topic, partition), bytes to
    copy, and how many batches come after it."""

    index: int
    partitions: int
    bytes: int
    keys: tuple[tuple[str, int], ...] = ()
    remaining: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "partitions": self.partitions, "bytes": self.bytes,
                "keys": [list(k) for k in self.keys], "status": "submitted", "remaining": self.remaining}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BatchSubmitted:
        return cls(int(data.get("index") or 0), int(data.get("partitions") or 0), int(data.get("bytes") or 0),
                   tuple((str(t), int(p)) for t, p in data.get("keys") or ()), data.get("remaining"))


@dataclass(frozen=True)
class Batch:
    """A submitted batch as the record shows it: when (``ts``), which step submitted it, its status
    and when it ended (None while submitted, or unfinished)."""

    ts: float
    submitted: BatchSubmitted
    step: str
    status: str = "submitted"
    ended_at: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"ts": self.ts, **self.submitted.to_dict(), "status": self.status, "step": self.step,
                "ended_at": self.ended_at}


@dataclass(frozen=True)
class ThrottleSet:
    """Replication throttles set on ``brokers`` for ``topics`` at ``rate`` bytes/s; ``record`` is the
    engine's ThrottleRecord (what a removal must undo)."""

    brokers: tuple[int, ...]
    topics: tuple[str, ...]
    rate: int | None = None
    record: Mapping[str, Any] = field(default_factory=dict)
    ts: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"brokers": list(self.brokers), "topics": list(self.topics), "rate": self.rate,
                "record": dict(self.record)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ThrottleSet:
        return cls(tuple(data.get("brokers") or ()), tuple(data.get("topics") or ()), data.get("rate"),
                   dict(data.get("record") or {}), ts=data.get("ts"))


@dataclass(frozen=True)
class ThrottleRemoved:
    """Throttles removed from ``brokers`` and ``topics``; ``left``: per broker, the rates a broker that
    was down kept (removed by the next run on the cluster)."""

    brokers: tuple[int, ...]
    topics: tuple[str, ...]
    left: Mapping[str, Sequence[str]] = field(default_factory=dict)
    ts: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"brokers": list(self.brokers), "topics": list(self.topics),
                "left": {str(b): list(keys) for b, keys in self.left.items()}}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ThrottleRemoved:
        return cls(tuple(data.get("brokers") or ()), tuple(data.get("topics") or ()),
                   {str(b): tuple(keys) for b, keys in (data.get("left") or {}).items()}, ts=data.get("ts"))


@dataclass(frozen=True)
class Reassignment:
    """A run's reassignment as its record tells it: the batches and the throttles, in order."""

    batches: tuple[Batch, ...] = ()
    throttles_set: tuple[ThrottleSet, ...] = ()
    throttles_removed: tuple[ThrottleRemoved, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The record's keys, as pages and the CLI read them (each throttle with its ``ts``)."""
        return {"batches": [b.to_dict() for b in self.batches],
                "throttles_set": [{"ts": t.ts, **t.to_dict()} for t in self.throttles_set],
                "throttles_removed": [{"ts": t.ts, **t.to_dict()} for t in self.throttles_removed]}

    def throttles_in_place(self, since: float) -> ThrottleSet | None:
        """The throttles set since ``since`` (this attempt) and not removed after, else None."""
        set_ = [t for t in self.throttles_set if (t.ts or 0) >= since]
        removed = [t for t in self.throttles_removed if (t.ts or 0) >= since]
        if not set_ or (removed and (removed[-1].ts or 0) >= (set_[-1].ts or 0)):
            return None
        return set_[-1]


def fold(events: Iterable[AuditEvent]) -> Reassignment:
    """The batches (with the status their submitting step's end gives them) and the throttles of a
    run's events (pure); the steps' ends come from the generic ``step`` and ``outcome`` events."""
    batches: list[Batch] = []
    unsettled: list[int] = []  # indexes into batches of those whose end is not known yet
    open_steps: list[str] = []  # steps started and not ended, in start order (this attempt's)
    set_, removed = [], []
    for e in events:
        d = e.data
        if e.kind == "started":
            open_steps.clear()
        elif e.kind == "step":
            name, status = d["name"], d.get("status")
            if status == "started":
                if name not in open_steps:
                    open_steps.append(name)
                continue
            if name in open_steps:
                open_steps.remove(name)
            if status in ("success", "failed"):
                mine = [i for i in unsettled if batches[i].step == name]
                for i in mine:
                    batches[i] = replace(batches[i], status="done" if status == "success" else "failed",
                                         ended_at=e.ts)
                if status == "success":
                    unsettled[:] = [i for i in unsettled if i not in mine]
        elif e.kind == "batch":
            for i in unsettled:  # a batch is submitted only when the previous one has moved
                batches[i] = replace(batches[i], status="done", ended_at=e.ts)
            unsettled.clear()
            owner = e.task_id if e.task_id in open_steps else (open_steps[-1] if open_steps else
                                                                e.task_id or "execute_batches")
            batches.append(Batch(e.ts, BatchSubmitted.from_dict(d), str(owner), str(d.get("status") or "submitted")))
            if batches[-1].status == "submitted":
                unsettled.append(len(batches) - 1)
        elif e.kind == "throttle_set":
            set_.append(ThrottleSet.from_dict({**d, "ts": e.ts}))
        elif e.kind == "throttle_removed":
            removed.append(ThrottleRemoved.from_dict({**d, "ts": e.ts}))
        elif e.kind == "outcome" and d.get("outcome") != "success":
            for i in unsettled:
                if batches[i].status == "submitted":
                    batches[i] = replace(batches[i], status="unfinished", ended_at=None)
    return Reassignment(tuple(batches), tuple(set_), tuple(removed))


def fold_record(events: Iterable[AuditEvent]) -> dict[str, Any]:
    """:func:`fold` as the record's keys: a ``fold`` of :func:`kafkaops.platform.state.read_record`."""
    return fold(events).to_dict()


def summarize(events: Iterable[AuditEvent]) -> dict[str, Any]:
    """A reassignment run's record: the generic record (:func:`kafkaops.platform.state.summarize`)
    with its batches and throttles (:func:`fold`)."""
    events = list(events)
    return {**state.summarize(events), **fold_record(events)}
