"""A rekey backfill as a value: what to copy, where each record goes, and proof that it went there.

Raising a topic's partition count changes ``murmur2(key) % partitions``, so a key's old records sit
in another partition than its new ones and per-key order breaks. The repair copies a bounded
snapshot of the source into a target topic, each record on the partition Kafka's Java producer
would give its key (:func:`kafkaops.platform.partitioner.partition_for`), in per-key source order, each
record exactly once, also when the copy is run again or restarted after a crash.

Pure (stdlib and the pure kafkaops layer only): :class:`BackfillPlan` (frozen, JSON round-trip),
:func:`target_partition`, the lineage header (``source_topic/partition/offset``) that makes re-runs
idempotent, the per-key order clock, and :func:`check_integrity` over collected rows. The new key of
a record comes from its key rule (:mod:`kafkaops.platform.keyrules`, the contract of docs/key-rules.md);
a record without one is a dead letter carrying the rule's reason code (:data:`CODE_HEADER`).

**Per-key source order.** Records of one key in one source partition are in offset order. A key
whose records come from several source partitions (an earlier partition increase moved it) is
merged by source timestamp: each record gets an *order timestamp*, the largest timestamp of its
key in its source partition up to and including its offset (a running maximum, so records of one
partition never swap even when producer clocks made timestamps go backwards), and records are
ordered by ``(order timestamp, source partition, source offset)``. For a key living in one source
partition this is exactly offset order. :class:`OrderClock` computes it while records stream by.
"""
from __future__ import annotations

import hashlib
import json
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kafkaops.errors import KafkaOpsError
from kafkaops.platform.keyrules import KeyRule, KeyRuleError, extract, rule_of
from kafkaops.platform.partitioner import partition_for

__all__ = [
    "CODE_HEADER", "LINEAGE_HEADER", "REASON_HEADER", "BackfillError", "BackfillIntegrityError", "BackfillPlan",
    "IntegrityReport", "OrderClock", "OutputRecord", "SourceRecord", "check_integrity", "format_lineage",
    "parse_lineage", "target_partition", "translate_offsets", "value_digest",
]

LINEAGE_HEADER = "kafkaops.lineage"
#: Dead letters carry the key rule's reason code (docs/key-rules.md, e.g. ``FIELD_MISSING``) in this header ...
CODE_HEADER = "kafkaops.dead_letter_code"
#: ... and a free-text detail in this one (not part of the contract: the JVM and Python word it apart).
REASON_HEADER = "kafkaops.dead_letter_reason"
_MASK64 = (1 << 64) - 1
_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")


class BackfillError(KafkaOpsError):
    """A backfill plan that cannot work, or a target that is not a prefix of the plan."""


class BackfillIntegrityError(BackfillError):
    """The copied data breaks an invariant; ``report`` holds every finding."""

    def __init__(self, message: str, report: IntegrityReport) -> None:
        super().__init__(message)
        self.report = report


# -- placement -------------------------------------------------------------------------------------------

def target_partition(key: bytes, partitions: int) -> int:
    """Where Kafka's Java default partitioner puts ``key`` in a topic of ``partitions``."""
    return partition_for(key, partitions)


# -- lineage ---------------------------------------------------------------------------------------------

def format_lineage(topic: str, partition: int, offset: int) -> str:
    """The lineage header value of a copied record: ``source_topic/partition/offset``."""
    return f"{topic}/{int(partition)}/{int(offset)}"


def parse_lineage(value: bytes | str) -> tuple[str, int, int]:
    text = value.decode("utf-8") if isinstance(value, (bytes, bytearray)) else value
    try:
        topic, partition, offset = text.rsplit("/", 2)
        return topic, int(partition), int(offset)
    except ValueError as err:
        raise BackfillError(f"lineage header {text!r} is not 'topic/partition/offset'; the record was not "
                            "written by a kafkaops backfill") from err


