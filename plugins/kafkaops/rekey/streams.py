"""A Kafka Streams application as kafkaops migrates it to a new partition count: what the cluster shows
of it (:func:`read_application`) and the plan of its migration (:func:`plan_migration`). Pure.

Kafka Streams names its internal topics after the application (``application.id``):
``<application.id>-<store>-changelog`` holds a state store's changes, ``<application.id>-<name>-repartition``
(and a foreign-key join's ``...-topic``) records in flight between sub-topologies. The application's
consumer group is its ``application.id``, and its committed offsets name its input topics.

A store's changelog is written to the partition of the task that owns the record's key, and a task owns
the keys Kafka's partitioner puts in its input partition: ``murmur2(key) % N``, where ``key`` is the store's
own key, which for a window or session store is the changelog key without its window suffix
(docs/key-rules.md: ``window_key``, ``session_key``). So a store's kind is told by the data itself: the key
rule that puts every sampled changelog record back in the partition Streams wrote it to is the store's
(:func:`store_kind`); the changelog's ``cleanup.policy`` narrows the choice (``compact`` for key-value stores,
``compact,delete`` for window and session stores), and the operator's param decides what the data cannot
(a one-partition changelog). A changelog no rule explains is refused before anything changes.

Invariants of a plan: every input topic of the application moves to the same new count (co-partitioned
inputs stay co-partitioned); every changelog is copied to the new application's changelog of that count
by its store's rule; repartition topics are not copied (the old application drains them before the cut and
the new one starts them empty); nothing of the old application is changed.
"""
from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kafkaops.errors import ConfigError, KafkaOpsError
from kafkaops.model import Cluster
from kafkaops.platform import keyrules
from kafkaops.rekey import backfill
from kafkaops.rekey.backfill import BackfillPlan

__all__ = ["KNOWN_HEADERS", "ChangelogSample", "InputMove", "InputTopic", "InternalTopic", "LiveCut", "Store", "StoreKind",
           "StoreMove", "StreamsApplication", "StreamsError", "StreamsPlan", "changelog_topic", "plan_migration",
           "read_application", "store_kind"]

#: Changelog record headers kafkaops knows: Streams' changelog version (``v``) and consistency position
#: (``c``), and the lineage kafkaops itself writes on a copy. Any other header is a format not read here.
KNOWN_HEADERS = frozenset({"v", "c", backfill.LINEAGE_HEADER})
#: The changelog version header values Streams writes that kafkaops knows (0: the position vector follows).
KNOWN_VERSIONS = frozenset({b"\x00"})

_CHANGELOG = "-changelog"
_REPARTITION = ("-repartition", "-topic")  # a foreign-key join's subscription topics end in "-topic"
_APPLICATION_ID = re.compile(r"^[A-Za-z0-9._-]+$")


class StreamsError(KafkaOpsError):
    """A Kafka Streams application that cannot be migrated as it is; nothing was changed."""


class StoreKind(str, enum.Enum):
    """The kind of a state store, as its changelog's keys show it."""

    KEY_VALUE = "key_value"
    WINDOW = "window"
    SESSION = "session"

    @property
    def key_rule(self) -> str:
        """The key rule (docs/key-rules.md) that gives the key its task owns."""
        return {"key_value": "record_key", "window": "window_key", "session": "session_key"}[self.value]

    @classmethod
    def parse(cls, text: str, store: str) -> StoreKind:
        try:
            return cls(text.strip().lower().replace("-", "_"))
        except ValueError as err:
            raise ConfigError(f"store kind {text!r} for store {store!r} is not one of "
                              f"{', '.join(k.value for k in cls)}") from err


def changelog_topic(application_id: str, store: str) -> str:
    """The changelog topic Kafka Streams uses for ``store`` of ``application_id``."""
    return f"{application_id}-{store}{_CHANGELOG}"


@dataclass(frozen=True)
class ChangelogSample:
    """One record read from a changelog: where it was, its key and its header names (and version)."""

    partition: int
    key: bytes | None
    headers: tuple[str, ...] = ()
    version: bytes | None = None  # the ``v`` header's value, when there is one


