"""A rekey backfill as a value: what to copy, where each record goes, and proof that it went there.

Raising a topic's partition count changes ``murmur2(key) % partitions``, so a key's old records sit
in another partition than its new ones and per-key order breaks. The repair copies a bounded
snapshot of the source into a target topic, each record on the partition Kafka's Java producer
would give its key (:func:`kafkaops.platform.partitioner.partition_for`), in per-key source order, each
record exactly once, also when the copy is run again or restarted after a crash.

Pure (stdlib and the pure kafkaops layer only): :class:`BackfillPlan` (frozen, JSON round-trip),
:func:`target_partition`, the lineage header (``source_topic/partition/offset``) on every copied
record, the per-key order clock, the integrity report (:func:`integrity_report`; its oracle over
collected rows is the test harness's :func:`kafkaops.testing.integrity.check_integrity`), the slices the
copy is written in, each by transactions of its own that commit its marker (:func:`slices`), with the
check of what earlier runs committed (:func:`committed_output`), and which copy a run writes
(:func:`choose_copy`, :func:`after_direct_pass`; the design is docs/rekey-backfill.md). The new key of
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
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

from kafkaops.errors import KafkaOpsError
from kafkaops.platform.keyrules import KeyRule, KeyRuleError, rule_of
from kafkaops.platform import own
from kafkaops.platform.partitioner import partition_for

__all__ = [
    "CODE_HEADER", "LINEAGE_HEADER", "LINEAGE_SEPARATOR", "REASON_HEADER", "BackfillError", "BackfillIntegrityError",
    "BackfillPlan", "CommittedOutput", "CopyChoice", "IntegrityFindings", "IntegrityReport", "OrderClock",
    "OutputCount", "after_direct_pass", "backfill_id", "checksum_of_sums", "choose_copy", "committed_output",
    "digest_halves", "format_lineage", "integrity_report", "parse_lineage", "slices", "target_partition",
    "translate_offsets", "value_digest",
]

#: The lineage header a copy writes on each record, after the source record's own headers: a record of a
#: topic copied twice carries two, and the copy's is the last (read it with ``Record.last_header``).
LINEAGE_HEADER = "kafkaops.lineage"
#: Between the source topic, partition and offset of a lineage (:func:`format_lineage`); no topic name holds it.
LINEAGE_SEPARATOR = "/"
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
    """The lineage header value of a copied record: ``source_topic/partition/offset``. The Spark apps
    build it as a column (``spark_apps.common.lineage``), the JVM sink from the same parts."""
    return LINEAGE_SEPARATOR.join((topic, str(int(partition)), str(int(offset))))


def parse_lineage(value: bytes | str) -> tuple[str, int, int]:
    text = value.decode("utf-8") if isinstance(value, (bytes, bytearray)) else value
    try:
        topic, partition, offset = text.rsplit(LINEAGE_SEPARATOR, 2)
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
            object.__setattr__(self, "dead_letter_topic", own.dead_letter_topic(self.target_topic))
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

    @staticmethod
    def many_to_json(plans: Sequence[BackfillPlan]) -> str:
        """Several copies for one Spark application (a JSON list of plans)."""
        return json.dumps([p.to_dict() for p in plans], sort_keys=True)

    @classmethod
    def many_from_json(cls, text: str) -> tuple[list[BackfillPlan], bool]:
        """The plans of :meth:`many_to_json`, or the one plan of :meth:`to_json`; and whether it was a list."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise BackfillError(f"backfill plan JSON is not valid: {err}") from err
        if isinstance(data, list):
            return [cls.from_dict(d) for d in data], True
        return [cls.from_dict(data)], False


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
    #: which part of a live migration's copy the row counts: "" (a one-part copy), ``backfill`` or ``tail``
    part: str = ""


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
        return [{"name": f"{p.topic}-{p.partition}" + (f" ({p.part})" if p.part else ""), "topic": p.topic, "partition": p.partition,
                 "records": p.records, "keys": p.keys, "misplaced": p.misplaced, "split_keys": p.split_keys,
                 "order_breaks": p.order_breaks, "duplicate_lineages": p.duplicate_lineages,
                 "unknown_lineages": p.unknown_lineages} for p in self.partitions]

    def totals(self) -> dict[str, Any]:
        return {"source_topic": self.source_topic, "target_topic": self.target_topic,
                "source_records": self.source_records, "target_records": self.target_records,
                "dead_letters": self.dead_letters, "accounted": self.target_records + self.dead_letters,
                "expected_dead_letters": self.expected_dead_letters, "wrong_codes": self.wrong_codes,
                "source_checksum": self.source_checksum, "output_checksum": self.output_checksum}


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
    first examples (:data:`SAMPLE`). The test harness's :func:`kafkaops.testing.integrity.check_integrity`
    finds them in Python over collected records, spark_apps/backfill_verify.py as Spark aggregations;
    :func:`integrity_report` words both the same way, so their reports compare equal.

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
        key, position, got, want_lineage, n_got, n_want = found.order
        failures.append(f"{found.order_breaks} key(s) are out of per-key source order, e.g. {key!r}: position "
                        f"{position} holds {got or 'nothing'}, source order has {want_lineage or 'nothing'} ({n_got} vs "
                        f"{n_want} records)")
    if found.source_checksum != found.output_checksum:
        failures.append(f"value checksum differs: source {found.source_checksum}, target + dead letters "
                        f"{found.output_checksum}; some value was changed, lost or duplicated")
    counts = {f.name: getattr(found, f.name) for f in fields(IntegrityCounts)}
    return IntegrityReport(**{**counts, "partitions": tuple(found.partitions),
                              "dead_letter_codes": dict(sorted(found.dead_letter_codes.items()))},
                           source_topic=plan.source_topic, target_topic=plan.target_topic, target_partitions=n,
                           failures=tuple(failures))


