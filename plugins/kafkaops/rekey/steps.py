"""Partition increase: grow a topic in place, or migrate it to a new topic with the new count.

    begin -> preflight gate -> plan -> approval -> execute -> verify -> cut-over -> finish

* ``in_place``: ``create_partitions`` with the new partitions placed by :func:`place_new_partitions`
  (balanced replica and leader counts, rack-aware). For a keyed topic, murmur2(key) % N changes,
  so per-key order breaks; it is refused unless ``accept_ordering_break``, and the refusal says
  how many keys of a bounded sample would change partition.
* ``migrate``: create the target (``<topic>.v2`` or the next free version) with the new count and
  the source's topic configs, plus a one-partition dead-letter topic; run the rekey backfill
  (:mod:`spark_apps.rekey_backfill`, a Spark job on the run's Spark connection); gate its integrity report with
  ``expectations/backfill.json``; cut over: record, per consumer group of the source, its
  committed offsets translated to target offsets through the lineage headers (and with
  ``cutover_group_suffix`` commit them for ``<group><suffix>``).

The plan is a value (:class:`PartitionPlan`, JSON); the step functions take the shared
:class:`kafkaops.reassign.steps.OperationContext` (with :class:`PartitionParams`) and return JSON-safe
values, appending to the run's audit record. Nothing here imports Airflow.
"""
from __future__ import annotations

import logging
import re
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from kafkaops.platform.kafka import configs, metadata, offsets, records, topics
from kafkaops.platform import keyrules, own
from kafkaops.rekey import backfill
from kafkaops.rekey import migration
from kafkaops.platform import gates, lifecycle, recommendations, render, state
from kafkaops.platform import params as form
from kafkaops.platform import spark
from kafkaops.rekey.backfill import BackfillPlan
from kafkaops.rekey.streams import StoreKind, StreamsPlan
from kafkaops.rekey.records import (AbandonedNote, CapacityAdvice, CatchUp, CopiesResult, Cutover, GateVerdict,
                                    GroupTranslation,
                                    MarkersDeletedNote, PassResult, Quiesced, RefusedNote, RunNote, TargetReady,
                                    TranslationNote)
from kafkaops.errors import ConfigError, KafkaOpsError
from kafkaops.model import Cluster
from kafkaops.platform.partitioner import partition_for

log = logging.getLogger(__name__)

KIND = "partition_increase"
class Mode(StrEnum):
    """How the topic grows: ``in_place`` (add partitions; keys move) or ``migrate`` (rekey into a new topic)."""

    IN_PLACE = "in_place"
    MIGRATE = "migrate"


# The partition increase's params, in the form's order (the live cut-over's are migration's); each one's
# default is here only.
TOPIC = form.Topic(name="topic", required=True, title="Topic", description="The topic whose partition count grows.")
NEW_PARTITION_COUNT = form.MaybeInteger(
    name="new_partition_count", minimum=1, title="New partition count",
    description="The topic's total partition count afterwards (larger than now). Empty: the count the newest "
                "capacity review of this cluster recommends for the topic when it is larger, else twice the "
                "current count.")
MAX_PARTITION_COUNT = form.Integer(
    name="max_partition_count", given=10_000, minimum=1, title="Most partitions of the topic",
    description="A bound on new_partition_count: a larger count is refused before anything is planned or created "
                "(each partition costs every broker that holds it files, memory and a fetcher). Raise it for a "
                "topic that really needs more.")
MODE = form.Choice(name="mode", given=Mode.MIGRATE, title="Mode",
                   description="in_place: add partitions to the topic (keys move: per-key order breaks). migrate: "
                               "rekey into a new topic with the new count, order kept, then cut consumers over.")
KEY_RULE = form.Text(name="key_rule", given="record_key", title="Key rule",
                     description="Where the key comes from: record_key, field:<name> (a top-level JSON field), "
                                 "jsonpath:$.a.b, or for a Kafka Streams window/session store changelog window_key/"
                                 "session_key (placed by the record key without its window suffix, written whole). "
                                 "Records without a key go to the dead-letter topic.")
TARGET_TOPIC = form.Topic(name="target_topic", title="Target topic",
                         description="migrate: the new topic; empty for <topic>.v2 or the next free version.")
ACCEPT_ORDERING_BREAK = form.Flag(
    name="accept_ordering_break", title="Accept the ordering break",
    description="in_place on a keyed topic: go ahead although records of a key end up in two steps. Refused "
                "otherwise.")
SAMPLE_RECORDS = form.Integer(name="sample_records", given=1000, minimum=1, title="Sample size",
                              description="Records read (latest, spread over the partitions) to measure how many "
                                          "keys would change partition.")
CUTOVER_GROUP_SUFFIX = form.Text(
    name="cutover_group_suffix", title="Cut-over group suffix",
    description="migrate: when set, commit each source group's translated offsets on the target for group "
                "<group><suffix>; empty: only record them.")
CUTOVER_GROUPS = form.Text(
    name="cutover_groups", title="Consumer groups to carry over",
    description="migrate: comma-separated groups to give offsets on the target besides every group with offsets "
                "on the source; one without a committed offset starts at the start of the target (said in the "
                "record).")
STREAMS_APPLICATION_ID = form.Text(
    name="streams_application_id", title="Kafka Streams application",
    description="migrate a Kafka Streams application, not only a topic: its application.id. Every input topic "
                "it reads moves to the new count together, each state store's changelog is copied to the new "
                "application's, and its input offsets are committed for the new application.id. topic names "
                "one of its inputs (target_topic is that input's new name).")
STREAMS_NEW_APPLICATION_ID = form.Text(
    name="streams_new_application_id", title="New application.id",
    description="The application.id the application restarts with on the new topics; empty for "
                "<application.id>-p<new count>. The old application's topics stay as they are for a rollback.")
STREAMS_STORE_KINDS = form.Text(
    name="streams_store_kinds", title="State store kinds",
    description="Only where kafkaops cannot tell a store's kind from its changelog (it says so): store=kind, "
                "comma-separated, kind one of key_value, window, session.")
STREAMS_STOP_TIMEOUT = form.Integer(
    name="streams_stop_timeout_s", given=900, minimum=10, title="Wait for the application to stop (s)",
    description="After the approval, how long the cut waits for every instance of the application to stop "
                "before it refuses, naming them.")
DRY_RUN = form.dry_run("Plan only (sample, target name, backfill plan): nothing is created or written.")


class OrderingBreakRefused(KafkaOpsError):
    """An in-place increase of a keyed topic without ``accept_ordering_break``."""

    final = True