@dataclass(frozen=True)
class InputTopic:
    """An input topic of the application: its partitions and the group's committed offsets on it."""

    name: str
    partitions: int
    committed: tuple[tuple[int, int], ...] = ()  # (partition, next offset to read)
    ends: tuple[tuple[int, int], ...] = ()       # (partition, end offset) when read

    @property
    def lag(self) -> int:
        done = dict(self.committed)
        return sum(max(0, end - done.get(p, 0)) for p, end in self.ends)


@dataclass(frozen=True)
class InternalTopic:
    """A repartition topic: its partitions and how far the application's group is behind its end."""

    name: str
    partitions: int
    lag: int | None = None  # None: the group committed nothing on it

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "partitions": self.partitions, "lag": self.lag}


@dataclass(frozen=True)
class Store:
    """A state store, told by its changelog: its kind and how kafkaops told it."""

    name: str
    changelog: str
    partitions: int
    kind: StoreKind
    how: str
    records: int = 0  # offsets in the changelog (an upper bound: compaction leaves gaps)
    configs: tuple[tuple[str, str], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "changelog": self.changelog, "partitions": self.partitions,
                "kind": self.kind.value, "how": self.how, "records": self.records, "configs": dict(self.configs)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Store:
        return cls(str(data["name"]), str(data["changelog"]), int(data["partitions"]), StoreKind(data["kind"]),
                   str(data["how"]), int(data.get("records", 0)),
                   tuple(sorted((str(k), str(v)) for k, v in dict(data.get("configs") or {}).items())))


@dataclass(frozen=True)
class StreamsApplication:
    """What the cluster shows of a Kafka Streams application."""

    application_id: str
    state: str
    members: int
    inputs: tuple[InputTopic, ...]
    stores: tuple[Store, ...]
    repartitions: tuple[InternalTopic, ...]

    @property
    def partitions(self) -> int:
        """The input topics' partition count (one count: :func:`read_application` refuses several)."""
        return self.inputs[0].partitions


def _is_repartition(application_id: str, topic: str) -> bool:
    return topic.startswith(application_id + "-") and topic.endswith(_REPARTITION)


def _policy_kinds(policy: str) -> tuple[StoreKind, ...]:
    parts = {p.strip() for p in policy.split(",") if p.strip()}
    if parts == {"compact"}:
        return (StoreKind.KEY_VALUE,)
    if parts == {"compact", "delete"}:
        return (StoreKind.WINDOW, StoreKind.SESSION)
    return tuple(StoreKind)


def store_kind(store: str, changelog: str, partitions: int, policy: str, samples: Sequence[ChangelogSample],
               asked: StoreKind | None = None) -> tuple[StoreKind, str]:
    """The kind of ``store`` and how it was told, from its changelog's ``cleanup.policy``, a sample of its
    records (``samples``) and the operator's ``asked`` kind.

    A kind stays a candidate when its key rule reads every sampled key and, on a changelog of more than one
    partition, puts each sampled record in the partition it was read from. Exactly one must stay; the
    operator's kind is held to the same evidence, never taken against it. Unknown headers or changelog
    versions are refused, not guessed."""
    for s in samples:
        unknown = sorted(set(s.headers) - KNOWN_HEADERS)
        if unknown:
            raise StreamsError(f"store {store!r}: changelog {changelog} partition {s.partition} has a record with "
                               f"header(s) {unknown} that kafkaops does not know (it knows {sorted(KNOWN_HEADERS)}); "
                               "a newer Kafka Streams may have written it. Nothing was changed; migrate this "
                               "application with a kafkaops that reads that format")
        if s.version is not None and s.version not in KNOWN_VERSIONS:
            raise StreamsError(f"store {store!r}: changelog {changelog} partition {s.partition} has changelog "
                               f"version {s.version.hex()} (kafkaops reads version 00). Nothing was changed")
    keyed = [s for s in samples if s.key is not None]
    policy_kinds = _policy_kinds(policy)
    candidates = (asked,) if asked is not None else policy_kinds
    evidence = []
    kept = []
    for kind in candidates:
        unread = next((s for s in keyed if keyrules.extract(s.key, None, kind.key_rule).code is not None), None)
        if unread is not None:
            evidence.append(f"{kind.value}: a key of {len(unread.key or b'')} byte(s) in partition "
                            f"{unread.partition} is not one ({keyrules.extract(unread.key, None, kind.key_rule).code})")
            continue
        if partitions > 1:
            misplaced = [s for s in keyed if backfill.target_partition(
                keyrules.extract_key(s.key, None, kind.key_rule) or b"", partitions) != s.partition]
            if misplaced:
                evidence.append(f"{kind.value}: {len(misplaced)} of {len(keyed)} sampled records are not where "
                                f"its key would be (e.g. one in partition {misplaced[0].partition})")
                continue
        kept.append(kind)
    param = f"set streams_store_kinds, e.g. {{\"{store}\": \"window\"}}"
    if len(kept) == 1:
        kind = kept[0]
        if not keyed:
            return kind, f"{'the operator' if asked else 'cleanup.policy ' + policy}; the changelog is empty"
        how = (f"{len(keyed)} sampled records placed by the {kind.key_rule} rule" if partitions > 1 else
               f"{len(keyed)} sampled keys read as {kind.value} keys (one partition: placement proves nothing)")
        return kind, ("the operator's kind; " if asked else f"cleanup.policy {policy}; ") + how
    if not kept:
        said = f"the operator's kind {asked.value}" if asked else f"no kind of store kafkaops reads ({policy})"
        raise StreamsError(f"store {store!r} (changelog {changelog}, {partitions} partition(s), cleanup.policy "
                           f"{policy}): {said} explains its {len(keyed)} sampled records: {'; '.join(evidence)}. "
                           "kafkaops copies key-value, window and session store changelogs; nothing was changed. "
                           f"If the store is one of those, {param}")
    raise StreamsError(f"store {store!r} (changelog {changelog}, {partitions} partition(s)): its "
                       f"{len(keyed)} sampled records fit {' and '.join(k.value for k in kept)} stores alike; "
                       f"nothing was changed; {param}")


def read_application(application_id: str, cluster: Cluster, configs: Mapping[str, Mapping[str, str]],
                     samples: Mapping[str, Sequence[ChangelogSample]], *,
                     kinds: Mapping[str, StoreKind] | None = None, others: Iterable[str] = ()) -> StreamsApplication:
    """The application ``application_id`` as ``cluster`` shows it (its group, input topics, changelogs and
    repartition topics), with each store's kind (:func:`store_kind`) from its changelog's ``configs`` and
    ``samples`` (changelog -> records read from it) and the operator's ``kinds`` (store -> kind).

    Refuses (:class:`StreamsError`, nothing changed) an application the cluster does not show, input topics
    of different partition counts, a changelog whose count differs from the inputs', a store whose kind the
    data does not tell, and a kind named for a store the application does not have.

    An internal topic named for a longer application id that starts with this one (``others``, such as the
    id the application is migrated to, or a consumer group's id on the cluster) is that application's, not
    this one's: ``app-p12-counts-changelog`` is the changelog of store ``counts`` of ``app-p12``."""
    kinds = dict(kinds or {})
    if not _APPLICATION_ID.match(application_id or ""):
        raise ConfigError(f"application.id {application_id!r} is not a valid Kafka Streams application id "
                          "(letters, digits, '.', '_' and '-')")
    group = next((g for g in cluster.groups if g.group_id == application_id), None)
    if group is None:
        raise StreamsError(f"Kafka Streams application {application_id!r}: no consumer group of that id on the "
                           f"cluster ({len(cluster.groups)} groups); is the application.id right, and has the "
                           "application committed offsets? Nothing was changed")
    longer = {o + "-" for o in (*others, *(g.group_id for g in cluster.groups))
              if o.startswith(application_id + "-")}
    topics = {t for t in cluster.topics if not any(t.startswith(o) for o in longer)}
    committed: dict[str, dict[int, int]] = {}
    for at in group.partitions:
        if at.committed is not None:
            committed.setdefault(at.topic, {})[at.partition] = at.committed
    prefix = application_id + "-"
    inputs = []
    for topic in sorted(committed):
        if _is_repartition(application_id, topic) or topic not in topics:
            continue
        parts = cluster.partitions_of(topic)
        inputs.append(InputTopic(topic, len(parts), tuple(sorted(committed[topic].items())),
                                 tuple((p.partition, p.end_offset or 0) for p in parts)))
    if not inputs:
        raise StreamsError(f"Kafka Streams application {application_id!r}: its group has committed no offset on an "
                           "input topic; run the application until it commits, then migrate it. Nothing was changed")
    counts = {i.name: i.partitions for i in inputs}
    if len(set(counts.values())) > 1:
        raise StreamsError(f"Kafka Streams application {application_id!r}: its input topics have different "
                           f"partition counts ({', '.join(f'{t} {n}' for t, n in sorted(counts.items()))}); kafkaops "
                           "migrates inputs of one count together. Nothing was changed")
    count = inputs[0].partitions
    repartitions = []
    for topic in sorted(t for t in topics if _is_repartition(application_id, t)):
        parts = cluster.partitions_of(topic)
        done = committed.get(topic, {})  # nothing committed: every record still there is unread
        lag = sum(max(0, (p.end_offset or 0) - done.get(p.partition, p.start_offset or 0)) for p in parts)
        repartitions.append(InternalTopic(topic, len(parts), lag))
    stores = []
    for topic in sorted(t for t in topics if t.startswith(prefix) and t.endswith(_CHANGELOG)):
        name = topic[len(prefix):-len(_CHANGELOG)]
        parts = cluster.partitions_of(topic)
        if len(parts) != count:
            raise StreamsError(f"store {name!r}: changelog {topic} has {len(parts)} partition(s), the inputs "
                               f"{count}; Kafka Streams keeps them equal, so this is not the application's "
                               "changelog as kafkaops reads it. Nothing was changed")
        topic_configs = dict(configs.get(topic) or {})
        kind, how = store_kind(name, topic, len(parts), topic_configs.get("cleanup.policy", "delete"),
                               samples.get(topic, ()), kinds.pop(name, None))
        stores.append(Store(name, topic, len(parts), kind, how,
                            sum((p.end_offset or 0) - (p.start_offset or 0) for p in parts),
                            tuple(sorted(topic_configs.items()))))
    if kinds:
        raise ConfigError(f"streams_store_kinds names store(s) {sorted(kinds)} that application {application_id!r} "
                          f"does not have; its stores are {[s.name for s in stores] or 'none'}")
    return StreamsApplication(application_id, group.state, group.members, tuple(inputs), tuple(stores),
                              tuple(repartitions))


# -- the plan ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class InputMove:
    """An input topic copied to ``target`` of the new count by its record key."""

    source: str
    target: str

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "target": self.target}


