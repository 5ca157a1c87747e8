"""A rekey backfill as a value: what to copy, where each record goes, and proof that it went there.

Raising a topic's partition count changes ``murmur2(key) % partitions``, so a key's old records sit
in another partition than its new ones and per-key order breaks. The repair copies a bounded
snapshot of the source into a target topic, each record on the partition Kafka's Java producer
would give its key (:func:`kafkaops.platform.partitioner.partition_for`), in per-key source order, each
record exactly once, also when the copy is run again or restarted after a crash.

Pure (stdlib and the pure kafkaops layer only): :class:`BackfillPlan` (frozen, JSON round-trip),
:func:`target_partition`, the lineage header (``source_topic/partition/offset``) on every copied
record, the per-key order clock, :func:`check_integrity` over collected rows, and the slices the copy
is written in, each by transactions of its own that commit its marker (:func:`slices`), with the check
of what earlier runs committed (:func:`committed_output`). The new key of
a record comes from its key rule (:mod:`kafkaops.platform.keyrules`, the contract of docs/key-rules.md);
a record without one is a dead letter carrying the rule's reason code (:data:`CODE_HEADER`).

**Per-key source order.** Records of one key in one source partition are in offset order. A key
whose records come from several source partitions (an earlier partition increase moved it) is
merged by source timestamp: each record gets an *order timestamp*, the largest timestamp of its
key in its source partition up to and including its offset (a running maximum, so records of one
partition never swap even when producer clocks made timestamps go backwards), and records are
ordered by ``(order timestamp, source partition, source offset)``. For a key living in one source
partition this is exactly offset order. :class:`OrderClock` computes it while records stream by.

**A copy in passes** (a live migration: the backfill, then catch-up passes while producers keep
writing, :meth:`BackfillPlan.next_pass`) appends each pass after the one before: a pass copies
``[end of the last pass, end now)`` of every partition, its clock starts afresh, and the whole copy's
order is ``(pass, order timestamp, source partition, source offset)``. A pass accepts in the target
what earlier passes of the same copy wrote (lineage between the copy's origin and the pass's start)
and counts only its own records against its markers.
"""
from __future__ import annotations

import hashlib
import json
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

from kafkaops.errors import KafkaOpsError
from kafkaops.platform.keyrules import KeyRule, KeyRuleError, extract, rule_of
from kafkaops.platform.partitioner import partition_for

__all__ = [
    "CODE_HEADER", "LINEAGE_HEADER", "REASON_HEADER", "BackfillError", "BackfillIntegrityError", "BackfillPlan",
    "CommittedOutput", "IntegrityFindings", "IntegrityReport", "OrderClock", "OutputCount", "OutputRecord",
    "SourceRecord", "backfill_id", "check_integrity", "checksum_of_sums", "committed_output", "digest_halves",
    "format_lineage", "integrity_report", "parse_lineage", "slices", "target_partition",
    "translate_offsets", "value_digest",
]

LINEAGE_HEADER = "kafkaops.lineage"
#: Dead letters carry the key rule's reason code (docs/key-rules.md, e.g. ``FIELD_MISSING``) in this header ...
CODE_HEADER = "kafkaops.dead_letter_code"
#: ... and a free-text detail in this one (not part of the contract: the JVM and Python word it apart).
REASON_HEADER = "kafkaops.dead_letter_reason"
_MASK64 = (1 << 64) - 1
_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")


class BackfillError(KafkaOpsError):
    """A backfill plan that cannot work, or a target holding what this plan did not write."""


