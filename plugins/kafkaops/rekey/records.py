"""The rekey capability's data contract: what its steps hand each other (through XCom and across the
Spark process boundary) and what they write into the run's record, as typed frozen values.

Step results (:meth:`to_dict` is what crosses XCom; :meth:`from_dict` reads it back):

    PassResult       the rekey backfill app's result (``spark_apps/rekey_backfill.py``): its ``run``
                     (a :class:`BackfillRun`) and ``integrity`` report; the final pass adds the
                     target's end offsets after it
    CopiesResult     its result for several copies in one Spark application: a PassResult each
    CatchUp          the catch-up (the tail copy's :class:`PassRow` and report) and the plan up to it
    Quiesced         how producers were stopped and the source's end offsets, still
    Cutover          per consumer group, its offsets translated to the target (:class:`GroupTranslation`)
    GateVerdict      the copy gated: the suite's result and the report's totals
    TargetReady      a live migration's quiesce, last part, gate and cut-over, made in one task
    SwitchObserved   the observed switch and the write-unavailable window
    Abandonment      a rollback before the switch
    StreamsBackfill  a live Kafka Streams migration's first copies, made while the application runs
    StreamsCatchUp   its tail copies, caught up together
    SwitchesObserved its switch as observed, per new input written
    (its cut, :class:`kafkaops.rekey.streams.StreamsCut`, is the streams module's)

Audit notes (written with :func:`kafkaops.platform.state.append_note`, read with
:func:`kafkaops.platform.state.read_notes`; the record page, the rehearsal and the finish read them):
:class:`RunNote`, :class:`CatchUpNote`, :class:`CatchUpDone`, :class:`ActionNote` (an :class:`Action`
a person or the finish acts on), :class:`QuiescedNote`, :class:`FinalPassNote`,
:class:`TranslationNote`, :class:`SwitchDecision`, :class:`SwitchObservedNote`,
:class:`AbandonedNote`, :class:`RefusedNote`, :class:`StreamsCutNote`.

Invariant: each note's stored JSON is the shape records were written in before these types (a key
naming what the note is: ``catch_up``, ``quiesce``, ``action`` ...), so :meth:`from_dict` reads
records of any age, tolerating fields they lack. Nothing here does I/O.
"""
from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, Self, TypeVar

from kafkaops.platform import render, state
from kafkaops.platform.gates import GateResult
from kafkaops.platform.recommendations import PartitionRecommendation
from kafkaops.rekey.backfill import BackfillPlan
from kafkaops.rekey.tail import TailProgress, TailReport
from kafkaops.rekey.streams import CopyDone, StreamsCut

FIRST_PASS = 1
"""The backfill is pass 1; catch-up passes and the final pass follow it, numbered on."""


def pass_number(catch_ups: int) -> int:
    """The number of the pass after ``catch_ups`` catch-up passes (the backfill was pass 1)."""
    return FIRST_PASS + catch_ups + 1


def offsets_of(data: Mapping[Any, Any] | None) -> dict[int, int]:
    """Partition -> offset, from JSON too (XCom turns the partitions into text)."""
    return {int(p): int(o) for p, o in (data or {}).items()}


def _ts(data: Mapping[str, Any]) -> float | None:
    ts = data.get("ts")
    return None if ts is None else float(ts)