@dataclass(frozen=True)
class StoreMove:
    """A store's changelog copied to the new application's changelog by the store's key rule."""

    store: Store
    target: str

    @property
    def key_rule(self) -> str:
        return self.store.kind.key_rule

    def to_dict(self) -> dict[str, Any]:
        return {"store": self.store.to_dict(), "target": self.target}


@dataclass(frozen=True)
class StreamsPlan:
    """The migration of application ``application_id`` from ``old_partitions`` to ``new_partitions``: the
    new application ``new_application_id`` reads ``inputs``' targets with ``stores`` restored from their
    copied changelogs; ``repartitions`` are drained by the old application, not copied."""

    application_id: str
    new_application_id: str
    old_partitions: int
    new_partitions: int
    inputs: tuple[InputMove, ...]
    stores: tuple[StoreMove, ...]
    repartitions: tuple[InternalTopic, ...] = ()

    def copies(self) -> tuple[tuple[str, str, str], ...]:
        """Every topic copy of the plan: (source, target, key rule), inputs first."""
        return (tuple((m.source, m.target, "record_key") for m in self.inputs)
                + tuple((m.store.changelog, m.target, m.key_rule) for m in self.stores))

    def backfills(self, ranges: Mapping[str, Mapping[int, tuple[int, int]]]) -> tuple[BackfillPlan, ...]:
        """The backfill of each copy over ``ranges`` (topic -> partition -> [start, end) offsets, a
        snapshot taken once the application has stopped)."""
        return tuple(BackfillPlan(source, tuple((p, s, e) for p, (s, e) in sorted(ranges[source].items())),
                                  target, self.new_partitions, key_rule=rule)
                     for source, target, rule in self.copies())

    def to_dict(self) -> dict[str, Any]:
        return {"application_id": self.application_id, "new_application_id": self.new_application_id,
                "old_partitions": self.old_partitions, "new_partitions": self.new_partitions,
                "inputs": [m.to_dict() for m in self.inputs], "stores": [m.to_dict() for m in self.stores],
                "repartitions": [r.to_dict() for r in self.repartitions]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StreamsPlan:
        try:
            return cls(str(data["application_id"]), str(data["new_application_id"]), int(data["old_partitions"]),
                       int(data["new_partitions"]),
                       tuple(InputMove(str(m["source"]), str(m["target"])) for m in data["inputs"]),
                       tuple(StoreMove(Store.from_dict(m["store"]), str(m["target"])) for m in data["stores"]),
                       tuple(InternalTopic(str(r["name"]), int(r["partitions"]),
                                           None if r.get("lag") is None else int(r["lag"]))
                             for r in data.get("repartitions", ())))
        except (KeyError, TypeError, ValueError) as err:
            raise StreamsError(f"cannot read a Streams migration plan from this dict ({err!r}); expected the shape "
                               "of StreamsPlan.to_dict()") from err

    def start_text(self) -> str:
        """What the operator does once the cut is done."""
        topics = ", ".join(f"{m.target} (was {m.source})" for m in self.inputs)
        return (f"start the application with application.id={self.new_application_id}, reading {topics}; "
                f"its state is restored from {len(self.stores)} copied changelog(s). "
                f"The old application {self.application_id} and its topics are unchanged for a rollback: delete them "
                "once the new application runs as it should")

    def markdown(self, live: str | None = None) -> str:
        """The plan as the approval shows it: each topic, store and internal topic, and what happens to it, and
        the operator's steps (``live``: the quiesce, ``manual`` or ``acl``, of a live cut-over)."""
        lines = [f"**Kafka Streams application `{self.application_id}`**: {self.old_partitions} -> "
                 f"{self.new_partitions} partitions, restarted as application `{self.new_application_id}`. "
                 "Nothing of the old application is changed: it stays whole for a rollback.", "",
                 "| what | old | new | how |", "|---|---|---|---|"]
        for m in self.inputs:
            lines.append(f"| input topic | `{m.source}` ({self.old_partitions}) | `{m.target}` ({self.new_partitions}) "
                         "| copied by the record key, per-key order kept, exactly once |")
        for s in self.stores:
            lines.append(f"| {s.store.kind.value.replace('_', '-')} store `{s.store.name}` | `{s.store.changelog}` "
                         f"({s.store.records:,} offsets) | `{s.target}` | changelog copied by `{s.key_rule}` "
                         f"(told by {s.store.how}); tombstones and headers kept |")
        for r in self.repartitions:
            lag = "nothing committed" if r.lag is None else f"lag {r.lag:,} now"
            lines.append(f"| repartition topic | `{r.name}` ({lag}) | started empty by the new application | "
                         "not copied: the old application must read it to its end before the cut |")
        start = (f"start the application with `application.id={self.new_application_id}` reading "
                 + ", ".join(f"`{m.target}` for `{m.source}`" for m in self.inputs))
        inputs = ", ".join(f"`{m.source}`" for m in self.inputs)
        if live is None:
            lines += ["", "**Your steps:** stop every instance of the application (the cut waits for its group "
                      f"`{self.application_id}` to have no member); kafkaops then checks every repartition topic is "
                      "read to its end, copies the inputs and changelogs, and commits the translated input offsets "
                      f"for group `{self.new_application_id}`. Then {start}."]
        else:
            stop = ("kafkaops denies writes to " + inputs + " (DENY Write ACLs) and asks you to" if live == "acl"
                    else "the record asks you to stop every producer of " + inputs + ", then to")
            lines += ["", f"**Your steps (live cut-over, quiesce={live}):** nothing while kafkaops copies every "
                      "topic above and its tail copies catch up: the application and its producers keep running. "
                      f"Then {stop} let the application read its inputs and repartition topics to their end and "
                      f"stop every instance of it. It is down only while kafkaops copies the last records, gates "
                      f"each copy and commits its offsets for `{self.new_application_id}`; then the record asks "
                      f"for the switch: move the producers to the new inputs and {start}. Approve the switch once "
                      "they run; Reject rolls back (the old application is unchanged)."]
        return "\n".join(lines)


def plan_migration(app: StreamsApplication, *, new_application_id: str, new_partitions: int,
                   targets: Mapping[str, str] | None = None, existing: Iterable[str] = ()) -> StreamsPlan:
    """The migration of ``app`` to ``new_partitions``: each input to ``targets[input]`` (default the next free
    ``<topic>.vN``), each changelog to ``new_application_id``'s. Refuses a count that is not larger, a new
    application id equal to the old one or already holding internal topics, and targets that clash."""
    existing = set(existing)
    problems = []
    if new_partitions <= app.partitions:
        problems.append(f"new_partitions {new_partitions} is not more than the inputs' {app.partitions}")
    if not _APPLICATION_ID.match(new_application_id or ""):
        problems.append(f"new application.id {new_application_id!r} is not a valid application id")
    elif new_application_id == app.application_id:
        problems.append("the new application.id must differ from the old one: the old application stays whole "
                        "for a rollback")
    else:
        taken = sorted(t for t in existing if t.startswith(new_application_id + "-")
                       and (t.endswith(_CHANGELOG) or t.endswith(_REPARTITION)))
        if taken:
            problems.append(f"application.id {new_application_id!r} already has internal topics ({', '.join(taken[:5])}"
                            f"{', ...' if len(taken) > 5 else ''}); choose another id or delete them")
    targets = dict(targets or {})
    stray = sorted(set(targets) - {i.name for i in app.inputs})
    if stray:
        problems.append(f"targets name topic(s) {stray} that are not inputs of {app.application_id!r} "
                        f"({[i.name for i in app.inputs]})")
    moves = []
    taken_names = set(existing)
    for i in app.inputs:
        target = targets.get(i.name) or backfill.next_target_topic(i.name, taken_names)
        if target in existing:
            problems.append(f"target topic {target} of input {i.name} exists already")
        taken_names.add(target)
        moves.append(InputMove(i.name, target))
    if len({m.target for m in moves}) < len(moves):
        problems.append(f"two inputs share a target: {[m.to_dict() for m in moves]}")
    if problems:
        raise StreamsError(f"cannot plan the migration of Kafka Streams application {app.application_id!r}: "
                           + "; ".join(problems) + ". Nothing was changed")
    stores = tuple(StoreMove(s, changelog_topic(new_application_id, s.name)) for s in app.stores)
    return StreamsPlan(app.application_id, new_application_id, app.partitions, new_partitions, tuple(moves), stores,
                       app.repartitions)


# -- the cut's result ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class CopyDone:
    """One topic copied at the cut: records on each side and its gate's verdict."""

    source: str
    target: str
    key_rule: str
    source_records: int
    target_records: int
    dead_letters: int
    gate_passed: bool
    seconds: float = 0.0  # the copy and its gate

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "target": self.target, "key_rule": self.key_rule,
                "source_records": self.source_records, "target_records": self.target_records,
                "dead_letters": self.dead_letters, "gate_passed": self.gate_passed, "seconds": round(self.seconds, 3)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CopyDone:
        return cls(str(data["source"]), str(data["target"]), str(data["key_rule"]), int(data["source_records"]),
                   int(data["target_records"]), int(data["dead_letters"]), bool(data["gate_passed"]),
                   float(data.get("seconds", 0.0)))


@dataclass(frozen=True)
class OffsetsMoved:
    """An input's committed offsets: the old application's on the source, the new one's on the target."""

    source: str
    target: str
    committed: tuple[tuple[int, int], ...]
    translated: tuple[tuple[int, int], ...]
    redelivered: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "target": self.target, "committed": {str(p): o for p, o in self.committed},
                "translated": {str(p): o for p, o in self.translated}, "redelivered": self.redelivered}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> OffsetsMoved:
        return cls(str(data["source"]), str(data["target"]),
                   tuple(sorted((int(p), int(o)) for p, o in dict(data["committed"]).items())),
                   tuple(sorted((int(p), int(o)) for p, o in dict(data["translated"]).items())),
                   int(data.get("redelivered", 0)))


