"""Live migration: a partition increase by migration while producers and consumers keep running, with
no record lost, duplicated or out of per-key order.

    backfill (Spark, pass 1, checked) -> the tail copy (:class:`Tail`: one process, part after part, each
         checked before its commit) until the lag is within a threshold (or abandon past the budget)
      -> quiesce the producers (manual: the operator stops them and kafkaops sees the end offsets stay
         still; acl: a DENY Write ACL on the source for named principals, removed whatever happens), the
         tail copying on meanwhile
      -> final part to the quiesced end offsets -> integrity gate: the backfill's check and every part's
      -> consumer groups settled (read to the end and stopped), offsets translated and committed on the target
      -> switch (a person moves producers and consumers to the target)
      -> confirmed by observation: writes reach the target and none reach the source
    before the switch, any failure (or a refused switch): abandon, the source stays authoritative.

The tail appends after the backfill, exactly once (Kafka transactions: a part's records and its source
position commit together; a retry fences the process before it). A consumer group that read the source
to its quiesced end resumes on the target after the last copied record of every partition: every record
once, in per-key order, also those the tail copied. The design and why it is not Spark Structured
Streaming: docs/live-migration.md.

The write-unavailable window is measured from the records themselves: the timestamp of the last
record written to the source to the first written to the target after the switch.

Pure decisions (:func:`catch_up_verdict`, :func:`quiet_period`, :class:`Stillness`, :func:`abandon_decision`;
the tail's own in :mod:`kafkaops.rekey.tail`) are separated from the steps,
which take the run's :class:`kafkaops.platform.lifecycle.OperationContext` and append to its record.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from kafkaops.errors import KafkaOpsError
from kafkaops.platform import lifecycle, render, state
from kafkaops.platform import params as form
from kafkaops.platform.kafka import acls, configs, metadata, records, topics
from kafkaops.platform.kafka.connection import KafkaConnection
from kafkaops.platform.kafka.transactions import NOTE_BYTES, TransactionalCopy
from kafkaops.rekey import backfill, tail
from kafkaops.rekey.backfill import BackfillPlan
from kafkaops.rekey.records import (AbandonedNote, Abandonment, Action, ActionNote, CatchUp, CatchUpDone,
                                    CatchUpNote, Cutover, FinalPassNote, PassResult, PassRow, Quiesced, QuiescedNote,
                                    SwitchObserved, SwitchObservedNote, TailNote, offsets_of, pass_number)

log = logging.getLogger(__name__)

class Quiesce(StrEnum):
    """How producers are quiesced: ``none`` (a snapshot migration: no cut-over protocol), ``manual`` (the
    operator stops them), ``acl`` (kafkaops denies Write on the source to named principals)."""

    NONE = "none"
    MANUAL = "manual"
    ACL = "acl"


# The live cut-over's params (the partition increase's form shows them); each one's default is here only.
QUIESCE = form.Choice(
    name="quiesce", given=Quiesce.NONE, title="Live cut-over",
    description="migrate while producers and consumers keep running. none: copy a snapshot and translate offsets "
                "(switch when you like). manual: a tail copy follows the source, then you stop the producers when asked and "
                "kafkaops waits until the source stays still, copies the rest, gates, commits the groups' offsets "
                "on the target and asks you to switch. acl: the same, with a DENY Write ACL on the source for the "
                "principals below (needs an authorizer; removed whatever happens).")
PRINCIPALS = form.Text(name="quiesce_principals", title="Producer principals (acl)",
                       description="quiesce=acl: comma-separated principals whose writes to the source are denied, "
                                   "e.g. User:orders-app.")
CATCH_UP_LAG = form.Integer(name="catch_up_lag_records", given=1000, minimum=0, title="Catch-up lag threshold (records)",
                            description="Live: the tail copy follows the source until it is at most this many "
                                        "records behind; only then are the producers quiesced.")
CATCH_UP_BUDGET = form.Integer(name="catch_up_budget_s", given=600, minimum=1, title="Catch-up budget (s)",
                               description="Live: if the tail copy is not within the lag threshold this many seconds "
                                           "after it began, the migration is abandoned before anything is quiesced "
                                           "(the record states both rates).")
QUIET = form.Integer(name="quiet_s", given=10, minimum=1, title="Quiet period (s)",
                     description="Live: the source's end offsets must stay still this long to count as quiesced.")
QUIESCE_TIMEOUT = form.Integer(
    name="quiesce_timeout_s", given=900, minimum=2, title="Quiesce timeout (s)",
    description="Live: producers (and consumers' groups) that have not stopped by then abandon the migration: the "
                "source stays authoritative.")
SWITCH_TIMEOUT = form.Integer(name="switch_timeout_s", given=900, minimum=1, title="Switch timeout (s)",
                              description="Live: after the switch, how long to wait for the first write to reach the "
                                          "target.")
DELETE_TARGET = form.Flag(name="delete_target_on_abandon", title="Delete the target if abandoned",
                          description="Live: when the migration is abandoned before the switch, delete the target "
                                      "topics (else they are kept and marked in the record).")


class MigrationAbandoned(KafkaOpsError):
    """The live migration stopped before the switch; the source stays authoritative. Final: a retry of
    the step would not change why (the producers, the groups or the budget decided it)."""

    final = True


@dataclass(frozen=True)
class LivePolicy:
    """The operator's limits for the cut-over (the DAG's params; defaults: the specs above)."""

    quiesce: Quiesce = QUIESCE.default
    catch_up_lag_records: int = CATCH_UP_LAG.default
    catch_up_budget_s: float = float(CATCH_UP_BUDGET.default)
    quiet_s: float = float(QUIET.default)
    quiesce_timeout_s: float = float(QUIESCE_TIMEOUT.default)
    switch_timeout_s: float = float(SWITCH_TIMEOUT.default)
    principals: tuple[str, ...] = ()
    delete_target_on_abandon: bool = DELETE_TARGET.default

    def __post_init__(self) -> None:  # a mode given as its string
        object.__setattr__(self, "quiesce", form.mode_of("quiesce", self.quiesce, Quiesce))

    @property
    def live(self) -> bool:
        return self.quiesce != Quiesce.NONE

    def problems(self) -> list[str]:
        found = []
        if self.quiesce == Quiesce.ACL and not self.principals:
            found.append("quiesce=acl needs the producers' principals (e.g. User:orders-app) in quiesce_principals")
        bad = [p for p in self.principals if not p.startswith("User:") or len(p) <= len("User:")]
        if bad:
            found.append(f"quiesce_principals {bad} are not Kafka principals of the form User:<name>")
        if self.catch_up_lag_records < 0:
            found.append(f"catch_up_lag_records is {self.catch_up_lag_records}; give 0 or more")
        for name in ("catch_up_budget_s", "quiet_s", "quiesce_timeout_s", "switch_timeout_s"):
            if getattr(self, name) <= 0:
                found.append(f"{name} is {getattr(self, name)}; give a number of seconds above 0")
        if self.quiet_s >= self.quiesce_timeout_s:
            found.append(f"quiet_s ({self.quiet_s}) must be shorter than quiesce_timeout_s ({self.quiesce_timeout_s})")
        return found


# -- pure decisions -----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class CatchUpVerdict:
    """Why the tail's catch-up ends: ``quiesce`` (the lag is within the threshold: ask for the quiesce) or
    not (the budget is spent with the source still too far ahead: abandon, the source stays
    authoritative)."""

    why: str
    quiesce: bool


def catch_up_verdict(progress: tail.TailProgress, policy: LivePolicy) -> CatchUpVerdict | None:
    """Whether the tail's catch-up ends now (None: copy on). The quiesce is asked for only once the lag is
    within ``catch_up_lag_records``: the write window then holds only those records' copy. Past
    ``catch_up_budget_s`` with more behind, the migration is abandoned, saying both rates."""
    if progress.lag <= policy.catch_up_lag_records:
        return CatchUpVerdict(f"the lag is {progress.lag:,} record(s), at or below the threshold of "
                              f"{policy.catch_up_lag_records:,}", True)
    if progress.elapsed_s >= policy.catch_up_budget_s:
        return CatchUpVerdict(
            f"the tail copy did not come within {policy.catch_up_lag_records:,} record(s) of the source in the "
            f"catch-up budget of {policy.catch_up_budget_s:.0f} s: {progress.lag:,} record(s) behind, the source "
            f"written at {progress.written_rate:,.0f} records/s and copied at {progress.copied_rate:,.0f} records/s. "
            "Nothing was quiesced; raise catch_up_budget_s or catch_up_lag_records, or migrate when the source is "
            "written more slowly", False)
    return None


#: quiesce=acl: how long the source's end offsets must stay still after the DENY Write ACL (at most
#: ``quiet_s``). The ACL refuses the named principals' writes, so stillness only has to show that it is in
#: effect on every broker and that no write accepted before it is still arriving; a producer the ACL
#: does not name is found by :func:`refuse_stray_writes` before the switch.
ACL_QUIET_S = 0.5


def quiet_period(policy: LivePolicy) -> float:
    """Seconds the source must stay still to count as quiesced: ``quiet_s`` (manual), at most
    :data:`ACL_QUIET_S` (acl)."""
    return min(policy.quiet_s, ACL_QUIET_S) if policy.quiesce == Quiesce.ACL else policy.quiet_s


class Stillness:
    """Whether a topic's end offsets stayed the same for ``quiet_s`` seconds: fed samples in time order."""

    def __init__(self, quiet_s: float) -> None:
        self.quiet_s = quiet_s
        self.ends: dict[int, int] | None = None
        self.since = 0.0

    def see(self, now: float, ends: Mapping[int, int]) -> bool:
        if self.ends != dict(ends):
            self.ends, self.since = dict(ends), now
            return False
        return now - self.since >= self.quiet_s


