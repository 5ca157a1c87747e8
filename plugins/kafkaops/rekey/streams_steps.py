"""The steps of a Kafka Streams application's migration to a new partition count (:mod:`kafkaops.rekey.streams`
decides, these read and change the cluster): find the application, plan, and the cut.

The cut (:func:`cut`) runs once the operator has stopped the application: it waits for the application's
group to have no member (refusing, naming them, at the deadline), refuses while a repartition topic is not
read to its end, snapshots the inputs and changelogs, creates the targets (each with its source's configs and
replication factor), copies each with the rekey backfill (exactly once, per-key order, gated), refuses a copy
that dead-lettered a record (state would be lost), and commits the inputs' translated offsets for the new
application's group. Nothing of the old application is changed.

A live migration (``quiesce`` manual or acl) keeps the application and its producers running while the long
part is done: :func:`copy_running` copies and gates every input and changelog from the application as it runs,
:func:`follow` tails every copy until all of them together lag at most ``catch_up_lag_records``, and
:func:`live_cut` quiesces the inputs (the operator stops their producers, or DENY Write ACLs), tails on while
the application reads to the end and is stopped, copies the last part of each topic, gates each whole copy,
commits the new application's offsets and asks for the switch: the application is down for the last parts,
the gates and the offsets, seconds. :func:`confirm` observes the switch (writes to the new inputs, none to the
old ones, the new application's group has members) and :func:`abandon` rolls back before it.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from typing import Any

from kafkaops.model import Cluster
from kafkaops.errors import KafkaOpsError
from kafkaops.platform import lifecycle, own, render, spark, state
from kafkaops.platform.kafka import acls, configs, metadata, offsets, records, topics
from kafkaops.rekey import backfill, migration, steps, streams, tail
from kafkaops.rekey.backfill import BackfillPlan
from kafkaops.rekey.migration import LivePolicy, MigrationAbandoned, Quiesce
from kafkaops.rekey.records import (AbandonedNote, Abandonment, Action, ActionNote, CatchUpDone, PassResult,
                                    Quiesced, QuiescedNote, StreamsBackfill, StreamsCatchUp, StreamsCutNote,
                                    SwitchObserved, SwitchObservedNote, SwitchesObserved)
from kafkaops.rekey.streams import (ChangelogSample, CopyDone, LiveCut, OffsetsMoved, StoreKind, StreamsApplication,
                                    StreamsCut, StreamsError, StreamsPlan)

log = logging.getLogger(__name__)

#: Changelog records read per partition to tell a store's kind (the latest ones).
SAMPLE_PER_PARTITION = 64


def discover(ctx: lifecycle.OperationContext, application_id: str, *,
             kinds: Mapping[str, StoreKind] | None = None, others: Sequence[str] = ()) -> StreamsApplication:
    """The application as the cluster shows it now (:func:`kafkaops.rekey.streams.read_application`): its
    group, inputs, repartition topics, and each changelog's configs and a sample of its latest records.
    ``others``: longer application ids whose internal topics are theirs (the id it is migrated to)."""
    with ctx.connect() as conn:
        snap = metadata.snapshot(conn, sizes=False)
        theirs = tuple(o + "-" for o in (*others, *(g.group_id for g in snap.groups))
                       if o.startswith(application_id + "-"))
        changelogs = [t for t in snap.topics if t.startswith(application_id + "-") and t.endswith("-changelog")
                      and not t.startswith(theirs)]
        described = configs.describe_configs(conn, "topic", changelogs) if changelogs else {}
    samples: dict[str, list[ChangelogSample]] = {}
    for topic in changelogs:
        ranges = {p.partition: (p.start_offset or 0, p.end_offset or 0) for p in snap.partitions_of(topic)}
        samples[topic] = [ChangelogSample(r.partition, r.key, tuple(k for k, _ in r.headers), r.header("v"))
                          for r in records.sample(ctx.conn_config, topic, ranges, SAMPLE_PER_PARTITION)]
    return streams.read_application(application_id, snap, {t: dict(c) for t, c in described.items()}, samples,
                                    kinds=kinds, others=others)


def plan(ctx: lifecycle.OperationContext, application_id: str, *, new_application_id: str, new_partitions: int,
         kinds: Mapping[str, StoreKind] | None = None, targets: Mapping[str, str] | None = None) -> StreamsPlan:
    """The migration's plan from the cluster as it is now; nothing changes."""
    app = discover(ctx, application_id, kinds=kinds, others=[new_application_id])
    with ctx.connect() as conn:
        existing = metadata.topic_names(conn)
    made = streams.plan_migration(app, new_application_id=new_application_id, new_partitions=new_partitions,
                                  targets=targets, existing=existing)
    log.info("Streams application %s: %d input(s), %d store(s), %d repartition topic(s): %d -> %d partitions",
             application_id, len(made.inputs), len(made.stores), len(made.repartitions), made.old_partitions,
             made.new_partitions)
    return made