def _offsets_of(data: Mapping[str, Mapping[Any, Any]]) -> dict[str, dict[int, int]]:
    return {str(t): {int(p): int(o) for p, o in ends.items()} for t, ends in data.items()}


@dataclass(frozen=True)
class LiveCut:
    """When a live cut's moments were, as observed (epoch seconds), and where it left each topic.

    ``asked_at``: the quiesce asked for (with ``acl``: the DENY Write ACLs up); ``stopped_at``: the
    inputs seen still and the application's group empty; ``ready_at``: the new application's offsets
    committed and its start asked for. ``source_ends``: each input's end offsets at the quiesce (what the
    copy holds); ``target_ends``: each copied input's target end offsets after the last part (where the
    producers' first writes to it begin)."""

    how: str
    asked_at: float
    stopped_at: float
    ready_at: float
    source_ends: Mapping[str, Mapping[int, int]]
    target_ends: Mapping[str, Mapping[int, int]]
    tail_records: int = 0  # copied by the tail after the backfills, the last parts included
    last_part_records: int = 0  # copied after the application stopped

    @property
    def stopped_s(self) -> float:
        """How long the application was down before the new one could start: from its group seen empty
        to the new group's offsets committed."""
        return max(0.0, self.ready_at - self.stopped_at)

    @property
    def window_s(self) -> float:
        """From the quiesce asked for to the switch asked for: the inputs' producers wait this long at least."""
        return max(0.0, self.ready_at - self.asked_at)

    def to_dict(self) -> dict[str, Any]:
        return {"how": self.how, "asked_at": self.asked_at, "stopped_at": self.stopped_at, "ready_at": self.ready_at,
                "source_ends": {t: {str(p): o for p, o in e.items()} for t, e in self.source_ends.items()},
                "target_ends": {t: {str(p): o for p, o in e.items()} for t, e in self.target_ends.items()},
                "tail_records": self.tail_records, "last_part_records": self.last_part_records}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LiveCut:
        return cls(str(data["how"]), float(data["asked_at"]), float(data["stopped_at"]), float(data["ready_at"]),
                   _offsets_of(data["source_ends"]), _offsets_of(data["target_ends"]), int(data.get("tail_records", 0)),
                   int(data.get("last_part_records", 0)))