@dataclass(frozen=True)
class AbandonDecision:
    """What the abandon step does once every step before it ended: ``roll_back`` a live migration that
    stopped before the switch (``reason`` goes into the record), or nothing, with ``reason`` saying why;
    ``failed`` names the steps that failed (the run fails then, rolled back or not); ``release``: remove
    the quiesce's DENY ACL again (idempotent) although nothing is rolled back (the switch was made)."""

    roll_back: bool
    reason: str
    failed: tuple[str, ...] = ()
    release: bool = False

    @property
    def fails(self) -> bool:
        """The run fails: a step failed, or the migration was rolled back (it did not happen)."""
        return self.roll_back or bool(self.failed)

    @property
    def text(self) -> str:
        """Why the abandon step did nothing, with the failed steps first."""
        return f"step(s) {', '.join(self.failed)} failed; {self.reason}" if self.failed else self.reason


def abandon_decision(*, planned: bool, dry_run: bool, live: bool, failed: Sequence[str], switch: bool | None,
                     steps: Sequence[Mapping[str, Any]] = ()) -> AbandonDecision:
    """Whether a run rolls back (pure): only a live migration that got past the plan and stopped before
    a confirmed switch does. ``failed``: the tasks Airflow marks failed (not the abandon step);
    ``switch``: True approved, False refused, None not answered; ``steps``: the record's step rows,
    whose errors make the reason."""
    failed = tuple(failed)
    if not planned or dry_run:
        return AbandonDecision(False, "nothing was planned or changed", failed)
    if not live:
        return AbandonDecision(False, "not a live migration: nothing to roll back", failed)
    if switch:  # the confirm removed the ACL: removing it again is idempotent
        return AbandonDecision(False, "the switch was made: the target is authoritative, nothing to roll back",
                               failed, release=True)
    errors = {s["name"]: s.get("error") for s in steps if s.get("status") == "failed"}
    reason = ("; ".join(_failure(t, errors) for t in failed) if failed else
              "the switch was refused" if switch is not None else "stopped before the switch")
    return AbandonDecision(True, reason, failed)