# -- the plan ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class BackfillPlan:
    """Copy ``source_offsets`` (partition -> [start, end), a bounded snapshot) of ``source_topic``
    into ``target_topic`` of ``target_partitions``, keyed by ``key_rule``; records without a key go
    to partition 0 of ``dead_letter_topic`` with the reason code and detail in headers."""

    source_topic: str
    source_offsets: tuple[tuple[int, int, int], ...]
    target_topic: str
    target_partitions: int
    key_rule: str = "record_key"
    dead_letter_topic: str = ""

    def __post_init__(self) -> None:
        offsets = tuple(sorted((int(p), int(s), int(e)) for p, s, e in self.source_offsets))
        object.__setattr__(self, "source_offsets", offsets)
        if not self.dead_letter_topic:
            object.__setattr__(self, "dead_letter_topic", f"{self.target_topic}.dlq")
        problems = []
        for name, topic in (("source_topic", self.source_topic), ("target_topic", self.target_topic),
                            ("dead_letter_topic", self.dead_letter_topic)):
            if not _TOPIC.match(topic or ""):
                problems.append(f"{name} {topic!r} is not a valid Kafka topic name")
        if len({self.source_topic, self.target_topic, self.dead_letter_topic}) < 3:
            problems.append(f"source {self.source_topic!r}, target {self.target_topic!r} and dead-letter "
                            f"{self.dead_letter_topic!r} topics must all differ")
        if self.target_partitions < 1:
            problems.append(f"target_partitions is {self.target_partitions}; give at least 1")
        parts = [p for p, _, _ in offsets]
        if len(set(parts)) != len(parts):
            problems.append(f"source_offsets name partition(s) {sorted({p for p in parts if parts.count(p) > 1})} "
                            "more than once")
        bad = [f"{p}: [{s}, {e})" for p, s, e in offsets if s < 0 or e < s]
        if bad:
            problems.append(f"source offset range(s) {', '.join(bad)} are not 0 <= start <= end")
        if not offsets:
            problems.append("source_offsets is empty; snapshot the source's start and end offsets")
        try:
            KeyRule(self.key_rule)
        except KeyRuleError as err:
            problems.append(str(err))
        if problems:
            raise BackfillError("bad backfill plan: " + "; ".join(problems))

    @property
    def rule(self) -> KeyRule:
        return rule_of(self.key_rule)

    @property
    def records(self) -> int:
        """Offsets in the snapshot (an upper bound on records: compaction leaves gaps)."""
        return sum(e - s for _, s, e in self.source_offsets)

    def offsets_json(self, which: str) -> str:
        """Spark's ``startingOffsets`` (``which='start'``) or ``endingOffsets`` (``'end'``, exclusive) JSON."""
        index = {"start": 1, "end": 2}[which]
        return json.dumps({self.source_topic: {str(o[0]): o[index] for o in self.source_offsets}})

    def to_dict(self) -> dict[str, Any]:
        return {"source_topic": self.source_topic,
                "source_offsets": [{"partition": p, "start": s, "end": e} for p, s, e in self.source_offsets],
                "target_topic": self.target_topic, "target_partitions": self.target_partitions,
                "key_rule": self.key_rule, "dead_letter_topic": self.dead_letter_topic}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BackfillPlan:
        try:
            return cls(source_topic=data["source_topic"],
                       source_offsets=tuple((o["partition"], o["start"], o["end"]) for o in data["source_offsets"]),
                       target_topic=data["target_topic"], target_partitions=int(data["target_partitions"]),
                       key_rule=data.get("key_rule", "record_key"),
                       dead_letter_topic=data.get("dead_letter_topic", ""))
        except (KeyError, TypeError) as err:
            raise BackfillError(f"cannot read a backfill plan from this dict ({err}); expected the shape of "
                                "BackfillPlan.to_dict()") from err

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> BackfillPlan:
        try:
            return cls.from_dict(json.loads(text))
        except json.JSONDecodeError as err:
            raise BackfillError(f"backfill plan JSON is not valid: {err}") from err


def next_target_topic(source_topic: str, existing: Iterable[str]) -> str:
    """``<topic>.v2``, or the next free version: ``orders.v2`` -> ``orders.v3``."""
    taken = set(existing)
    m = re.match(r"^(.*)\.v(\d+)$", source_topic)
    base, version = (m.group(1), int(m.group(2)) + 1) if m else (source_topic, 2)
    while f"{base}.v{version}" in taken:
        version += 1
    return f"{base}.v{version}"