def make_plan(ctx: lifecycle.OperationContext, before: Mapping[str, Any]) -> dict[str, Any]:
    """The partition increase's plan step for a Kafka Streams application (``streams_application_id``): the
    application found and planned (:func:`plan`), as a :class:`kafkaops.rekey.steps.PartitionPlan` of the
    ``topic`` input carrying the whole :class:`StreamsPlan`; the approval shows the application's plan."""
    p: steps.PartitionParams = ctx.params  # type: ignore[assignment]
    cluster = Cluster.from_dict(before)
    current = len(cluster.partitions_of(p.topic))
    count, why = steps.new_partition_count_for(ctx.store, cluster.cluster_id, p.topic, current, p.new_partition_count)
    if why:
        ctx.audit.append("note", text=f"new_partition_count {count}: {why}")
    made = plan(ctx, p.streams_application_id, new_application_id=p.new_application_id(count), new_partitions=count,
                kinds=p.store_kinds, targets={p.topic: p.target_topic} if p.target_topic else None)
    mine = next((m for m in made.inputs if m.source == p.topic), None)
    if mine is None:
        raise StreamsError(f"topic {p.topic} is not an input of Kafka Streams application {made.application_id} "
                           f"(its inputs: {', '.join(m.source for m in made.inputs)}); name one of them. Nothing "
                           "was changed")
    rf = max(x.replication_factor for x in cluster.partitions_of(p.topic))
    ranges = {x.partition: (x.start_offset or 0, x.end_offset or 0) for x in cluster.partitions_of(p.topic)}
    bf = BackfillPlan(p.topic, tuple((k, s, e) for k, (s, e) in sorted(ranges.items())), mine.target, count)
    partition_plan = steps.PartitionPlan(steps.Mode.MIGRATE, p.topic, current, count, rf, backfill=bf.to_dict(),
                                         streams=made.to_dict())
    summary = (f"migrate Kafka Streams application {made.application_id} to {count} partitions as "
               f"{made.new_application_id}: {len(made.inputs)} input(s), {len(made.stores)} store(s), "
               f"{len(made.repartitions)} repartition topic(s) drained")
    data: dict[str, Any] = {"plan": partition_plan.to_dict(), "summary": summary,
                            "approval": made.markdown(p.policy.quiesce.value if p.policy.live else None)}
    ctx.audit.append("plan", **data)
    log.info("plan: %s", summary)
    return data