@dataclass(frozen=True)
class PartitionParams:
    """What the operator asked for; validated before anything changes."""

    topic: str
    new_partition_count: int | None  # None: derived from the topic (new_partition_count_for)
    mode: Mode = MODE.default
    key_rule: str = KEY_RULE.default
    target_topic: str = TARGET_TOPIC.default
    accept_ordering_break: bool = ACCEPT_ORDERING_BREAK.default
    sample_records: int = SAMPLE_RECORDS.default
    cutover_group_suffix: str = CUTOVER_GROUP_SUFFIX.default
    approval: form.Approval = form.APPROVAL.default
    dry_run: bool = DRY_RUN.default
    quiesce: migration.Quiesce = migration.QUIESCE.default
    catch_up_lag_records: int = migration.CATCH_UP_LAG.default
    catch_up_budget_s: int = migration.CATCH_UP_BUDGET.default
    quiet_s: int = migration.QUIET.default
    quiesce_timeout_s: int = migration.QUIESCE_TIMEOUT.default
    switch_timeout_s: int = migration.SWITCH_TIMEOUT.default
    quiesce_principals: str = migration.PRINCIPALS.default
    delete_target_on_abandon: bool = migration.DELETE_TARGET.default
    cutover_groups: str = CUTOVER_GROUPS.default
    streams_application_id: str = STREAMS_APPLICATION_ID.default
    streams_new_application_id: str = STREAMS_NEW_APPLICATION_ID.default
    streams_store_kinds: str = STREAMS_STORE_KINDS.default
    streams_stop_timeout_s: int = STREAMS_STOP_TIMEOUT.default
    max_partition_count: int = MAX_PARTITION_COUNT.default
    kind: str = KIND

    def __post_init__(self) -> None:
        for name, modes in (("mode", Mode), ("approval", form.Approval), ("quiesce", migration.Quiesce)):
            object.__setattr__(self, name, form.mode_of(name, getattr(self, name), modes))  # a mode given as its string

    @property
    def named_groups(self) -> tuple[str, ...]:
        """Consumer groups the operator names for the cut-over (besides every group with offsets on the
        source): one without a committed offset there starts at the start of the target."""
        return tuple(sorted({g.strip() for g in self.cutover_groups.split(",") if g.strip()}))

    @property
    def store_kinds(self) -> dict[str, StoreKind]:
        """``streams_store_kinds`` read: store -> kind."""
        kinds = {}
        for item in (i.strip() for i in self.streams_store_kinds.split(",")):
            if not item:
                continue
            store, sep, kind = item.partition("=")
            if not sep or not store.strip():
                raise ConfigError(f"streams_store_kinds item {item!r} is not store=kind (e.g. counts=key_value)")
            kinds[store.strip()] = StoreKind.parse(kind, store.strip())
        return kinds

    def new_application_id(self, count: int) -> str:
        return self.streams_new_application_id or f"{self.streams_application_id}-p{count}"

    @property
    def policy(self) -> migration.LivePolicy:
        """The live cut-over's limits (:mod:`kafkaops.rekey.migration`); ``quiesce=none``: no cut-over."""
        return migration.LivePolicy(
            quiesce=self.quiesce, catch_up_lag_records=self.catch_up_lag_records,
            catch_up_budget_s=float(self.catch_up_budget_s), quiet_s=float(self.quiet_s),
            quiesce_timeout_s=float(self.quiesce_timeout_s), switch_timeout_s=float(self.switch_timeout_s),
            principals=tuple(p.strip() for p in self.quiesce_principals.split(",") if p.strip()),
            delete_target_on_abandon=self.delete_target_on_abandon)

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> PartitionParams:
        """The params of a run, however sent: an empty field is its default (kafkaops.platform.params)."""
        read = form.Reading(params)
        result = cls(topic=read(TOPIC), new_partition_count=read(NEW_PARTITION_COUNT), mode=read(MODE), key_rule=read(KEY_RULE), target_topic=read(TARGET_TOPIC),
                     accept_ordering_break=read(ACCEPT_ORDERING_BREAK), sample_records=read(SAMPLE_RECORDS),
                     cutover_group_suffix=read(CUTOVER_GROUP_SUFFIX), approval=read(form.APPROVAL),
                     dry_run=read(DRY_RUN), quiesce=read(migration.QUIESCE),
                     catch_up_lag_records=read(migration.CATCH_UP_LAG), catch_up_budget_s=read(migration.CATCH_UP_BUDGET),
                     quiet_s=read(migration.QUIET), quiesce_timeout_s=read(migration.QUIESCE_TIMEOUT),
                     switch_timeout_s=read(migration.SWITCH_TIMEOUT), quiesce_principals=read(migration.PRINCIPALS),
                     delete_target_on_abandon=read(migration.DELETE_TARGET), cutover_groups=read(CUTOVER_GROUPS),
                     streams_application_id=read(STREAMS_APPLICATION_ID).strip(),
                     streams_new_application_id=read(STREAMS_NEW_APPLICATION_ID).strip(),
                     streams_store_kinds=read(STREAMS_STORE_KINDS), streams_stop_timeout_s=read(STREAMS_STOP_TIMEOUT),
                     max_partition_count=read(MAX_PARTITION_COUNT))
        read(form.KAFKA_CONN_ID)  # the tasks read it; checked with the rest
        result.validate(read.problems)
        return result

    def validate(self, refused: Iterable[str] = ()) -> None:
        """Refuses the params, naming every problem: ``refused``, the values :meth:`from_params` could not read
        (they read as their defaults), then the rest."""
        problems = list(refused)
        if not self.topic and not any(p.startswith("param topic ") for p in problems):  # not the refused one again
            problems.append("topic is empty; name the topic to grow")
        if self.new_partition_count is not None and self.new_partition_count < 1:
            problems.append(f"new_partition_count is {self.new_partition_count}; give the new total count, or leave "
                            "it empty for the capacity review's count (else twice the current count)")
        if self.max_partition_count < 1:
            problems.append(f"max_partition_count is {self.max_partition_count}; give 1 or more")
        elif self.new_partition_count is not None and self.new_partition_count > self.max_partition_count:
            problems.append(f"new_partition_count is {self.new_partition_count:,}, more than max_partition_count "
                            f"({self.max_partition_count:,}), the most partitions a topic may get here; give fewer, "
                            "or raise max_partition_count if the topic really needs that many")
        if self.sample_records < 1:
            problems.append(f"sample_records is {self.sample_records}; give at least 1")
        if self.target_topic and self.target_topic == self.topic:
            problems.append(f"target_topic {self.target_topic!r} is the source topic; name a new topic")
        try:
            keyrules.KeyRule(self.key_rule)
        except keyrules.KeyRuleError as err:
            problems.append(f"param key_rule: {err}")
        problems += self.policy.problems()
        if self.policy.live and self.mode != Mode.MIGRATE:
            problems.append(f"quiesce={self.quiesce} is a live migration's cut-over; it needs mode=migrate")
        if self.streams_application_id:
            if self.mode != Mode.MIGRATE:
                problems.append("streams_application_id needs mode=migrate: in place, a Streams application's state "
                                "would sit in the wrong partitions")
            if self.key_rule != "record_key":
                problems.append(f"streams_application_id with key_rule {self.key_rule!r}: Kafka Streams places "
                                "records by their record key, so its inputs are copied by record_key")
            try:
                _ = self.store_kinds
            except ConfigError as err:
                problems.append(str(err))
        elif self.streams_new_application_id or self.streams_store_kinds:
            problems.append("streams_new_application_id and streams_store_kinds need streams_application_id")
        if problems:
            raise ConfigError("refusing the partition increase, nothing was changed: " + "; ".join(problems))


def check_topic(p: PartitionParams, conn: Any) -> None:
    """At the begin, before the lock: the topic exists, and a ``new_partition_count`` given is larger than its
    count now (Kafka cannot remove partitions); a ConfigError naming the param otherwise."""
    found = metadata.cluster_metadata(conn).topics.get(p.topic)  # every topic's: asking for one could create it
    if found is None or found.error is not None:
        raise ConfigError(f"refusing the partition increase, nothing was changed: param topic names {p.topic}, which "
                          "the cluster does not hold")
    current = len(found.partitions)
    if p.new_partition_count is not None and p.new_partition_count <= current:
        raise ConfigError(f"refusing the partition increase, nothing was changed: topic {p.topic} has {current} "
                          f"partitions; new_partition_count {p.new_partition_count} must be larger (Kafka cannot "
                          "remove partitions)")


# -- pure planning ------------------------------------------------------------------------------------------