#: The steps of the record the ``quiesce`` task runs, in order (:func:`kafkaops.rekey.steps.ready_target`).
READY_STEPS = ("quiesce", "final_pass", "verify", "cutover")


def _failure(task: str, errors: Mapping[str, str | None]) -> str:
    """A failed task said with its step's error: the quiesce task's own step, or the one of its later
    steps that failed (:data:`READY_STEPS`)."""
    for name in READY_STEPS if task == "quiesce" else (task,):
        if errors.get(name):
            return f"{task} failed: {errors[name]}" if name == task else f"{task} failed at its step {name}: {errors[name]}"
    return f"{task} failed: see its log"


# -- steps (I/O) ----------------------------------------------------------------------------------------------

def source_ends(ctx: lifecycle.OperationContext, topic: str) -> dict[int, int]:
    return {p: e for p, (_, e) in records.end_offsets(ctx.conn_config, topic).items()}


#: Records a tail part reads at most (split over the source partitions): a part's records are held in
#: memory until they are committed, so a large lag is copied in parts of this size (and of at most
#: :data:`kafkaops.rekey.tail.PART_BYTES`).
PART_RECORDS = 50_000
#: How often the tail writes its lag, rates and ETA to the task log and the record ...
TAIL_REPORT_S = 10.0
#: ... with the rates over this many seconds before.
RATE_WINDOW_S = 5.0
#: How long the tail waits for new records when it has copied everything.
TAIL_IDLE_S = 0.05


class Tail:
    """The tail copy (:mod:`kafkaops.rekey.tail`) of one migration, run in this process: each part is read
    from the source up to its last stable offsets, rekeyed, written in a transaction, read back and
    checked (:func:`tail.check_part`) and only then committed with its source position. Resumes where
    the last commit of any earlier process left it (the transactional id fences that process). Close it
    (a context manager) in the code that opened it."""

    def __init__(self, ctx: lifecycle.OperationContext, first: BackfillPlan, report: tail.TailReport | None = None,
                 *, clock: Callable[[], float] = time.monotonic) -> None:
        self.ctx, self.first, self.clock = ctx, first, clock
        name = tail.tail_id(first)
        self.copy = TransactionalCopy(ctx.conn_config, source_topic=first.source_topic, transactional_id=name,
                                      group_id=name)
        try:
            partitions = [p for p, _, _ in first.source_offsets]
            committed, note = self.copy.committed(partitions)
            began = {p: e for p, _, e in first.source_offsets}
            self.position: dict[int, int] = {p: began[p] if committed.get(p) is None else int(committed[p] or 0)
                                             for p in partitions}
            if report is not None and dict(report.position) != self.position:
                raise KafkaOpsError(
                    f"the tail copy into {first.target_topic} stands at {render.offsets(self.position)} in Kafka "
                    f"(group {name}) but its record says {render.offsets(report.position)}: another process "
                    "copied in between; nothing more was copied. Abandon the migration and start it again")
            self.report = report or (tail.TailReport.from_note(note, self.position) if note else
                                     tail.TailReport(began=began, position=dict(self.position)))
            self.outputs = [(first.target_topic, p) for p in range(first.target_partitions)] + \
                [(first.dead_letter_topic, 0)]
            # read back from here on: whatever reaches the outputs from now is a part's, or a part fails
            self.checked_to = self.copy.ends(self.outputs, committed=False)
        except BaseException:
            self.copy.close()
            raise
        self.keys = tail.TailKeys()
        self.started = clock()
        #: the lag the last :meth:`run` ended on: what its verdict was given
        self.ended_lag = 0

    def __enter__(self) -> Tail:
        return self

    def __exit__(self, *exc: object) -> None:
        self.copy.close()

    def source_ends(self) -> dict[int, int]:
        return {p: e for (_, p), e in self.copy.ends([(self.first.source_topic, p) for p in self.position]).items()}

    def lag(self, ends: Mapping[int, int]) -> int:
        return sum(max(0, ends.get(p, o) - o) for p, o in self.position.items())

    def part(self, ends: Mapping[int, int]) -> int:
        """Copy one part, up to ``ends`` (or fewer records: :data:`PART_RECORDS`); returns its records."""
        cap = tail.part_cap(len(self.position), PART_RECORDS, self.report)
        upto = {p: min(max(o, ends.get(p, o)), o + cap) for p, o in self.position.items()}
        if upto == self.position:
            return 0
        source: Sequence[tail.Record] = self.copy.read_source(self.position, upto)
        more = [p for p, o in upto.items() if o < ends.get(p, o)]
        if more:  # capped: cut every partition at one moment, so the merged order holds across parts
            source, upto = tail.cut_by_time(source, upto, more)
        outputs = tail.rekey_part(self.first, source)
        before = self.checked_to
        self.copy.begin()
        try:
            self.copy.write(outputs)
            after = self.copy.ends(self.outputs, committed=False)
            written = self.copy.read_back({tp: (before[tp], after[tp]) for tp in self.outputs})
            check = tail.check_part(self.first, source, written, outputs)
            if not check.ok:
                raise backfill.BackfillError(
                    f"a part of the tail copy into {self.first.target_topic} ({len(source):,} record(s) of "
                    f"{self.first.source_topic} from {render.offsets(self.position)} to {render.offsets(upto)}) failed "
                    f"its check: {'; '.join(check.failures)}. It was aborted: the target holds only the parts before "
                    "it, each checked; abandon the migration (the source stays authoritative)")
            report = tail.add_part(self.report, check, upto,
                                   source_bytes=sum(len(r.key or b"") + len(r.value or b"") for r in source))
            self.copy.commit(upto, report.note(NOTE_BYTES))
        except BaseException:
            self.copy.abort()
            raise
        self.keys.add(check)
        self.report = replace(report, keys=self.keys.counts())
        self.position, self.checked_to = dict(upto), after
        return len(source)

    def progress(self, samples: Sequence[tuple[float, int, int]], lag: int) -> tail.TailProgress:
        """The tail now, its rates over ``samples`` ``(seconds, source end total, copied total)``."""
        written, copied = tail.rates(samples[0], samples[-1]) if len(samples) > 1 else (0.0, 0.0)
        return tail.TailProgress(lag, written, copied, samples[-1][0] - self.started, self.report.parts,
                                 self.report.source_records)

    def run(self, done: Callable[[tail.TailProgress], CatchUpVerdict | None], *, label: str = "tail",
            stop_at: Mapping[int, int] | None = None) -> CatchUpVerdict:
        """Copy parts until ``done(progress)`` gives a verdict (returned), or with ``stop_at`` until the
        position reached it (copying only up to it). Logs and records the lag, the rates (over the last
        :data:`RATE_WINDOW_S`) and the ETA every :data:`TAIL_REPORT_S`, and when it ends."""
        samples: list[tuple[float, int, int]] = []
        reported = self.clock()
        while True:
            ends = dict(stop_at) if stop_at is not None else self.source_ends()
            now, lag = self.clock(), self.lag(ends)
            # the rates over the last RATE_WINDOW_S, or since the sample before a part that took longer
            recent = [x for x in samples if now - x[0] <= RATE_WINDOW_S]
            samples = samples[-1:] if not recent and samples else recent
            samples.append((now, sum(ends.values()), self.report.source_records))
            progress = self.progress(samples, lag)
            verdict = done(progress) if stop_at is None else \
                CatchUpVerdict("the copy reached the quiesced end offsets", True) if lag == 0 else None
            if verdict is not None or now - reported >= TAIL_REPORT_S:
                line = progress.line(render.duration)
                state.append_note(self.ctx.audit, TailNote(line, progress))
                log.info("%s", line.replace("tail:", f"{label}:", 1))
                reported = now
            if verdict is not None:
                self.ended_lag = lag
                return verdict
            if not self.part(ends):
                time.sleep(TAIL_IDLE_S)