def wait_stopped(ctx: lifecycle.OperationContext, group_id: str, *, timeout_s: float,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> float:
    """Wait until consumer group ``group_id`` has no member; the seconds waited. At ``timeout_s`` refuses,
    naming the members still there."""
    began = clock()
    while True:
        with ctx.connect() as conn:
            state, members = offsets.group_members(conn, group_id)
        if not members:
            return clock() - began
        if clock() - began > timeout_s:
            raise StreamsError(f"the Kafka Streams application {group_id} still has {len(members)} member(s) "
                               f"{timeout_s:.0f} s into the cut (group state {state}): {', '.join(members[:10])}. "
                               "Stop every instance of the application, then run the cut again; nothing was changed")
        log.info("waiting for group %s to stop: %d member(s) left (%s)", group_id, len(members), state)
        sleep(1.0)


def cut(ctx: lifecycle.OperationContext, made: StreamsPlan, *, launcher: spark.Launcher, stop_timeout_s: float = 300.0,
        copy_timeout_s: float = 3600.0, replication_factor: int | None = None) -> StreamsCut:
    """The cut of ``made`` (the module's docstring): the application stopped and drained, every input and
    changelog copied and gated, the inputs' offsets committed for the new application."""
    waited = wait_stopped(ctx, made.application_id, timeout_s=stop_timeout_s)
    log.info("group %s has no member (waited %.1f s)", made.application_id, waited)
    now = _as_stopped(ctx, made, live=False)
    plans = _create_targets(ctx, made, replication_factor)
    done = _copy_all(ctx, plans, launcher=launcher, timeout_s=copy_timeout_s)[0]
    moved = tuple(_commit_offsets(ctx, made, bf, now) for bf in plans[:len(made.inputs)])
    result = StreamsCut(made, now.repartitions, tuple(done), moved)
    state.append_note(ctx.audit, StreamsCutNote(
        f"Kafka Streams application {made.application_id} cut over to {made.new_application_id}: {len(done)} "
        f"topic(s) copied, offsets committed for {len(moved)} input(s); {made.start_text()}", result))
    return result


def _as_planned(ctx: lifecycle.OperationContext, made: StreamsPlan) -> StreamsApplication:
    """The application as the cluster shows it now, refused unless it is still what was planned
    (:func:`_require_same`); the new application's topics are not read as its own."""
    now = discover(ctx, made.application_id, kinds={m.store.name: m.store.kind for m in made.stores},
                   others=[made.new_application_id])
    _require_same(made, now)
    return now


def _as_stopped(ctx: lifecycle.OperationContext, made: StreamsPlan, *, live: bool) -> StreamsApplication:
    """The application as it stopped: still what was planned (:func:`_as_planned`), its repartition topics
    read to their end. Else refused (a live migration: abandoned), nothing switched."""
    now = _as_planned(ctx, made)
    left = streams.undrained(now.repartitions)
    if left:
        unread = ("the application stopped before reading its repartition topic(s) to the end: "
                  + ", ".join(f"{r.name} ({r.lag:,} record(s) unread)" for r in left))
        if live:
            raise MigrationAbandoned(f"{unread}. The migration is abandoned and nothing was switched: start the "
                                     "application again and trigger the migration once it can read them to the end")
        raise StreamsError(f"{unread}. Records in flight there would be lost: start the application again until they "
                           "are read, stop it, and run the cut again; nothing was changed")
    return now


def _require_same(made: StreamsPlan, now: StreamsApplication) -> None:
    """The application at the cut is the one planned: the same inputs and stores of the same counts."""
    planned = ({m.source for m in made.inputs}, {m.store.changelog for m in made.stores}, made.old_partitions)
    found = ({i.name for i in now.inputs}, {s.changelog for s in now.stores}, now.partitions)
    if planned != found:
        raise StreamsError(f"the application {made.application_id} changed since the plan: planned inputs, "
                           f"changelogs and count {planned}, found {found}; plan again. Nothing was changed")


def _create_targets(ctx: lifecycle.OperationContext, made: StreamsPlan, replication_factor: int | None
                    ) -> tuple[BackfillPlan, ...]:
    """Each copy's backfill over its source as it ends now, its target and dead-letter topic created (the
    source's configs and replication factor)."""
    with ctx.connect() as conn:
        snap = metadata.snapshot(conn, topics=[s for s, _, _ in made.copies()], sizes=False, groups=False)
        source_configs = configs.describe_configs(conn, "topic", [m.source for m in made.inputs])
    ranges = {t: {p.partition: (p.start_offset or 0, p.end_offset or 0) for p in snap.partitions_of(t)}
              for t, _, _ in made.copies()}
    rf = {t: replication_factor or snap.partitions_of(t)[0].replication_factor for t, _, _ in made.copies()}
    wanted = {**{m.source: dict(source_configs.get(m.source) or {}) for m in made.inputs},
              **{m.store.changelog: dict(m.store.configs) for m in made.stores}}
    plans = made.backfills(ranges)
    for bf in plans:
        with ctx.connect() as conn:
            ctx.fence(f"create the target topic {bf.target_topic}")
            topics.create_topic(conn, bf.target_topic, bf.target_partitions, rf[bf.source_topic],
                                wanted[bf.source_topic])
            topics.create_topic(conn, bf.dead_letter_topic, 1, rf[bf.source_topic])
    return plans


def _copy_all(ctx: lifecycle.OperationContext, plans: Sequence[BackfillPlan], *, launcher: spark.Launcher,
              timeout_s: float) -> tuple[tuple[CopyDone, ...], tuple[PassResult, ...]]:
    """Every copy by the rekey backfill in one Spark application (:func:`kafkaops.rekey.steps.run_backfills`),
    each then gated; refuses when any dead-lettered a record (its state would be lost to the new application)."""
    log.info("%d copies in one Spark application: %s", len(plans),
             "; ".join(f"{bf.source_topic} -> {bf.target_topic} by {bf.key_rule}, {bf.records:,} offsets"
                       for bf in plans))
    passes = steps.run_backfills(ctx, plans, launcher=launcher, timeout_s=timeout_s, name="streams-copies")
    done = tuple(_gated(ctx, bf, result, time.monotonic() - ((result.run.seconds or 0.0) if result.run else 0.0))
                 for bf, result in zip(plans, passes, strict=True))
    lost = [c for c in done if c.dead_letters]
    if lost:
        raise StreamsError("the copy dead-lettered record(s), whose state the new application would not have: "
                           + ", ".join(f"{c.source} -> {c.target}: {c.dead_letters}" for c in lost)
                           + ". The new application's topics stay for a look; the old application is unchanged")
    return done, passes


def _subject(bf: BackfillPlan, what: str) -> str:
    """A copy's gate as the record names it."""
    return f"{bf.source_topic} -> {bf.target_topic} ({what})"


def _gated(ctx: lifecycle.OperationContext, bf: BackfillPlan, result: PassResult, began: float, *,
           docs_after: bool = False, what: str = "copy") -> CopyDone:
    verdict = steps.backfill_gate(ctx, result, docs_after=docs_after, subject=_subject(bf, what))
    totals = verdict.totals
    return CopyDone(bf.source_topic, bf.target_topic, bf.key_rule, int(totals["source_records"]),
                    int(totals["target_records"]), int(totals["dead_letters"]), verdict.result.ok,
                    time.monotonic() - began)


def _commit_offsets(ctx: lifecycle.OperationContext, made: StreamsPlan, bf: BackfillPlan,
                    now: StreamsApplication, *, source_ends: Mapping[int, int] | None = None) -> OffsetsMoved:
    """The old group's committed offsets on ``bf``'s source, translated through the target's lineage and
    committed for the new application's group. A group that read the source to ``source_ends`` (a live
    cut's quiesced ends: the copy holds the source up to them) resumes at the target's end offsets, with no
    lineage to read, so the cut's time does not grow with the topic."""
    committed = dict(next(i.committed for i in now.inputs if i.name == bf.source_topic))
    ends = records.end_offsets(ctx.conn_config, bf.target_topic)
    if source_ends is not None and all(committed.get(p, -1) >= e for p, e in source_ends.items()):
        table = {p: {"offset": e, "redelivered": 0} for p, (_, e) in sorted(ends.items())}
    else:
        lineage: dict[int, list[tuple[int, str]]] = {p: [] for p in ends}
        for r in records.read_ranges(ctx.conn_config, bf.target_topic, ends):
            value = r.last_header(backfill.LINEAGE_HEADER)
            lineage[r.partition].append((r.offset, value.decode() if value else "?/-1/-1"))
        table = backfill.translate_offsets(bf.source_topic, committed, lineage, {p: e for p, (_, e) in ends.items()})
    translated = {p: v["offset"] for p, v in table.items()}
    with ctx.connect() as conn:
        ctx.fence(f"commit offsets for group {made.new_application_id} on {bf.target_topic}")
        offsets.commit_group_offsets(conn, made.new_application_id, bf.target_topic, translated)
    return OffsetsMoved(bf.source_topic, bf.target_topic, tuple(sorted(committed.items())),
                        tuple(sorted(translated.items())), sum(v["redelivered"] for v in table.values()))


# -- the live migration of an application ---------------------------------------------------------------------

def copy_running(ctx: lifecycle.OperationContext, made: StreamsPlan, *, launcher: spark.Launcher,
                 copy_timeout_s: float = 3600.0, replication_factor: int | None = None) -> StreamsBackfill:
    """Live, while the application and its producers run: the application is still what was planned, each
    target is created and each input and changelog copied by the rekey backfill up to its end now, and gated.
    The tail (:func:`follow`) goes on from each copy's end."""
    _as_planned(ctx, made)
    plans = _create_targets(ctx, made, replication_factor)
    done, passes = _copy_all(ctx, plans, launcher=launcher, timeout_s=copy_timeout_s)
    ctx.audit.append("note", text=f"Kafka Streams application {made.application_id}: {len(done)} topic(s) copied "
                                  f"and gated while it runs ({sum(c.source_records for c in done):,} record(s)); the "
                                  "tail copies follow each of them")
    return StreamsBackfill(done, passes)


def _tails(stack: ExitStack, ctx: lifecycle.OperationContext, plans: Sequence[BackfillPlan],
           reports: Sequence[tail.TailReport | None] | None = None) -> list[migration.Tail]:
    """A tail copy per copy, each closed by ``stack``."""
    return [stack.enter_context(migration.Tail(ctx, bf, report))
            for bf, report in zip(plans, reports or [None] * len(plans), strict=True)]


def _copy_parts(tails: Sequence[migration.Tail], ends: Sequence[Mapping[int, int]]) -> int:
    """One part of each tail, up to its ``ends``; the records copied."""
    return sum(t.part(e) for t, e in zip(tails, ends, strict=True))


def follow(ctx: lifecycle.OperationContext, backfilled: StreamsBackfill, policy: LivePolicy, *,
           clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep
           ) -> StreamsCatchUp:
    """The catch-up of every copy by its tail, part after part of each in turn, while the application and
    its producers run, until all of them together lag at most ``catch_up_lag_records``. Past
    ``catch_up_budget_s`` the migration is abandoned (nothing was quiesced; the old application runs on).
    Logs the lag, the rate and the ETA every :data:`kafkaops.rekey.migration.TAIL_REPORT_S`."""
    plans = backfilled.plans()
    began = reported = clock()
    with ExitStack() as stack:
        tails = _tails(stack, ctx, plans)
        first_lag: int | None = None
        copied = 0
        while True:
            ends = [t.source_ends() for t in tails]
            lag = sum(t.lag(e) for t, e in zip(tails, ends, strict=True))
            first_lag = lag if first_lag is None else first_lag
            now = clock()
            if lag <= policy.catch_up_lag_records:
                break
            if now - began >= policy.catch_up_budget_s:
                raise MigrationAbandoned(
                    f"the tail copies of {', '.join(bf.source_topic for bf in plans)} did not come "
                    f"within {policy.catch_up_lag_records:,} record(s) of them in the catch-up budget of "
                    f"{policy.catch_up_budget_s:.0f} s: {lag:,} record(s) behind after copying {copied:,}. Nothing "
                    "was quiesced and the application runs on; raise catch_up_budget_s or catch_up_lag_records")
            if now - reported >= migration.TAIL_REPORT_S:
                rate = copied / max(now - began, 1e-9)
                eta = render.duration(lag / rate) if rate > 0 else "unknown"
                done_pct = 100.0 * copied / max(copied + lag, 1)
                log.info("catch-up: %d tail(s), %.0f%% copied, lag %d record(s), %.0f records/s, ETA %s",
                         len(tails), done_pct, lag, rate, eta)
                reported = now
            n = _copy_parts(tails, ends)
            copied += n
            if not n:
                sleep(migration.TAIL_IDLE_S)
        reports = tuple(t.report for t in tails)
    seconds = clock() - began
    state.append_note(ctx.audit, CatchUpDone(
        f"catch-up done: {len(reports)} tail copies ({copied:,} record(s) in {seconds:.1f} s) lag {lag:,} record(s) "
        f"together, at or below the threshold of {policy.catch_up_lag_records:,} (lag was {first_lag or 0:,})",
        lag, 1))
    return StreamsCatchUp(reports, lag, seconds)


def _deny_input_writes(ctx: lifecycle.OperationContext, inputs: Sequence[str], policy: LivePolicy) -> None:
    """quiesce=acl: a DENY Write ACL on each input for each principal, each said in the record (what a
    rollback or the finish removes); a failure removes what this call may have created, then raises."""
    done: list[str] = []
    with ctx.connect() as conn:
        for topic in inputs:
            ctx.fence(f"deny writes to {topic}")
            try:
                acls.deny_writes(conn, topic, policy.principals)
            except KafkaOpsError:
                for undo in [*done, topic]:
                    acls.allow_writes(conn, undo, policy.principals)
                raise
            done.append(topic)
            state.append_note(ctx.audit, ActionNote(
                f"writes to {topic} denied to {', '.join(policy.principals)} (ACL DENY Write); the write window begins",
                Action.WRITES_DENIED, topic=topic, acl=policy.principals))


def live_cut(ctx: lifecycle.OperationContext, made: StreamsPlan, backfilled: StreamsBackfill,
             caught: StreamsCatchUp, policy: LivePolicy, *, clock: Callable[[], float] = time.monotonic,
             sleep: Callable[[float], None] = time.sleep) -> StreamsCut:
    """The live cut of ``made``, in one process (no scheduler hop inside it):

    1. each tail copies what it lags (its consumers connected before anything is asked);
    2. the inputs are quiesced (acl: DENY Write ACLs; manual: the record asks for their producers to be
       stopped) and the record asks for the application to read to the end and be stopped;
    3. the tails copy on until the inputs stayed still for the quiet period, every copy reached its source's
       end and the application's group has no member (by ``quiesce_timeout_s``, else abandoned, naming the
       members or the inputs' new records);
    4. the last part of each copy, to its source's end once the application is gone; an input written past
       its quiesced end abandons the migration;
    5. the application is still what was planned, its repartition topics read to their end;
    6. each whole copy gated (the backfill's check and every tail part's), verdicts only;
    7. the inputs' offsets committed for the new application, and the switch asked for in the record.

    The gates' Data Docs are built after the switch is asked for."""
    p_inputs = [m.source for m in made.inputs]
    plans = backfilled.plans()
    inputs = plans[:len(made.inputs)]
    with ExitStack() as stack:
        tails = _tails(stack, ctx, plans, caught.tails)
        before = sum(t.report.source_records for t in tails)
        _copy_parts(tails, [t.source_ends() for t in tails])
        asked_at = lifecycle.now()
        if policy.quiesce == Quiesce.ACL:
            _deny_input_writes(ctx, p_inputs, policy)
        stop = ("" if policy.quiesce == Quiesce.ACL else
                f"Stop every producer writing to {', '.join(p_inputs)} now; the write window begins. ")
        state.append_note(ctx.audit, ActionNote(
            f"{stop}Let the Kafka Streams application {made.application_id} read its inputs and repartition "
            f"topics to their end, then stop every instance of it: it restarts as {made.new_application_id} on "
            f"{', '.join(m.target for m in made.inputs)}, where kafkaops commits its offsets. Waiting up to "
            f"{policy.quiesce_timeout_s:.0f} s for the inputs to stay still for "
            f"{migration.quiet_period(policy):g} s and the application's group to be empty.",
            Action.STOP_PRODUCERS, topic=p_inputs[0], target_topic=made.inputs[0].target,
            deadline=asked_at + policy.quiesce_timeout_s))
        still, began = migration.Stillness(migration.quiet_period(policy)), clock()
        members: tuple[str, ...] = ()
        first_ends: list[dict[int, int]] | None = None
        while True:
            ends = [t.source_ends() for t in tails]
            first_ends = first_ends or [dict(e) for e in ends[:len(inputs)]]
            quiet = still.see(clock(), {i: o for i, o in enumerate(o for e in ends[:len(inputs)]
                                                                    for _, o in sorted(e.items()))})
            if quiet and all(t.position == e for t, e in zip(tails, ends, strict=True)):
                with ctx.connect() as conn:
                    _, members = offsets.group_members(conn, made.application_id)
                if not members:
                    break
            if clock() - began > policy.quiesce_timeout_s:
                moving = [migration.stray_writes(ctx, bf.source_topic, Quiesced(policy.quiesce.value, asked_at, None, e0),
                                                 policy, e, since="since the quiesce was asked for")
                          for bf, e0, e in zip(inputs, first_ends, ends, strict=False)]
                why = "; ".join(m for m in moving if m) if not quiet else (
                    f"the application's group {made.application_id} still has {len(members)} member(s): "
                    f"{', '.join(members[:10])}" if members else "the tail copies did not reach their sources' end")
                raise MigrationAbandoned(
                    f"{policy.quiesce_timeout_s:.0f} s after the quiesce was asked for: {why}. The migration is "
                    f"abandoned: the old application and its topics stay authoritative and nothing was switched; "
                    "start the application again, and trigger the migration once its producers and instances can "
                    "be stopped")
            if not _copy_parts(tails, ends):
                sleep(migration.TAIL_IDLE_S)
        stopped_at = lifecycle.now()
        quiesced_ends = [dict(e) for e in ends[:len(inputs)]]
        state.append_note(ctx.audit, QuiescedNote(
            f"inputs quiesced ({policy.quiesce}) and application {made.application_id} stopped "
            f"{stopped_at - asked_at:.1f} s after asking; the tail copies went on meanwhile",
            Quiesced(policy.quiesce.value, asked_at, stopped_at, quiesced_ends[0] if quiesced_ends else {})))
        # the application is gone: what it wrote before leaving its group is copied now, to its sources' end
        last_ends = [t.source_ends() for t in tails]
        for bf, q, e in zip(inputs, quiesced_ends, last_ends, strict=False):
            found = migration.stray_writes(ctx, bf.source_topic, Quiesced(policy.quiesce.value, asked_at, stopped_at, q),
                                           policy, e)
            if found:
                raise MigrationAbandoned(f"{found}. Those records are not in {bf.target_topic}, so the switch is not "
                                         f"asked: the migration is abandoned and the old application stays "
                                         "authoritative. Stop that producer, then run the migration again")
        last = 0
        for t, e in zip(tails, last_ends, strict=True):
            while t.position != e:
                last += t.part(e)
        reports = [t.report for t in tails]
    now = _as_stopped(ctx, made, live=True)
    wholes = [tail.whole_copy(backfill.IntegrityReport.from_dict(passed.integrity or {}), report)
              for passed, report in zip(backfilled.passes, reports, strict=True)]
    # each copy's time: its backfill (made while the application ran) and this gate of the whole copy
    copies = tuple(_gated(ctx, bf, PassResult(passed.run, whole.to_dict()), clock() - first.seconds,
                          docs_after=True, what="whole copy: backfill and tail")
                   for bf, passed, whole, first in zip(plans, backfilled.passes, wholes, backfilled.copies,
                                                       strict=True))
    moved = tuple(_commit_offsets(ctx, made, bf, now, source_ends=q) for bf, q in zip(inputs, quiesced_ends,
                                                                                      strict=True))
    target_ends = {bf.target_topic: migration.source_ends(ctx, bf.target_topic) for bf in inputs}
    ready_at = lifecycle.now()
    live = LiveCut(policy.quiesce.value, asked_at, stopped_at, ready_at,
                   {bf.source_topic: q for bf, q in zip(inputs, quiesced_ends, strict=True)}, target_ends,
                   sum(r.source_records for r in reports), last)
    result = StreamsCut(made, now.repartitions, copies, moved, live)
    state.append_note(ctx.audit, ActionNote(result.switch_text(), Action.SWITCH, topic=p_inputs[0],
                                            target_topic=made.inputs[0].target))
    state.append_note(ctx.audit, StreamsCutNote(
        f"Kafka Streams application {made.application_id} cut over live to {made.new_application_id}: "
        f"{len(copies)} topic(s) copied ({sum(r.source_records for r in reports) - before:,} record(s) by the tails "
        f"in this step, {last:,} after the application stopped), offsets committed for {len(moved)} input(s); the "
        f"application was stopped {live.stopped_s:.1f} s before its switch was asked for", result))
    for bf, whole in zip(plans, wholes, strict=True):  # outside the window now: the Data Docs of each gate
        lifecycle.publish_docs(ctx, "backfill", steps.integrity_frames(whole),
                               subject=_subject(bf, "whole copy: backfill and tail"))
    return result


def confirm(ctx: lifecycle.OperationContext, cut: StreamsCut, policy: LivePolicy, *,
            clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep
            ) -> SwitchesObserved:
    """Observe the switch of a live cut: writes reach the new inputs past the copy, none reach the old inputs
    past their quiesced ends, and the new application's group has members, also for ``quiet_s`` after the
    first new write (a producer left behind shows up there). An input nothing was written to since (a
    table's topic, say) is not waited for. Records each written input's write-unavailable window."""
    live = cut.live
    if live is None:
        raise KafkaOpsError("the Kafka Streams cut was not live: there is no switch to confirm")
    moves = cut.plan.inputs
    began, first_seen, seen_at = clock(), None, live.ready_at
    members: tuple[str, ...] = ()
    while True:
        for m in moves:
            found = migration.stray_writes(ctx, m.source, Quiesced(live.how, live.asked_at, live.stopped_at,
                                                                   live.source_ends[m.source]), policy)
            if found:
                raise KafkaOpsError(f"{found}, and those records are not in {m.target}. Stop it, then copy them: "
                                    f"kafka_partition_increase cannot merge them into {m.target} in key order once "
                                    "producers write there; see docs/streams-applications.md")
        arrived = {m.target: sorted(p for p, e in migration.source_ends(ctx, m.target).items()
                                    if e > live.target_ends[m.target].get(p, 0)) for m in moves}
        with ctx.connect() as conn:
            _, members = offsets.group_members(conn, cut.plan.new_application_id)
        if any(arrived.values()) and members and first_seen is None:
            first_seen, seen_at = clock(), lifecycle.now()
        if first_seen is not None and clock() - first_seen >= policy.quiet_s:
            break
        if first_seen is None and clock() - began > policy.switch_timeout_s:
            missing = [what for what, ok in (("no write reached " + ", ".join(m.target for m in moves),
                                              any(arrived.values())),
                                             (f"application {cut.plan.new_application_id} has no running instance",
                                              bool(members))) if not ok]
            raise KafkaOpsError(f"{policy.switch_timeout_s:.0f} s after the switch: {'; '.join(missing)}. Start the "
                                f"producers on the new inputs and {cut.plan.start_text()}")
        sleep(1.0)
    observed = []
    for m in moves:
        if not arrived[m.target]:
            continue
        copied = live.target_ends[m.target]
        now_target = migration.source_ends(ctx, m.target)
        first_new = min((r.timestamp for r in records.read_ranges(
            ctx.conn_config, m.target, {p: (copied.get(p, 0), min(e, copied.get(p, 0) + migration.TAIL))
                                        for p, e in now_target.items() if e > copied.get(p, 0)})), default=None)
        last_old = migration.last_timestamp(ctx, m.source, live.source_ends[m.source])
        # by the clock: a Streams input's record timestamps are often event times, not when it was written
        window = max(0.0, seen_at - live.asked_at)
        seen = SwitchObserved(window, last_old, first_new, tuple(arrived[m.target]), migration.OBSERVED_BEGAN)
        said = (f"switch observed: writes reach {m.target}, none reach {m.source}; application "
                f"{cut.plan.new_application_id} runs with {len(members)} member(s); write-unavailable window "
                f"{window:.1f} s at most, from {migration.OBSERVED_BEGAN}")
        state.append_note(ctx.audit, SwitchObservedNote(said, seen))
        observed.append(seen)
    return SwitchesObserved(tuple(observed))


def release_input_writes(ctx: lifecycle.OperationContext, made: StreamsPlan, policy: LivePolicy) -> bool:
    """Remove the quiesce's DENY Write ACLs on every input (idempotent); True when there were any."""
    return any([migration.release_writes(ctx, m.source, policy) for m in made.inputs])


def abandon(ctx: lifecycle.OperationContext, made: StreamsPlan, policy: LivePolicy, reason: str, *,
            cut: StreamsCut | None = None) -> Abandonment:
    """Roll a live Streams migration back before the switch: writes to the inputs allowed again, the copies
    (every target and dead-letter topic, and the new application's committed offsets) deleted with
    ``delete_target_on_abandon``, else kept and named. A new input that holds writes past the copy
    (someone switched before refusing the switch) keeps every copy. The old application stays authoritative:
    start it again."""
    released, acl_error = False, None
    if migration.outstanding_denials(ctx.audit.summary()["notes"]):  # only what the quiesce created is removed
        try:
            released = release_input_writes(ctx, made, policy)
        except KafkaOpsError as err:
            acl_error = err
    new_writes = 0
    if cut is not None and cut.live is not None:
        for m in made.inputs:
            copied = cut.live.target_ends[m.target]
            new_writes += sum(max(0, e - copied.get(p, e)) for p, e in migration.source_ends(ctx, m.target).items())
    made_topics = [t for _, target, _ in made.copies() for t in (target, own.dead_letter_topic(target))]
    deleted = False
    if policy.delete_target_on_abandon and not new_writes:
        with ctx.connect() as conn:
            present = [t for t in made_topics if t in set(metadata.topic_names(conn))]
            ctx.fence(f"delete the abandoned copies of application {made.application_id}")
            if present:
                topics.delete_topics(conn, present)
            if offsets.group_members(conn, made.new_application_id)[0] != "DEAD":
                offsets.delete_consumer_group(conn, made.new_application_id)
        deleted = True
    what = ("deleted" if deleted else
            f"kept: the new inputs hold {new_writes:,} offset(s) written after the copy (producers were switched), so "
            "those records exist only there; move them back before deleting them" if new_writes else
            "kept, not authoritative (delete them once inspected): " + ", ".join(made_topics))
    acl = ("" if acl_error is None else
           f" The DENY Write ACLs on the inputs could NOT be removed ({acl_error}): remove them with "
           + "; ".join(migration.acl_removal_command(m.source, policy.principals) for m in made.inputs)
           + ", producers cannot write until then.")
    state.append_note(ctx.audit, AbandonedNote(
        f"live migration of Kafka Streams application {made.application_id} abandoned: {reason}. The old "
        f"application and its topics stay authoritative: start it again with application.id={made.application_id}; "
        f"the new application's topics {what}.{acl}", deleted, released, new_writes))
    if acl_error is not None:
        raise acl_error
    return Abandonment(reason, deleted, new_writes)