# -- per-key order -----------------------------------------------------------------------------------------

class OrderClock:
    """The order timestamp of each record, fed in source-partition offset order (see the module
    docstring). Refuses offsets that go backwards within a source partition: the running maximum
    would be wrong."""

    def __init__(self) -> None:
        self._latest: dict[tuple[int, bytes], int] = {}
        self._last_offset: dict[int, int] = {}

    def tick(self, partition: int, offset: int, timestamp: int, key: bytes | None) -> int:
        last = self._last_offset.get(partition)
        if last is not None and offset <= last:
            raise BackfillError(f"source partition {partition}: offset {offset} came after {last}; records "
                                "must arrive in offset order per partition (do not set minPartitions or "
                                "maxRecordsPerPartition on the Kafka source)")
        self._last_offset[partition] = offset
        if key is None:
            return timestamp
        slot = (partition, key)
        latest = max(self._latest.get(slot, timestamp), timestamp)
        self._latest[slot] = latest
        return latest


def order_key(order_ts: int, partition: int, offset: int) -> tuple[int, int, int]:
    return (order_ts, partition, offset)


# -- integrity ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SourceRecord:
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None


@dataclass(frozen=True)
class OutputRecord:
    """A record read back from the target or dead-letter topic (``lineage`` and, on a dead letter,
    ``code`` from their headers)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    lineage: str | None
    code: str | None = None


def value_digest(value: bytes | None) -> int:
    """64 bits of BLAKE2b of one value (a tombstone hashes as empty, plus a marker)."""
    data = b"\x00tombstone" if value is None else b"\x01" + bytes(value)
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")


def checksum(values: Iterable[bytes | None]) -> str:
    """Order-independent checksum: the sum of :func:`value_digest` modulo 2**64, as 16 hex digits."""
    total = 0
    for v in values:
        total = (total + value_digest(v)) & _MASK64
    return f"{total:016x}"


@dataclass(frozen=True)
class PartitionIntegrity:
    """One target partition (or the dead-letter topic) read back."""

    topic: str
    partition: int
    records: int
    keys: int
    misplaced: int
    split_keys: int
    order_breaks: int
    duplicate_lineages: int
    unknown_lineages: int


@dataclass(frozen=True)
class IntegrityReport:
    """The invariants of a backfill, measured; ``failures`` says in words what broke."""

    source_topic: str
    target_topic: str
    target_partitions: int
    source_records: int
    target_records: int
    dead_letters: int
    expected_dead_letters: int
    source_checksum: str
    output_checksum: str
    partitions: tuple[PartitionIntegrity, ...]
    failures: tuple[str, ...]
    #: dead letters per reason code the rule gives their source records
    dead_letter_codes: Mapping[str, int] = field(default_factory=dict)
    #: dead letters whose code header is not the code the rule gives
    wrong_codes: int = 0

    @property
    def ok(self) -> bool:
        return not self.failures

    def require(self) -> IntegrityReport:
        if self.failures:
            raise BackfillIntegrityError(
                f"backfill {self.source_topic} -> {self.target_topic} broke {len(self.failures)} invariant(s): "
                f"{'; '.join(self.failures)[:3000]}. Delete the target and dead-letter topics and run the "
                "backfill again", self)
        return self

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return {**asdict(self), "ok": self.ok}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> IntegrityReport:
        fields = {k: v for k, v in data.items() if k != "ok"}
        fields["partitions"] = tuple(PartitionIntegrity(**p) for p in data["partitions"])
        fields["failures"] = tuple(data["failures"])
        return cls(**fields)

    def rows(self) -> list[dict[str, Any]]:
        """One row per target partition and dead-letter partition, for the backfill gate."""
        return [{"name": f"{p.topic}-{p.partition}", "topic": p.topic, "partition": p.partition,
                 "records": p.records, "keys": p.keys, "misplaced": p.misplaced, "split_keys": p.split_keys,
                 "order_breaks": p.order_breaks, "duplicate_lineages": p.duplicate_lineages,
                 "unknown_lineages": p.unknown_lineages} for p in self.partitions]

    def totals(self) -> dict[str, Any]:
        return {"source_topic": self.source_topic, "target_topic": self.target_topic,
                "source_records": self.source_records, "target_records": self.target_records,
                "dead_letters": self.dead_letters, "accounted": self.target_records + self.dead_letters,
                "expected_dead_letters": self.expected_dead_letters, "wrong_codes": self.wrong_codes,
                "source_checksum": self.source_checksum, "output_checksum": self.output_checksum}


def expected_order(plan: BackfillPlan, source: Iterable[SourceRecord]
                   ) -> tuple[dict[bytes, list[str]], dict[str, bytes | None], dict[str, str]]:
    """Per new key, the lineages in per-key source order; each lineage's new key; each dead-letter
    lineage's reason code."""
    rule = plan.rule
    clock = OrderClock()
    keyed: dict[bytes, list[tuple[tuple[int, int, int], str]]] = defaultdict(list)
    key_of: dict[str, bytes | None] = {}
    dead: dict[str, str] = {}
    for r in sorted(source, key=lambda r: (r.partition, r.offset)):
        new_key, code, _ = extract(r.key, r.value, rule)
        lineage = format_lineage(plan.source_topic, r.partition, r.offset)
        key_of[lineage] = new_key
        ts = clock.tick(r.partition, r.offset, r.timestamp, new_key)
        if new_key is None:
            dead[lineage] = code or ""
        else:
            keyed[new_key].append((order_key(ts, r.partition, r.offset), lineage))
    return {k: [lin for _, lin in sorted(v)] for k, v in keyed.items()}, key_of, dead