class BackfillIntegrityError(BackfillError):
    """The copied data breaks an invariant; ``report`` holds every finding."""

    final = True

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
    #: A copy in passes (a live migration's backfill, then catch-up passes): ``(partition, offset)``
    #: where each pass up to this plan's began (:meth:`next_pass`). Empty for a one-pass copy.
    pass_starts: tuple[tuple[int, int], ...] = ()

    def __post_init__(self) -> None:
        offsets = tuple(sorted((int(p), int(s), int(e)) for p, s, e in self.source_offsets))
        object.__setattr__(self, "source_offsets", offsets)
        # duplicates kept: a pass that found a partition empty starts where the next one does, and both count
        object.__setattr__(self, "pass_starts", tuple(sorted((int(p), int(o)) for p, o in self.pass_starts)))
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
        ends = {p: e for p, _, e in offsets}
        stray = [f"{p}@{o}" for p, o in self.pass_starts if p not in ends or o < 0 or o > ends[p]]
        if stray:
            problems.append(f"pass start(s) {', '.join(stray)} lie outside the plan's partitions or past their end; "
                            "build catch-up passes with BackfillPlan.next_pass")
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

    def origin(self, partition: int) -> int:
        """Where the copy of ``partition`` began: its first pass's start (this plan's start for one pass)."""
        start = next(s for p, s, _ in self.source_offsets if p == partition)
        return min([start] + [o for p, o in self.pass_starts if p == partition])

    @property
    def continues(self) -> bool:
        """Earlier passes copied part of the source into the target before this one."""
        return any(self.origin(p) < s for p, s, _ in self.source_offsets)

    def pass_of(self, partition: int, offset: int) -> int:
        """The pass that copies ``partition``'s record at ``offset``: how many passes began at or
        before it (0 for a one-pass copy). Every pass starts in every partition (an empty one where
        the partition had nothing new), so the number is the same pass in every partition."""
        return sum(1 for p, o in self.pass_starts if p == partition and o <= offset)

    def next_pass(self, ends: Mapping[int, int]) -> BackfillPlan:
        """The catch-up pass after this one: from this plan's ends to ``ends`` (partition -> end
        offset, exclusive; a partition not named, or behind, gets an empty range)."""
        starts = self.pass_starts or tuple((p, s) for p, s, _ in self.source_offsets)
        return replace(self, source_offsets=tuple((p, e, max(e, int(ends.get(p, e)))) for p, _, e in self.source_offsets),
                       pass_starts=starts + tuple((p, e) for p, _, e in self.source_offsets))

    def whole_copy(self) -> BackfillPlan:
        """All passes up to this one as one plan (each partition from its origin to this pass's
        end), with the pass starts: what the final integrity gate checks."""
        return replace(self, source_offsets=tuple((p, self.origin(p), e) for p, _, e in self.source_offsets))

    def offsets_json(self, which: str) -> str:
        """Spark's ``startingOffsets`` (``which='start'``) or ``endingOffsets`` (``'end'``, exclusive) JSON."""
        index = {"start": 1, "end": 2}[which]
        return json.dumps({self.source_topic: {str(o[0]): o[index] for o in self.source_offsets}})

    def to_dict(self) -> dict[str, Any]:
        return {"source_topic": self.source_topic,
                "source_offsets": [{"partition": p, "start": s, "end": e} for p, s, e in self.source_offsets],
                "target_topic": self.target_topic, "target_partitions": self.target_partitions,
                "key_rule": self.key_rule, "dead_letter_topic": self.dead_letter_topic,
                # a one-pass plan's dict (and so its backfill_id) stays as it was before passes
                **({"pass_starts": [{"partition": p, "offset": o} for p, o in self.pass_starts]}
                   if self.pass_starts else {})}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BackfillPlan:
        try:
            return cls(source_topic=data["source_topic"],
                       source_offsets=tuple((o["partition"], o["start"], o["end"]) for o in data["source_offsets"]),
                       target_topic=data["target_topic"], target_partitions=int(data["target_partitions"]),
                       key_rule=data.get("key_rule", "record_key"),
                       dead_letter_topic=data.get("dead_letter_topic", ""),
                       pass_starts=tuple((o["partition"], o["offset"]) for o in data.get("pass_starts", ())))
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
        self._latest: dict[tuple[int, bytes, int], int] = {}
        self._last_offset: dict[int, int] = {}

    def tick(self, partition: int, offset: int, timestamp: int, key: bytes | None, copy_pass: int = 0) -> int:
        last = self._last_offset.get(partition)
        if last is not None and offset <= last:
            raise BackfillError(f"source partition {partition}: offset {offset} came after {last}; records "
                                "must arrive in offset order per partition (do not set minPartitions or "
                                "maxRecordsPerPartition on the Kafka source)")
        self._last_offset[partition] = offset
        if key is None:
            return timestamp
        slot = (partition, key, copy_pass)  # each pass of a copy in passes keeps a clock of its own
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


