"""The reassignment capability's data contract: the events its steps write into a run's record (a
batch submitted, throttles set and removed) as typed frozen values, and their fold into what the
record page and the CLI show (:func:`fold`): each batch with its status, the throttles.

    BatchSubmitted    a batch of moves submitted (``batch`` event)
    ThrottleSet       replication throttles set (``throttle_set``), with the engine's ThrottleRecord
    ThrottleRemoved   throttles removed (``throttle_removed``), with those a down broker kept (``left``)
    CordonSet         a drain's cordons set (``cordon_set``), with the engine's CordonRecord, or why none was set
    CordonLifted      cordons lifted (``cordon_lifted``), with those that stay and the command that lifts each
    Reassignment      the fold: batches (:class:`Batch`: submitted, done, failed or unfinished), throttles, cordons

and the step results that leave the step that made them:

    PlannedReassignment  the plan step's plan (XCom, to the approval, provision and execute steps; its ``plan``
                         event): the ReassignmentPlan, its summary, ETA and approval text, a scale-out's new brokers
    PlannedMoves      what the batch loop reads of it on every pass (the target replicas and the storage)
    Provisioned       the provision step's new brokers (:class:`NewBroker`; XCom, to the plan step)
    BatchStep         what the batch operator does next: wait for moves in flight, or a batch it submitted
    WaitSpec          the moves a progress trigger follows (its kwargs, stored by Airflow: no config, no secret)
    Polled            one progress poll of those moves (the engine's Progress and the partitions still moving)
    ProgressEvent     what the trigger fires: done, or stalled with the last poll

A batch is "submitted" until its end is known: "done" once a later batch is submitted or the step
that submitted it succeeds, "failed" when that step fails (a retry that then completes it makes it
"done"), "unfinished" when the run ended without either. A re-run of the same DAG run (its
``begin`` again) keeps the earlier attempts' batches and throttles listed: they happened.

Invariant: the stored JSON of each event is the shape written before these types, and
:meth:`Reassignment.to_dict` gives the record the keys it had (``batches``, ``throttles_set``,
``throttles_removed``; ``cordons_set`` and ``cordons_lifted`` since), so pages read old records too. Nothing
here does I/O.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from kafkaops.model import Cluster, TopicPartition, TopicStorage
from kafkaops.platform import state
from kafkaops.platform.state import AuditEvent
from kafkaops.reassign.engine import Progress, Receiver, receivers_advice
from kafkaops.reassign.planner.errors import PlanInputError
from kafkaops.reassign.planner.plan import ReassignmentPlan


@dataclass(frozen=True)
class NewBroker:
    """A broker a scale-out provisioned, or in a dry run would add: its id and rack, and where it runs
    (``host`` and ``port`` from a kafkaops cluster spec, ``hostname`` for an Ansible inventory host)."""

    id: int
    rack: str | None = None
    host: str | None = None
    port: int | None = None
    hostname: str | None = None

    @property
    def where(self) -> str:
        return self.hostname or (f"{self.host}:{self.port}" if self.host else "its host")

    def to_dict(self) -> dict[str, Any]:
        found = {"host": self.host, "port": self.port, "hostname": self.hostname}
        return {"id": self.id, "rack": self.rack, **{k: v for k, v in found.items() if v is not None}}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> NewBroker:
        port = data.get("port")
        return cls(int(data["id"]), data.get("rack") or None, data.get("host"), None if port is None else int(port),
                   data.get("hostname"))


@dataclass(frozen=True)
class Provisioned:
    """What the provision step hands the plan step: the new brokers, in the order they were chosen."""

    new_brokers: tuple[NewBroker, ...] = ()

    @property
    def ids(self) -> list[int]:
        return [b.id for b in self.new_brokers]

    def to_dict(self) -> dict[str, Any]:
        return {"new_brokers": [b.to_dict() for b in self.new_brokers]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Provisioned:
        """``None`` (a skipped provision: dry run, or not a scale-out) is no new broker."""
        return cls(tuple(NewBroker.from_dict(b) for b in (data or {}).get("new_brokers") or ()))


@dataclass(frozen=True)
class PlannedReassignment:
    """What the plan step made (:func:`kafkaops.reassign.steps.make_plan`): the plan (with the cluster planned
    on and the moved topics' storage), its ``summary`` and the ``approval`` the operator reads (each with the
    refusal a real run would meet, when the inventory check found one), the ``eta_s`` at the run's throttle, and
    for a scale-out the brokers it plans onto, which the provision after the approval starts (``new_brokers``;
    None for a rebalance or a drain). The plan task's XCom value and its audit ``plan`` event are
    :meth:`to_dict`; the Kafka JSON, diff, table and counts there are the plan's, written for the record pages."""

    plan: ReassignmentPlan
    summary: str
    eta_s: float
    approval: str
    new_brokers: tuple[NewBroker, ...] | None = None

    @property
    def moves(self) -> PlannedMoves:
        """What the batch loop reads of it (:class:`PlannedMoves`: the target replicas, preferred leader first, and
        the moved topics' storage), from the plan itself."""
        return PlannedMoves({m.topic_partition: m.after for m in self.plan.moves}, self.plan.storage)

    @property
    def provisioned(self) -> Provisioned:
        """The new brokers as the provision step takes them (none when the plan is not a scale-out's)."""
        return Provisioned(self.new_brokers or ())

    def to_dict(self) -> dict[str, Any]:
        """The plan step's value as it was before this type: the plan, Kafka's JSON, diff and table, the counts, the
        summary, ETA and approval, and ``new_brokers`` for a scale-out only (JSON-safe)."""
        plan, tiered = self.plan, self.plan.tiered_moves
        data: dict[str, Any] = {
            "plan": plan.to_dict(), "kafka_json": plan.to_kafka_json(), "diff": list(plan.diff()),
            "table": list(plan.table()), "summary": self.summary, "moves": len(plan.moves),
            "replica_moves": plan.replica_moves, "bytes_to_move": plan.bytes_to_move, "tiered_moves": len(tiered),
            "tiered_bytes": sum(m.bytes for m in tiered), "eta_s": self.eta_s, "approval": self.approval}
        if self.new_brokers is not None:
            data["new_brokers"] = Provisioned(self.new_brokers).to_dict()["new_brokers"]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> PlannedReassignment:
        """The plan step's value read back; :class:`~kafkaops.reassign.planner.errors.PlanInputError` naming the keys
        missing (or the value unreadable) when ``data`` is not one. The Kafka JSON, diff, table and counts are the
        plan's, made again from it."""
        if not isinstance(data, Mapping):
            raise PlanInputError(f"the plan task's value is a {type(data).__name__}, not a planned reassignment "
                                 "(PlannedReassignment.to_dict()); nothing was changed: run the DAG again so its plan "
                                 "task plans anew")
        missing = [k for k in ("plan", "summary", "eta_s", "approval") if k not in data]
        if missing:
            raise PlanInputError(f"the plan task's value lacks {', '.join(map(repr, missing))} (it has "
                                 f"{sorted(map(str, data)) or 'no key'}): not a planned reassignment "
                                 "(PlannedReassignment.to_dict()); nothing was changed: run the DAG again so its plan "
                                 "task plans anew")
        plan = ReassignmentPlan.from_dict(data["plan"])  # PlanInputError, naming what it could not read
        try:
            found = data.get("new_brokers")
            return cls(plan, str(data["summary"]), float(data["eta_s"]), str(data["approval"]),
                       None if found is None else tuple(NewBroker.from_dict(b) for b in found))
        except (KeyError, TypeError, ValueError) as err:
            raise PlanInputError(f"cannot read the {plan.kind} plan's value: {err!r}; expected the shape of "
                                 "PlannedReassignment.to_dict(); nothing was changed: run the DAG again so its plan "
                                 "task plans anew") from err