@dataclass(frozen=True)
class StreamsCut:
    """The cut of a Streams migration as it happened: the repartition topics as the old application left
    them, every copy with its gate, the offsets committed for the new application, and for a live cut
    (``live``) its moments and end offsets."""

    plan: StreamsPlan
    repartitions: tuple[InternalTopic, ...]
    copies: tuple[CopyDone, ...]
    offsets: tuple[OffsetsMoved, ...]
    live: LiveCut | None = None

    @property
    def ready(self) -> bool:
        return all(c.gate_passed and c.dead_letters == 0 for c in self.copies)

    def switch_text(self) -> str:
        """What the operator does now: producers to the new inputs (a live cut), the new application started."""
        if self.live is None:
            return self.plan.start_text()
        moves = ", ".join(f"{m.source} to {m.target}" for m in self.plan.inputs)
        return (f"Move the producers of the application's inputs ({moves}) and {self.plan.start_text()}. "
                "Approve the switch once they run on the new topics; Reject rolls the migration back (the old "
                "application and its topics are unchanged)")

    def to_dict(self) -> dict[str, Any]:
        out = {"plan": self.plan.to_dict(), "repartitions": [r.to_dict() for r in self.repartitions],
               "copies": [c.to_dict() for c in self.copies], "offsets": [o.to_dict() for o in self.offsets]}
        if self.live is not None:
            out["live"] = self.live.to_dict()
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StreamsCut:
        return cls(StreamsPlan.from_dict(data["plan"]),
                   tuple(InternalTopic(str(r["name"]), int(r["partitions"]), r.get("lag")) for r in data["repartitions"]),
                   tuple(CopyDone.from_dict(c) for c in data["copies"]),
                   tuple(OffsetsMoved.from_dict(o) for o in data["offsets"]),
                   LiveCut.from_dict(data["live"]) if data.get("live") else None)


def undrained(repartitions: Iterable[InternalTopic]) -> tuple[InternalTopic, ...]:
    """The repartition topics the application has not read to their end (lag above 0)."""
    return tuple(r for r in repartitions if r.lag)