@dataclass(frozen=True, kw_only=True)
class IntegrityCounts:
    """What every read-back of a backfill counts: records on each side, dead letters, value
    checksums and the partitions read (:class:`IntegrityFindings` before wording, :class:`IntegrityReport` after)."""

    source_records: int
    target_records: int
    dead_letters: int
    expected_dead_letters: int
    source_checksum: str
    output_checksum: str
    partitions: tuple[PartitionIntegrity, ...]
    #: dead letters per reason code the rule gives their source records
    dead_letter_codes: Mapping[str, int] = field(default_factory=dict)
    #: dead letters whose code header is not the code the rule gives
    wrong_codes: int = 0


@dataclass(frozen=True, kw_only=True)
class IntegrityReport(IntegrityCounts):
    """The invariants of a backfill, measured; ``failures`` says in words what broke."""

    source_topic: str
    target_topic: str
    target_partitions: int
    failures: tuple[str, ...]

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
        values = {k: v for k, v in data.items() if k != "ok"}
        values["partitions"] = tuple(PartitionIntegrity(**p) for p in data["partitions"])
        values["failures"] = tuple(data["failures"])
        return cls(**values)

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
    keyed: dict[bytes, list[tuple[tuple[int, int, int, int], str]]] = defaultdict(list)
    key_of: dict[str, bytes | None] = {}
    dead: dict[str, str] = {}
    for r in sorted(source, key=lambda r: (r.partition, r.offset)):
        new_key, code, _ = extract(r.key, r.value, rule)
        lineage = format_lineage(plan.source_topic, r.partition, r.offset)
        key_of[lineage] = new_key
        copy_pass = plan.pass_of(r.partition, r.offset)
        ts = clock.tick(r.partition, r.offset, r.timestamp, new_key, copy_pass)
        if new_key is None:
            dead[lineage] = code or ""
        else:
            keyed[new_key].append(((copy_pass, *order_key(ts, r.partition, r.offset)), lineage))
    return {k: [lin for _, lin in sorted(v)] for k, v in keyed.items()}, key_of, dead


#: How many examples of each kind of failure a report names (the counts are always complete).
SAMPLE = 3


def digest_halves(value: bytes | None) -> tuple[int, int]:
    """:func:`value_digest` as its high and low 32 bits: sums of each fit a signed 64-bit column (Spark's
    ``sum``) for up to 2**31 records, and :func:`checksum_of_sums` gives :func:`checksum` from them."""
    digest = value_digest(value)
    return digest >> 32, digest & 0xFFFFFFFF


def checksum_of_sums(high: int, low: int) -> str:
    """:func:`checksum` from the sums of :func:`digest_halves` over the same values."""
    return f"{((int(high) << 32) + int(low)) & _MASK64:016x}"


@dataclass(frozen=True, kw_only=True)
class IntegrityFindings(IntegrityCounts):
    """What a read-back measured, before it is worded: the counts of each kind of failure and the
    first examples (:data:`SAMPLE`). :func:`check_integrity` finds them in Python over collected
    records, spark_apps/backfill_verify.py as Spark aggregations; :func:`integrity_report` words
    both the same way, so their reports compare equal.

    Examples name a record as ``topic-partition@offset``; ``wrong_code`` is (record, lineage, code
    found, code expected), ``wrong_key`` (record, key found, key expected), ``misplaced`` (key,
    record, the partition its key belongs to or None for a null key), ``split`` (key, its target
    partitions), ``order`` (key, first differing position, lineage found there, lineage planned
    there, records found, records planned)."""

    no_lineage: int = 0
    no_lineage_at: str = ""
    extra_partitions: tuple[int, ...] = ()
    duplicates: int = 0
    duplicate_sample: tuple[str, ...] = ()
    unknown: int = 0
    unknown_sample: tuple[str, ...] = ()
    lost: int = 0
    lost_sample: tuple[str, ...] = ()
    wrong_dead: int = 0
    wrong_dead_sample: tuple[str, ...] = ()
    dead_in_target: int = 0
    dead_in_target_sample: tuple[str, ...] = ()
    wrong_code: tuple[str, str, str | None, str] | None = None
    wrong_keys: int = 0
    wrong_key: tuple[str, bytes | None, bytes | None] | None = None
    misplaced: tuple[bytes | None, str, int | None] | None = None
    split_keys: int = 0
    split: tuple[bytes, tuple[int, ...]] | None = None
    order_breaks: int = 0
    order: tuple[bytes, int, str | None, str | None, int, int] | None = None