@dataclass(frozen=True)
class PlannedMoves:
    """The part of a :class:`PlannedReassignment` the batch loop reads on every pass: each moved partition's replicas
    after the plan (``desired``) and the moved topics' ``storage``, read from its dict without parsing the plan's
    cluster (which holds every partition of the cluster: seconds at a million)."""

    desired: Mapping[TopicPartition, tuple[int, ...]]
    storage: tuple[TopicStorage, ...] = ()

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> PlannedMoves:
        """Read from :meth:`PlannedReassignment.to_dict` (its Kafka JSON and the plan's storage);
        :class:`~kafkaops.reassign.planner.errors.PlanInputError` when ``data`` is not one."""
        try:
            if not isinstance(data, Mapping):
                raise TypeError(f"a {type(data).__name__}, not a mapping")
            partitions = data["kafka_json"]["partitions"]
            desired = {(str(p["topic"]), int(p["partition"])): tuple(int(b) for b in p["replicas"]) for p in partitions}
            storage = tuple(TopicStorage.from_dict(s) for s in (data.get("plan") or {}).get("storage") or ())
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise PlanInputError(f"cannot read the moves of the plan task's value: {err!r}; expected the shape of "
                                 "PlannedReassignment.to_dict(); nothing was changed: run the DAG again so its plan "
                                 "task plans anew") from err
        return cls(desired, storage)


