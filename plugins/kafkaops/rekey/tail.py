"""The tail copy of a live migration: after the backfill, one process follows the source, copying each
new part of it into the target in a Kafka transaction of its own, checked before it is committed.

A *part* is ``[position, end)`` of every source partition, ``end`` the source's last stable offsets when
the part began: the same unit as a catch-up pass (:meth:`kafkaops.rekey.backfill.BackfillPlan.next_pass`),
without a Spark start. Its records are rekeyed by the key-rule contract (docs/key-rules.md, the Python
side: :func:`kafkaops.platform.keyrules.extract`), placed by Kafka's Java partitioner and written in the
merged copy's order, ``(order timestamp, source partition, source offset)`` with the order clock started
afresh per part (:class:`kafkaops.rekey.backfill.OrderClock`): per-key source order, also for keys whose
records come from several source partitions; for a key in one source partition it is offset order. The
whole copy's order is then ``(backfill, part 1, part 2, ...)``, as for passes.

Pure: :func:`rekey_part` (what a part writes), :func:`check_part` (what was read back against it: counts,
keys, placement, per-key order, lineage, values, dead-letter codes, nothing else), :class:`TailReport`
(the checks added up) and :func:`whole_copy` (the backfill's integrity report and the tail's as the gate's
one report), :class:`TailProgress` (the lag, the rates and the ETA the log and the record show). The
process that runs it is :func:`kafkaops.rekey.migration.follow`.
"""
from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Protocol

from kafkaops.platform import keyrules
from kafkaops.platform.partitioner import partition_for
from kafkaops.rekey import backfill
from kafkaops.rekey.backfill import (CODE_HEADER, LINEAGE_HEADER, REASON_HEADER, BackfillPlan, IntegrityReport,
                                     OrderClock, PartitionIntegrity, format_lineage, value_digest)

_MASK64 = (1 << 64) - 1


def tail_id(first: BackfillPlan) -> str:
    """The tail's transactional id and the consumer group its position is committed to: the backfill's
    name (:func:`kafkaops.rekey.backfill.backfill_id`, so a cut-over translates no such group) plus ``-tail``."""
    return f"{backfill.backfill_id(first)}-tail"


# -- what a part writes ----------------------------------------------------------------------------------

