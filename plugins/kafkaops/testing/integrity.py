"""The integrity oracle of a rekey backfill: every invariant checked in plain Python over the records
read back, the slow obvious way, to hold the product's own verify to (spark_apps/backfill_verify.py
measures the same as Spark aggregations; tests/integration/rekey/test_backfill_verify.py compares the
two reports, which :func:`kafkaops.rekey.backfill.integrity_report` words alike).

Test harness (:mod:`kafkaops.testing`): tests and benchmarks use it, no production module does. It
collects every record to one process, so it is for test-sized copies: the product verifies in Spark.
"""
from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kafkaops.platform.keyrules import extract, placement_key, written_key
from kafkaops.platform.partitioner import partition_for
from kafkaops.rekey.backfill import (SAMPLE, BackfillPlan, IntegrityFindings, IntegrityReport, OrderClock,
                                     PartitionIntegrity, checksum, format_lineage, integrity_report, order_key,
                                     parse_lineage)

__all__ = ["OutputRecord", "SourceRecord", "check_integrity", "expected_order", "read_back"]


@dataclass(frozen=True)
class SourceRecord:
    """A record of the snapshot, read back from the source topic."""

    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None


@dataclass(frozen=True)
class OutputRecord:
    """A record read back from the target or dead-letter topic (``lineage`` and, on a dead letter,
    ``code`` from their headers: the last of each name, the copy's own, after the source's)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    lineage: str | None
    code: str | None = None


def expected_order(plan: BackfillPlan, source: Iterable[SourceRecord]
                   ) -> tuple[dict[bytes, list[str]], dict[str, bytes | None], dict[str, str]]:
    """Per new key (the key records are placed and ordered by), the lineages in per-key source order; each
    lineage's new key; each dead-letter lineage's reason code."""
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


def read_back(plan: BackfillPlan, snapshot: Any, output: Any
              ) -> tuple[list[SourceRecord], list[OutputRecord], list[OutputRecord]]:
    """The snapshot, the target and the dead-letter topic of ``plan``, collected to this process from
    Spark frames: ``snapshot`` as ``spark_apps.common.snapshot`` gives it (``partition, offset, ts, key,
    value``), ``output`` as ``spark_apps.backfill_verify.read_output`` does (``topic, partition, offset,
    key, value, lineage, code``, the headers as text). (This package imports no Spark app: the caller
    reads the frames.)"""
    source = [SourceRecord(r["partition"], r["offset"], r["ts"], _b(r["key"]), _b(r["value"]))
              for r in snapshot.select("partition", "offset", "ts", "key", "value").collect()]
    out = [OutputRecord(r["topic"], r["partition"], r["offset"], _b(r["key"]), _b(r["value"]), _text(r["lineage"]),
                        _text(r["code"]))
           for r in output.select("topic", "partition", "offset", "key", "value", "lineage", "code").collect()]
    return (source, [r for r in out if r.topic == plan.target_topic],
            [r for r in out if r.topic == plan.dead_letter_topic])


def _b(value: Any) -> bytes | None:
    return None if value is None else bytes(value)


def _text(value: Any) -> str | None:
    """A header's text: Spark gives it as a string (cast) or as bytes."""
    if value is None or isinstance(value, str):
        return value
    return bytes(value).decode()


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
    * each target record's key is the key the rule writes (:func:`kafkaops.platform.keyrules.written_key`:
      the source record's own for ``record_key``, ``window_key`` and ``session_key``, the new key for a
      value rule), on ``partition_for(placement key, N)``, the placement key being the rule applied to the
      written key (:func:`~kafkaops.platform.keyrules.placement_key`: the store key of a changelog key, else
      the written key itself), and every placement key lives in exactly one target partition;
    * per placement key, the target order is the per-key source order (the module docstring of
      :mod:`kafkaops.rekey.backfill`);
    * the order-independent checksum of values is the same on both sides.

    spark_apps/backfill_verify.py measures the same as Spark aggregations (no records on the driver).
    """
    source = list(source)
    target = sorted(target, key=lambda r: (r.partition, r.offset))
    dead_letters = sorted(dead_letters, key=lambda r: (r.partition, r.offset))
    expected, key_of, expected_dead = expected_order(plan, source)
    rule = plan.rule
    written_of = {format_lineage(plan.source_topic, r.partition, r.offset): written_key(r.key, None, rule)
                  for r in source} if rule.keeps_record_key else key_of
    n = plan.target_partitions

    seen: dict[str, int] = defaultdict(int)
    for r in (*target, *dead_letters):
        if r.lineage is not None:
            seen[r.lineage] += 1
    missing_lineage = [r for r in (*target, *dead_letters) if r.lineage is None]

    keys_in: dict[bytes, set[int]] = defaultdict(set)
    actual: dict[bytes, list[str]] = defaultdict(list)
    for r in target:
        place = placement_key(r.key, rule)
        if place is not None:
            keys_in[place].add(r.partition)
            actual[place].append(r.lineage or "?")
    split = {k for k, ps in keys_in.items() if len(ps) > 1}
    broken = {k for k in expected.keys() | actual.keys() if expected.get(k, []) != actual.get(k, [])}
    rows = _partition_rows(plan, target, dead_letters, split=split, broken=broken, seen=seen, known=key_of.keys())
    written = {r.partition for r in target}

    dups = sorted(lin for lin, c in seen.items() if c > 1)
    unknown = sorted(lin for lin in seen if lin not in key_of)
    lost = sorted(set(key_of) - set(seen), key=parse_lineage)
    wrong_dead = sorted({r.lineage for r in dead_letters if r.lineage} - expected_dead.keys())
    dead_in_target = sorted({r.lineage for r in target if r.lineage} & expected_dead.keys())
    wrong_code = [r for r in dead_letters if r.lineage in expected_dead and r.code != expected_dead[r.lineage]]
    wrong_key = [r for r in target if r.lineage in key_of and written_of[r.lineage] != r.key]
    off_home = next((r for r in target if _off_home(r, plan)), None)
    home_key = None if off_home is None else placement_key(off_home.key, rule)
    found = IntegrityFindings(
        source_records=len(source), target_records=len(target), dead_letters=len(dead_letters),
        expected_dead_letters=len(expected_dead), source_checksum=checksum(r.value for r in source),
        output_checksum=checksum(r.value for r in (*target, *dead_letters)), partitions=tuple(rows),
        dead_letter_codes=Counter(expected_dead.values()),
        no_lineage=len(missing_lineage), no_lineage_at=_at(missing_lineage[0]) if missing_lineage else "",
        extra_partitions=tuple(sorted(written - set(range(n)))),
        duplicates=len(dups), duplicate_sample=tuple(dups[:SAMPLE]),
        unknown=len(unknown), unknown_sample=tuple(unknown[:SAMPLE]),
        lost=len(lost), lost_sample=tuple(lost[:SAMPLE]),
        wrong_dead=len(wrong_dead), wrong_dead_sample=tuple(wrong_dead[:SAMPLE]),
        dead_in_target=len(dead_in_target), dead_in_target_sample=tuple(dead_in_target[:SAMPLE]),
        wrong_codes=len(wrong_code),
        wrong_code=(_at(wrong_code[0]), wrong_code[0].lineage or "", wrong_code[0].code,
                    expected_dead[wrong_code[0].lineage or ""]) if wrong_code else None,
        wrong_keys=len(wrong_key),
        wrong_key=(_at(wrong_key[0]), wrong_key[0].key, written_of[wrong_key[0].lineage or ""]) if wrong_key else None,
        misplaced=None if off_home is None else (
            home_key, _at(off_home), None if home_key is None else partition_for(home_key, n)),
        split_keys=len(split), split=(min(split), tuple(sorted(keys_in[min(split)]))) if split else None,
        order_breaks=len(broken), order=_first_order_break(broken, expected, actual))
    return integrity_report(plan, found)


def _partition_rows(plan: BackfillPlan, target: list[OutputRecord], dead_letters: list[OutputRecord], *,
                    split: set[bytes], broken: set[bytes], seen: Mapping[str, int], known: Collection[str]
                    ) -> list[PartitionIntegrity]:
    """One row per target partition (all ``plan.target_partitions`` of them) and per dead-letter partition written
    (partition 0 when none is): records, keys and what is wrong there."""
    n = plan.target_partitions

    def row(topic: str, partition: int, records: list[OutputRecord], *, is_target: bool) -> PartitionIntegrity:
        keys = {placement_key(r.key, plan.rule) for r in records}
        misplaced = sum(1 for r in records if is_target and _off_home(r, plan))
        return PartitionIntegrity(
            topic=topic, partition=partition, records=len(records), keys=len(keys), misplaced=misplaced,
            split_keys=sum(1 for k in keys if k in split) if is_target else 0,
            order_breaks=sum(1 for k in keys if k in broken) if is_target else 0,
            duplicate_lineages=sum(1 for r in records if r.lineage and seen.get(r.lineage, 0) > 1),
            unknown_lineages=sum(1 for r in records if r.lineage and r.lineage not in known))

    by_partition: dict[int, list[OutputRecord]] = defaultdict(list)
    for r in target:
        by_partition[r.partition].append(r)
    dead_by: dict[int, list[OutputRecord]] = defaultdict(list)
    for r in dead_letters:
        dead_by[r.partition].append(r)
    return ([row(plan.target_topic, p, by_partition.get(p, []), is_target=True) for p in range(n)]
            + [row(plan.dead_letter_topic, p, dead_by.get(p, []), is_target=False) for p in sorted(dead_by) or [0]])


def _off_home(r: OutputRecord, plan: BackfillPlan) -> bool:
    """A target record off its placement key's partition, or without a placement key."""
    place = placement_key(r.key, plan.rule)
    return place is None or partition_for(place, plan.target_partitions) != r.partition


def _first_order_break(broken: set[bytes], expected: Mapping[bytes, list[str]], actual: Mapping[bytes, list[str]]
                       ) -> tuple[bytes, int, str | None, str | None, int, int] | None:
    """The first key (in byte order) whose target order is not its source order: the key, the first position that
    differs, the lineage there in the target and in the source order, and both counts."""
    if not broken:
        return None
    k = min(broken)
    want, got = expected.get(k, []), actual.get(k, [])
    at = next((i for i, (a, b) in enumerate(zip(want, got)) if a != b), min(len(want), len(got)))
    return k, at, got[at] if at < len(got) else None, want[at] if at < len(want) else None, len(got), len(want)