def integrity_report(plan: BackfillPlan, found: IntegrityFindings) -> IntegrityReport:
    """The :class:`IntegrityReport` of ``found``: its failures in words, in a fixed order."""
    failures: list[str] = []
    n = plan.target_partitions
    if found.no_lineage:
        failures.append(f"{found.no_lineage} record(s) carry no {LINEAGE_HEADER} header, e.g. "
                        f"{found.no_lineage_at}: something other than the backfill wrote there")
    if found.extra_partitions:
        failures.append(f"target {plan.target_topic} has records in partition(s) {list(found.extra_partitions)}, "
                        f"beyond the plan's {n}")
    if found.source_records != found.target_records + found.dead_letters:
        failures.append(f"source {plan.source_topic} has {found.source_records} records in the snapshot but target "
                        f"{plan.target_topic} holds {found.target_records} and dead-letter {plan.dead_letter_topic} "
                        f"{found.dead_letters} (sum {found.target_records + found.dead_letters})")
    if found.duplicates:
        failures.append(f"{found.duplicates} source record(s) were written more than once, e.g. "
                        f"{list(found.duplicate_sample)}")
    if found.unknown:
        failures.append(f"{found.unknown} lineage(s) name no record of the snapshot, e.g. {list(found.unknown_sample)}")
    if found.lost:
        failures.append(f"{found.lost} source record(s) are in neither the target nor the dead-letter topic, "
                        f"e.g. {list(found.lost_sample)}")
    if found.wrong_dead or found.dead_in_target:
        failures.append(f"{found.wrong_dead} record(s) with a key went to the dead-letter topic (e.g. "
                        f"{list(found.wrong_dead_sample)}) and {found.dead_in_target} without one to the target "
                        f"(e.g. {list(found.dead_in_target_sample)})")
    if found.wrong_codes and found.wrong_code:
        at, lineage, code, want = found.wrong_code
        failures.append(f"{found.wrong_codes} dead letter(s) carry another {CODE_HEADER} than rule {plan.key_rule!r} "
                        f"gives, e.g. {at} ({lineage}) carries {code!r}, expected {want!r}")
    if found.wrong_keys and found.wrong_key:
        at, key, want_key = found.wrong_key
        failures.append(f"{found.wrong_keys} target record(s) carry another key than rule {plan.key_rule!r} gives, "
                        f"e.g. {at} key {key!r}, expected {want_key!r}")
    misplaced = sum(row.misplaced for row in found.partitions)
    if misplaced and found.misplaced:
        key, at, home = found.misplaced
        want = "none (null key)" if home is None else str(home)
        failures.append(f"{misplaced} target record(s) sit off their key's partition, e.g. key {key!r} at "
                        f"{at}, partition_for gives {want} of {n}")
    if found.split_keys and found.split:
        key, parts = found.split
        failures.append(f"{found.split_keys} key(s) live in more than one target partition, e.g. {key!r} in "
                        f"{list(parts)}")
    if found.order_breaks and found.order:
        key, at, got, want_lineage, n_got, n_want = found.order
        failures.append(f"{found.order_breaks} key(s) are out of per-key source order, e.g. {key!r}: position {at} "
                        f"holds {got or 'nothing'}, source order has {want_lineage or 'nothing'} ({n_got} vs "
                        f"{n_want} records)")
    if found.source_checksum != found.output_checksum:
        failures.append(f"value checksum differs: source {found.source_checksum}, target + dead letters "
                        f"{found.output_checksum}; some value was changed, lost or duplicated")
    counts = {f.name: getattr(found, f.name) for f in fields(IntegrityCounts)}
    return IntegrityReport(**{**counts, "partitions": tuple(found.partitions),
                              "dead_letter_codes": dict(sorted(found.dead_letter_codes.items()))},
                           source_topic=plan.source_topic, target_topic=plan.target_topic, target_partitions=n,
                           failures=tuple(failures))