class Record(Protocol):
    """A record as read (:class:`kafkaops.platform.kafka.records.Record` is one)."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def timestamp(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def headers(self) -> Sequence[tuple[str, bytes | None]]: ...
    def last_header(self, name: str) -> bytes | None: ...


@dataclass(frozen=True)
class Output:
    """One record a part writes: where, its key, value, headers (the source's, in order, then the copy's
    lineage and a dead letter's code and detail) and the source's timestamp (ms); ``placement``: the key it is
    placed and ordered by (:func:`kafkaops.platform.keyrules.placement_key`; None for a dead letter), which
    is its written ``key`` but for ``window_key``/``session_key``, which write the changelog key."""

    topic: str
    partition: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp: int | None = None
    placement: bytes | None = None

    def last_header(self, name: str) -> bytes | None:
        """The value of the last header ``name``: the copy's own (they come after the source's)."""
        return last_header(self.headers, name)


def last_header(headers: Sequence[tuple[str, bytes | None]], name: str) -> bytes | None:
    """The value of the last header ``name`` of ``headers``; None when there is none."""
    for k, v in reversed(headers):
        if k == name:
            return v
    return None


def rekey_part(plan: BackfillPlan, records: Sequence[Record]) -> list[Output]:
    """The outputs of one part, in the order they are written: ``records`` (the part's source records,
    in offset order per partition) rekeyed by ``plan``'s rule, each on ``partition_for(new key, N)`` of the
    target or partition 0 of the dead-letter topic (with the reason code and detail), with the key the rule
    writes (:func:`kafkaops.platform.keyrules.written_key`), the source's headers then its lineage header,
    and its source timestamp, ordered by ``(order timestamp, source partition, source offset)``."""
    clock = OrderClock()
    rule = plan.rule
    rows: list[tuple[int, int, int, Output]] = []
    for r in records:
        found = keyrules.extract(r.key, r.value, rule)
        key = keyrules.written_key(r.key, found.key, rule)
        headers = (*r.headers, (LINEAGE_HEADER, format_lineage(plan.source_topic, r.partition, r.offset).encode()))
        if found.key is None:
            out = Output(plan.dead_letter_topic, 0, key, r.value,
                         (*headers, (CODE_HEADER, str(found.code).encode()),
                          (REASON_HEADER, str(found.detail).encode())), r.timestamp)
        else:
            out = Output(plan.target_topic, partition_for(found.key, plan.target_partitions), key, r.value,
                         headers, r.timestamp, found.key)
        rows.append((clock.tick(r.partition, r.offset, r.timestamp, found.key), r.partition, r.offset, out))
    rows.sort(key=lambda row: row[:3])
    return [row[3] for row in rows]


def cut_by_time(records: Sequence[Record], read_to: Mapping[int, int], more: Sequence[int]
                ) -> tuple[list[Record], dict[int, int]]:
    """A part cut at one moment when a partition's records were capped (``more``: the partitions read
    only part of the way to their end): the cut is the earliest of those partitions' last timestamps, and
    each partition keeps its records up to the first one written after it. Without this, a partition cut
    by count would put a key's later records (in a partition written slowly) before its earlier ones (in
    a partition written fast) in the merged order. Returns the records kept and where each partition's
    part now ends; everything read when nothing would be kept (timestamps out of order)."""
    by_partition: dict[int, list[Record]] = defaultdict(list)
    for r in records:
        by_partition[r.partition].append(r)
    lasts = [by_partition[p][-1].timestamp for p in more if by_partition.get(p)]
    if not lasts:
        return list(records), dict(read_to)
    cut = min(lasts)
    kept: list[Record] = []
    ends = dict(read_to)
    for p, rs in by_partition.items():
        for r in rs:
            if r.timestamp > cut:
                ends[p] = r.offset
                break
            kept.append(r)
    return (kept, ends) if kept else (list(records), dict(read_to))


# -- what a part's check found ---------------------------------------------------------------------------

#: How many examples of each kind of failure a check names (the counts are always complete).
SAMPLE = 3


@dataclass(frozen=True)
class PartCheck:
    """One part read back (before its commit) against what it had to write. ``partitions``: records per
    output topic partition; ``keys``: the target keys per partition (the keys records are placed by:
    :func:`kafkaops.platform.keyrules.placement_key`). A part is good exactly when
    ``failures`` is empty."""

    source_records: int
    target_records: int
    dead_letters: int
    expected_dead_letters: int
    wrong_codes: int
    source_sum: int
    output_sum: int
    partitions: Mapping[tuple[str, int], int]
    failures: tuple[str, ...] = ()
    keys: Mapping[tuple[str, int], frozenset[bytes]] = field(default_factory=dict, repr=False)

    @property
    def ok(self) -> bool:
        return not self.failures


def _where(r: Record) -> str:
    return f"{r.topic}-{r.partition}@{r.offset}"


def check_part(plan: BackfillPlan, source: Sequence[Record], written: Sequence[Record],
               expected: Sequence[Output] | None = None) -> PartCheck:
    """Check ``written`` (what the outputs hold of this part, read back, in offset order per partition)
    against ``source`` (the part's source records; ``expected``: :func:`rekey_part` of them, when already
    made): every source record exactly once (by the last lineage header of each record: a source copied
    before carries one of its own), in the target on its new key's partition with the key the rule writes
    or a dead letter with the rule's reason code, its value unchanged, each output partition holding exactly
    the planned sequence (so per-key order, by the placement key, as :func:`rekey_part` orders it), and
    nothing else. Pure."""
    expected = rekey_part(plan, source) if expected is None else expected
    want: dict[bytes, Output] = {}
    planned: dict[tuple[str, int], list[bytes]] = defaultdict(list)
    for out in expected:
        planned_lineage = out.last_header(LINEAGE_HEADER) or b""  # after the source's headers (rekey_part)
        want[planned_lineage] = out
        planned[(out.topic, out.partition)].append(planned_lineage)
    seen: set[bytes] = set()
    got: dict[tuple[str, int], list[bytes]] = defaultdict(list)
    foreign: list[str] = []
    duplicates: list[str] = []
    wrong_place: list[str] = []
    wrong_keys: list[str] = []
    wrong_values: list[str] = []
    wrong_codes: list[str] = []
    partitions: Counter[tuple[str, int]] = Counter()
    keys: dict[tuple[str, int], set[bytes]] = defaultdict(set)
    output_sum = dead = 0
    dead_letter_topic = plan.dead_letter_topic
    for r in written:
        where = (r.topic, r.partition)
        partitions[where] += 1
        output_sum += value_digest(r.value)
        if r.topic == dead_letter_topic:
            dead += 1
        lineage = r.last_header(LINEAGE_HEADER)  # the copy's: a source copied before has one of its own
        o = want.get(lineage) if lineage is not None else None
        if o is None or lineage is None:
            foreign.append(f"{_where(r)} ({lineage.decode('utf-8', 'replace') if lineage else 'no lineage'})")
            continue
        if lineage in seen:
            duplicates.append(lineage.decode())
            continue
        seen.add(lineage)
        got[where].append(lineage)
        if where != (o.topic, o.partition):
            wrong_place.append(f"{lineage.decode()} at {_where(r)}, planned {o.topic}-{o.partition}")
        if r.key != o.key:
            wrong_keys.append(f"{_where(r)} key {r.key!r}, rule gives {o.key!r}")
        elif o.placement is not None:
            keys[where].add(o.placement)
        if r.value != o.value:
            wrong_values.append(_where(r))
        if r.topic == dead_letter_topic and r.last_header(CODE_HEADER) != o.last_header(CODE_HEADER):
            wrong_codes.append(f"{_where(r)} code {r.last_header(CODE_HEADER)!r}, rule gives "
                               f"{o.last_header(CODE_HEADER)!r}")
    failures: list[str] = []
    lost = [lineage.decode() for lineage in want if lineage not in seen]
    breaks = _order_breaks(want, planned, got, seen)
    for label, found in (("record(s) not of this part (no or another lineage)", foreign),
                         ("source record(s) written more than once", duplicates),
                         ("source record(s) missing from the outputs", lost),
                         ("record(s) in another output partition than planned", wrong_place),
                         ("record(s) with another key than the rule gives", wrong_keys),
                         ("dead letter(s) with another reason code than the rule gives", wrong_codes),
                         ("record(s) whose value differs from the source's", wrong_values)):
        if found:
            failures.append(f"{len(found)} {label}, e.g. {found[:SAMPLE]}")
    if breaks:
        (topic, partition, key), read, wanted = breaks[0]
        failures.append(f"{len(breaks)} key(s) out of per-key source order, e.g. key {key!r} in {topic}-{partition}: "
                        f"read back {[x.decode() for x in read[:4]]}, planned {[x.decode() for x in wanted[:4]]}")
    source_sum = 0
    for r in source:
        source_sum += value_digest(r.value)
    expected_dead = sum(1 for o in expected if o.topic == dead_letter_topic)
    return PartCheck(len(source), len(written) - dead, dead, expected_dead, len(wrong_codes), source_sum & _MASK64,
                     output_sum & _MASK64, dict(partitions), tuple(failures),
                     {k: frozenset(v) for k, v in keys.items()})


def _order_breaks(want: Mapping[bytes, Output], planned: Mapping[tuple[str, int], list[bytes]],
                  got: Mapping[tuple[str, int], list[bytes]], seen: set[bytes]
                  ) -> list[tuple[tuple[str, int, bytes | None], list[bytes], list[bytes]]]:
    """The keys whose records were read back in another order than planned (each lost record left out of
    the plan, each misplaced one counted where it was planned). Each output partition is compared whole
    first: equal sequences (the usual case) need no per-key look."""
    if all(got.get(tp, []) == [x for x in lineages if x in seen] for tp, lineages in planned.items()) and \
            set(got) <= set(planned):
        return []
    read: dict[tuple[str, int, bytes | None], list[bytes]] = defaultdict(list)
    for lineages in got.values():
        for x in lineages:
            o = want[x]
            read[(o.topic, o.partition, o.placement)].append(x)
    wanted: dict[tuple[str, int, bytes | None], list[bytes]] = defaultdict(list)
    for lineages in planned.values():
        for x in lineages:
            if x in seen:
                o = want[x]
                wanted[(o.topic, o.partition, o.placement)].append(x)
    return [(k, read.get(k, []), w) for k, w in wanted.items() if read.get(k, []) != w]


# -- the checks added up ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class TailReport:
    """Every part the tail committed, checked and added up: ``parts``, source records and outputs,
    dead letters (and those the rule expects), wrong reason codes, the value checksums (sums of
    :func:`kafkaops.rekey.backfill.value_digest` mod 2**64), records and distinct keys per output
    partition, and where the tail began and stands (source partition -> offset). ``failures`` is
    empty: a part that fails its check is aborted, never added."""

    parts: int = 0
    source_records: int = 0
    target_records: int = 0
    dead_letters: int = 0
    expected_dead_letters: int = 0
    wrong_codes: int = 0
    source_sum: int = 0
    output_sum: int = 0
    records: Mapping[str, int] = field(default_factory=dict)
    keys: Mapping[str, int] = field(default_factory=dict)
    began: Mapping[int, int] = field(default_factory=dict)
    position: Mapping[int, int] = field(default_factory=dict)
    #: the source records' keys and values, in bytes (what sizes the next part: :func:`part_cap`)
    source_bytes: int = 0

    #: the parts before this process's first were counted by an earlier one (a retried task): their
    #: totals came with the committed position (:meth:`note`), their distinct keys did not
    resumed: bool = False

    def note(self, limit: int) -> str:
        """The totals as the text committed with each part's position (at most ``limit`` bytes: the records
        per output partition are left out when they do not fit), read back by :meth:`from_note`."""
        data = {k: v for k, v in self.to_dict().items() if k not in ("keys", "position", "resumed")}
        text = json.dumps(data, separators=(",", ":"), sort_keys=True)
        if len(text.encode()) > limit:
            text = json.dumps({**data, "records": None}, separators=(",", ":"), sort_keys=True)
        return text

    @classmethod
    def from_note(cls, text: str, position: Mapping[int, int]) -> TailReport:
        """The totals a process committed (:meth:`note`), for the process that resumes after it."""
        data = json.loads(text)
        return replace(cls.from_dict({**data, "records": data.get("records") or {}}), position=dict(position),
                       resumed=True)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["began"] = {str(p): o for p, o in self.began.items()}
        data["position"] = {str(p): o for p, o in self.position.items()}
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> TailReport:
        if not data:
            return cls()
        return cls(**{**data, "began": {int(p): int(o) for p, o in data.get("began", {}).items()},
                      "position": {int(p): int(o) for p, o in data.get("position", {}).items()}})


class TailKeys:
    """Distinct keys per output partition over every part (kept while the tail runs, for the report)."""

    def __init__(self) -> None:
        self._keys: dict[str, set[bytes]] = defaultdict(set)

    def add(self, check: PartCheck) -> None:
        for (topic, partition), keys in check.keys.items():
            self._keys[f"{topic}-{partition}"].update(keys)

    def counts(self) -> dict[str, int]:
        return {name: len(keys) for name, keys in sorted(self._keys.items())}


def add_part(report: TailReport, check: PartCheck, position: Mapping[int, int], *, source_bytes: int = 0
             ) -> TailReport:
    """``report`` with one more part (its check passed) ending at ``position``, its source records'
    keys and values ``source_bytes`` long; the distinct keys are added apart (:class:`TailKeys`), once
    the part is committed."""
    records = Counter(dict(report.records))
    for (topic, partition), n in check.partitions.items():
        records[f"{topic}-{partition}"] += n
    return replace(report, parts=report.parts + 1, source_records=report.source_records + check.source_records,
                   target_records=report.target_records + check.target_records,
                   dead_letters=report.dead_letters + check.dead_letters,
                   expected_dead_letters=report.expected_dead_letters + check.expected_dead_letters,
                   wrong_codes=report.wrong_codes + check.wrong_codes,
                   source_sum=(report.source_sum + check.source_sum) & _MASK64,
                   output_sum=(report.output_sum + check.output_sum) & _MASK64,
                   records=dict(sorted(records.items())), position=dict(position),
                   source_bytes=report.source_bytes + source_bytes)


#: The bytes of keys and values a part reads at most: it holds them, their outputs and the read-back
#: until its commit, about three times this.
PART_BYTES = 64 * 2**20
#: A part's records while no record size is known (a tail's first part): few, whatever their size.
FIRST_PART_RECORDS = 100


def part_cap(partitions: int, most_records: int, report: TailReport, most_bytes: int = PART_BYTES) -> int:
    """Records a part reads at most from each of ``partitions`` source partitions: ``most_records`` over
    them all (at least 100 each), fewer where records of the mean size so far (``report``'s bytes per
    source record) would pass ``most_bytes``, and :data:`FIRST_PART_RECORDS` over them all while no size
    is known (no record copied yet). Records of no bytes at all (empty keys and values) leave the records'
    cap alone. At least 1: a record larger than ``most_bytes`` is a part alone."""
    n = max(1, partitions)
    cap = max(100, most_records // n)
    if not report.source_records:
        cap = min(cap, FIRST_PART_RECORDS // n)
    elif report.source_bytes:
        cap = min(cap, int(most_bytes * report.source_records / report.source_bytes) // n)
    return max(1, cap)


def whole_copy(copied: IntegrityReport, tail: TailReport) -> IntegrityReport:
    """The gate's report of the whole copy: the backfill's (checked by its Spark pass) and the tail's
    parts (each checked before its commit), one row per output partition and part of the copy. The
    tail's records come after the backfill's in every output partition (it writes after the backfill
    committed), so per-key order holds across the two when it holds in each."""
    rows = [replace(p, part="backfill") for p in copied.partitions]
    for name, n in tail.records.items():
        topic, _, partition = name.rpartition("-")
        rows.append(PartitionIntegrity(topic, int(partition), n, tail.keys.get(name, 0), 0, 0, 0, 0, 0, part="tail"))
    source = (int(copied.source_checksum, 16) + tail.source_sum) & _MASK64
    output = (int(copied.output_checksum, 16) + tail.output_sum) & _MASK64
    failures = list(copied.failures)
    if f"{source:016x}" != f"{output:016x}" and not failures:
        failures.append(f"value checksum differs: source {source:016x}, target + dead letters {output:016x}")
    return replace(copied, source_records=copied.source_records + tail.source_records,
                   target_records=copied.target_records + tail.target_records,
                   dead_letters=copied.dead_letters + tail.dead_letters,
                   expected_dead_letters=copied.expected_dead_letters + tail.expected_dead_letters,
                   wrong_codes=copied.wrong_codes + tail.wrong_codes, source_checksum=f"{source:016x}",
                   output_checksum=f"{output:016x}", partitions=tuple(rows), failures=tuple(failures))


# -- progress ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TailProgress:
    """The tail as its log line and the record show it: the lag now (records of the source not yet
    committed to the target), the source's write rate and the copy's rate over the last interval, seconds
    since the tail began, and the parts committed."""

    lag: int
    written_rate: float
    copied_rate: float
    elapsed_s: float
    parts: int
    copied: int

    @property
    def eta_s(self) -> float | None:
        """Seconds until the lag is gone at these rates: 0 when none; None when the copy does not gain."""
        if self.lag <= 0:
            return 0.0
        gain = self.copied_rate - self.written_rate
        return self.lag / gain if gain > 0 else None

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "eta_s": self.eta_s}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TailProgress:
        return cls(int(data.get("lag") or 0), float(data.get("written_rate") or 0.0),
                   float(data.get("copied_rate") or 0.0), float(data.get("elapsed_s") or 0.0),
                   int(data.get("parts") or 0), int(data.get("copied") or 0))

    def line(self, duration: Callable[[float | None], str]) -> str:
        eta = self.eta_s
        return (f"tail: lag {self.lag:,} record(s) after {duration(self.elapsed_s)}, {self.parts:,} part(s) and "
                f"{self.copied:,} record(s) copied; source written at {self.written_rate:,.0f} records/s, copied at "
                f"{self.copied_rate:,.0f} records/s, "
                + ("caught up" if eta == 0 else f"caught up in about {duration(eta)}" if eta is not None
                   else "not gaining on the source"))


def rates(before: tuple[float, int, int], now: tuple[float, int, int]) -> tuple[float, float]:
    """(written, copied) records/s between two samples ``(seconds, source end total, copied total)``."""
    dt = max(now[0] - before[0], 1e-6)
    return max(now[1] - before[1], 0) / dt, max(now[2] - before[2], 0) / dt