# -- resume and cut-over -----------------------------------------------------------------------------------

#: Copy modes, and the slices each writes in a transaction of its own: a direct slice is one source
#: partition's records, a merged slice one output partition's (the dead-letter topic is one more).
DIRECT, MERGED = "direct", "merged"


#: The start of every backfill's marker group (:func:`backfill_id`): the copy's own bookkeeping, not a
#: consumer of the source, so a cut-over translates no such group.
MARKER_GROUP_PREFIX = own.MARKER_GROUP_PREFIX


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
        if c.source_topic is None or c.source_partition is None:
            raise BackfillError(f"{where} holds {c.records} record(s) without a {LINEAGE_HEADER} header: something "
                                f"else wrote there; use an empty target topic, or {fix}")
        start, end = ranges.get(c.source_partition, (0, 0)) if c.source_topic == plan.source_topic else (0, 0)
        if c.earlier and c.source_topic == plan.source_topic and c.source_partition in ranges:
            start, end = plan.origin(c.source_partition), start  # an earlier pass of this copy wrote them
        if not (start <= (c.first_offset or 0) and (c.last_offset or 0) < end):
            lineage = format_lineage(c.source_topic, c.source_partition, c.last_offset or 0)
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
    for c in counts:  # each with its source partition (checked above)
        found[(plan.source_topic, c.source_partition or 0) if mode == DIRECT else (c.topic, c.partition)] += c.records
    want = direct if mode == DIRECT else merged
    for name in sorted(set(found) | set(want)):
        if found[name] != want.get(name, 0):
            raise BackfillError(f"the {mode} slice {name[0]}-{name[1]} has {found[name]} committed record(s) in the "
                                f"output but its commit marker in consumer group {group} counts {want.get(name, 0)}: "
                                f"not only this backfill wrote there; {fix}")
    return CommittedOutput(mode, total)


def foreign_record(plan: BackfillPlan, found: Iterable[tuple[str, int, int, bytes | None]]) -> str | None:
    """The first of ``found`` (committed records of the target: topic, partition, offset, lineage header)
    that no run of ``plan`` can have written, in words; None when each could be this plan's (pure). A
    record without a lineage header, of another source topic or of a source offset outside the plan's
    ranges (or before an earlier pass's start) is foreign: :func:`committed_output` would refuse it too,
    after the approval. Lets the plan refuse a used target topic before anything is asked or written."""
    ranges = {p: (plan.origin(p), e) for p, _, e in plan.source_offsets}
    for topic, partition, offset, lineage in found:
        where = f"{topic}-{partition} offset {offset}"
        if lineage is None:
            return f"{where} carries no {LINEAGE_HEADER} header (not written by a kafkaops backfill)"
        try:
            source, source_partition, source_offset = parse_lineage(lineage)
        except BackfillError as err:
            return f"{where}: {err}"
        start, end = ranges.get(source_partition, (0, 0)) if source == plan.source_topic else (0, 0)
        if not start <= source_offset < end:
            return (f"{where} is a copy of {format_lineage(source, source_partition, source_offset)}, which this "
                    f"copy of {plan.source_topic} does not hold (another plan or topic wrote it)")
    return None