def check_integrity(plan: BackfillPlan, source: Iterable[SourceRecord], target: Iterable[OutputRecord],
                    dead_letters: Iterable[OutputRecord] = ()) -> IntegrityReport:
    """Every invariant of a finished backfill over rows read back (pure):

    * source records == target records + dead letters, and the dead letters are exactly the
      records without a key under the rule, each carrying the reason code the rule gives it
      (:mod:`kafkaops.platform.keyrules`: the Python side of the contract, so this cross-checks the
      JVM side that wrote them);
    * every lineage of the snapshot appears once, no lineage repeats, none is unknown;
    * each target record's key is its source record's new key, on ``partition_for(key, N)``,
      and every key lives in exactly one target partition;
    * per key, the target order is the per-key source order (module docstring);
    * the order-independent checksum of values is the same on both sides.
    """
    source = list(source)
    target = sorted(target, key=lambda r: (r.partition, r.offset))
    dead_letters = sorted(dead_letters, key=lambda r: (r.partition, r.offset))
    expected, key_of, expected_dead = expected_order(plan, source)
    failures: list[str] = []
    n = plan.target_partitions

    seen: dict[str, int] = defaultdict(int)
    for r in (*target, *dead_letters):
        if r.lineage is not None:
            seen[r.lineage] += 1
    missing_lineage = [r for r in (*target, *dead_letters) if r.lineage is None]
    if missing_lineage:
        r = missing_lineage[0]
        failures.append(f"{len(missing_lineage)} record(s) carry no {LINEAGE_HEADER} header, e.g. "
                        f"{r.topic}-{r.partition}@{r.offset}: something other than the backfill wrote there")

    rows: list[PartitionIntegrity] = []
    keys_in: dict[bytes, set[int]] = defaultdict(set)
    actual: dict[bytes, list[str]] = defaultdict(list)
    for r in target:
        if r.key is not None:
            keys_in[r.key].add(r.partition)
            actual[r.key].append(r.lineage or "?")
    split = {k for k, ps in keys_in.items() if len(ps) > 1}
    broken = {k for k in expected.keys() | actual.keys() if expected.get(k, []) != actual.get(k, [])}

    def partition_row(topic: str, partition: int, records: list[OutputRecord], *, is_target: bool
                      ) -> PartitionIntegrity:
        keys = {r.key for r in records}
        misplaced = sum(1 for r in records if is_target and (r.key is None or partition_for(r.key, n) != partition))
        return PartitionIntegrity(
            topic=topic, partition=partition, records=len(records), keys=len(keys), misplaced=misplaced,
            split_keys=sum(1 for k in keys if k in split) if is_target else 0,
            order_breaks=sum(1 for k in keys if k in broken) if is_target else 0,
            duplicate_lineages=sum(1 for r in records if r.lineage and seen[r.lineage] > 1),
            unknown_lineages=sum(1 for r in records if r.lineage and r.lineage not in key_of))

    by_partition: dict[int, list[OutputRecord]] = defaultdict(list)
    for r in target:
        by_partition[r.partition].append(r)
    for p in range(n):
        rows.append(partition_row(plan.target_topic, p, by_partition.get(p, []), is_target=True))
    extra = sorted(set(by_partition) - set(range(n)))
    if extra:
        failures.append(f"target {plan.target_topic} has records in partition(s) {extra}, beyond the plan's {n}")
    dl_by: dict[int, list[OutputRecord]] = defaultdict(list)
    for r in dead_letters:
        dl_by[r.partition].append(r)
    for p in sorted(dl_by) or [0]:
        rows.append(partition_row(plan.dead_letter_topic, p, dl_by.get(p, []), is_target=False))

    if len(source) != len(target) + len(dead_letters):
        failures.append(f"source {plan.source_topic} has {len(source)} records in the snapshot but target "
                        f"{plan.target_topic} holds {len(target)} and dead-letter {plan.dead_letter_topic} "
                        f"{len(dead_letters)} (sum {len(target) + len(dead_letters)})")
    dups = sorted(lin for lin, c in seen.items() if c > 1)
    if dups:
        failures.append(f"{len(dups)} source record(s) were written more than once, e.g. {dups[:3]}")
    unknown = sorted(lin for lin in seen if lin not in key_of)
    if unknown:
        failures.append(f"{len(unknown)} lineage(s) name no record of the snapshot, e.g. {unknown[:3]}")
    lost = sorted(set(key_of) - set(seen), key=parse_lineage)
    if lost:
        failures.append(f"{len(lost)} source record(s) are in neither the target nor the dead-letter topic, "
                        f"e.g. {lost[:3]}")
    wrong_dead = sorted({r.lineage for r in dead_letters if r.lineage} - expected_dead.keys())
    dead_in_target = sorted({r.lineage for r in target if r.lineage} & expected_dead.keys())
    if wrong_dead or dead_in_target:
        failures.append(f"{len(wrong_dead)} record(s) with a key went to the dead-letter topic (e.g. "
                        f"{wrong_dead[:3]}) and {len(dead_in_target)} without one to the target (e.g. "
                        f"{dead_in_target[:3]})")
    wrong_code = [r for r in dead_letters if r.lineage in expected_dead and r.code != expected_dead[r.lineage]]
    if wrong_code:
        r = wrong_code[0]
        failures.append(f"{len(wrong_code)} dead letter(s) carry another {CODE_HEADER} than rule {plan.key_rule!r} "
                        f"gives, e.g. {r.topic}-{r.partition}@{r.offset} ({r.lineage}) carries {r.code!r}, expected "
                        f"{expected_dead[r.lineage]!r}")
    wrong_key = [r for r in target if r.lineage in key_of and key_of[r.lineage] != r.key]
    if wrong_key:
        r = wrong_key[0]
        failures.append(f"{len(wrong_key)} target record(s) carry another key than rule {plan.key_rule!r} gives, "
                        f"e.g. {r.topic}-{r.partition}@{r.offset} key {r.key!r}, expected {key_of[r.lineage]!r}")
    misplaced = sum(row.misplaced for row in rows)
    if misplaced:
        r = next(r for r in target if r.key is None or partition_for(r.key, n) != r.partition)
        want = "none (null key)" if r.key is None else str(partition_for(r.key, n))
        failures.append(f"{misplaced} target record(s) sit off their key's partition, e.g. key {r.key!r} at "
                        f"{r.topic}-{r.partition}@{r.offset}, partition_for gives {want} of {n}")
    if split:
        k = sorted(split)[0]
        failures.append(f"{len(split)} key(s) live in more than one target partition, e.g. {k!r} in "
                        f"{sorted(keys_in[k])}")
    if broken:
        k = sorted(broken)[0]
        want, got = expected.get(k, []), actual.get(k, [])
        at = next((i for i, (a, b) in enumerate(zip(want, got)) if a != b), min(len(want), len(got)))
        failures.append(f"{len(broken)} key(s) are out of per-key source order, e.g. {k!r}: position {at} holds "
                        f"{got[at] if at < len(got) else 'nothing'}, source order has "
                        f"{want[at] if at < len(want) else 'nothing'} ({len(got)} vs {len(want)} records)")
    src_sum = checksum(r.value for r in source)
    out_sum = checksum(r.value for r in (*target, *dead_letters))
    if src_sum != out_sum:
        failures.append(f"value checksum differs: source {src_sum}, target + dead letters {out_sum}; some value "
                        "was changed, lost or duplicated")
    return IntegrityReport(source_topic=plan.source_topic, target_topic=plan.target_topic, target_partitions=n,
                           source_records=len(source), target_records=len(target), dead_letters=len(dead_letters),
                           expected_dead_letters=len(expected_dead), source_checksum=src_sum,
                           output_checksum=out_sum, partitions=tuple(rows), failures=tuple(failures),
                           dead_letter_codes=dict(sorted(Counter(expected_dead.values()).items())),
                           wrong_codes=len(wrong_code))