def follow(ctx: lifecycle.OperationContext, first: BackfillPlan, policy: LivePolicy, *,
           clock: Callable[[], float] = time.monotonic) -> CatchUp:
    """The catch-up by the tail copy: from the backfill's end (or where an earlier try committed), part
    after part, while producers keep writing, until :func:`catch_up_verdict` ends it: the lag is within
    ``catch_up_lag_records`` (returns the position as the next pass's plan), or the budget is spent
    (raises :class:`MigrationAbandoned`: nothing was quiesced, the source stays authoritative)."""
    began = clock()
    with Tail(ctx, first, clock=clock) as t:
        lag_before = t.lag(t.source_ends())
        verdict = t.run(lambda progress: catch_up_verdict(progress, policy), label="catch-up")
        # the lag the verdict was given (the log's and the record's), not a later look at a source still written
        remaining, report = t.ended_lag, t.report
    plan = first.next_pass(report.position)
    row = PassRow(pass_number(0), report.source_records, plan.records, "tail", round(clock() - began, 1), lag_before)
    state.append_note(ctx.audit, CatchUpNote(f"catch-up by the tail copy: {row.written:,} record(s) in "
                                             f"{report.parts:,} checked part(s) in {row.seconds} s (lag was "
                                             f"{lag_before:,})", row))
    if not verdict.quiesce:
        raise MigrationAbandoned(f"{verdict.why}. The migration is abandoned: {first.source_topic} stays authoritative")
    state.append_note(ctx.audit, CatchUpDone(f"catch-up done: {verdict.why}", remaining, 1))
    return CatchUp(plan.to_dict(), (row,), remaining, verdict.why, tail=report)


def final_part(ctx: lifecycle.OperationContext, caught: CatchUp, quiesced: Quiesced, copied: PassResult,
               *, clock: Callable[[], float] = time.monotonic) -> PassResult:
    """The tail's last part, to the quiesced end offsets, checked before its commit; returns the whole
    copy's integrity report (the backfill's, ``copied``, with every tail part's: :func:`tail.whole_copy`)
    and the target's end offsets after it (where the switch's first writes begin)."""
    if copied.integrity is None:
        raise KafkaOpsError("the backfill reported no integrity check, so the whole copy cannot be gated; run the "
                            "migration again (a live backfill checks its copy before the tail begins)")
    first = BackfillPlan.from_dict(copied.run.plan) if copied.run else caught.last_plan
    began = clock()
    left = quiesced.tail or caught.tail
    if left is not None and dict(left.position) == dict(quiesced.ends):  # the quiesce's copy committed it all
        before, report = left.source_records, left
    else:
        with Tail(ctx, first, left, clock=clock) as t:
            before = t.report.source_records
            t.run(lambda _progress: None, stop_at=quiesced.ends, label="final part")
            report = t.report
    plan = caught.last_plan.next_pass(quiesced.ends)
    target_ends = source_ends(ctx, plan.target_topic)
    number = caught.next_pass
    row = PassRow(number, report.source_records - before, plan.records, "tail", round(clock() - began, 2))
    state.append_note(ctx.audit, FinalPassNote(
        f"final part: {row.written:,} record(s) copied and checked up to the quiesced end offsets in {row.seconds} s; "
        f"the copy holds every record of {plan.source_topic} from "
        f"{render.offsets({p: plan.origin(p) for p, _, _ in plan.source_offsets})} to {render.offsets(quiesced.ends)} "
        f"(the backfill and {report.parts:,} tail part(s), each checked)", row))
    whole = tail.whole_copy(backfill.IntegrityReport.from_dict(copied.integrity), report)
    run = copied.run
    return PassResult(run, whole.to_dict(), target_ends)