def translate_offsets(source_topic: str, committed: Mapping[int, int],
                      target: Mapping[int, Sequence[tuple[int, str]]],
                      ends: Mapping[int, int] | None = None) -> dict[int, dict[str, int]]:
    """Map a consumer group's committed source offsets (partition -> next offset to read) to target
    offsets. ``target`` holds, per target partition, ``(offset, lineage)`` in offset order: each record's
    **last** lineage header (``Record.last_header``), the copy's own; a source that is itself a copy keeps
    its earlier lineage before it.

    Per target partition the resume offset is the first record the group has not consumed, so
    nothing is lost; ``redelivered`` counts consumed records after it (read again: duplicates to
    the consumer). It is 0 exactly when the consumed records form a prefix of the partition:
    always for a group that has caught up to the snapshot's end (the usual cut-over: stop the
    producers, let the consumers drain, translate); the audit records the number either way.
    A source partition the group never committed counts as not consumed. A target partition whose every
    record was consumed resumes at its end offset in ``ends`` (partition -> end offset, when given): past
    the copy's last transaction marker too, so the group shows no lag; else after its last record.
    """
    out: dict[int, dict[str, int]] = {}
    for p, records in sorted(target.items()):
        resume = None
        redelivered = 0
        end = max(records[-1][0] + 1 if records else 0, (ends or {}).get(p, 0))
        for offset, lineage in records:
            topic, sp, so = parse_lineage(lineage)
            consumed = topic == source_topic and so < committed.get(sp, 0)
            if resume is None and not consumed:
                resume = offset
            elif resume is not None and consumed:
                redelivered += 1
        out[p] = {"offset": end if resume is None else resume, "redelivered": redelivered}
    return out


# -- which copy a run writes ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class CopyChoice:
    """The copy a run of a plan writes (:data:`DIRECT` or :data:`MERGED`) and why (``reason``, for the
    result and the log).

    ``catch_up``: chosen for a catch-up pass by an exact count before writing. ``checked_by_pass``: a
    direct copy whose own pass still has to show that no new key spans source partitions
    (:func:`after_direct_pass` reads what it found); its ``reason`` is empty until then. ``rewrite``:
    the direct copy just written cannot stand; delete it (the output, then its markers) and write the
    merged copy. The three are never true together; ``rewrite`` implies :data:`MERGED`."""

    mode: str
    reason: str
    catch_up: bool = False
    checked_by_pass: bool = False
    rewrite: bool = False

    def describe(self) -> str:
        """The choice in words: ``catch-up pass, merged copy (...)``, ``merged copy (...)``, ``direct copy``."""
        if self.catch_up:
            return f"catch-up pass, {self.mode} copy ({self.reason})"
        return f"{self.mode} copy" + (f" ({self.reason})" if self.reason else "")


