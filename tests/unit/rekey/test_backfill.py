"""kafkaops.rekey.backfill and the pure parts of kafkaops.rekey.steps: lineage, the plan as a value,
per-key order, integrity checks that pass on a correct copy and name each kind of damage (the key
rules are tests/unit/platform/test_keyrules.py's)."""
from __future__ import annotations

import json
import struct
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafkaops.platform import keyrules
from kafkaops.rekey import backfill
from kafkaops.rekey import steps as partitions
from kafkaops.rekey.backfill import BackfillError, BackfillPlan, OrderClock, format_lineage, parse_lineage
from kafkaops.testing.integrity import OutputRecord, SourceRecord, check_integrity, expected_order
from kafkaops.model import Broker, Cluster, PartitionAssignment
from kafkaops.platform.partitioner import partition_for

PLAN = BackfillPlan("orders", ((0, 0, 100), (1, 0, 100), (2, 0, 100)), "orders.v2", 6, "field:key")


# -- lineage and plan ------------------------------------------------------------------------------------------
@given(st.from_regex(r"[A-Za-z0-9._-]{1,40}", fullmatch=True), st.integers(0, 10_000), st.integers(0, 2**62))
def test_lineage_round_trips(topic: str, partition: int, offset: int) -> None:
    assert parse_lineage(format_lineage(topic, partition, offset).encode()) == (topic, partition, offset)


def test_the_plan_is_a_json_value_with_spark_offsets() -> None:
    assert BackfillPlan.from_json(PLAN.to_json()) == PLAN
    assert PLAN.dead_letter_topic == "orders.v2.dlq" and PLAN.records == 300
    assert json.loads(PLAN.offsets_json("end")) == {"orders": {"0": 100, "1": 100, "2": 100}}


def test_several_plans_travel_as_one_json_list_and_one_plan_as_itself() -> None:
    other = BackfillPlan("customers", ((0, 0, 7),), "customers.v2", 12, key_rule="window_key")
    assert BackfillPlan.many_from_json(BackfillPlan.many_to_json([PLAN, other])) == ([PLAN, other], True)
    assert BackfillPlan.many_from_json(PLAN.to_json()) == ([PLAN], False)
    with pytest.raises(BackfillError, match="not valid"):
        BackfillPlan.many_from_json("[{")


@pytest.mark.parametrize("changes, words", [
    ({"target_topic": "orders"}, "must all differ"),
    ({"target_partitions": 0}, "at least 1"),
    ({"source_offsets": ((0, 5, 2),)}, "0 <= start <= end"),
    ({"source_offsets": ((0, 0, 1), (0, 0, 2))}, "more than once"),
    ({"key_rule": "jsonpath:$..x"}, "key rule"),
])
def test_bad_plans_are_refused(changes: dict, words: str) -> None:
    with pytest.raises(BackfillError, match=words):
        replace(PLAN, **changes)


def test_next_target_topic_skips_taken_versions() -> None:
    assert backfill.next_target_topic("orders", []) == "orders.v2"
    assert backfill.next_target_topic("orders", ["orders.v2", "orders.v3"]) == "orders.v4"
    assert backfill.next_target_topic("orders.v2", []) == "orders.v3"


# -- order -----------------------------------------------------------------------------------------------------
def test_the_order_clock_is_a_running_maximum_per_key_and_partition() -> None:
    clock = OrderClock()
    assert [clock.tick(0, o, ts, b"k") for o, ts in [(0, 10), (1, 5), (2, 20)]] == [10, 10, 20]
    assert clock.tick(1, 0, 7, b"k") == 7  # another partition has its own clock
    with pytest.raises(BackfillError, match="offset order"):
        clock.tick(0, 1, 30, b"k")


# -- integrity ---------------------------------------------------------------------------------------------
def source_records(n: int = 300) -> list[SourceRecord]:
    out = []
    for i in range(n):
        p, off = i % 3, i // 3
        key = None if i % 50 == 7 else f"acct-{i % 13}"
        body = {"id": i} if key is None else {"id": i, "key": key}
        out.append(SourceRecord(p, off, 1000 + i, None, json.dumps(body).encode()))
    return out


