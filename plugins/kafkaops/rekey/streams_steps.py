"""The steps of a Kafka Streams application's migration to a new partition count (:mod:`kafkaops.rekey.streams`
decides, these read and change the cluster): find the application, plan, and the cut.

The cut (:func:`cut`) runs once the operator has stopped the application: it waits for the application's
group to have no member (refusing, naming them, at the deadline), refuses while a repartition topic is not
read to its end, snapshots the inputs and changelogs, creates the targets (each with its source's configs and
replication factor), copies each with the rekey backfill (exactly once, per-key order, gated), refuses a copy
that dead-lettered a record (state would be lost), and commits the inputs' translated offsets for the new
application's group. Nothing of the old application is changed.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from kafkaops.model import Cluster
from kafkaops.platform import lifecycle, spark, state
from kafkaops.platform.kafka import configs, metadata, offsets, records, topics
from kafkaops.rekey import backfill, steps, streams
from kafkaops.rekey.backfill import BackfillPlan
from kafkaops.rekey.records import StreamsCutNote
from kafkaops.rekey.streams import (ChangelogSample, CopyDone, OffsetsMoved, StoreKind, StreamsApplication,
                                    StreamsCut, StreamsError, StreamsPlan)

log = logging.getLogger(__name__)

#: Changelog records read per partition to tell a store's kind (the latest ones).
SAMPLE_PER_PARTITION = 64


def discover(ctx: lifecycle.OperationContext, application_id: str, *,
             kinds: Mapping[str, StoreKind] | None = None) -> StreamsApplication:
    """The application as the cluster shows it now (:func:`kafkaops.rekey.streams.read_application`): its
    group, inputs, repartition topics, and each changelog's configs and a sample of its latest records."""
    with ctx.connect() as conn:
        snap = metadata.snapshot(conn, sizes=False)
        changelogs = [t for t in snap.topics if t.startswith(application_id + "-") and t.endswith("-changelog")]
        described = configs.describe_configs(conn, "topic", changelogs) if changelogs else {}
    samples: dict[str, list[ChangelogSample]] = {}
    for topic in changelogs:
        ranges = {p.partition: (p.start_offset or 0, p.end_offset or 0) for p in snap.partitions_of(topic)}
        samples[topic] = [ChangelogSample(r.partition, r.key, tuple(k for k, _ in r.headers), r.header("v"))
                          for r in records.sample(ctx.conn_config, topic, ranges, SAMPLE_PER_PARTITION)]
    return streams.read_application(application_id, snap, {t: dict(c) for t, c in described.items()}, samples,
                                    kinds=kinds)


def plan(ctx: lifecycle.OperationContext, application_id: str, *, new_application_id: str, new_partitions: int,
         kinds: Mapping[str, StoreKind] | None = None, targets: Mapping[str, str] | None = None) -> StreamsPlan:
    """The migration's plan from the cluster as it is now; nothing changes."""
    app = discover(ctx, application_id, kinds=kinds)
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
    data: dict[str, Any] = {"plan": partition_plan.to_dict(), "summary": summary, "approval": made.markdown()}
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
    now = discover(ctx, made.application_id, kinds={m.store.name: m.store.kind for m in made.stores})
    _require_same(made, now)
    left = streams.undrained(now.repartitions)
    if left:
        raise StreamsError("the application stopped before reading its repartition topic(s) to the end: "
                           + ", ".join(f"{r.name} ({r.lag:,} record(s) unread)" for r in left)
                           + ". Records in flight there would be lost: start the application again until they are "
                           "read, stop it, and run the cut again; nothing was changed")
    with ctx.connect() as conn:
        snap = metadata.snapshot(conn, topics=[s for s, _, _ in made.copies()], sizes=False, groups=False)
        source_configs = configs.describe_configs(conn, "topic", [m.source for m in made.inputs])
    ranges = {t: {p.partition: (p.start_offset or 0, p.end_offset or 0) for p in snap.partitions_of(t)}
              for t, _, _ in made.copies()}
    rf = {t: replication_factor or snap.partitions_of(t)[0].replication_factor for t, _, _ in made.copies()}
    wanted = {**{m.source: dict(source_configs.get(m.source) or {}) for m in made.inputs},
              **{m.store.changelog: dict(m.store.configs) for m in made.stores}}
    plans = made.backfills(ranges)
    done = []
    for i, bf in enumerate(plans, 1):
        with ctx.connect() as conn:
            ctx.fence(f"create the target topic {bf.target_topic}")
            topics.create_topic(conn, bf.target_topic, bf.target_partitions, rf[bf.source_topic],
                                wanted[bf.source_topic])
            topics.create_topic(conn, bf.dead_letter_topic, 1, rf[bf.source_topic])
        log.info("copy %d/%d: %s -> %s by %s, %d offsets", i, len(plans), bf.source_topic, bf.target_topic,
                 bf.key_rule, bf.records)
        done.append(_copy(ctx, bf, launcher=launcher, timeout_s=copy_timeout_s, name=f"streams-copy{i}"))
    lost = [c for c in done if c.dead_letters]
    if lost:
        raise StreamsError("the copy dead-lettered record(s), whose state the new application would not have: "
                           + ", ".join(f"{c.source} -> {c.target}: {c.dead_letters}" for c in lost)
                           + ". The new application's topics stay for a look; the old application is unchanged")
    moved = tuple(_commit_offsets(ctx, made, bf, now) for bf in plans[:len(made.inputs)])
    result = StreamsCut(made, now.repartitions, tuple(done), moved)
    state.append_note(ctx.audit, StreamsCutNote(
        f"Kafka Streams application {made.application_id} cut over to {made.new_application_id}: {len(done)} "
        f"topic(s) copied, offsets committed for {len(moved)} input(s); {made.start_text()}", result))
    return result


def _require_same(made: StreamsPlan, now: StreamsApplication) -> None:
    """The application at the cut is the one planned: the same inputs and stores of the same counts."""
    planned = ({m.source for m in made.inputs}, {m.store.changelog for m in made.stores}, made.old_partitions)
    found = ({i.name for i in now.inputs}, {s.changelog for s in now.stores}, now.partitions)
    if planned != found:
        raise StreamsError(f"the application {made.application_id} changed since the plan: planned inputs, "
                           f"changelogs and count {planned}, found {found}; plan again. Nothing was changed")


def _copy(ctx: lifecycle.OperationContext, bf: BackfillPlan, *, launcher: spark.Launcher, timeout_s: float,
          name: str) -> CopyDone:
    began = time.monotonic()
    result = steps.run_backfill(ctx, bf, launcher=launcher, timeout_s=timeout_s, verify=True, name=name)
    verdict = steps.backfill_gate(ctx, result)
    totals = verdict.totals
    return CopyDone(bf.source_topic, bf.target_topic, bf.key_rule, int(totals["source_records"]),
                    int(totals["target_records"]), int(totals["dead_letters"]), verdict.result.ok,
                    time.monotonic() - began)


def _commit_offsets(ctx: lifecycle.OperationContext, made: StreamsPlan, bf: BackfillPlan,
                    now: StreamsApplication) -> OffsetsMoved:
    """The old group's committed offsets on ``bf``'s source, translated through the target's lineage and
    committed for the new application's group."""
    committed = dict(next(i.committed for i in now.inputs if i.name == bf.source_topic))
    ends = records.end_offsets(ctx.conn_config, bf.target_topic)
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