def _at(r: OutputRecord) -> str:
    return f"{r.topic}-{r.partition}@{r.offset}"


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

    spark_apps/backfill_verify.py measures the same as Spark aggregations (no records on the driver).
    """
    source = list(source)
    target = sorted(target, key=lambda r: (r.partition, r.offset))
    dead_letters = sorted(dead_letters, key=lambda r: (r.partition, r.offset))
    expected, key_of, expected_dead = expected_order(plan, source)
    n = plan.target_partitions

    seen: dict[str, int] = defaultdict(int)
    for r in (*target, *dead_letters):
        if r.lineage is not None:
            seen[r.lineage] += 1
    missing_lineage = [r for r in (*target, *dead_letters) if r.lineage is None]

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
    dl_by: dict[int, list[OutputRecord]] = defaultdict(list)
    for r in dead_letters:
        dl_by[r.partition].append(r)
    for p in sorted(dl_by) or [0]:
        rows.append(partition_row(plan.dead_letter_topic, p, dl_by.get(p, []), is_target=False))

    dups = sorted(lin for lin, c in seen.items() if c > 1)
    unknown = sorted(lin for lin in seen if lin not in key_of)
    lost = sorted(set(key_of) - set(seen), key=parse_lineage)
    wrong_dead = sorted({r.lineage for r in dead_letters if r.lineage} - expected_dead.keys())
    dead_in_target = sorted({r.lineage for r in target if r.lineage} & expected_dead.keys())
    wrong_code = [r for r in dead_letters if r.lineage in expected_dead and r.code != expected_dead[r.lineage]]
    wrong_key = [r for r in target if r.lineage in key_of and key_of[r.lineage] != r.key]
    off_home = next((r for r in target if r.key is None or partition_for(r.key, n) != r.partition), None)
    order = None
    if broken:
        k = sorted(broken)[0]
        want, got = expected.get(k, []), actual.get(k, [])
        at = next((i for i, (a, b) in enumerate(zip(want, got)) if a != b), min(len(want), len(got)))
        order = (k, at, got[at] if at < len(got) else None, want[at] if at < len(want) else None, len(got), len(want))
    found = IntegrityFindings(
        source_records=len(source), target_records=len(target), dead_letters=len(dead_letters),
        expected_dead_letters=len(expected_dead), source_checksum=checksum(r.value for r in source),
        output_checksum=checksum(r.value for r in (*target, *dead_letters)), partitions=tuple(rows),
        dead_letter_codes=Counter(expected_dead.values()),
        no_lineage=len(missing_lineage), no_lineage_at=_at(missing_lineage[0]) if missing_lineage else "",
        extra_partitions=tuple(sorted(set(by_partition) - set(range(n)))),
        duplicates=len(dups), duplicate_sample=tuple(dups[:SAMPLE]),
        unknown=len(unknown), unknown_sample=tuple(unknown[:SAMPLE]),
        lost=len(lost), lost_sample=tuple(lost[:SAMPLE]),
        wrong_dead=len(wrong_dead), wrong_dead_sample=tuple(wrong_dead[:SAMPLE]),
        dead_in_target=len(dead_in_target), dead_in_target_sample=tuple(dead_in_target[:SAMPLE]),
        wrong_codes=len(wrong_code),
        wrong_code=(_at(wrong_code[0]), wrong_code[0].lineage or "", wrong_code[0].code,
                    expected_dead[wrong_code[0].lineage or ""]) if wrong_code else None,
        wrong_keys=len(wrong_key),
        wrong_key=(_at(wrong_key[0]), wrong_key[0].key, key_of[wrong_key[0].lineage or ""]) if wrong_key else None,
        misplaced=None if off_home is None else (
            off_home.key, _at(off_home), None if off_home.key is None else partition_for(off_home.key, n)),
        split_keys=len(split), split=(min(split), tuple(sorted(keys_in[min(split)]))) if split else None,
        order_breaks=len(broken), order=order)
    return integrity_report(plan, found)


# -- resume and cut-over -----------------------------------------------------------------------------------

#: Copy modes, and the slices each writes in a transaction of its own: a direct slice is one source
#: partition's records, a merged slice one output partition's (the dead-letter topic is one more).
DIRECT, MERGED = "direct", "merged"


#: The start of every backfill's marker group (:func:`backfill_id`): the copy's own bookkeeping, not a
#: consumer of the source, so a cut-over translates no such group.
MARKER_GROUP_PREFIX = "kafkaops-backfill-"


def backfill_id(plan: BackfillPlan) -> str:
    """The plan's name in Kafka: the transactional id prefix of its slices and its marker group,
    ``kafkaops-backfill-<target>-<hash of the plan>`` (another plan into the same target gets another)."""
    digest = hashlib.sha256(plan.to_json().encode()).hexdigest()[:12]
    return f"{MARKER_GROUP_PREFIX}{plan.target_topic}-{digest}"


def slices(plan: BackfillPlan, mode: str) -> list[tuple[str, int]]:
    """The slices of ``mode``, each named by the topic partition of its commit marker: a direct slice
    by its source partition, a merged slice by its output partition."""
    if mode == DIRECT:
        return [(plan.source_topic, p) for p, _, _ in plan.source_offsets]
    return [(plan.target_topic, p) for p in range(plan.target_partitions)] + [(plan.dead_letter_topic, 0)]


@dataclass(frozen=True)
class OutputCount:
    """Committed records of one output partition whose lineage names one source topic partition
    (``source_topic`` None: records without a lineage header), with the least and greatest source offset."""

    topic: str
    partition: int
    source_topic: str | None
    source_partition: int | None
    records: int
    first_offset: int | None = None
    last_offset: int | None = None
    #: these records' source offsets lie before the plan's start: an earlier pass's (or another plan's)
    earlier: bool = False


@dataclass(frozen=True)
class CommittedOutput:
    """What earlier runs of a plan committed: the copy they wrote (``None``: nothing) and how many
    records. ``stale`` says the marker group counts records no longer there (the output was deleted
    to switch to the merged copy before the markers were): forget the markers and start afresh."""

    mode: str | None
    records: int
    stale: bool = False


def committed_output(plan: BackfillPlan, markers: Mapping[tuple[str, int], int],
                     counts: Iterable[OutputCount]) -> CommittedOutput:
    """Check what a read_committed reader sees in the target and dead-letter topics against the plan's
    commit markers (slice -> records committed, :func:`slices`): every record must carry this plan's
    lineage, and each slice's records must number exactly its marker. Raises :class:`BackfillError`
    naming the first partition that is not this plan's work."""
    counts = list(counts)
    group = backfill_id(plan)
    fix = (f"delete the target and dead-letter topics' records and consumer group {group} (or choose a new "
           "target topic) and run the backfill again")
    ranges = {p: (s, e) for p, s, e in plan.source_offsets}
    for c in counts:
        where = f"{c.topic}-{c.partition}"
        if c.source_topic is None:
            raise BackfillError(f"{where} holds {c.records} record(s) without a {LINEAGE_HEADER} header: something "
                                f"else wrote there; use an empty target topic, or {fix}")
        start, end = ranges.get(c.source_partition, (0, 0)) if c.source_topic == plan.source_topic else (0, 0)
        if c.earlier and c.source_topic == plan.source_topic and c.source_partition in ranges:
            start, end = plan.origin(c.source_partition), start  # an earlier pass of this copy wrote them
        if not (start <= (c.first_offset or 0) and (c.last_offset or 0) < end):
            lineage = format_lineage(c.source_topic, c.source_partition or 0, c.last_offset or 0)
            raise BackfillError(f"{where} holds {c.records} record(s) up to lineage {lineage}, which this plan does "
                                f"not hold: the topic was written by another plan; {fix}")
    counts = [c for c in counts if not c.earlier]  # only this pass's records count against its markers
    total = sum(c.records for c in counts)
    direct = {s: n for s, n in markers.items() if s in set(slices(plan, DIRECT))}
    merged = {s: n for s, n in markers.items() if s in set(slices(plan, MERGED))}
    if total == 0:
        return CommittedOutput(None, 0, stale=bool(markers))
    if direct and merged:
        raise BackfillError(f"consumer group {group} holds commit markers of both copies ({len(direct)} direct, "
                            f"{len(merged)} merged slice(s)); no run leaves that: {fix}")
    mode = MERGED if merged else DIRECT if direct else None
    if mode is None:
        raise BackfillError(f"{plan.target_topic} and {plan.dead_letter_topic} hold {total} record(s) of this plan "
                            f"but consumer group {group} has no commit marker for them: written by another writer "
                            f"(or a kafkaops without transactional writes), so a re-run would write them twice; {fix}")
    found: Counter[tuple[str, int]] = Counter()
    for c in counts:
        found[(plan.source_topic, c.source_partition) if mode == DIRECT else (c.topic, c.partition)] += c.records
    want = direct if mode == DIRECT else merged
    for name in sorted(set(found) | set(want)):
        if found[name] != want.get(name, 0):
            raise BackfillError(f"the {mode} slice {name[0]}-{name[1]} has {found[name]} committed record(s) in the "
                                f"output but its commit marker in consumer group {group} counts {want.get(name, 0)}: "
                                f"not only this backfill wrote there; {fix}")
    return CommittedOutput(mode, total)


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