def quiesce(ctx: lifecycle.OperationContext, plan: BackfillPlan, policy: LivePolicy, *, copy: Tail | None = None,
            clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep
            ) -> Quiesced:
    """Stop the writes to the source and wait until its end offsets stay still for :func:`quiet_period`.

    manual: the record asks the operator to stop the producers (and to let consumers read to the end,
    then stop them); acl: a DENY Write ACL on the source for each principal (removed by
    :func:`release_writes`, whatever happens later). ``copy``: the tail copy, which goes on copying
    (and checking) what the source still receives while it is waited on, so that at the quiesce only
    what arrived in the last moment is left; the result carries its report. Raises
    :class:`MigrationAbandoned` when the end offsets still move after ``quiesce_timeout_s``."""
    topic, target = plan.source_topic, plan.target_topic
    if copy is not None:  # before the window opens: the lag copied, and the tail's consumers connected and
        copy.part(copy.source_ends())  # fetching (a new one's first part takes a second or two, its next tenths)
    asked_at = lifecycle.now()
    if policy.quiesce == Quiesce.ACL:
        with ctx.connect() as conn:
            ctx.fence(f"deny writes to {topic}")
            try:
                acls.deny_writes(conn, topic, policy.principals)
            except KafkaOpsError:  # some may exist though the request failed: the record could not say which
                _undo_denials(conn, topic, policy.principals)
                raise
        state.append_note(ctx.audit, ActionNote(
            f"writes to {topic} denied to {', '.join(policy.principals)} (ACL DENY Write); the write window begins",
            Action.WRITES_DENIED, topic=topic, acl=policy.principals))
    state.append_note(ctx.audit, ActionNote(
        f"Stop every producer writing to {topic} now; the write window begins. Let the consumers of {topic} read "
        f"to its end, then stop them: they restart on {target} at offsets kafkaops commits. Waiting up to "
        f"{policy.quiesce_timeout_s:.0f} s for the end offsets of {topic} to stay still for {quiet_period(policy):g} s.",
        Action.STOP_PRODUCERS, topic=topic, target_topic=target, deadline=asked_at + policy.quiesce_timeout_s))
    still, began = Stillness(quiet_period(policy)), clock()
    copied_before = copy.report.source_records if copy is not None else 0
    first: dict[int, int] | None = None
    while True:
        ends = copy.source_ends() if copy is not None else source_ends(ctx, topic)
        first = dict(ends) if first is None else first
        if still.see(clock(), ends) and (copy is None or copy.position == ends):
            break
        if clock() - began > policy.quiesce_timeout_s:
            found = (stray_writes(ctx, topic, Quiesced(policy.quiesce.value, asked_at, None, first), policy, ends,
                                  since="since the DENY Write ACL went up") if policy.quiesce == Quiesce.ACL else None)
            raise MigrationAbandoned(
                f"{topic}'s end offsets still moved after {policy.quiesce_timeout_s:.0f} s (now {render.offsets(ends)}): "
                f"{found or 'producers did not stop'}. The migration is abandoned: {topic} stays authoritative and "
                "nothing was switched; stop the producers (with acl: name every principal that writes to it in "
                "quiesce_principals) and trigger the migration again")
        if copy is None or not copy.part(ends):
            sleep(min(1.0, still.quiet_s / 4) if copy is None else TAIL_IDLE_S)
    settled_at = lifecycle.now()
    quiesced = Quiesced(policy.quiesce.value, asked_at, settled_at, ends, None if copy is None else copy.report)
    meanwhile = ("" if copy is None else f"; the tail copy went on meanwhile and copied and checked "
                 f"{copy.report.source_records - copied_before:,} record(s), up to the quiesced end offsets")
    state.append_note(ctx.audit, QuiescedNote(f"producers quiesced ({policy.quiesce}): {topic}'s end offsets stayed "
                                              f"still for {still.quiet_s:g} s, {settled_at - asked_at:.1f} s "
                                              f"after asking{meanwhile}", quiesced))
    return quiesced


def _undo_denials(conn: Any, topic: str, principals: Sequence[str]) -> None:
    """Remove what a failed :func:`acls.deny_writes` may have created; a failure here is logged, the
    deny's own error is the one raised."""
    try:
        acls.allow_writes(conn, topic, principals)
    except KafkaOpsError as err:
        log.error("denying writes to %s failed, and removing any DENY Write ACL it created failed too (%s): check "
                  "with kafka-acls --list --topic %s", topic, err, topic)


def acl_problem(conn: KafkaConnection) -> str | None:
    """Why DENY Write ACLs cannot quiesce producers on this cluster, or None when they can, in three
    reads that change nothing: each broker's ``authorizer.class.name`` (a broker without one enforces no
    ACL; a KRaft cluster without any answers DescribeAcls with an empty list, not SECURITY_DISABLED), one
    DescribeAcls (CLUSTER_AUTHORIZATION_FAILED: a principal without Describe on the cluster), then the
    connection's authorized operations on the cluster, which must include Alter (creating and deleting
    ACLs; a principal without any right there is also answered an empty list of ACLs)."""
    brokers = [b.id for b in metadata.describe_cluster(conn)[2]]
    try:
        lacking = [b for b in brokers if not (configs.config_value(conn, "broker", b, acls.AUTHORIZER) or "").strip()]
    except KafkaOpsError as err:
        if err.code == acls.NOT_ALLOWED:
            return (f"the Kafka connection's principal may not read the brokers' configs at {conn.bootstrap}, so it "
                    "cannot manage ACLs either; it needs DescribeConfigs, Describe and Alter on the Cluster resource")
        raise
    if lacking:
        return (f"broker(s) {', '.join(map(str, lacking))} of the cluster at {conn.bootstrap} have no authorizer "
                f"({acls.AUTHORIZER} is not set), so no ACL can deny writes there")
    try:
        acls.describe_all(conn)
    except KafkaOpsError as err:
        if err.code == acls.NO_AUTHORIZER:  # ZooKeeper-era brokers answer so
            return (f"the cluster at {conn.bootstrap} has no authorizer ({acls.AUTHORIZER} is not set), so no ACL can "
                    "deny writes")
        if err.code == acls.NOT_ALLOWED:
            return (f"the Kafka connection's principal may not describe the ACLs of the cluster at {conn.bootstrap}; "
                    "it needs Describe and Alter on the Cluster resource")
        raise
    allowed = acls.cluster_operations(conn)
    if not allowed & {"ALTER", "ALL"}:
        may = ", ".join(sorted(allowed)) or "nothing"
        return (f"the Kafka connection's principal may not create or delete ACLs on the cluster at {conn.bootstrap} "
                f"(on the Cluster resource it may: {may}); it needs Alter on the Cluster resource")
    return None