def choose_copy(plan: BackfillPlan, before: CommittedOutput, *, spanning_keys: Callable[[], int],
                sample_spans: Callable[[], bool]) -> CopyChoice:
    """The copy a run of ``plan`` writes, given what earlier runs committed (``before``,
    :func:`committed_output`). Pure but for the two probes, each called at most once and only when the
    choice needs it (each costs a Spark job or a read of the source): ``spanning_keys()``, the new keys
    of the snapshot with records in more than one source partition, counted exactly; ``sample_spans()``,
    whether the first records of each source partition already show a new key in two of them.

    * A catch-up pass with nothing committed (:attr:`BackfillPlan.continues`): earlier passes' records
      stay, so nothing may be rewritten; the exact count decides before writing (no key spans: direct).
    * A merged copy begun before resumes as merged.
    * Nothing committed, a value rule and a sample showing a spanning key: merged at once.
    * Else the direct copy, resumed or fresh, whose pass checks every key as it goes
      (``checked_by_pass``; then :func:`after_direct_pass`)."""
    if before.mode is None and plan.continues:
        spanning = spanning_keys()
        if spanning:
            return CopyChoice(MERGED, f"{spanning} key(s) of this pass have records in more than one source "
                                      "partition (an exact count before writing)", catch_up=True)
        return CopyChoice(DIRECT, "every key of this pass has its records in one source partition (an exact "
                                  "count before writing)", catch_up=True)
    if before.mode == MERGED:
        return CopyChoice(MERGED, "the merged copy was begun before")
    if before.mode is None and plan.rule.needs_value and sample_spans():
        return CopyChoice(MERGED, "a sample of the source has a key in two source partitions")
    return CopyChoice(DIRECT, "", checked_by_pass=True)


def after_direct_pass(plan: BackfillPlan, spanning: int, how: str) -> CopyChoice:
    """What stands after a direct pass of ``plan`` that :func:`choose_copy` left to the pass
    (``checked_by_pass``), which found ``spanning`` new keys with records in more than one source
    partition (``how``: how it counted them). None: the direct copy kept per-key order and stands.
    Some: it cannot have; it is rewritten as the merged copy (``rewrite``), except in a catch-up pass,
    whose earlier passes' records stay: raises :class:`BackfillError` (the pass began as the direct
    copy because its exact count said no key spans; its records stay as written)."""
    if not spanning:
        return CopyChoice(DIRECT, f"every key's records are in one source partition ({how})")
    if plan.continues:
        raise BackfillError(f"catch-up pass into {plan.target_topic}: {spanning} key(s) span source partitions after "
                            "the pass began as the direct copy; the pass's records stay as written. Delete the "
                            "target and start the migration again")
    return CopyChoice(MERGED, f"{spanning} key(s) have records in more than one source partition ({how})",
                      rewrite=True)



# -- progress ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class CopyProgress:
    """How far one pass of the copy got, as the task log shows it while Spark runs: ``written`` offsets
    taken in the target and dead-letter topics since the pass started (records, plus one transaction
    marker per partition and commit, so "about") of the pass's ``total`` source offsets, after
    ``elapsed_s`` seconds. ``checking``: the pass checks the whole copy once it has written (``--verify``).
    ``previous``: the last observation ``(elapsed_s, written)``, so the rate is the recent one, not one
    diluted by Spark's start."""

    written: int
    total: int
    elapsed_s: float
    checking: bool = False
    previous: tuple[float, int] | None = None

    @property
    def rate(self) -> float | None:
        """Records per second since the previous observation that had written some (else since the pass
        started); None before any."""
        if self.written <= 0 or self.elapsed_s <= 0:
            return None
        if self.previous is not None and self.previous[1] > 0 and self.elapsed_s > self.previous[0]:
            return max(self.written - self.previous[1], 0) / (self.elapsed_s - self.previous[0]) or None
        return self.written / self.elapsed_s

    @property
    def eta_s(self) -> float | None:
        """Seconds left at the rate so far; 0 once written; None while nothing was written yet."""
        if self.written >= self.total:
            return 0.0
        rate = self.rate
        return (self.total - self.written) / rate if rate else None

    def line(self, name: str, duration: Callable[[float | None], str]) -> str:
        """``backfill: about 62% (123,456 of 200,000 records), 9,876 records/s, ETA 8.1 s`` (``duration``
        formats seconds); once written, what Spark still does."""
        if self.total <= 0 or self.written >= self.total:
            rest = "checking the whole copy" if self.checking else "committing and finishing"
            return (f"{name}: {self.total:,} of {self.total:,} records written after {duration(self.elapsed_s)}; "
                    f"Spark is {rest}")
        rate = self.rate
        return (f"{name}: about {100.0 * self.written / self.total:.0f}% ({self.written:,} of {self.total:,} records) "
                f"after {duration(self.elapsed_s)}, "
                + (f"{rate:,.0f} records/s, ETA {duration(self.eta_s)}" if rate
                   else "Spark is starting (ETA unknown yet)" if self.written <= 0
                   else "nothing written since the last line (ETA unknown yet)"))