def place_new_partitions(cluster: Cluster, topic: str, new_total: int) -> tuple[tuple[int, ...], ...]:
    """Replica lists of the partitions ``topic`` gains growing to ``new_total``: each on distinct
    brokers, spread over as many racks as possible, on the brokers with the fewest replicas (the
    whole cluster's, then the topic's), led by the chosen broker with the fewest preferred leaders."""
    existing = cluster.partitions_of(topic)
    if new_total <= len(existing):
        raise ConfigError(f"topic {topic} has {len(existing)} partitions; new_partition_count {new_total} must be "
                          "larger (Kafka cannot remove partitions)")
    rf = max(p.replication_factor for p in existing)
    online = [b for b in cluster.brokers if b.online]
    if rf > len(online):
        raise ConfigError(f"topic {topic} has replication factor {rf} but only {len(online)} broker(s) are online; "
                          "bring brokers back before adding partitions")
    total = Counter({b.id: 0 for b in online}) + Counter(cluster.replicas_per_broker())
    in_topic = Counter(r for p in existing for r in p.replicas)
    leaders = Counter(p.replicas[0] for p in existing)
    rack = {b.id: b.rack for b in online}
    out = []
    for _ in range(new_total - len(existing)):
        chosen: list[int] = []
        for _slot in range(rf):
            used = {rack[b] for b in chosen}
            best = min((b.id for b in online if b.id not in chosen),
                       key=lambda b: (rack[b] is not None and rack[b] in used, in_topic[b], total[b], b))
            chosen.append(best)
        leader = min(chosen, key=lambda b: (leaders[b], chosen.index(b)))
        chosen.remove(leader)
        replicas = (leader, *chosen)
        for b in replicas:
            total[b] += 1
            in_topic[b] += 1
        leaders[leader] += 1
        out.append(replicas)
    return tuple(out)