#: What the ACL fence does to a running producer, as measured (tests/integration/rekey/test_acl_fence.py).
FENCE_EFFECT = ("While the ACL stands, every send of those principals to {topic} is refused at once with "
                "TOPIC_AUTHORIZATION_FAILED, which producers do not retry: a Java producer's callback gets a "
                "TopicAuthorizationException, a librdkafka producer's produce() call raises it, and an application "
                "that does not handle the error stops (a Kafka Streams application does, by default). A refused "
                "record is not in {topic}; every acknowledged one is, and is copied. Producers that survive the "
                "refusals write again once the ACL is removed, with no restart. A producer with acks=0 gets no answer: "
                "what it sends while the ACL stands is dropped without its knowing. Other principals are not "
                "stopped: the confirm refuses the switch if {topic} still grows")


def cutover_summary(policy: LivePolicy, topic: str) -> str:
    """What the approval says of the cut-over the run will do after the copy, in the operator's terms."""
    if not policy.live:
        return (f"Snapshot copy (quiesce=none): records written to {topic} after the snapshot are not copied; "
                "switch producers and consumers yourself afterwards, at the translated offsets")
    stop = (f"kafkaops denies Write on {topic} to {', '.join(policy.principals)} (a DENY ACL, removed after the "
            f"switch or on rollback). {FENCE_EFFECT.format(topic=topic)}" if policy.quiesce == Quiesce.ACL else
            f"you are asked (in the run's record) to stop the producers of {topic}")
    return (f"Live cut-over (quiesce={policy.quiesce}): after the backfill a tail copy follows {topic}, each part "
            f"checked before it is committed, until it is at most {policy.catch_up_lag_records:,} records behind "
            f"(abandoned if not within {policy.catch_up_budget_s:.0f} s); then {stop}, the last part is copied and "
            "checked, and writes pause until the switch. Abandoned, "
            f"{topic} staying authoritative, if {topic} is not still for {quiet_period(policy):g} s within "
            f"{policy.quiesce_timeout_s:.0f} s. The switch is a second approval, with the groups' offsets")


def switch_request(cut: Cutover) -> str:
    """What the switch step asks of the operator: the topics and each group's committed target offsets."""
    source, target = cut.source_topic, cut.target_topic
    lines = [f"Move producers from {source} to {target} now, then start the consumers on {target}: their groups' "
             f"offsets are committed there (the consumers must subscribe to {target}; nothing is read twice or "
             f"skipped). Approve once they run; Reject abandons the migration ({source} stays authoritative).", ""]
    if cut.groups:
        lines += ["| group | committed for | target offsets (partition: offset) | redelivered |", "|---|---|---|---|"]
        for group, g in sorted(cut.groups.items()):
            offsets = ", ".join(f"{p}: {o}" for p, o in sorted(g.target.items(), key=lambda x: int(x[0])))
            lines.append(f"| {group} | {g.committed_for or '-'} | {offsets} | {g.redelivered} |")
    else:
        lines.append(f"No consumer group had offsets on {source}.")
    return "\n".join(lines)


def release_writes(ctx: lifecycle.OperationContext, topic: str, policy: LivePolicy) -> bool:
    """Remove the quiesce's DENY Write ACLs (idempotent); True when there were any to remove."""
    if policy.quiesce != Quiesce.ACL:
        return False
    with ctx.connect() as conn:
        removed = acls.allow_writes(conn, topic, policy.principals)
    if removed:
        state.append_note(ctx.audit, ActionNote(f"writes to {topic} allowed again: {removed} DENY Write ACL(s) "
                                                "removed", Action.WRITES_ALLOWED, topic=topic))
    return bool(removed)


def acl_removal_command(topic: str, principals: Sequence[str]) -> str:
    """The kafka-acls command that removes the quiesce's DENY Write ACLs by hand."""
    return (f"kafka-acls --remove --topic {topic} --operation Write --deny-principal "
            f"{' --deny-principal '.join(principals)}")


def outstanding_denials(notes: Sequence[Mapping[str, Any]]) -> tuple[ActionNote, ...]:
    """Per topic, the last DENY Write a quiesce recorded in ``notes`` that no later note says was removed
    (pure): what a rollback or the finish has to remove. A quiesce of a Kafka Streams application denies
    writes to each of its inputs; an "allowed" note that names no topic (older records) covers them all."""
    actions = state.read_notes(notes, ActionNote)
    last: dict[str, ActionNote] = {}
    for n in actions:
        if n.action is Action.WRITES_DENIED and n.topic:
            last[n.topic] = n
    return tuple(d for topic, d in last.items()
                 if not any(n.action is Action.WRITES_ALLOWED and n.topic in (None, topic) and (n.ts or 0) >= (d.ts or 0)
                            for n in actions))


def denied_writes(notes: Sequence[Mapping[str, Any]]) -> ActionNote | None:
    """The last of :func:`outstanding_denials`, or None: no DENY Write is left to remove."""
    left = outstanding_denials(notes)
    return left[-1] if left else None


def release_left_writes(ctx: lifecycle.OperationContext, notes: Sequence[Mapping[str, Any]]) -> str | None:
    """The finish teardown's safety net: when this run's record says a quiesce denied writes and no
    step allowed them again after (the confirm or the rollback did not run to its end: a killed
    worker, a timeout), remove the DENY Write ACLs now, since nothing else would. Returns what was
    said in the record, or None when there was nothing to do. A failed removal is said with the
    kafka-acls command and does not raise: the teardown must still conclude the run."""
    said = [text for text in (_release_left(ctx, d) for d in outstanding_denials(notes)) if text]
    return "; ".join(said) if said else None