@dataclass(frozen=True)
class BatchStep:
    """What :func:`kafkaops.reassign.steps.next_batch` decided: the partitions to wait for (moves in
    flight, or the batch it just submitted), those it submitted now, and the batches after it (None
    while it waits for moves an earlier try submitted; 0 when every move is done and nothing waits)."""

    wait_for: tuple[TopicPartition, ...] = ()
    submitted: tuple[TopicPartition, ...] = ()
    remaining_batches: int | None = 0


@dataclass(frozen=True)
class WaitSpec:
    """The moves a progress trigger follows: each partition's target replicas and the snapshot before
    the moves, cut to those partitions (small, JSON-safe: Airflow stores a trigger's kwargs)."""

    targets: Mapping[TopicPartition, tuple[int, ...]]
    before: Cluster

    @classmethod
    def cut(cls, targets: Mapping[TopicPartition, tuple[int, ...]], before: Cluster,
            storage: Iterable[TopicStorage] = ()) -> WaitSpec:
        """The spec of ``targets``: the snapshot ``before`` cut to their partitions (no consumer group), with
        the moved topics' ``storage`` (a tiered partition's copy is the leader's local log; none read: none)."""
        cluster = replace(before, partitions=tuple(p for p in before.partitions if p.topic_partition in targets),
                          groups=(), _index=None).with_storage(storage)
        return cls(dict(targets), cluster)

    def to_dict(self) -> dict[str, Any]:
        """Kafka's reassignment JSON entries and the snapshot, the shape triggers were stored in before."""
        return {"partitions": [{"topic": t, "partition": p, "replicas": list(r)}
                               for (t, p), r in sorted(self.targets.items())],
                "before": self.before.to_dict()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> WaitSpec:
        return cls({(str(e["topic"]), int(e["partition"])): tuple(int(b) for b in e["replicas"])
                    for e in data["partitions"]}, Cluster.from_dict(data["before"]))


@dataclass(frozen=True)
class Polled:
    """One progress poll of a :class:`WaitSpec`'s moves: the engine's :class:`~kafkaops.reassign.engine.Progress`
    and the partitions still moving (``topic-partition``; empty once done)."""

    progress: Progress
    in_flight: tuple[str, ...] = ()

    @property
    def done(self) -> bool:
        return self.progress.done

    @property
    def text(self) -> str:
        return str(self.progress)

    def to_dict(self) -> dict[str, Any]:
        """The progress flat, with its percent, ETA and line (what the trigger's event carried before)."""
        prog = self.progress
        return {"done": prog.done, "text": str(prog), "partitions_done": prog.partitions_done,
                "partitions_total": prog.partitions_total, "partitions_in_flight": prog.partitions_in_flight,
                "bytes_done": prog.bytes_done, "bytes_total": prog.bytes_total, "elapsed_s": prog.elapsed_s,
                "percent": round(prog.percent, 1), "eta_s": prog.eta_s, "in_flight": list(self.in_flight),
                "receivers": [r.to_dict() for r in prog.receivers]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Polled:
        in_flight = tuple(str(k) for k in data.get("in_flight") or ())
        progress = Progress(int(data["partitions_done"]), int(data["partitions_total"]),
                            int(data.get("partitions_in_flight", len(in_flight))), int(data["bytes_done"]),
                            int(data["bytes_total"]), data.get("elapsed_s"),
                            tuple(Receiver.from_dict(r) for r in data.get("receivers") or ()))
        return cls(progress, in_flight)

    def remembering(self, earlier: Mapping[int, Receiver]) -> Polled:
        """This poll, each receiver down with the log dirs it showed ``earlier`` (by broker; the poller's memory)."""
        receivers = tuple(r.remembering(earlier.get(r.broker)) for r in self.progress.receivers)
        return replace(self, progress=replace(self.progress, receivers=receivers))

    def stall_text(self) -> str:
        """The receiving brokers for a stall's message, those in trouble first, and what to do before resuming."""
        ordered = sorted(self.progress.receivers, key=lambda r: (not r.in_trouble, r.broker))
        text = "; ".join(str(r) for r in ordered)
        advice = receivers_advice(ordered)
        return (f"receiving brokers: {text}" if text else "") + (f". Before resuming: {advice}" if advice else "")


@dataclass(frozen=True)
class ProgressEvent:
    """What the progress trigger fires: ``done``, or ``stalled`` when nothing progressed for
    ``stalled_for_s`` (with the last poll, None when the cluster never answered)."""

    status: str
    polled: Polled | None = None
    stalled_for_s: float | None = None

    @property
    def stalled(self) -> bool:
        return self.status == "stalled"

    def describe(self) -> str:
        return self.polled.text if self.polled is not None else "no answer from the cluster"

    def to_dict(self) -> dict[str, Any]:
        found = {"stalled_for_s": self.stalled_for_s} if self.stalled_for_s is not None else {}
        polled = self.polled.to_dict() if self.polled is not None else {"in_flight": [], "text": self.describe()}
        return {"status": self.status, **found, **polled}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProgressEvent:
        polled = Polled.from_dict(data) if "partitions_done" in data else None
        stalled = data.get("stalled_for_s")
        return cls(str(data["status"]), polled, None if stalled is None else float(stalled))


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
class CordonSet:
    """A drain's cordons: ``brokers`` whose log dirs were cordoned for the run, ``kept`` those an operator had
    cordoned before (left alone), ``skipped`` why none was set (brokers older than Kafka 4.3), ``record`` the
    engine's CordonRecord (what a lift must give back)."""

    brokers: tuple[int, ...]
    kept: tuple[int, ...] = ()
    skipped: str | None = None
    record: Mapping[str, Any] = field(default_factory=dict)
    ts: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"brokers": list(self.brokers), "kept": list(self.kept), "skipped": self.skipped,
                "record": dict(self.record)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CordonSet:
        return cls(tuple(int(b) for b in data.get("brokers") or ()), tuple(int(b) for b in data.get("kept") or ()),
                   data.get("skipped"), dict(data.get("record") or {}), ts=data.get("ts"))


@dataclass(frozen=True)
class CordonLifted:
    """Cordons lifted from ``brokers`` (each given back its value before the run); ``left`` the brokers whose
    cordon stays (down or not answering) and ``commands`` what lifts each by hand."""

    brokers: tuple[int, ...]
    left: tuple[int, ...] = ()
    commands: tuple[str, ...] = ()
    ts: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"brokers": list(self.brokers), "left": list(self.left), "commands": list(self.commands)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CordonLifted:
        return cls(tuple(int(b) for b in data.get("brokers") or ()), tuple(int(b) for b in data.get("left") or ()),
                   tuple(str(c) for c in data.get("commands") or ()), ts=data.get("ts"))


@dataclass(frozen=True)
class LeadersElected:
    """The preferred-leader election after the moves: partitions ``asked`` (every moved one) and how many
    ``changed`` leader (one already led by its first replica needs none)."""

    asked: int
    changed: int

    def to_dict(self) -> dict[str, Any]:
        return {"asked": self.asked, "changed": self.changed}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LeadersElected:
        return cls(int(data.get("asked") or 0), int(data.get("changed") or 0))


@dataclass(frozen=True)
class BrokersStopped:
    """The drained brokers a drain stopped (none when it was not asked to)."""

    brokers: tuple[int, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"stopped": list(self.brokers)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BrokersStopped:
        return cls(tuple(int(b) for b in data.get("stopped") or ()))


@dataclass(frozen=True)
class Reassignment:
    """A run's reassignment as its record tells it: the batches and the throttles, in order."""

    batches: tuple[Batch, ...] = ()
    throttles_set: tuple[ThrottleSet, ...] = ()
    throttles_removed: tuple[ThrottleRemoved, ...] = ()
    cordons_set: tuple[CordonSet, ...] = ()
    cordons_lifted: tuple[CordonLifted, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The record's keys, as pages and the CLI read them (each throttle and cordon with its ``ts``)."""
        return {"batches": [b.to_dict() for b in self.batches],
                "throttles_set": [{"ts": t.ts, **t.to_dict()} for t in self.throttles_set],
                "throttles_removed": [{"ts": t.ts, **t.to_dict()} for t in self.throttles_removed],
                "cordons_set": [{"ts": c.ts, **c.to_dict()} for c in self.cordons_set],
                "cordons_lifted": [{"ts": c.ts, **c.to_dict()} for c in self.cordons_lifted]}

    def throttles_in_place(self, since: float) -> ThrottleSet | None:
        """The throttles set since ``since`` (this attempt) and not removed after, else None."""
        return _in_place(self.throttles_set, self.throttles_removed, since)

    def cordons_in_place(self, since: float) -> CordonSet | None:
        """The cordons set since ``since`` (this attempt) on some broker and not lifted after, else None."""
        return _in_place(tuple(c for c in self.cordons_set if c.brokers), self.cordons_lifted, since)


_Done = TypeVar("_Done", ThrottleSet, CordonSet)


def _in_place(done: Sequence[_Done], undone: Sequence[ThrottleRemoved | CordonLifted], since: float) -> _Done | None:
    """The last of ``done`` since ``since`` when nothing of ``undone`` came after it, else None."""
    set_ = [d for d in done if (d.ts or 0) >= since]
    after = [u for u in undone if (u.ts or 0) >= since]
    if not set_ or (after and (after[-1].ts or 0) >= (set_[-1].ts or 0)):
        return None
    return set_[-1]


def fold(events: Iterable[AuditEvent]) -> Reassignment:
    """The batches (with the status their submitting step's end gives them) and the throttles of a
    run's events (pure); the steps' ends come from the generic ``step`` and ``outcome`` events."""
    batches: list[Batch] = []
    unsettled: list[int] = []  # indexes into batches of those whose end is not known yet
    open_steps: list[str] = []  # steps started and not ended, in start order (this attempt's)
    set_, removed = [], []
    cordoned: list[CordonSet] = []
    lifted: list[CordonLifted] = []
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
        elif e.kind == "cordon_set":
            cordoned.append(CordonSet.from_dict({**d, "ts": e.ts}))
        elif e.kind == "cordon_lifted":
            lifted.append(CordonLifted.from_dict({**d, "ts": e.ts}))
        elif e.kind == "outcome" and d.get("outcome") != "success":
            for i in unsettled:
                if batches[i].status == "submitted":
                    batches[i] = replace(batches[i], status="unfinished", ended_at=None)
    return Reassignment(tuple(batches), tuple(set_), tuple(removed), tuple(cordoned), tuple(lifted))


def fold_record(events: Iterable[AuditEvent]) -> dict[str, Any]:
    """:func:`fold` as the record's keys: a ``fold`` of :func:`kafkaops.platform.state.read_record`."""
    return fold(events).to_dict()


def summarize(events: Iterable[AuditEvent]) -> dict[str, Any]:
    """A reassignment run's record: the generic record (:func:`kafkaops.platform.state.summarize`)
    with its batches and throttles (:func:`fold`)."""
    events = list(events)
    return {**state.summarize(events), **fold_record(events)}