# -- step results -------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class BackfillRun:
    """One Spark pass as the rekey backfill app reports it (its ``run``): the pass's plan, the records
    written, the copy (``direct`` or ``merged``), seconds; what the app adds: why it chose the copy
    (``mode_reason``), whether it deleted a direct copy and wrote the merged one (``rewritten``), the
    records committed by earlier runs (``already_written``), the slices and the records skipped as
    written before. ``extra`` keeps any other counter a result holds.

    Invariant: the app's counters are None only in results written before they were declared (or
    by a stand-in); :meth:`to_dict` leaves out what is None, so a result reads back and writes out
    unchanged."""

    plan: Mapping[str, Any]
    written: int = 0
    mode: str | None = None
    seconds: float | None = None
    mode_reason: str | None = None
    rewritten: bool | None = None
    already_written: int | None = None
    slices: int | None = None
    skipped: int | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    _COUNTERS: ClassVar[tuple[str, ...]] = ("mode_reason", "rewritten", "already_written", "slices", "skipped")

    @property
    def backfill(self) -> BackfillPlan:
        return BackfillPlan.from_dict(self.plan)

    @property
    def first_pass(self) -> bool:
        """The backfill (pass 1): a later pass's plan carries where each pass started."""
        return "pass_starts" not in self.plan

    def to_dict(self) -> dict[str, Any]:
        counters = {k: getattr(self, k) for k in self._COUNTERS if getattr(self, k) is not None}
        return {**self.extra, **counters, "plan": dict(self.plan), "written": self.written, "mode": self.mode,
                "seconds": self.seconds}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BackfillRun:
        known = ("plan", "written", "mode", "seconds", *cls._COUNTERS)
        extra = {k: v for k, v in data.items() if k not in known}
        return cls(plan=dict(data.get("plan") or {}), written=int(data.get("written") or 0), mode=data.get("mode"),
                   seconds=data.get("seconds"), extra=extra, **{k: data.get(k) for k in cls._COUNTERS})


@dataclass(frozen=True)
class PassResult:
    """The rekey backfill app's result for one pass: ``run`` (None when the app only verified),
    ``integrity`` (with ``--verify``), and for the final pass the target's end offsets after it
    (where the switch's first writes begin)."""

    run: BackfillRun | None = None
    integrity: Mapping[str, Any] | None = None
    target_ends: Mapping[int, int] | None = None

    @property
    def written(self) -> int:
        return self.run.written if self.run else 0

    @property
    def mode(self) -> str | None:
        return self.run.mode if self.run else None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.run is not None:
            out["run"] = self.run.to_dict()
        if self.integrity is not None:
            out["integrity"] = dict(self.integrity)
        if self.target_ends is not None:
            out["target_ends"] = dict(self.target_ends)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PassResult:
        run, ends = data.get("run"), data.get("target_ends")
        return cls(run=BackfillRun.from_dict(run) if run else None, integrity=data.get("integrity"),
                   target_ends=None if ends is None else offsets_of(ends))