def _release_left(ctx: lifecycle.OperationContext, last: ActionNote) -> str:
    topic, principals = str(last.topic), last.acl
    try:
        with ctx.connect() as conn:
            removed = acls.allow_writes(conn, topic, principals)
    except KafkaOpsError as err:
        text = (f"the DENY Write ACL on {topic} is still there: the step that removes it did not run to its end, "
                f"and the finish could not remove it ({err}). Producers cannot write to {topic} until you run "
                f"{acl_removal_command(topic, principals)}")
        state.append_note(ctx.audit, ActionNote(text, Action.WRITES_LEFT_DENIED, topic=topic))
        log.error("%s", text)
        return text
    text = (f"writes to {topic} allowed again by the finish: {removed} DENY Write ACL(s) removed (the step that "
            "removes them did not run to its end)")
    state.append_note(ctx.audit, ActionNote(text, Action.WRITES_ALLOWED, topic=topic))
    log.warning("%s", text)
    return text


def settle_groups(ctx: lifecycle.OperationContext, topic: str, ends: Mapping[int, int], *, timeout_s: float,
                  clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep
                  ) -> dict[str, str]:
    """Wait until no consumer group of ``topic`` has a member (its offsets can then be committed on
    the target and cannot move on). Returns group -> how it was left: ``drained`` (read to ``ends``),
    ``not drained`` (stopped before the end: the translation states its redelivered count) or, at
    the timeout, ``still active``."""
    began = clock()
    while True:
        with ctx.connect() as conn:
            snap = metadata.snapshot(conn, topics=[topic], sizes=False)
        states = {}
        for g in snap.groups:
            if g.group_id.startswith(backfill.MARKER_GROUP_PREFIX):
                continue
            committed = {x.partition: x.committed for x in g.partitions if x.topic == topic}
            if not committed:
                continue
            drained = all((committed.get(p) or 0) >= e for p, e in ends.items())
            states[g.group_id] = ("drained" if drained and g.members == 0 else
                                  "still active" if g.members else "not drained")
        # a group without members cannot move any more: drained, or stopped early (translated, its redelivery said)
        if all(s != "still active" for s in states.values()) or clock() - began > timeout_s:
            return states
        sleep(1.0)


TAIL = 16
"""Offsets read at either side of the switch for the write window: a transaction's commit marker
takes an offset but holds no record, so one offset may show nothing."""


def last_timestamp(ctx: lifecycle.OperationContext, topic: str, ends: Mapping[int, int]) -> int | None:
    """The latest timestamp (ms) of the records just before ``ends``: when the last write landed. It
    reads the last :data:`TAIL` offsets of each partition, as with transactional producers the last
    offsets are commit markers, which hold no record."""
    ranges = {p: (max(0, e - TAIL), e) for p, e in ends.items() if e > 0}
    stamps = [r.timestamp for r in records.read_ranges(ctx.conn_config, topic, ranges)] if ranges else []
    return max(stamps) if stamps else None


def strays(quiesced_ends: Mapping[int, int], ends: Mapping[int, int]) -> dict[int, int]:
    """The records written to each source partition past its quiesced end (pure); partitions with none
    are left out."""
    quiesced = offsets_of(quiesced_ends)
    return {p: e - quiesced[p] for p, e in sorted(offsets_of(ends).items()) if p in quiesced and e > quiesced[p]}


def stray_writes(ctx: lifecycle.OperationContext, topic: str, quiesced: Quiesced, policy: LivePolicy,
                 ends: Mapping[int, int] | None = None, *, since: str = "after the quiesce") -> str | None:
    """What the source received past ``quiesced.ends``, said for the operator (how many records, in which
    partitions, written when, and which producers the quiesce does not stop), or None when it stayed still.
    ``ends``: the source's end offsets now (read when not given); ``since``: when ``quiesced.ends`` were read."""
    grown = strays(quiesced.ends, source_ends(ctx, topic) if ends is None else ends)
    if not grown:
        return None
    start = offsets_of(quiesced.ends)
    stamps = [r.timestamp for r in records.read_ranges(
        ctx.conn_config, topic, {p: (start[p], start[p] + min(n, TAIL)) for p, n in grown.items()})]
    last = last_timestamp(ctx, topic, {p: start[p] + n for p, n in grown.items()})
    when = (f", written from {render.utc_time(min(stamps) / 1000.0)} to {render.utc_time(max(stamps + [last or 0]) / 1000.0)}"
            if stamps else "")
    who = (f"a principal the DENY Write ACL does not name (it names {', '.join(policy.principals)})"
           if policy.quiesce == Quiesce.ACL else "a producer that was not stopped")
    where = ", ".join(f"{p} ({n:,})" for p, n in grown.items())
    return (f"{sum(grown.values()):,} record(s) were written to {topic} {since}, in partition(s) {where}"
            f"{when}: {who} still writes to it")


def refuse_stray_writes(ctx: lifecycle.OperationContext, plan: BackfillPlan, quiesced: Quiesced,
                        policy: LivePolicy) -> None:
    """Before the switch is asked: the source must still end where the quiesce found it. A producer the quiesce
    did not stop fails this step, naming it (:func:`stray_writes`); the migration is then abandoned and the
    source stays authoritative, since those records are not in the copy."""
    found = stray_writes(ctx, plan.source_topic, quiesced, policy)
    if found:
        raise MigrationAbandoned(f"{found}. Those records are not in {plan.target_topic}, so the switch is not asked: "
                            f"the migration is abandoned and {plan.source_topic} stays authoritative. Stop that "
                            "producer, then run the migration again")