# -- resume and cut-over -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class ResumePoint:
    """What an earlier run left in one output partition: ``written`` records, the last one's lineage.
    With ``source_partition`` set, only the records copied from that source partition count (a
    direct copy, where each source partition's records reach an output partition in offset order
    but interleaved with other source partitions')."""

    topic: str
    partition: int
    written: int
    last_lineage: str
    source_partition: int | None = None

    @property
    def name(self) -> str:
        where = f"{self.topic}-{self.partition}"
        return where if self.source_partition is None else f"{where} (from source partition {self.source_partition})"


def check_prefix(point: ResumePoint, planned_through_last: int) -> None:
    """The output partition must hold exactly the plan's records up to its last lineage: a prefix.
    Anything else (another writer, another plan) cannot be resumed without duplicates."""
    if point.written != planned_through_last:
        raise BackfillError(
            f"{point.name} holds {point.written} record(s) ending at lineage "
            f"{point.last_lineage}, but the plan puts {planned_through_last} record(s) there up to that lineage: "
            "the partition is not a prefix of this backfill (another writer, or another plan). Delete the "
            "target and dead-letter topics (or choose a new target topic) and run the backfill again")


def translate_offsets(source_topic: str, committed: Mapping[int, int],
                      target: Mapping[int, Sequence[tuple[int, str]]]) -> dict[int, dict[str, int]]:
    """Map a consumer group's committed source offsets (partition -> next offset to read) to target
    offsets. ``target`` holds, per target partition, ``(offset, lineage)`` in offset order.

    Per target partition the resume offset is the first record the group has not consumed, so
    nothing is lost; ``redelivered`` counts consumed records after it (read again: duplicates to
    the consumer). It is 0 exactly when the consumed records form a prefix of the partition:
    always for a group that has caught up to the snapshot's end (the usual cut-over: stop the
    producers, let the consumers drain, translate); the audit records the number either way.
    A source partition the group never committed counts as not consumed.
    """
    out: dict[int, dict[str, int]] = {}
    for p, records in sorted(target.items()):
        resume = None
        redelivered = 0
        end = records[-1][0] + 1 if records else 0
        for offset, lineage in records:
            topic, sp, so = parse_lineage(lineage)
            consumed = topic == source_topic and so < committed.get(sp, 0)
            if resume is None and not consumed:
                resume = offset
            elif resume is not None and consumed:
                redelivered += 1
        out[p] = {"offset": end if resume is None else resume, "redelivered": redelivered}
    return out