def copy(source: list[SourceRecord], plan: BackfillPlan = PLAN) -> tuple[list[OutputRecord], list[OutputRecord]]:
    """A correct backfill, computed the slow obvious way."""
    expected, key_of, dead = expected_order(plan, source)
    by_lineage = {format_lineage(plan.source_topic, r.partition, r.offset): r for r in source}
    target, next_offset = [], [0] * plan.target_partitions
    for key, lineages in sorted(expected.items()):  # placed by the new key, written with the key the rule writes
        p = partition_for(key, plan.target_partitions)
        for lin in lineages:
            written = keyrules.written_key(by_lineage[lin].key, key, plan.rule)
            target.append(OutputRecord(plan.target_topic, p, next_offset[p], written, by_lineage[lin].value, lin))
            next_offset[p] += 1
    dlq = [OutputRecord(plan.dead_letter_topic, 0, i, keyrules.written_key(by_lineage[lin].key, None, plan.rule),
                        by_lineage[lin].value, lin, dead[lin])
           for i, lin in enumerate(sorted(dead, key=parse_lineage))]
    return target, dlq


#: A Kafka Streams window store changelog copied by window_key into 6 partitions.
WINDOWED = replace(PLAN, key_rule="window_key", source_offsets=((0, 0, 1000), (1, 0, 1000), (2, 0, 1000)))