def confirm_switch(ctx: lifecycle.OperationContext, plan: BackfillPlan, quiesced: Quiesced,
                   copied_ends: Mapping[int, int], policy: LivePolicy, *,
                   clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep
                   ) -> SwitchObserved:
    """Observe the switch: writes reach the target past the copy (``copied_ends``) and none reach the
    source past its quiesced end, also for ``quiet_s`` after the first write to the target (a producer
    left behind shows up there; the ACL stays until then). Records the write-unavailable window from
    the records' timestamps."""
    source, target = plan.source_topic, plan.target_topic
    source_at = dict(quiesced.ends)
    copied_ends = offsets_of(copied_ends)
    began, first_seen = clock(), None
    while True:
        found = stray_writes(ctx, source, quiesced, policy, source_ends(ctx, source))
        if found:
            raise KafkaOpsError(
                f"{found}, and those records are not in {target}. Stop it, then copy them: "
                f"kafka_partition_increase cannot merge them into {target} in key order once producers write there; "
                "see docs/live-migration.md")
        now_target = source_ends(ctx, target)
        arrived = {p: e - copied_ends.get(p, 0) for p, e in now_target.items() if e > copied_ends.get(p, 0)}
        if arrived and first_seen is None:
            first_seen = clock()
        if first_seen is not None and clock() - first_seen >= policy.quiet_s:
            break  # writes reach the target and the source stayed still for the quiet period after them
        if first_seen is None and clock() - began > policy.switch_timeout_s:
            raise KafkaOpsError(f"no write reached {target} within {policy.switch_timeout_s:.0f} s of the switch: "
                                f"producers were not moved to it. {source} has no new writes either; start the "
                                f"producers on {target}")
        sleep(1.0)
    first_new = min((r.timestamp for r in records.read_ranges(
        ctx.conn_config, target, {p: (copied_ends.get(p, 0), min(e, copied_ends.get(p, 0) + TAIL))
                                  for p, e in now_target.items() if e > copied_ends.get(p, 0)})), default=None)
    last_old = last_timestamp(ctx, source, source_at)
    window, began_with = write_window(last_old, first_new, quiesced.asked_at)
    observed = SwitchObserved(window, last_old, first_new, tuple(sorted(arrived)), began_with)
    said = f"switch observed: writes reach {target}, none reach {source}"
    if window is not None:
        said += f"; write-unavailable window {window:.1f} s, from {began_with} to the first write to {target}"
    if window is not None and last_old is not None and began_with == QUIESCE_BEGAN:
        said += (f" ({source}'s last write came {render.duration((quiesced.asked_at or 0) - last_old / 1000.0)} "
                 "before the quiesce: it was already still)")
    state.append_note(ctx.audit, SwitchObservedNote(said, observed))
    return observed


LAST_WRITE_BEGAN = "the last source write"
QUIESCE_BEGAN = "the quiesce"
#: A Kafka Streams application's window: its inputs' records often carry event times, not write times, so
#: the window is measured by the clock, from the quiesce to the first write seen on a new input.
OBSERVED_BEGAN = "the quiesce to the first write kafkaops saw on a new input, looking every second"


def write_window(last_source_write_ms: int | None, first_target_write_ms: int | None, quiesce_asked_at: float | None
                 ) -> tuple[float | None, str]:
    """The write-unavailable window (seconds; None without a first target write) and what began it (pure):
    from the later of the source's last write and the quiesce (epoch seconds) to the first write to the
    target. A source already still before the quiesce was not made unavailable by it: its window begins
    with the quiesce, never with a record written long before."""
    if first_target_write_ms is None:
        return None, LAST_WRITE_BEGAN
    quiesce_ms = None if quiesce_asked_at is None else quiesce_asked_at * 1000.0
    if last_source_write_ms is None and quiesce_ms is None:
        return None, LAST_WRITE_BEGAN
    if last_source_write_ms is None or (quiesce_ms is not None and quiesce_ms > last_source_write_ms):
        return max(0.0, (first_target_write_ms - float(quiesce_ms or 0)) / 1000.0), QUIESCE_BEGAN
    return (first_target_write_ms - last_source_write_ms) / 1000.0, LAST_WRITE_BEGAN


def abandon(ctx: lifecycle.OperationContext, plan: BackfillPlan, policy: LivePolicy, reason: str, *,
            copied_ends: Mapping[Any, int] | None = None) -> Abandonment:
    """Roll back before the switch: writes to the source allowed again, the target deleted (with
    ``delete_target_on_abandon``) or kept and marked abandoned in the record (with any offsets
    committed there). The source stays authoritative. A target that holds writes past the copy
    (``copied_ends``: someone switched producers before refusing the switch) is never deleted."""
    released, acl_error = False, None
    if denied_writes(ctx.audit.summary()["notes"]) is not None:  # only what a quiesce created is removed
        try:
            released = release_writes(ctx, plan.source_topic, policy)
        except KafkaOpsError as err:  # said in the record, and the step fails after it
            acl_error = err
    new_writes = 0
    if copied_ends is not None:
        ends = source_ends(ctx, plan.target_topic)
        copied = offsets_of(copied_ends)
        new_writes = sum(max(0, e - copied.get(p, e)) for p, e in ends.items())
    deleted = False
    if policy.delete_target_on_abandon and not new_writes:
        with ctx.connect() as conn:
            ctx.fence(f"delete the abandoned target {plan.target_topic}")
            topics.delete_topics(conn, [plan.target_topic, plan.dead_letter_topic])
        deleted = True
    what = ("deleted" if deleted else
            f"kept: it holds {new_writes:,} offset(s) written after the copy (producers were switched), so those "
            "records exist only there; move them back before deleting it" if new_writes else
            f"kept, not authoritative (delete it with kafka-topics --delete --topic {plan.target_topic} once inspected)")
    acl = ("" if acl_error is None else
           f" The DENY Write ACL on {plan.source_topic} could NOT be removed ({acl_error}): remove it with "
           f"{acl_removal_command(plan.source_topic, policy.principals)}, producers cannot write until then.")
    state.append_note(ctx.audit, AbandonedNote(
        f"live migration abandoned: {reason}. {plan.source_topic} stays authoritative; target {plan.target_topic} "
        f"{what}; producers and consumers stay on (or go back to) {plan.source_topic}.{acl}", deleted, released,
        new_writes))
    if acl_error is not None:
        raise acl_error
    return Abandonment(reason, deleted, new_writes)