@dataclass(frozen=True)
class CopiesResult:
    """The rekey backfill app's result for several copies run in one Spark application
    (:func:`kafkaops.rekey.steps.run_backfills`): each copy's :class:`PassResult`, in the plans' order."""

    passes: tuple[PassResult, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"passes": [p.to_dict() for p in self.passes]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CopiesResult:
        return cls(tuple(PassResult.from_dict(p) for p in data["passes"]))


@dataclass(frozen=True)
class StreamsBackfill:
    """A live Streams migration's first copies, made while the application runs: each copy (an input by
    the record key, a changelog by its store's rule) with its gate, and its pass (the plan the tail goes
    on from, and the check the whole copy's gate adds the tail's parts to), in the plan's order."""

    copies: tuple[CopyDone, ...]
    passes: tuple[PassResult, ...]

    def plans(self) -> tuple[BackfillPlan, ...]:
        return tuple(BackfillPlan.from_dict(p.run.plan if p.run else {}) for p in self.passes)

    def to_dict(self) -> dict[str, Any]:
        return {"copies": [c.to_dict() for c in self.copies], "passes": [p.to_dict() for p in self.passes]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StreamsBackfill:
        return cls(tuple(CopyDone.from_dict(c) for c in data["copies"]),
                   tuple(PassResult.from_dict(p) for p in data["passes"]))


@dataclass(frozen=True)
class StreamsCatchUp:
    """A live Streams migration's catch-up: each copy's tail (in the plan's order) as it stood when the
    lag of all of them together was within ``catch_up_lag_records``, and that lag."""

    tails: tuple[TailReport, ...]
    lag: int
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return {"tails": [t.to_dict() for t in self.tails], "lag": self.lag, "seconds": round(self.seconds, 3)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StreamsCatchUp:
        return cls(tuple(TailReport.from_dict(t) for t in data["tails"]), int(data["lag"]), float(data["seconds"]))


@dataclass(frozen=True)
class SwitchesObserved:
    """A Kafka Streams application's switch as observed: each new input written since, with its window."""

    inputs: tuple[SwitchObserved, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"inputs": [o.to_dict() for o in self.inputs]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SwitchesObserved:
        return cls(tuple(SwitchObserved.from_dict(o) for o in data["inputs"]))


@dataclass(frozen=True)
class PassRow:
    """A catch-up or final pass as the record lists it (``lag_before``: None for the final pass)."""

    number: int
    written: int = 0
    records: int = 0
    mode: str | None = None
    seconds: float | None = None
    lag_before: int | None = None

    def to_dict(self) -> dict[str, Any]:
        out = {"pass": self.number, "written": self.written, "records": self.records, "mode": self.mode,
               "seconds": self.seconds}
        return out if self.lag_before is None else {**out, "lag_before": self.lag_before}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PassRow:
        lag = data.get("lag_before")
        return cls(number=int(data.get("pass") or 0), written=int(data.get("written") or 0),
                   records=int(data.get("records") or 0), mode=data.get("mode"), seconds=data.get("seconds"),
                   lag_before=None if lag is None else int(lag))


@dataclass(frozen=True)
class CatchUp:
    """The catch-up's result: the last pass's plan (``backfill``, where the final pass continues), the
    passes run, the lag left and why it stopped."""

    backfill: Mapping[str, Any]
    passes: tuple[PassRow, ...] = ()
    lag: int = 0
    why: str = ""
    #: the tail copy's parts, checked and added up (None: the catch-up ran Spark passes)
    tail: TailReport | None = None

    @property
    def last_plan(self) -> BackfillPlan:
        return BackfillPlan.from_dict(self.backfill)

    @property
    def next_pass(self) -> int:
        """The final pass's number."""
        return pass_number(len(self.passes))

    def to_dict(self) -> dict[str, Any]:
        out = {"backfill": dict(self.backfill), "passes": [p.to_dict() for p in self.passes], "lag": self.lag,
               "why": self.why}
        return out if self.tail is None else {**out, "tail": self.tail.to_dict()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CatchUp:
        return cls(backfill=dict(data["backfill"]), passes=tuple(PassRow.from_dict(p) for p in data.get("passes", ())),
                   lag=int(data.get("lag") or 0), why=str(data.get("why") or ""),
                   tail=TailReport.from_dict(data["tail"]) if data.get("tail") else None)


@dataclass(frozen=True)
class Quiesced:
    """Producers stopped: how (``manual``, ``acl``), when asked and when the source's end offsets
    (``ends``) had stayed still for the quiet period (epoch seconds)."""

    how: str
    asked_at: float | None
    settled_at: float | None
    ends: Mapping[int, int]
    #: the tail copy as the quiesce left it (it copied on while the source was waited on); None: no tail
    tail: TailReport | None = None

    def to_dict(self) -> dict[str, Any]:
        out = {"how": self.how, "asked_at": self.asked_at, "settled_at": self.settled_at, "ends": dict(self.ends)}
        return out if self.tail is None else {**out, "tail": self.tail.to_dict()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Quiesced:
        return cls(how=str(data.get("how") or ""), asked_at=data.get("asked_at"), settled_at=data.get("settled_at"),
                   ends=offsets_of(data.get("ends")), tail=TailReport.from_dict(data["tail"]) if data.get("tail") else None)


@dataclass(frozen=True)
class GroupTranslation:
    """One consumer group's cut-over: its committed source offsets, the target offsets they translate to
    (partitions as text, as in JSON), the records it will read again, and what was done with them."""

    source: Mapping[str, int]
    target: Mapping[str, int]
    redelivered: int = 0
    stated: str | None = None
    settled: str | None = None
    committed_for: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"source": dict(self.source), "target": dict(self.target),
                               "redelivered": self.redelivered}
        for name in ("stated", "settled", "committed_for"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GroupTranslation:
        return cls(source={str(k): int(v) for k, v in (data.get("source") or {}).items()},
                   target={str(k): int(v) for k, v in (data.get("target") or {}).items()},
                   redelivered=int(data.get("redelivered") or 0), stated=data.get("stated"),
                   settled=data.get("settled"), committed_for=data.get("committed_for"))


def groups_of(data: Mapping[str, Any] | None) -> dict[str, GroupTranslation]:
    return {g: GroupTranslation.from_dict(t) for g, t in (data or {}).items()}


@dataclass(frozen=True)
class Cutover:
    """The cut-over's result: per group its translation; a live migration adds the switch's request."""

    source_topic: str
    target_topic: str
    groups: Mapping[str, GroupTranslation] = field(default_factory=dict)
    switch_text: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out = {"source_topic": self.source_topic, "target_topic": self.target_topic,
               "groups": {g: t.to_dict() for g, t in self.groups.items()}}
        return out if self.switch_text is None else {**out, "switch_text": self.switch_text}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Cutover:
        return cls(source_topic=str(data.get("source_topic") or "the source"),
                   target_topic=str(data.get("target_topic") or "the target"), groups=groups_of(data.get("groups")),
                   switch_text=data.get("switch_text"))


@dataclass(frozen=True)
class GateVerdict:
    """The copy gated (``expectations/backfill.json``): the suite's result, with its Data Docs page in the
    store, and the integrity report's totals."""

    result: GateResult
    totals: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"gate": self.result.to_dict(), "totals": dict(self.totals)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GateVerdict:
        return cls(result=GateResult.from_dict(data.get("gate") or {}), totals=dict(data.get("totals") or {}))


@dataclass(frozen=True)
class TargetReady:
    """A live migration's cut-over, made in one task from the quiesce to the switch's question (so that no
    scheduler hop lies inside the write window): producers stopped (``quiesced``), the tail's last part
    copied and checked (``final``: the whole copy's report and the target's end offsets after it), the
    whole copy gated (``verified``: the gate's result and the report's totals) and the consumer groups'
    offsets committed on the target (``cutover``, with the switch's request)."""

    quiesced: Quiesced
    final: PassResult
    verified: GateVerdict
    cutover: Cutover

    def to_dict(self) -> dict[str, Any]:
        return {"quiesced": self.quiesced.to_dict(), "final": self.final.to_dict(), "verified": self.verified.to_dict(),
                "cutover": self.cutover.to_dict()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TargetReady:
        return cls(quiesced=Quiesced.from_dict(data.get("quiesced") or {}),
                   final=PassResult.from_dict(data.get("final") or {}),
                   verified=GateVerdict.from_dict(data.get("verified") or {}),
                   cutover=Cutover.from_dict(data.get("cutover") or {}))


@dataclass(frozen=True)
class SwitchObserved:
    """The switch as observed: the write-unavailable window (seconds, None when a side had no record) from
    its start (``window_from``: the source's last write, or the quiesce when the source was already still
    before it) to the first target record's timestamp, and where writes landed."""

    write_window_s: float | None
    last_source_write_ms: int | None
    first_target_write_ms: int | None
    target_partitions_written: tuple[int, ...] = ()
    window_from: str = "the last source write"

    def to_dict(self) -> dict[str, Any]:
        return {"write_window_s": self.write_window_s, "last_source_write_ms": self.last_source_write_ms,
                "first_target_write_ms": self.first_target_write_ms,
                "target_partitions_written": list(self.target_partitions_written), "window_from": self.window_from}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SwitchObserved:
        return cls(write_window_s=data.get("write_window_s"), last_source_write_ms=data.get("last_source_write_ms"),
                   first_target_write_ms=data.get("first_target_write_ms"),
                   target_partitions_written=tuple(int(p) for p in data.get("target_partitions_written") or ()),
                   window_from=str(data.get("window_from") or "the last source write"))


@dataclass(frozen=True)
class Abandonment:
    """A rollback before the switch: why, whether the target was deleted, offsets written to it after the copy."""

    reason: str
    target_deleted: bool
    target_new_writes: int = 0

    @property
    def outcome(self) -> str:
        """Why the run fails although the rollback went as planned: the migration did not happen."""
        return (f"live migration abandoned and rolled back ({self.reason}); the source stays authoritative, see the "
                f"operation record (target deleted: {self.target_deleted})")

    def to_dict(self) -> dict[str, Any]:
        return {"abandoned": True, "target_deleted": self.target_deleted, "reason": self.reason,
                "target_new_writes": self.target_new_writes}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Abandonment:
        return cls(reason=str(data.get("reason") or ""), target_deleted=bool(data.get("target_deleted")),
                   target_new_writes=int(data.get("target_new_writes") or 0))


@dataclass(frozen=True)
class CapacityAdvice:
    """A capacity review's partition count for the topic (``recommendation``) beside the count the
    operator chose: shown at the approval and in the plan's summary; a different count is allowed."""

    recommendation: PartitionRecommendation
    chosen: int

    @property
    def differs(self) -> bool:
        return self.chosen != self.recommendation.partitions

    @property
    def text(self) -> str:
        rec, value = self.recommendation, self.recommendation.partitions
        verdict = ("the same count" if not self.differs else
                   f"you chose {self.chosen}: allowed, but it is {'fewer' if self.chosen < value else 'more'} than "
                   "the review's count")
        return (f"The capacity review of {render.utc_time(rec.at)} recommends {value} partitions for {rec.topic} "
                f"({rec.message}); {verdict}")

    def to_dict(self) -> dict[str, Any]:
        rec = self.recommendation
        return {"run_id": rec.run_id, "at": rec.at, "recommended": rec.partitions, "chosen": self.chosen,
                "differs": self.differs, "message": rec.message, "text": self.text}


# -- audit notes ----------------------------------------------------------------------------------------------

class Action(str, enum.Enum):
    """What an :class:`ActionNote` asks for or says was done: a person (or the rehearsal playing one)
    acts on ``stop_producers`` and ``switch``; the finish reads ``writes_denied`` / ``writes_allowed``."""

    STOP_PRODUCERS = "stop_producers"
    SWITCH = "switch"
    WRITES_DENIED = "writes_denied"
    WRITES_ALLOWED = "writes_allowed"
    WRITES_LEFT_DENIED = "writes_left_denied"


@dataclass(frozen=True)
class Note:
    """An audit note of the rekey capability: its ``text`` (what the record page lists), its own
    fields, and ``ts`` (set by the store: None until written). ``KEY`` marks the kind in the stored JSON."""

    KEY: ClassVar[str]
    text: str
    ts: float | None = field(default=None, kw_only=True)


@dataclass(frozen=True)
class RunNote(Note):
    """A pass's Spark run, written when it returns (``run`` None: the app did not report one)."""

    KEY = "run"
    run: BackfillRun | None

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "run": None if self.run is None else self.run.to_dict()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunNote:
        run = data.get("run")
        return cls(str(data.get("text") or ""), BackfillRun.from_dict(run) if run else None, ts=_ts(data))


V = TypeVar("V", PassRow, Quiesced, SwitchObserved, TailProgress, StreamsCut)


@dataclass(frozen=True)
class ValueNote(Note, Generic[V]):
    """A note that carries one value (of type ``VALUE``) under its ``KEY``."""

    VALUE: ClassVar[Any]
    value: V

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, self.KEY: self.value.to_dict()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        return cls(str(data.get("text") or ""), cls.VALUE.from_dict(data[cls.KEY]), ts=_ts(data))


class CatchUpNote(ValueNote[PassRow]):
    """One catch-up pass, done."""

    KEY, VALUE = "catch_up", PassRow


class TailNote(ValueNote[TailProgress]):
    """The tail copy while it runs: its lag, the rates and the ETA to caught up (every few seconds)."""

    KEY, VALUE = "tail", TailProgress


class StreamsCutNote(ValueNote[StreamsCut]):
    """A Kafka Streams application's cut: its repartition topics drained, each copy gated, its offsets committed."""

    KEY, VALUE = "streams_cut", StreamsCut


class FinalPassNote(ValueNote[PassRow]):
    """The final pass, to the quiesced end offsets."""

    KEY, VALUE = "final_pass", PassRow


@dataclass(frozen=True)
class CatchUpDone(Note):
    """The catch-up stopped: the lag left after ``passes`` catch-up passes."""

    KEY = "catch_up_done"
    lag: int
    passes: int

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, self.KEY: True, "lag": self.lag, "passes": self.passes}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CatchUpDone:
        return cls(str(data.get("text") or ""), int(data.get("lag") or 0), int(data.get("passes") or 0),
                   ts=_ts(data))


@dataclass(frozen=True)
class ActionNote(Note):
    """A step of the cut-over someone acts on (:class:`Action`): the topic it is about, the target,
    the DENY ACL's principals (``acl``), the cut-over the switch asks for (``switch``)."""

    KEY = "action"
    action: Action
    topic: str | None = None
    target_topic: str | None = None
    acl: tuple[str, ...] = ()
    switch: Cutover | None = None
    deadline: float | None = None  # epoch seconds: when the run gives up waiting for the action

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"text": self.text, "action": self.action.value}
        if self.deadline is not None:
            out["deadline"] = self.deadline
        if self.topic is not None:
            out["topic"] = self.topic
        if self.target_topic is not None:
            out["target_topic"] = self.target_topic
        if self.acl:
            out["acl"] = list(self.acl)
        if self.switch is not None:
            out["switch"] = self.switch.to_dict()
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ActionNote:
        switch = data.get("switch")
        return cls(str(data.get("text") or ""), Action(data["action"]), data.get("topic"), data.get("target_topic"),
                   tuple(str(p) for p in data.get("acl") or ()), Cutover.from_dict(switch) if switch else None,
                   deadline=data.get("deadline"), ts=_ts(data))

    @classmethod
    def in_note(cls, data: Mapping[str, Any]) -> bool:
        return data.get(cls.KEY) in {a.value for a in Action}


class QuiescedNote(ValueNote[Quiesced]):
    """Producers quiesced."""

    KEY, VALUE = "quiesce", Quiesced


@dataclass(frozen=True)
class TranslationNote(Note):
    """The cut-over: each consumer group's offsets translated to the target."""

    KEY = "offset_translation"
    groups: Mapping[str, GroupTranslation]

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, self.KEY: {g: t.to_dict() for g, t in self.groups.items()}}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TranslationNote:
        return cls(str(data.get("text") or ""), groups_of(data.get(cls.KEY)), ts=_ts(data))


@dataclass(frozen=True)
class SwitchDecision:
    """The switch's answer: confirmed (``approved``) or refused, by whom (a person, or the approval param)."""

    KEY: ClassVar[str] = "switch_decision"
    approved: bool
    by: str
    ts: float | None = None

    @property
    def text(self) -> str:
        return f"switch {'confirmed' if self.approved else 'refused'} by {self.by}"

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, self.KEY: {"approved": self.approved, "by": self.by}}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SwitchDecision:
        d = data.get(cls.KEY) or {}
        return cls(bool(d.get("approved")), str(d.get("by") or "?"), ts=_ts(data))


class SwitchObservedNote(ValueNote[SwitchObserved]):
    """The switch observed."""

    KEY, VALUE = "switch_observed", SwitchObserved


@dataclass(frozen=True)
class AbandonedNote(Note):
    """The live migration rolled back before the switch: the finish concludes the run ``abandoned`` with ``text``."""

    KEY = "abandoned"
    target_deleted: bool = False
    writes_released: bool = False
    target_new_writes: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, self.KEY: True, "target_deleted": self.target_deleted,
                "writes_released": self.writes_released, "target_new_writes": self.target_new_writes}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AbandonedNote:
        return cls(str(data.get("text") or ""), bool(data.get("target_deleted")), bool(data.get("writes_released")),
                   int(data.get("target_new_writes") or 0), ts=_ts(data))


@dataclass(frozen=True)
class RefusedNote(Note):
    """An in-place growth of a keyed topic refused: the finish concludes the run ``refused`` with ``text``."""

    KEY = "refused"
    key_change: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, self.KEY: True, "key_change": dict(self.key_change)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RefusedNote:
        return cls(str(data.get("text") or ""), dict(data.get("key_change") or {}), ts=_ts(data))


@dataclass(frozen=True)
class MarkersDeletedNote(Note):
    """A migration past its rollback point (copy verified; the cut-over made, or a live migration's switch
    confirmed): the backfill's marker consumer groups (its passes' commit markers and the tail's position,
    :func:`kafkaops.rekey.backfill.backfill_id`) are no longer what a rerun resumes from, so the finish deletes
    them. ``deleted``: gone now or before (a retry); ``left``: each group not deleted with its error; ``error``:
    why they could not even be listed."""

    KEY = "markers_deleted"
    deleted: tuple[str, ...] = ()
    left: Mapping[str, str] = field(default_factory=dict)
    error: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, self.KEY: True, "deleted": list(self.deleted), "left": dict(self.left),
                "error": self.error}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MarkersDeletedNote:
        return cls(str(data.get("text") or ""), tuple(str(g) for g in data.get("deleted") or ()),
                   {str(k): str(v) for k, v in (data.get("left") or {}).items()}, str(data.get("error") or ""),
                   ts=_ts(data))


@dataclass(frozen=True)
class LiveRecord:
    """A live migration's cut-over as its record tells it (what the record page shows): the backfill's
    run, the catch-up and final passes in order, the quiesce, the groups, the switch, an abandonment."""

    backfill: RunNote | None
    passes: tuple[CatchUpNote | FinalPassNote, ...]
    stop_request: ActionNote | None
    quiesced: QuiescedNote | None
    translations: tuple[TranslationNote, ...]
    decision: SwitchDecision | None
    observed: SwitchObservedNote | None
    abandoned: AbandonedNote | None
    #: the tail copy's latest report of its lag and rates (None: no tail ran, or it ran less than 10 s)
    tail: TailNote | None = None
    #: the request to switch the applications to the target (written once the target is ready)
    switch_request: ActionNote | None = None

    @classmethod
    def of(cls, notes: Sequence[Mapping[str, Any]]) -> LiveRecord | None:
        """None unless the notes are a live migration's (a catch-up, a quiesce or a request to stop producers)."""
        actions = state.read_notes(notes, ActionNote)
        stops = [a for a in actions if a.action is Action.STOP_PRODUCERS]
        switches = [a for a in actions if a.action is Action.SWITCH]
        if not (stops or any(state.holds(n, QuiescedNote) or state.holds(n, CatchUpNote) for n in notes)):
            return None
        passes = [CatchUpNote.from_dict(n) if state.holds(n, CatchUpNote) else FinalPassNote.from_dict(n)
                  for n in notes if state.holds(n, CatchUpNote) or state.holds(n, FinalPassNote)]
        return cls(backfill=next((r for r in state.read_notes(notes, RunNote)
                                  if r.run is not None and r.run.plan and r.run.first_pass), None),
                   passes=tuple(passes), stop_request=stops[-1] if stops else None,
                   quiesced=next(iter(state.read_notes(notes, QuiescedNote)), None),
                   translations=tuple(state.read_notes(notes, TranslationNote)),
                   decision=next(iter(state.read_notes(notes, SwitchDecision)), None),
                   observed=next(iter(state.read_notes(notes, SwitchObservedNote)), None),
                   abandoned=next(iter(state.read_notes(notes, AbandonedNote)), None),
                   tail=next(iter(reversed(state.read_notes(notes, TailNote))), None),
                   switch_request=switches[0] if switches else None)

    def window_phases(self) -> tuple[tuple[str, float], ...]:
        """Where the write-unavailable window went, phase by phase (seconds, in order; they add up to the
        window), from the record's own times: until the source was seen still (``quiet_s`` included), the
        final pass, the integrity gate with the consumer groups and their offsets, the request to switch
        (written as the target is ready), and the applications' switch (from that request to the producers'
        first write to the target; a person's confirmation of the switch may come later and is no part of
        it). Empty when the record lacks one of those times (a run that did not reach its confirm)."""
        final = next((n for n in reversed(self.passes) if isinstance(n, FinalPassNote)), None)
        seen = self.observed.value if self.observed else None
        q = self.quiesced.value if self.quiesced else None
        last_translation = self.translations[-1] if self.translations else None
        asked = self.switch_request
        if (seen is None or seen.write_window_s is None or seen.first_target_write_ms is None or q is None
                or q.settled_at is None or final is None or final.ts is None or last_translation is None
                or last_translation.ts is None or asked is None or asked.ts is None):
            return ()
        end = seen.first_target_write_ms / 1000.0
        marks = [end - seen.write_window_s, q.settled_at, final.ts, last_translation.ts, asked.ts, end]
        names = ("until the source was seen still", "the final pass", "the integrity gate, the consumer groups "
                 "and their offsets", "the request to switch", "the applications' switch (the request to the "
                 "producers' first write to the target)")
        return tuple((name, round(max(0.0, b - a), 2)) for name, a, b in zip(names, marks, marks[1:]))