def window_records(n: int = 240) -> list[SourceRecord]:
    """A window store changelog: 12 store keys, each in the source partition Streams put it in
    (murmur2(store key) % 3), windows of a minute, tombstones, and two records no window store writes."""
    out, offsets = [], [0, 0, 0]
    for i in range(n):
        store = f"sensor-{i % 12}".encode()
        p = partition_for(store, 3)
        key = store + struct.pack(">qi", 60_000 * (i // 36), i % 2)
        out.append(SourceRecord(p, offsets[p], 1000 + i, key, None if i % 11 == 3 else json.dumps({"n": i}).encode()))
        offsets[p] += 1
    out += [SourceRecord(0, offsets[0], 5000, b"short", b"{}"), SourceRecord(1, offsets[1], 5001, None, b"{}")]
    return out


def test_a_window_store_copy_keeps_each_changelog_key_placed_by_its_store_key() -> None:
    source = window_records()
    target, dlq = copy(source, WINDOWED)
    by_lineage = {format_lineage("orders", r.partition, r.offset): r for r in source}
    assert all(r.key == by_lineage[r.lineage or ""].key and r.partition == partition_for(r.key[:-12], 6)
               for r in target if r.key is not None)
    assert [r.key for r in dlq] == [b"short", None]  # dead letters keep their key too
    report = check_integrity(WINDOWED, source, target, dlq)
    assert report.ok, report.failures
    assert (report.target_records, report.dead_letters) == (240, 2)
    assert sum(p.keys for p in report.partitions if p.topic == WINDOWED.target_topic) == 12  # store keys


@pytest.mark.parametrize("kind, words", [
    ("placed by the whole changelog key", "off their key's partition"),
    ("written with the store key", "carry another key than rule 'window_key' gives"),
    ("a store key's windows reordered", "out of per-key source order"),
])
def test_a_window_store_copy_placed_or_keyed_by_anything_but_the_rule_fails(kind: str, words: str) -> None:
    source = window_records()
    target, dlq = copy(source, WINDOWED)
    i = next(i for i, r in enumerate(target)
             if partition_for(r.key or b"", 6) != r.partition and partition_for(r.key or b"", 6) in (0, 1, 2))
    r = target[i]
    if kind == "placed by the whole changelog key":  # as record_key (or a copy ignoring the rule) would place it
        target[i] = replace(r, partition=partition_for(r.key or b"", 6), offset=30_000)
    elif kind == "written with the store key":  # as the backfill wrote it before: the suffix lost
        target[i] = replace(r, key=(r.key or b"")[:-12])
    else:  # two windows of one store key swapped
        j = next(j for j in range(i + 1, len(target)) if (target[j].key or b"")[:-12] == (r.key or b"")[:-12])
        target[i], target[j] = replace(target[j], offset=r.offset), replace(r, offset=target[j].offset)
    report = check_integrity(WINDOWED, source, target, dlq)
    assert not report.ok and any(words in f for f in report.failures), report.failures
    if kind == "placed by the whole changelog key":
        assert sum(p.misplaced for p in report.partitions) == 1
        assert any(f"key {(r.key or b'')[:-12]!r}" in f for f in report.failures), report.failures


def test_a_correct_copy_passes_every_check() -> None:
    source = source_records()
    target, dlq = copy(source)
    report = check_integrity(PLAN, source, target, dlq)
    assert report.ok, report.failures
    assert (report.source_records, report.target_records, report.dead_letters) == (300, 294, 6)
    assert report.dead_letter_codes == {"FIELD_MISSING": 6} and report.wrong_codes == 0
    assert report.require() is report
    assert backfill.IntegrityReport.from_dict(json.loads(json.dumps(report.to_dict()))) == report


def damaged(kind: str, source: list[SourceRecord] | None = None) -> tuple[list[OutputRecord], list[OutputRecord]]:
    """A copy of ``source`` (:func:`source_records` if None) with one kind of damage."""
    target, dlq = copy(source_records() if source is None else source)
    if kind == "duplicate":
        target.append(replace(target[0], offset=10_000))
    elif kind == "lost":
        target.pop(5)
    elif kind == "misplaced":
        r = target[0]
        target[0] = replace(r, partition=(r.partition + 1) % 6, offset=20_000)
    elif kind == "reordered":
        i = next(i for i in range(len(target) - 1) if target[i].key == target[i + 1].key)
        a, b = target[i], target[i + 1]
        target[i], target[i + 1] = replace(b, offset=a.offset), replace(a, offset=b.offset)
    elif kind == "changed value":
        target[3] = replace(target[3], value=b'{"id": -1}')
    elif kind == "dead letter lost":
        dlq.pop()
    elif kind == "wrong code":
        dlq[2] = replace(dlq[2], code="NOT_JSON")
    elif kind == "no code":
        dlq[0] = replace(dlq[0], code=None)
    return target, dlq


@pytest.mark.parametrize("kind, words", [
    ("duplicate", "written more than once"),
    ("lost", "in neither the target nor the dead-letter topic"),
    ("misplaced", "off their key's partition"),
    ("reordered", "out of per-key source order"),
    ("changed value", "value checksum differs"),
    ("dead letter lost", "300 records in the snapshot but target"),
    ("wrong code", "1 dead letter(s) carry another kafkaops.dead_letter_code than rule 'field:key' gives"),
    ("no code", "carries None, expected 'FIELD_MISSING'"),
])
def test_each_damage_is_named(kind: str, words: str) -> None:
    target, dlq = damaged(kind)
    report = check_integrity(PLAN, source_records(), target, dlq)
    assert not report.ok
    assert any(words in f for f in report.failures), report.failures
    with pytest.raises(backfill.BackfillIntegrityError, match="Delete the target"):
        report.require()


def test_the_integrity_frames_fit_the_backfill_suite() -> None:
    from kafkaops.platform import gates

    source = source_records()
    good = partitions.integrity_frames(check_integrity(PLAN, source, *copy(source)))
    assert gates.run("backfill", good).ok
    bad = gates.run("backfill", partitions.integrity_frames(check_integrity(PLAN, source, *damaged("duplicate"))))
    assert not bad.ok and any("duplicated record" in f for f in bad.failures), bad.failures
    bad = gates.run("backfill", partitions.integrity_frames(check_integrity(PLAN, source, *damaged("wrong code"))))
    assert not bad.ok and any("1 dead letter(s) carry another reason code" in f for f in bad.failures), bad.failures


def test_a_report_written_before_reason_codes_still_reads() -> None:
    source = source_records()
    data = check_integrity(PLAN, source, *copy(source)).to_dict()
    del data["dead_letter_codes"], data["wrong_codes"]
    assert backfill.IntegrityReport.from_dict(data).wrong_codes == 0


def test_keys_spanning_source_partitions_merge_by_timestamp() -> None:
    plan = replace(PLAN, key_rule="record_key")
    # key k moved from partition 0 to partition 1 at ts 100 (an earlier partition increase)
    source = [SourceRecord(0, 0, 10, b"k", b"a"), SourceRecord(0, 1, 50, b"k", b"b"),
              SourceRecord(1, 0, 100, b"k", b"c"), SourceRecord(1, 1, 90, b"k", b"d")]
    expected, _, _ = expected_order(plan, source)
    assert expected[b"k"] == ["orders/0/0", "orders/0/1", "orders/1/0", "orders/1/1"]


# -- a copy in passes --------------------------------------------------------------------------------------
def test_a_catch_up_pass_starts_where_the_last_ended_and_the_whole_copy_spans_all_passes() -> None:
    first = replace(PLAN, source_offsets=((0, 10, 100), (1, 0, 100), (2, 0, 100)))
    second = first.next_pass({0: 150, 1: 100, 2: 130})
    assert second.source_offsets == ((0, 100, 150), (1, 100, 100), (2, 100, 130))
    assert second.pass_starts == ((0, 10), (0, 100), (1, 0), (1, 100), (2, 0), (2, 100))
    assert second.continues and not first.continues and second.origin(0) == 10
    third = second.next_pass({0: 160, 1: 90})  # a partition behind or not named: an empty range
    assert third.source_offsets == ((0, 150, 160), (1, 100, 100), (2, 130, 130))
    whole = third.whole_copy()
    assert whole.source_offsets == ((0, 10, 160), (1, 0, 100), (2, 0, 130)) and whole.records == 150 + 100 + 130
    assert [whole.pass_of(0, o) for o in (10, 99, 100, 149, 150)] == [1, 1, 2, 2, 3]
    assert whole.pass_of(1, 99) == 1 and PLAN.pass_of(0, 50) == 0
    # partition 1 had nothing new in passes 2 and 3: its later records still count as the same pass everywhere
    fourth = third.next_pass({0: 170, 1: 105, 2: 140}).whole_copy()
    assert [fourth.pass_of(0, 165), fourth.pass_of(1, 102), fourth.pass_of(2, 135)] == [4, 4, 4]
    assert BackfillPlan.from_json(third.to_json()) == third
    assert "pass_starts" not in PLAN.to_dict()  # a one-pass plan keeps its name (backfill_id)
    assert backfill.backfill_id(second) != backfill.backfill_id(third)
    with pytest.raises(BackfillError, match="pass start.*outside"):
        replace(PLAN, pass_starts=((5, 0),))


def test_a_pass_orders_after_the_pass_before_whatever_the_timestamps() -> None:
    plan = replace(PLAN, key_rule="record_key", source_offsets=((0, 0, 2), (1, 0, 2)),
                   pass_starts=((0, 0), (0, 1), (1, 0), (1, 1)))
    # pass 1: 0/0 (ts 50), 1/0 (ts 60); pass 2: 0/1 (ts 10, a clock gone backwards), 1/1 (ts 5)
    source = [SourceRecord(0, 0, 50, b"k", b"a"), SourceRecord(1, 0, 60, b"k", b"b"),
              SourceRecord(0, 1, 10, b"k", b"c"), SourceRecord(1, 1, 5, b"k", b"d")]
    expected, _, _ = expected_order(plan, source)
    assert expected[b"k"] == ["orders/0/0", "orders/1/0", "orders/1/1", "orders/0/1"]  # each pass's own clock
    one_pass, _, _ = expected_order(replace(plan, pass_starts=()), source)
    assert one_pass[b"k"] == ["orders/0/0", "orders/0/1", "orders/1/0", "orders/1/1"]


def test_a_catch_up_pass_accepts_what_earlier_passes_wrote_and_counts_only_its_own() -> None:
    second = replace(PLAN, source_offsets=((0, 0, 100), (1, 0, 100), (2, 0, 100))).next_pass(
        {0: 120, 1: 110, 2: 100})
    earlier = ("orders.v2", 0, "orders", 0, 60, 0, 99, True)
    mine = ("orders.v2", 0, "orders", 0, 20, 100, 119, False)
    got = backfill.committed_output(second, {("orders", 0): 20}, _counts(earlier, mine))
    assert got == backfill.CommittedOutput("direct", 20)
    assert backfill.committed_output(second, {}, _counts(earlier)) == backfill.CommittedOutput(None, 0)
    with pytest.raises(BackfillError, match="another plan"):  # not of this copy: before its origin
        backfill.committed_output(replace(second, pass_starts=((0, 50), (0, 100), (1, 0), (1, 100), (2, 0),
                                                               (2, 100))), {}, _counts(earlier))


def _counts(*rows: tuple) -> list[backfill.OutputCount]:
    return [backfill.OutputCount(*row) for row in rows]


def test_a_plan_has_its_own_slices_and_transactional_names() -> None:
    assert backfill.slices(PLAN, backfill.DIRECT) == [("orders", 0), ("orders", 1), ("orders", 2)]
    assert backfill.slices(PLAN, backfill.MERGED) == [("orders.v2", p) for p in range(6)] + [("orders.v2.dlq", 0)]
    name = backfill.backfill_id(PLAN)
    assert name.startswith("kafkaops-backfill-orders.v2-") and name == backfill.backfill_id(BackfillPlan.from_json(
        PLAN.to_json()))
    assert backfill.backfill_id(replace(PLAN, source_offsets=((0, 0, 101), (1, 0, 100), (2, 0, 100)))) != name


def test_committed_output_takes_the_copy_its_markers_count() -> None:
    direct = _counts(("orders.v2", 0, "orders", 0, 30, 0, 40), ("orders.v2", 3, "orders", 0, 10, 2, 50),
                     ("orders.v2.dlq", 0, "orders", 1, 2, 7, 9))
    got = backfill.committed_output(PLAN, {("orders", 0): 40, ("orders", 1): 2}, direct)
    assert got == backfill.CommittedOutput("direct", 42)
    merged = _counts(("orders.v2", 0, "orders", 0, 30, 0, 40), ("orders.v2", 0, "orders", 2, 5, 0, 4),
                     ("orders.v2.dlq", 0, "orders", 1, 2, 7, 9))
    assert backfill.committed_output(PLAN, {("orders.v2", 0): 35, ("orders.v2.dlq", 0): 2}, merged) == \
        backfill.CommittedOutput("merged", 37)
    assert backfill.committed_output(PLAN, {}, []) == backfill.CommittedOutput(None, 0)
    # markers of records no longer there: the output was deleted (to switch copies) before the markers
    assert backfill.committed_output(PLAN, {("orders", 0): 40}, []) == backfill.CommittedOutput(None, 0, stale=True)


@pytest.mark.parametrize(("markers", "counts", "message"), [
    ({}, [("orders.v2", 2, None, None, 1)], "orders.v2-2 holds 1 record.*without a kafkaops.lineage header"),
    ({}, [("orders.v2", 2, "orders", 0, 1, 999_999, 999_999)], "orders.v2-2 .*lineage orders/0/999999.*another plan"),
    ({}, [("orders.v2", 2, "payments", 0, 1, 5, 5)], "lineage payments/0/5.*another plan"),
    ({}, [("orders.v2", 2, "orders", 0, 4, 0, 3)], "hold 4 record.*no commit marker.*twice"),
    ({("orders", 0): 5}, [("orders.v2", 2, "orders", 0, 4, 0, 3)],
     "direct slice orders-0 has 4 committed record.*marker in consumer group kafkaops-backfill-orders.v2-.* counts 5"),
    ({("orders.v2", 2): 4}, [("orders.v2", 2, "orders", 0, 4, 0, 3), ("orders.v2", 1, "orders", 0, 1, 4, 4)],
     "merged slice orders.v2-1 has 1 committed record.*counts 0"),
    ({("orders", 0): 4, ("orders.v2", 2): 4}, [("orders.v2", 2, "orders", 0, 4, 0, 3)], "markers of both copies"),
])
def test_committed_output_refuses_what_this_plan_did_not_write(markers, counts, message) -> None:
    with pytest.raises(BackfillError, match=message):
        backfill.committed_output(PLAN, markers, _counts(*counts))


def test_offset_translation_resumes_at_the_first_unconsumed_record() -> None:
    target = {0: [(0, "s/0/0"), (1, "s/1/0"), (2, "s/0/1"), (3, "s/1/1")], 1: [(0, "s/0/2")]}
    assert backfill.translate_offsets("s", {0: 2, 1: 1}, target) == {
        0: {"offset": 3, "redelivered": 0}, 1: {"offset": 0, "redelivered": 0}}
    assert backfill.translate_offsets("s", {0: 2}, target)[0] == {"offset": 1, "redelivered": 1}
    assert backfill.translate_offsets("s", {0: 3, 1: 2}, target)[0] == {"offset": 4, "redelivered": 0}
    # with the partitions' end offsets (the copy's last transaction marker after its last record): no lag left
    assert backfill.translate_offsets("s", {0: 3, 1: 2}, target, {0: 5, 1: 2}) == {
        0: {"offset": 5, "redelivered": 0}, 1: {"offset": 2, "redelivered": 0}}
    assert backfill.translate_offsets("s", {0: 2}, target, {0: 5, 1: 2})[0] == {"offset": 1, "redelivered": 1}


def test_a_copy_of_a_copy_is_read_by_its_last_lineage_header() -> None:
    """A topic copied twice: each record carries the first copy's lineage (kept with the source's headers)
    and the second's after it. Offset translation and the check of a used target read the last one."""
    from kafkaops.platform.kafka.records import Record

    lineage = backfill.LINEAGE_HEADER
    copied = [Record("s.v3", 0, o, 0, b"k", b"v", ((lineage, f"s.v1/2/{o + 100}".encode()), ("trace", None),
                                                   (lineage, f"s/0/{o}".encode()))) for o in range(4)]
    assert copied[1].header(lineage) == b"s.v1/2/101" and copied[1].last_header(lineage) == b"s/0/1"
    assert copied[1].last_header("absent") is None
    table = backfill.translate_offsets("s", {0: 2}, {0: [(r.offset, (r.last_header(lineage) or b"").decode())
                                                         for r in copied]})
    assert table == {0: {"offset": 2, "redelivered": 0}}
    plan = BackfillPlan("s", ((0, 0, 10),), "s.v3", 1)
    assert backfill.foreign_record(plan, ((r.topic, r.partition, r.offset, r.last_header(lineage)) for r in copied)) \
        is None
    assert "does not hold" in str(backfill.foreign_record(plan, ((r.topic, r.partition, r.offset, r.header(lineage))
                                                                 for r in copied)))


# -- in-place placement and key change --------------------------------------------------------------------
def cluster(brokers: int = 6, racks: int = 3, partitions_: int = 3, rf: int = 3) -> Cluster:
    bs = tuple(Broker(i, rack=f"r{i % racks}") for i in range(1, brokers + 1))
    parts = tuple(PartitionAssignment("t", p, tuple(((p + k) % brokers) + 1 for k in range(rf)))
                  for p in range(partitions_))
    return Cluster(bs, parts)


@pytest.mark.parametrize("brokers, racks, rf, grow_to", [(6, 3, 3, 12), (3, 3, 3, 9), (4, 2, 2, 10), (5, 1, 2, 13)])
def test_new_partitions_are_balanced_and_rack_aware(brokers: int, racks: int, rf: int, grow_to: int) -> None:
    c = cluster(brokers, racks, 3, rf)
    placed = partitions.place_new_partitions(c, "t", grow_to)
    assert len(placed) == grow_to - 3
    rack = {b.id: b.rack for b in c.brokers}
    for replicas in placed:
        assert len(set(replicas)) == rf
        assert len({rack[b] for b in replicas}) == min(rf, racks)
    counts = {b: 0 for b in c.broker_ids}
    leaders = dict(counts)
    for replicas in (*(p.replicas for p in c.partitions), *placed):
        leaders[replicas[0]] += 1
        for b in replicas:
            counts[b] += 1
    assert max(counts.values()) - min(counts.values()) <= 1, counts
    assert max(leaders.values()) - min(leaders.values()) <= 1, leaders


def test_key_change_counts_moved_keys_and_records() -> None:
    keys = [f"k{i}".encode() for i in range(200)] * 2 + [None] * 10
    change = partitions.key_change(keys, 3, 6)
    moved = sum(partition_for(f"k{i}".encode(), 3) != partition_for(f"k{i}".encode(), 6) for i in range(200))
    assert (change.distinct_keys, change.moved_keys, change.moved_records, change.keyed_records) == \
        (200, moved, 2 * moved, 400)
    assert f"{moved} of 200 distinct keys" in change.summary()
    assert not partitions.key_change([None, None], 3, 6).keyed


def test_partition_params_refuse_bad_input() -> None:
    with pytest.raises(Exception, match="mode 'sideways' is unknown.*key rule"):
        partitions.PartitionParams.from_params({"topic": "t", "new_partition_count": 6, "mode": "sideways",
                                                "key_rule": "nope"})
    p = partitions.PartitionParams.from_params({"topic": "t", "new_partition_count": 6})
    assert p.dry_run is True and p.mode == "migrate" and p.kind == "partition_increase"


@given(st.lists(st.one_of(st.none(), st.binary(max_size=40)), max_size=60))
def test_the_checksum_sums_as_two_32_bit_halves(values: list[bytes | None]) -> None:
    """What the Spark verify sums in 64-bit columns gives the checksum of check_integrity."""
    halves = [backfill.digest_halves(v) for v in values]
    assert all(0 <= h < 2**32 and 0 <= lo < 2**32 for h, lo in halves)
    assert backfill.checksum_of_sums(sum(h for h, _ in halves), sum(lo for _, lo in halves)) == \
        backfill.checksum(values)


def test_a_target_record_no_run_of_the_plan_wrote_is_named_and_the_plans_own_are_not() -> None:
    from kafkaops.rekey.backfill import foreign_record

    plan = BackfillPlan("orders", ((0, 10, 100), (1, 0, 50)), "orders.v2", 6)
    own = [("orders.v2", 3, 7, b"orders/0/10"), ("orders.v2", 5, 0, b"orders/1/49")]
    assert foreign_record(plan, own) is None
    assert foreign_record(plan, []) is None
    assert "orders.v2-2 offset 4 carries no kafkaops.lineage header" in str(
        foreign_record(plan, [*own, ("orders.v2", 2, 4, None)]))
    assert "is a copy of orders/0/9, which this copy of orders does not hold" in str(
        foreign_record(plan, [("orders.v2", 1, 0, b"orders/0/9")]))  # before the plan's start
    assert "copy of orders/1/50" in str(foreign_record(plan, [("orders.v2", 1, 0, b"orders/1/50")]))  # at its end
    assert "copy of payments/0/20" in str(foreign_record(plan, [("orders.v2", 1, 0, b"payments/0/20")]))
    assert "is not 'topic/partition/offset'" in str(foreign_record(plan, [("orders.v2", 1, 0, b"garbage")]))
    # a later pass of the same copy: records of the earlier passes (from the first pass's start) are its own
    later = plan.next_pass({0: 150, 1: 50})
    assert foreign_record(later, [("orders.v2", 0, 0, b"orders/0/10"), ("orders.v2", 0, 9, b"orders/0/149")]) is None