@dataclass(frozen=True)
class KeyChange:
    """How a partition count change moves the keys of a sample of records."""

    sampled_records: int
    keyed_records: int
    distinct_keys: int
    moved_keys: int
    moved_records: int
    old_partitions: int
    new_partitions: int

    @property
    def keyed(self) -> bool:
        return self.keyed_records > 0

    def to_dict(self) -> dict[str, Any]:
        """The fields, and the summary for readers of the JSON."""
        return {"sampled_records": self.sampled_records, "keyed_records": self.keyed_records,
                "distinct_keys": self.distinct_keys, "moved_keys": self.moved_keys,
                "moved_records": self.moved_records, "old_partitions": self.old_partitions,
                "new_partitions": self.new_partitions, "summary": self.summary()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> KeyChange:
        return cls(*(int(data.get(name) or 0) for name in ("sampled_records", "keyed_records", "distinct_keys",
                                                          "moved_keys", "moved_records", "old_partitions",
                                                          "new_partitions")))

    def summary(self) -> str:
        if not self.keyed:
            return f"no key in {self.sampled_records} sampled record(s): the topic is not keyed"
        share = 100.0 * self.moved_records / self.keyed_records
        return (f"{self.moved_keys} of {self.distinct_keys} distinct keys ({self.moved_records} of "
                f"{self.keyed_records} keyed records, {share:.1f}%) in a sample of {self.sampled_records} would "
                f"change partition going from {self.old_partitions} to {self.new_partitions} partitions")


@dataclass(frozen=True)
class KeySample:
    """What a migration's plan learnt from its sample of the source: records sampled, and how many of
    them the key rule finds no key in (they would go to the dead-letter topic)."""

    sampled_records: int
    dead_letters_in_sample: int

    def to_dict(self) -> dict[str, Any]:
        return {"sampled_records": self.sampled_records, "dead_letters_in_sample": self.dead_letters_in_sample}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> KeySample:
        return cls(int(data.get("sampled_records") or 0), int(data.get("dead_letters_in_sample") or 0))


def key_change_of(data: Mapping[str, Any] | None) -> KeyChange | KeySample | None:
    """A plan's ``key_change`` from its JSON: an in-place growth's :class:`KeyChange` (it has
    ``keyed_records``), a migration's :class:`KeySample`, or None (nothing measured)."""
    if not data:
        return None
    return KeyChange.from_dict(data) if "keyed_records" in data else KeySample.from_dict(data)


def key_change(keys: Iterable[bytes | None], old: int, new: int) -> KeyChange:
    """Measure on sampled record keys (``None`` for an unkeyed record) how many keys change partition."""
    sampled = keyed = moved_records = 0
    moved: dict[bytes, bool] = {}
    for key in keys:
        sampled += 1
        if key is None:
            continue
        keyed += 1
        if key not in moved:
            moved[key] = partition_for(key, old) != partition_for(key, new)
        moved_records += moved[key]
    return KeyChange(sampled, keyed, len(moved), sum(moved.values()), moved_records, old, new)


@dataclass(frozen=True)
class PartitionPlan:
    """An in-place growth (``assignment`` of the new partitions) or a migration (``backfill``)."""

    mode: Mode
    topic: str
    current_partitions: int
    new_partitions: int
    replication_factor: int
    assignment: tuple[tuple[int, ...], ...] = ()
    key_change: KeyChange | KeySample | None = None
    backfill: Mapping[str, Any] | None = None
    target_configs: Mapping[str, str] = field(default_factory=dict)
    #: a Kafka Streams application's migration (:class:`kafkaops.rekey.streams.StreamsPlan`), when one was asked for
    streams: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:  # a mode given as its string (JSON)
        object.__setattr__(self, "mode", form.mode_of("mode", self.mode, Mode))

    def summary(self) -> str:
        if self.mode == Mode.IN_PLACE:
            return (f"grow {self.topic} in place from {self.current_partitions} to {self.new_partitions} partitions; "
                    f"new partitions on {[list(r) for r in self.assignment]}")
        plan = BackfillPlan.from_dict(self.backfill or {})
        return (f"migrate {self.topic} ({self.current_partitions} partitions, {plan.records} records in the "
                f"snapshot) to {plan.target_topic} with {self.new_partitions} partitions keyed by {plan.key_rule}; "
                f"dead letters to {plan.dead_letter_topic}")

    def to_dict(self) -> dict[str, Any]:
        return {"mode": self.mode.value, "topic": self.topic, "current_partitions": self.current_partitions,
                "new_partitions": self.new_partitions, "replication_factor": self.replication_factor,
                "assignment": [list(r) for r in self.assignment],
                "key_change": self.key_change.to_dict() if self.key_change is not None else {},
                "backfill": dict(self.backfill) if self.backfill else None,
                "target_configs": dict(self.target_configs),
                **({"streams": dict(self.streams)} if self.streams else {})}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PartitionPlan:
        return cls(mode=data["mode"], topic=data["topic"], current_partitions=data["current_partitions"],
                   new_partitions=data["new_partitions"], replication_factor=data["replication_factor"],
                   assignment=tuple(tuple(r) for r in data.get("assignment", ())),
                   key_change=key_change_of(data.get("key_change")), backfill=data.get("backfill"),
                   target_configs=data.get("target_configs") or {}, streams=data.get("streams"))


def approval_markdown(plan: PartitionPlan, params: PartitionParams, advice: CapacityAdvice | None = None
                      ) -> str:
    """The approval body: the plan as a table (the topic now and after), the keys, the capacity review's
    advice, then (a migration) the cut-over, and the steps that follow approval in the order the DAG runs them."""
    review = ["#### Capacity review",
              (advice.text if advice else f"No capacity review of this cluster recommends a partition count for "
                                          f"{plan.topic}") + ".", ""]
    if plan.mode == Mode.IN_PLACE:
        return "\n".join([
            f"Grow **{plan.topic}** in place: {plan.current_partitions} → {plan.new_partitions} partitions.", "",
            "| | Now | After |", "|---|---|---|",
            f"| Topic | {plan.topic} | {plan.topic} (grown in place) |",
            f"| Partitions | {plan.current_partitions} | {plan.new_partitions} |",
            f"| Replication factor | {plan.replication_factor} | {plan.replication_factor} |", "",
            "#### New partitions", "| partition | replicas (the first leads) |", "|---|---|",
            *(f"| {plan.current_partitions + i} | {', '.join(map(str, r))} |" for i, r in enumerate(plan.assignment)),
            "", "#### Keys", (plan.key_change.summary() if isinstance(plan.key_change, KeyChange)
                              else "No key change was measured") + ".", "",
            *review, "#### What follows",
            f"1. Add partitions {plan.current_partitions}-{plan.new_partitions - 1} to {plan.topic}; its records stay "
            "where they are, so the keys above change partition for new records only."])
    policy, bf = params.policy, BackfillPlan.from_dict(plan.backfill or {})
    sample = plan.key_change if isinstance(plan.key_change, KeySample) else KeySample(0, 0)
    sampled, dead = sample.sampled_records, sample.dead_letters_in_sample
    named, suffix = params.named_groups, params.cutover_group_suffix
    also = (f" (also {', '.join(named)}: from the target's start if they have no offset on {plan.topic})"
            if named else "")
    if policy.live:
        groups = (f"Wait until each consumer group of {plan.topic}{also} read it to the end and has no member, then "
                  f"commit its translated offsets on {bf.target_topic} for " +
                  (f"<group>{suffix}." if suffix else "the group itself."))
    elif suffix:
        groups = (f"Translate each consumer group's offsets on {plan.topic}{also} to {bf.target_topic} and commit "
                  f"them for <group>{suffix}.")
    else:
        groups = (f"Translate each consumer group's offsets on {plan.topic}{also} to {bf.target_topic}, into the "
                  "record (cutover_group_suffix is empty: nothing is committed).")
    steps_ = [f"Create {bf.target_topic} ({plan.new_partitions} partitions, replication factor "
              f"{plan.replication_factor}, the source's topic configs) and {bf.dead_letter_topic}.",
              "Copy the snapshot with Spark, each record once (transactions), each key's records in order.",
              *([f"Catch-up passes copy what producers wrote since, then writes to {plan.topic} stop "
                 f"({policy.quiesce} quiesce) and a final pass copies the rest."] if policy.live else []),
              "Verify the copy (the integrity gate): every record once, each key in the partition Kafka "
              "gives it, per-key order kept.",
              groups,
              *([f"The switch: a second approval, when producers and consumers move to {bf.target_topic}."]
                if policy.live else [])]
    return "\n".join([
        f"Migrate **{plan.topic}** into **{bf.target_topic}**: {plan.current_partitions} → {plan.new_partitions} "
        f"partitions, keyed by {bf.key_rule}.", "",
        "| | Source | Target |", "|---|---|---|",
        f"| Topic | {plan.topic} | {bf.target_topic} |",
        f"| Partitions | {plan.current_partitions} | {plan.new_partitions} |",
        f"| Replication factor | {plan.replication_factor} | {plan.replication_factor} |",
        f"| Records | {bf.records:,} in the snapshot | {bf.records:,} less dead letters, "
        f"then {'the catch-up passes' if policy.live else 'nothing more'} |",
        f"| Key | as written | {bf.key_rule}, placed as Kafka's partitioner places it |",
        f"| Dead letters | - | {bf.dead_letter_topic}: records without a key ({dead:,} of {sampled:,} sampled) |", "",
        *review, "#### Cut-over", migration.cutover_summary(policy, plan.topic) + ".", "",
        "#### What follows", *(f"{i}. {text}" for i, text in enumerate(steps_, 1))])


def integrity_frames(report: backfill.IntegrityReport) -> dict[str, Any]:
    """The frames of the backfill gate: ``partitions`` (one row per output partition) and ``totals``."""
    import pandas as pd

    partitions = pd.DataFrame(report.rows(), columns=["name", "topic", "partition", "records", "keys", "misplaced",
                                                      "split_keys", "order_breaks", "duplicate_lineages",
                                                      "unknown_lineages"])
    totals = pd.DataFrame([report.totals()])
    return {"partitions": partitions.reset_index(drop=True), "totals": totals}


# -- steps (I/O) ----------------------------------------------------------------------------------------------

def context(conn_config: Mapping[str, str], params: Mapping[str, Any], **fields: Any
            ) -> lifecycle.OperationContext:
    """The shared operation context, carrying :class:`PartitionParams` (``fields``: dag_id, run_id,
    triggered_by, task_id, try_number, run_ended)."""
    return lifecycle.OperationContext(conn_config=conn_config, params=PartitionParams.from_params(params),
                                      **fields)  # type: ignore[arg-type]


def preflight(ctx: lifecycle.OperationContext) -> dict[str, Any]:
    """The cluster before (:func:`kafkaops.platform.lifecycle.preflight`), then what this run's settings
    need of the cluster, checked before anything changes: for ``quiesce=acl`` an authorizer and the right
    to create and delete ACLs. A setting that cannot work is a :class:`ConfigError` naming the fix."""
    before = lifecycle.preflight(ctx)
    p: PartitionParams = ctx.params  # type: ignore[assignment]
    if p.mode == Mode.MIGRATE and p.policy.quiesce == migration.Quiesce.ACL:
        with ctx.connect() as conn:
            problem = migration.acl_problem(conn)
        if problem is not None:
            raise ConfigError(f"quiesce=acl cannot stop the producers of {p.topic}: {problem}. Nothing was changed; "
                              "trigger again with quiesce=manual (the run asks you to stop the producers), or give "
                              "the cluster an authorizer and the connection Alter on the Cluster")
        ctx.audit.append("note", text=f"quiesce=acl: the cluster has an authorizer and the connection may create and "
                                      f"delete ACLs; {', '.join(p.policy.principals)} will be denied writes to "
                                      f"{p.topic} at the quiesce")
    return before


def make_plan(ctx: lifecycle.OperationContext, before: Mapping[str, Any]) -> dict[str, Any]:
    """Plan on the snapshot; an in-place growth of a keyed topic is refused here unless accepted."""
    p: PartitionParams = ctx.params  # type: ignore[assignment]
    cluster = Cluster.from_dict(before)
    parts = cluster.partitions_of(p.topic)
    current = len(parts)
    count, why = new_partition_count_for(ctx.store, cluster.cluster_id, p.topic, current, p.new_partition_count)
    if count <= current:
        raise ConfigError(f"topic {p.topic} has {current} partitions; new_partition_count {count} must be larger")
    if why:
        ctx.audit.append("note", text=f"new_partition_count {count}: {why}")
    ranges = {x.partition: (x.start_offset or 0, x.end_offset or 0) for x in parts}
    rf = max(x.replication_factor for x in parts)
    per_partition = max(1, -(-p.sample_records // current))
    sampled = records.sample(ctx.conn_config, p.topic, ranges, per_partition)
    if p.mode == Mode.IN_PLACE:
        change = key_change((r.key for r in sampled), current, count)
        if change.keyed and not p.accept_ordering_break:
            text = (f"refusing to grow keyed topic {p.topic} in place: {change.summary()}, so their records would "
                    "sit in two partitions and per-key order breaks for consumers. Use mode=migrate (rekey "
                    "into a new topic), or set accept_ordering_break=true if consumers do not rely on key order")
            state.append_note(ctx.audit, RefusedNote(text, change.to_dict()))
            raise OrderingBreakRefused(text)
        plan = PartitionPlan(Mode.IN_PLACE, p.topic, current, count, rf,
                             assignment=place_new_partitions(cluster, p.topic, count),
                             key_change=change)
    else:
        with ctx.connect() as conn:
            names = metadata.topic_names(conn)
            topic_configs = configs.describe_configs(conn, "topic", [p.topic])[p.topic]
        target = p.target_topic or backfill.next_target_topic(p.topic, names)
        existing = sum(1 for x in cluster.partitions if x.topic == target)
        if existing and existing != count:
            raise ConfigError(f"target_topic {target} exists with {existing} partition(s), not {count}: the copy would "
                              f"put keys where Kafka's partitioner does not. Nothing was changed; leave target_topic "
                              f"empty (the next free name is {backfill.next_target_topic(p.topic, names)}) or name "
                              "a topic that does not exist")
        bf = BackfillPlan(p.topic, tuple((k, s, e) for k, (s, e) in sorted(ranges.items())), target,
                          count, p.key_rule)
        if existing:
            check_target_records(ctx, cluster, bf, backfill.next_target_topic(p.topic, names))
        dead = sum(1 for r in sampled if keyrules.extract_key(r.key, r.value, bf.rule) is None)
        plan = PartitionPlan(Mode.MIGRATE, p.topic, current, count, rf, backfill=bf.to_dict(),
                             key_change=KeySample(len(sampled), dead),
                             target_configs=topic_configs)
    data: dict[str, Any] = {"plan": plan.to_dict(), "summary": plan.summary()}
    if plan.mode == Mode.MIGRATE:
        data["summary"] += f". {migration.cutover_summary(p.policy, p.topic)}"
    advice = capacity_advice(ctx.store, cluster.cluster_id, p.topic, count)
    if advice is not None:  # shown at the approval; a count other than the review's is allowed
        data["capacity_advice"] = advice.to_dict()
        data["summary"] += f". {advice.text}"
    data["approval"] = approval_markdown(plan, p, advice)  # in the record too: its page shows what was asked
    ctx.audit.append("plan", **data)
    log.info("plan: %s", data["summary"])
    return data


#: Records sampled from the end of each partition of an existing target topic by :func:`check_target_records`.
TARGET_SAMPLE = 8


def check_target_records(ctx: lifecycle.OperationContext, cluster: Cluster, bf: BackfillPlan, free_name: str) -> None:
    """An existing target topic of the planned count may hold only what a run of this copy wrote (a resumed
    run): the newest committed records of each of its partitions are read (:data:`TARGET_SAMPLE`) and one
    that no run of ``bf`` wrote (:func:`kafkaops.rekey.backfill.foreign_record`) refuses the plan, before the
    approval; the backfill checks every record before it writes."""
    ranges = {x.partition: (x.start_offset or 0, x.end_offset or 0) for x in cluster.partitions_of(bf.target_topic)}
    tail = records.sample(ctx.conn_config, bf.target_topic, {k: v for k, v in ranges.items() if v[1] > v[0]},
                          TARGET_SAMPLE)
    found = backfill.foreign_record(bf, ((r.topic, r.partition, r.offset, r.last_header(backfill.LINEAGE_HEADER))
                                         for r in tail))
    if found is not None:
        held = sum(e - s for s, e in ranges.values())
        raise ConfigError(f"target_topic {bf.target_topic} exists and holds records that are not this copy's "
                          f"({held:,} offsets; {found}). Nothing was changed; leave target_topic empty (the next "
                          f"free name is {free_name}), or delete {bf.target_topic} if nothing needs it")


def new_partition_count_for(store: Any, cluster_id: str | None, topic: str, current: int, asked: int | None
                            ) -> tuple[int, str]:
    """The count to grow ``topic`` to and why (empty when the operator gave it): ``asked``, else the
    newest capacity review's recommendation for the topic when it is larger than ``current``, else
    twice ``current``."""
    if asked is not None:
        return asked, ""
    found = recommendations.latest_partition_recommendation(cluster_id, topic, store=store)
    if found is not None and found.partitions > current:
        return found.partitions, (f"the count the capacity review of {render.utc_time(found.at)} recommends for {topic} "
                                  "(the param was empty)")
    return 2 * current, (f"twice the current {current} (the param was empty and no capacity review recommends a "
                         f"larger count for {topic})")


def capacity_advice(store: Any, cluster_id: str | None, topic: str, chosen: int) -> CapacityAdvice | None:
    """The newest partition count a capacity review of cluster ``cluster_id`` recommends for ``topic``
    (:func:`kafkaops.platform.recommendations.latest_partition_recommendation`), beside the ``chosen``
    count; None when none does."""
    found = recommendations.latest_partition_recommendation(cluster_id, topic, store=store)
    return None if found is None else CapacityAdvice(found, chosen)


def execute_in_place(ctx: lifecycle.OperationContext, plan: PartitionPlan) -> dict[str, Any]:
    with ctx.connect() as conn:
        ctx.fence(f"add partitions to {plan.topic}")
        grown = topics.create_partitions(conn, plan.topic, plan.new_partitions, plan.assignment)
    ctx.audit.append("note", text=f"{plan.topic}: {'grown' if grown else 'already had'} {plan.new_partitions} "
                                  "partitions")
    return {"grown": grown}


#: The source's topic configs its dead-letter topic takes too: a dead letter is kept as safely as a copied record.
DEAD_LETTER_CONFIGS = ("min.insync.replicas", "unclean.leader.election.enable")


def dead_letter_configs(target_configs: Mapping[str, str] | None) -> dict[str, str]:
    """The configs of the dead-letter topic: the target's durability settings (:data:`DEAD_LETTER_CONFIGS`)."""
    return {k: str(v) for k, v in (target_configs or {}).items() if k in DEAD_LETTER_CONFIGS}


def create_target(ctx: lifecycle.OperationContext, plan: PartitionPlan) -> dict[str, Any]:
    """The target topic (new count, the source's configs and RF) and its one-partition dead-letter topic (the
    same RF and durability settings, :func:`dead_letter_configs`)."""
    bf = BackfillPlan.from_dict(plan.backfill or {})
    with ctx.connect() as conn:
        ctx.fence(f"create the target topic {bf.target_topic}")
        created = topics.create_topic(conn, bf.target_topic, bf.target_partitions, plan.replication_factor,
                                     plan.target_configs)
        dlq = topics.create_topic(conn, bf.dead_letter_topic, 1, plan.replication_factor,
                                  dead_letter_configs(plan.target_configs))
    ctx.audit.append("note", text=f"target {bf.target_topic} ({bf.target_partitions} partitions) "
                                  f"{'created' if created else 'exists'}; dead-letter {bf.dead_letter_topic} "
                                  f"{'created' if dlq else 'exists'}")
    return {"target_created": created, "dead_letter_created": dlq}


def run_backfill(ctx: lifecycle.OperationContext, bf: BackfillPlan, *, launcher: spark.Launcher,
                 timeout_s: float = 3600.0, verify: bool = True, name: str = "backfill") -> PassResult:
    """Submit :mod:`spark_apps.rekey_backfill` (run, and with ``verify`` the integrity check of the
    whole copy so far) through ``launcher``; resume-safe. The plan and the result (the integrity report
    with it) travel through the store as artifacts ``backfill/<operation>/<name>-try<n>/<submission>/
    {plan,result}.json``, the Spark log goes there too (``name``: ``backfill``, or a live migration's
    ``pass<k>``)."""
    result = _submit_backfill(ctx, [bf], bf.to_json(), launcher=launcher, timeout_s=timeout_s, verify=verify,
                              name=name)
    return _written(ctx, PassResult.from_dict(result), bf, name)


def run_backfills(ctx: lifecycle.OperationContext, plans: Sequence[BackfillPlan], *, launcher: spark.Launcher,
                  timeout_s: float = 3600.0, name: str = "copies") -> tuple[PassResult, ...]:
    """Several copies in one Spark application (:func:`run_backfill` for each, in turn, each checked after its
    write): one Spark start for all of them, as a Kafka Streams application's inputs and changelogs are
    copied. Returns each copy's result, in the order of ``plans``."""
    result = _submit_backfill(ctx, plans, BackfillPlan.many_to_json(plans), launcher=launcher, timeout_s=timeout_s,
                              verify=True, name=name)
    passes = CopiesResult.from_dict(result).passes
    if len(passes) != len(plans):
        raise KafkaOpsError(f"{name}: the Spark application reported {len(passes)} copies of the {len(plans)} it "
                            "was given; run it again (each copy resumes where it stopped)")
    return tuple(_written(ctx, done, bf, name) for done, bf in zip(passes, plans, strict=True))


def _written(ctx: lifecycle.OperationContext, done: PassResult, bf: BackfillPlan, name: str) -> PassResult:
    """``done`` said in the record and the log."""
    text = f"{name} wrote {done.written:,} record(s) to {bf.target_topic}"
    state.append_note(ctx.audit, RunNote(text, done.run))
    log.info("%s", text)
    return done


def _submit_backfill(ctx: lifecycle.OperationContext, plans: Sequence[BackfillPlan], plan_json: str, *,
                     launcher: spark.Launcher, timeout_s: float, verify: bool, name: str) -> dict[str, Any]:
    artifacts = f"backfill/{ctx.artifact_prefix}/{name}-try{ctx.try_number or 1}"  # this try's log, plan, result
    if name == "backfill":
        artifacts = f"backfill/{ctx.artifact_prefix}/spark-try{ctx.try_number or 1}"
    log_artifact = f"{artifacts}.log"
    what = ", ".join(f"{bf.source_topic} -> {bf.target_topic}" for bf in plans)
    with tempfile.TemporaryDirectory(prefix="kafkaops-backfill-") as tmp:  # the task's own scratch space
        log_file = Path(tmp) / "spark.log"
        args = ["run", "--verify"] if verify else ["run"]
        ctx.fence(f"start the backfill into {', '.join(bf.target_topic for bf in plans)}")

        def started(argv: list[str]) -> None:  # the client config is in a file the argv names, never in it
            ctx.audit.append("note", text=f"{name} started on Spark master {launcher.master} (connection "
                                          f"{launcher.conn_id}): {what}, {sum(bf.records for bf in plans):,} "
                                          f"offsets (Spark log: artifact {log_artifact})",
                             artifact=log_artifact, argv=argv)  # the record links the Spark log
        try:
            # exit 3 is a finished run whose integrity check failed: the report says so and the gate fails on it
            return spark.run_spark_app(
                "rekey_backfill", args, launcher=launcher, log_file=log_file, timeout_s=timeout_s,
                ok_exit_codes=None, what=f"backfill {what}",
                on_timeout="run it again: it resumes where it stopped", on_failure="it resumes safely when run again",
                kafka_config=ctx.conn_config, on_start=started, inputs={"plan": plan_json},
                exchange=spark.Exchange(ctx.store, artifacts), progress=copy_progress(ctx, plans, name, verify))
        finally:
            if log_file.exists():
                ctx.store.put_artifact(log_artifact, log_file.read_bytes(), "text/plain; charset=utf-8")


def _output_offsets(ctx: lifecycle.OperationContext, plans: Sequence[BackfillPlan]) -> int:
    """Offsets taken in the target and dead-letter topics now (records and transaction markers)."""
    return sum(e for bf in plans for topic in (bf.target_topic, bf.dead_letter_topic)
               for _, e in records.end_offsets(ctx.conn_config, topic).values())


def copy_progress(ctx: lifecycle.OperationContext, plans: Sequence[BackfillPlan], name: str, verify: bool
                  ) -> Callable[[float], None]:
    """What :func:`kafkaops.platform.spark.run_spark_app` calls while a pass runs: one task-log line of
    records written of the pass's source offsets, the rate and the ETA (:class:`backfill.CopyProgress`),
    from the output topics' end offsets against theirs when the pass started (``plans``: the copies of one
    Spark application, counted together)."""
    total = sum(bf.records for bf in plans)
    try:
        at_start = _output_offsets(ctx, plans)
    except KafkaOpsError as err:  # no progress lines then; the pass itself is not at stake
        log.warning("%s: the output topics' offsets could not be read, so no progress is logged: %s", name, err)
        return lambda _elapsed_s: None

    last: list[tuple[float, int]] = []  # the previous observation (the thread that calls this is the only one)

    def progress(elapsed_s: float) -> None:
        now = backfill.CopyProgress(max(_output_offsets(ctx, plans) - at_start, 0), total, elapsed_s,
                                    checking=verify, previous=last[-1] if last else None)
        last[:] = [(elapsed_s, now.written)]
        log.info("%s", now.line(name, render.duration))

    return progress


def backfill_gate(ctx: lifecycle.OperationContext, result: PassResult, *, docs_after: bool = False,
                  subject: str | None = None) -> GateVerdict:
    """Gate the integrity report with ``expectations/backfill.json``, then require it outright too.
    ``docs_after``: the verdict only, its Data Docs later (:func:`publish_gate_docs`); ``subject``: which copy
    (:func:`kafkaops.platform.lifecycle.gate`)."""
    if result.integrity is None:
        raise KafkaOpsError(f"the backfill into {(result.run.plan if result.run else {}).get('target_topic')} "
                            "reported no integrity check: nothing to gate; run the pass again with --verify")
    report = backfill.IntegrityReport.from_dict(result.integrity)
    gate = lifecycle.gate(ctx, "backfill", integrity_frames(report), docs_after=docs_after, subject=subject)
    report.require()
    return GateVerdict(gates.GateResult.from_dict(gate), report.totals())


def publish_gate_docs(ctx: lifecycle.OperationContext, ready: TargetReady) -> None:
    """The Data Docs of a live cut-over's gate (:func:`ready_target` gives its verdict without them), built
    and stored once the switch is asked for: outside the write window. Never raises."""
    lifecycle.publish_docs(ctx, "backfill", integrity_frames(backfill.IntegrityReport.from_dict(
        ready.final.integrity or {})))


def ready_target(ctx: lifecycle.OperationContext, plan: PartitionPlan, before: Mapping[str, Any], first: BackfillPlan,
                 caught: CatchUp, copied: PassResult, step: Callable[[str], AbstractContextManager[Any]]) -> TargetReady:
    """A live migration from the quiesce to the switch's question, in one process: no scheduler hop
    (seconds each through a Celery deployment) lies inside the write window. Each part is a step of the
    record of its own, in order (``step(name)`` records it): ``quiesce`` (the tail copies on while the
    source is waited on, so its last part is usually empty), ``final_pass`` (the last part, checked),
    ``verify`` (the gate over the whole copy: the backfill's check and every part's; its verdict only, the
    Data Docs after the switch is asked for: :func:`publish_gate_docs`) and ``cutover``
    (groups settled, offsets committed on the target). A failure in any part fails the task and the
    abandon step rolls back: the source stays authoritative."""
    p: PartitionParams = ctx.params  # type: ignore[assignment]
    with step("quiesce"), migration.Tail(ctx, first, caught.tail) as copy:
        quiesced = migration.quiesce(ctx, caught.last_plan, p.policy, copy=copy)
    with step("final_pass"):
        final = migration.final_part(ctx, caught, quiesced, copied)
    with step("verify"):
        verified = backfill_gate(ctx, final, docs_after=True)
    with step("cutover"):
        cut = cutover(ctx, plan, before, quiesced)
    return TargetReady(quiesced, final, verified, cut)


def verify_in_place(ctx: lifecycle.OperationContext, plan: PartitionPlan) -> dict[str, Any]:
    with ctx.connect() as conn:
        snap = metadata.snapshot(conn, topics=[plan.topic], sizes=False, groups=False)
    parts = snap.partitions_of(plan.topic)
    problems = []
    if len(parts) != plan.new_partitions:
        problems.append(f"{plan.topic} has {len(parts)} partitions, the plan {plan.new_partitions}")
    for i, replicas in enumerate(plan.assignment):
        n = plan.current_partitions + i
        if n < len(parts) and parts[n].replicas != tuple(replicas):
            problems.append(f"{plan.topic}-{n} replicas {list(parts[n].replicas)}, plan {list(replicas)}")
    if problems:
        raise KafkaOpsError("in-place growth not as planned: " + "; ".join(problems) + "; check the topic and run "
                            "again (create_partitions is skipped once the count is reached)")
    ctx.audit.append("note", text=f"{plan.topic} has {len(parts)} partitions as planned")
    return {"partitions": len(parts)}


def cutover(ctx: lifecycle.OperationContext, plan: PartitionPlan, before: Mapping[str, Any],
            quiesced: Quiesced | None = None) -> Cutover:
    """Per consumer group of the source: committed source source_offsets -> target source_offsets (via lineage);
    recorded in the audit, and committed for ``<group><suffix>`` when the suffix param is set.

    A live migration (``quiesced``: the quiesce step's end source_offsets) first waits until every group read
    the source to its quiesced end and has no member (:func:`kafkaops.rekey.migration.settle_groups`),
    then commits each group's translation on the target, for the group itself unless a suffix is set:
    its consumers restart on the target where they stopped. A group still active at the timeout stops
    the cut-over (its position could still move); one not read to the end is translated and its
    redelivered count stated. So does a source written after the quiesce
    (:func:`kafkaops.rekey.migration.refuse_stray_writes`): the switch is never asked then."""
    p: PartitionParams = ctx.params  # type: ignore[assignment]
    bf = BackfillPlan.from_dict(plan.backfill or {})
    settled: dict[str, str] = {}
    if quiesced is not None:
        settled = migration.settle_groups(ctx, bf.source_topic, quiesced.ends, timeout_s=p.policy.quiesce_timeout_s)
        active = sorted(g for g, how in settled.items() if how == "still active")
        if active:
            raise migration.MigrationAbandoned(
                f"consumer group(s) {', '.join(active)} still have members on {bf.source_topic} "
                f"{p.policy.quiesce_timeout_s:.0f} s after the quiesce: their position can still move, so no offset "
                f"can be committed for them on {bf.target_topic}. Stop those consumers once they read to the end, "
                "then trigger the migration again; nothing was switched")
        migration.refuse_stray_writes(ctx, bf, quiesced, p.policy)  # a producer the quiesce did not stop
    with ctx.connect() as conn:
        snap = metadata.snapshot(conn, topics=[bf.source_topic, bf.target_topic], sizes=False)
    committed: dict[str, dict[int, int]] = {}
    for g in snap.groups:
        if g.group_id.startswith(backfill.MARKER_GROUP_PREFIX):  # a backfill's commit markers (the direct copy's
            continue                                            # count source offsets): not a consumer
        on_source = [x for x in g.partitions if x.topic == bf.source_topic]
        source_offsets = {x.partition: x.committed for x in on_source if x.committed is not None}
        if source_offsets or (on_source and quiesced is not None):  # live: no committed offset = the target's start
            committed[g.group_id] = source_offsets
    for group in p.named_groups:  # named by the operator: without a committed offset, from the target's start
        committed.setdefault(group, {})
    ranges = {x.partition: (x.start_offset or 0, x.end_offset or 0) for x in snap.partitions_of(bf.target_topic)}
    lineage: dict[int, list[tuple[int, str]]] = {k: [] for k in ranges}
    # a group that read the source to its quiesced end resumes at the target's end, one that never committed at
    # its start: no lineage to read for either, so the cut-over's time does not grow with the topic
    at_end = {g for g, o in committed.items() if quiesced is not None and o and
              all(o.get(p, 0) >= e for p, e in quiesced.ends.items())}
    unread = {g for g, o in committed.items() if not o}
    if set(committed) - at_end - unread:
        for r in records.read_ranges(ctx.conn_config, bf.target_topic, ranges):
            value = r.last_header(backfill.LINEAGE_HEADER)
            lineage[r.partition].append((r.offset, value.decode() if value else f"?/{-1}/-1"))
    translated = {}
    for group, source_offsets in sorted(committed.items()):
        table = ({p: {"offset": end, "redelivered": 0} for p, (_, end) in sorted(ranges.items())} if group in at_end
                 else {p: {"offset": start, "redelivered": 0} for p, (start, _) in sorted(ranges.items())}
                 if group in unread else backfill.translate_offsets(bf.source_topic, source_offsets, lineage))
        new_group = None
        if p.cutover_group_suffix or quiesced is not None:
            new_group = f"{group}{p.cutover_group_suffix}"
            with ctx.connect() as conn:
                ctx.fence(f"commit offsets for group {new_group}")
                offsets.commit_group_offsets(conn, new_group, bf.target_topic,
                                           {k: v["offset"] for k, v in table.items()})
        translated[group] = GroupTranslation(
            source={str(k): v for k, v in sorted(source_offsets.items())},
            target={str(k): v["offset"] for k, v in table.items()},
            redelivered=sum(v["redelivered"] for v in table.values()),
            stated=None if source_offsets else "no committed offset on the source: starts at the start of the target",
            settled=settled.get(group), committed_for=new_group)
    state.append_note(ctx.audit, TranslationNote(f"cut-over of {len(translated)} consumer group(s) from "
                                                 f"{bf.source_topic} to {bf.target_topic}", translated))
    cut = Cutover(bf.source_topic, bf.target_topic, translated)
    return Cutover(cut.source_topic, cut.target_topic, translated, migration.switch_request(cut)) \
        if quiesced is not None else cut


def finish(ctx: lifecycle.OperationContext, cluster_id: str | None, *, failed_tasks: Iterable[str] = ()
           ) -> dict[str, Any]:
    """:func:`kafkaops.platform.lifecycle.finish`, with outcome ``refused`` for an ordering-break refusal
    and ``abandoned`` for a live migration rolled back before the switch. The ``abandon`` task fails on
    purpose when another step failed (so nothing after it runs): that is not a failure of its own, and its
    own are in its recorded step, so it is not counted among ``failed_tasks``."""
    failed_tasks = [t for t in failed_tasks if t != "abandon"]
    record = ctx.audit.summary()
    current = [n for n in record["notes"] if n["ts"] >= (record["started_at"] or 0)]
    migration.release_left_writes(ctx, current)
    if record.get("before") is not None:
        record_after(ctx)
    refusal = next(iter(state.read_notes(current, RefusedNote)), None)
    if refusal is not None:
        return lifecycle.conclude(ctx, "refused", refusal.text, cluster_id)
    record = ctx.audit.summary()  # with the cluster after
    plan, left = _recorded_plan(record), tuple[str, ...]()
    try:
        before, after = (Cluster.from_dict(record[k]) if record.get(k) else None for k in ("before", "after"))
        left = left_topics(plan, before, after)
    except (KafkaOpsError, KeyError, TypeError, ValueError) as err:  # the outcome is recorded whatever this says
        log.warning("the topics this run made could not be told from its record: %s", err)
    abandoned = next(iter(state.read_notes(current, AbandonedNote)), None)
    if abandoned is not None:  # a live migration rolled back before the switch
        return lifecycle.conclude(ctx, "abandoned", abandoned.text, cluster_id,
                                  next_steps=next_steps(plan, ctx.params, "abandoned", left))
    outcome, _ = lifecycle.outcome_of(record, dry_run=ctx.params.dry_run, failed_tasks=failed_tasks)
    if outcome == "success" and plan is not None and past_rollback_point(plan, ctx.params.policy.live, record["steps"]):
        delete_markers(ctx, plan, current)
    return lifecycle.finish(ctx, cluster_id, failed_tasks=failed_tasks,
                            next_steps={outcome: next_steps(plan, ctx.params, outcome, left)})


def past_rollback_point(plan: PartitionPlan, live: bool, steps: Iterable[Mapping[str, Any]]) -> bool:
    """Whether a migration's attempt (its recorded ``steps``) is past the point a rollback or a rerun would resume
    from its marker groups (pure): a live migration once its switch is confirmed (step ``confirm``), a Kafka Streams
    cut once it committed the new application's offsets (``execute``), a plain migrate once its cut-over
    translated the groups' offsets (``cutover``). The copy's verification comes before each of them."""
    if plan.mode != Mode.MIGRATE or not plan.backfill:
        return False
    done = {s["name"] for s in steps if s.get("status") == "success"}
    return ("confirm" if live else "execute" if plan.streams else "cutover") in done


def marker_groups(plan: PartitionPlan, group_ids: Iterable[str]) -> list[str]:
    """The marker groups among ``group_ids`` of backfills into ``plan``'s targets (pure): its passes' commit
    markers (:func:`kafkaops.rekey.backfill.backfill_id`, one per pass plan) and its tail's (``-tail``)."""
    targets = [BackfillPlan.from_dict(plan.backfill or {}).target_topic]
    if plan.streams:
        targets += [target for _, target, _ in StreamsPlan.from_dict(plan.streams).copies()]
    names = "|".join(re.escape(t) for t in dict.fromkeys(targets))
    pattern = re.compile(rf"{re.escape(backfill.MARKER_GROUP_PREFIX)}(?:{names})-[0-9a-f]{{12}}(?:-tail)?")
    return sorted(g for g in group_ids if pattern.fullmatch(g))


def delete_markers(ctx: lifecycle.OperationContext, plan: PartitionPlan, current: Sequence[Mapping[str, Any]]
                   ) -> MarkersDeletedNote | None:
    """Delete the marker groups of a migration past its rollback point (:func:`past_rollback_point`, the caller
    checks), recorded as a :class:`MarkersDeletedNote`. Idempotent: a retry finds them gone and, once this attempt
    has its note, records nothing more. A group that is not deleted stays, named in the note; the outcome does not
    change (the migration is done; the groups are bookkeeping). A failed or abandoned run never gets here: its
    groups are what a rerun resumes from."""
    try:
        with ctx.connect() as conn:
            found = marker_groups(plan, offsets.group_ids(conn))
            if not found and state.read_notes(current, MarkersDeletedNote):
                return None
            if found:
                ctx.fence("delete the backfill's marker groups")
            done = offsets.delete_consumer_groups(conn, found)
    except KafkaOpsError as err:
        log.warning("the backfill's marker groups were not deleted: %s", err)
        note = MarkersDeletedNote(f"the backfill's marker groups were not deleted ({err}); they stay: delete the "
                                  f"groups named {backfill.MARKER_GROUP_PREFIX}<target>-... with kafka-consumer-groups.sh "
                                  "--delete", error=str(err)[:2000])
        state.append_note(ctx.audit, note)
        return note
    gone = tuple(sorted((*done.deleted, *done.absent)))
    parts = []
    if gone or not done.failed:
        parts.append(f"{len(gone)} marker group(s) of the backfill deleted, the migration past its rollback point"
                     + (f": {', '.join(gone)}" if gone else ""))
    if done.failed:
        parts.append("not deleted, they stay: " + ", ".join(f"{g} ({e})" for g, e in sorted(done.failed.items())))
    note = MarkersDeletedNote("; ".join(parts), gone, dict(done.failed))
    state.append_note(ctx.audit, note)
    return note


def _recorded_plan(record: Mapping[str, Any]) -> PartitionPlan | None:
    """The plan the record holds; None without one, or with one this kafkaops cannot read (an older record)."""
    data = (record.get("plan") or {}).get("plan")
    try:
        return PartitionPlan.from_dict(data) if isinstance(data, Mapping) else None
    except (KafkaOpsError, KeyError, TypeError, ValueError) as err:
        log.warning("the record's plan could not be read: %s", err)
        return None


def left_topics(plan: PartitionPlan | None, before: Cluster | None, after: Cluster | None) -> tuple[str, ...]:
    """A migrate's target and dead-letter topics that the run made: there after it, not before (none for
    in place); a Kafka Streams application's: every input's and changelog's copy, with its dead-letter topic."""
    if plan is None or plan.mode != Mode.MIGRATE or not plan.backfill or after is None:
        return ()
    bf = BackfillPlan.from_dict(plan.backfill)
    made = [bf.target_topic, bf.dead_letter_topic]
    if plan.streams:
        made += [t for _, target, _ in StreamsPlan.from_dict(plan.streams).copies()
                 for t in (target, own.dead_letter_topic(target))]
    had = set(before.topics) if before is not None else set()
    return tuple(t for t in dict.fromkeys(made) if t in set(after.topics) and t not in had)


def next_steps(plan: PartitionPlan | None, p: PartitionParams, outcome: str, left: tuple[str, ...]) -> str:
    """The record's closing "what to do now" for a partition increase that ended ``outcome`` (pure);
    ``left``: the target and dead-letter topics that exist after it (:func:`left_topics`)."""
    if plan is None:
        return lifecycle.next_steps_of(outcome)
    if outcome == "success" and plan.mode == Mode.IN_PLACE:
        return (f"Nothing to do: {plan.topic} has {plan.new_partitions} partitions now. Producers write to the new "
                "partitions after their next metadata refresh (metadata.max.age.ms, 5 minutes by default), and "
                "consumer groups rebalance onto them.")
    if plan.mode != Mode.MIGRATE or not plan.backfill:
        return lifecycle.next_steps_of(outcome)
    if plan.streams and outcome == "success":
        made = StreamsPlan.from_dict(plan.streams)
        if p.policy.live:
            return (f"Application {made.new_application_id} runs on {', '.join(m.target for m in made.inputs)} and "
                    f"{', '.join(m.source for m in made.inputs)} receive no writes. The old application "
                    f"{made.application_id} and its topics are unchanged for a rollback: delete them once the new "
                    "application runs as it should.")
        text = made.start_text()
        return text[0].upper() + text[1:] + "."
    bf = BackfillPlan.from_dict(plan.backfill)
    dlq = (f"{bf.dead_letter_topic} holds the records the key rule found no key in (the gate's dead-letter count "
           "says how many): read them before you delete it.")
    if outcome == "success" and p.policy.live:
        return (f"Producers and consumers run on {bf.target_topic}, and {plan.topic} receives no writes. Keep "
                f"{plan.topic} while you may still want to go back, then delete it. {dlq}")
    if outcome == "success":
        return (f"{bf.target_topic} holds {plan.topic} as it was at the snapshot; records written to {plan.topic} "
                f"since are not in it. Move your consumers to {bf.target_topic} at the offsets translated in the "
                f"notes, then your producers; delete {plan.topic} once nothing uses it. {dlq}")
    stays = (f" {' and '.join(left)}, made by this run, stay: delete them before a new run with the same "
             "target_topic, or leave target_topic empty to copy into the next free name.") if left else ""
    return lifecycle.next_steps_of(outcome) + stays


def record_after(ctx: lifecycle.OperationContext) -> None:
    """The record's "Cluster after", whatever the outcome: the cluster as this run leaves it, so a migrate's
    record shows its new topic, and a rejected or failed one what stays. A cluster that does not answer
    now leaves a note instead: the run's outcome is recorded either way."""
    try:
        with ctx.connect() as conn:
            after = metadata.snapshot(conn, include_internal=True)
    except KafkaOpsError as err:
        log.warning("no snapshot of the cluster after the run: %s", err)
        ctx.audit.append("note", text=f"no snapshot of the cluster after the run ({err}); the record's "
                                      "\"Cluster after\" is missing")
        return
    ctx.audit.append("snapshot", stage="after", cluster=after.to_dict())


def plan_of(plan_data: Mapping[str, Any]) -> PartitionPlan:
    return PartitionPlan.from_dict(plan_data["plan"])

