"""The tail copy's pure parts: what a part writes, and its check finding each kind of fault."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest

from kafkaops.platform.kafka.records import Record
from kafkaops.platform.partitioner import partition_for
from kafkaops.rekey import tail
from kafkaops.rekey.backfill import (CODE_HEADER, LINEAGE_HEADER, BackfillPlan, IntegrityReport, PartitionIntegrity,
                                     checksum)

PLAN = BackfillPlan("orders", ((0, 0, 100), (1, 0, 100)), "orders.v2", 6, key_rule="field:customer")


def source(partition: int, offset: int, ts: int, customer: str | None) -> Record:
    value = json.dumps({"customer": customer} if customer is not None else {"other": 1}).encode()
    return Record("orders", partition, offset, ts, f"k{offset}".encode(), value)


def read_back(outputs: list[tail.Output]) -> list[Record]:
    """What a faithful broker gives back: each output partition's records in the order written."""
    offsets: dict[tuple[str, int], int] = {}
    found = []
    for o in outputs:
        at = offsets.get((o.topic, o.partition), 0)
        offsets[(o.topic, o.partition)] = at + 1
        found.append(Record(o.topic, o.partition, at, o.timestamp or 0, o.key, o.value, o.headers))
    return found


# one new key ("alice") in two source partitions, its timestamps interleaved; one record without the field
SOURCE = [source(0, 10, 1000, "alice"), source(0, 11, 1003, "bob"), source(1, 20, 1001, "alice"),
          source(1, 21, 1002, "alice"), source(1, 22, 1004, None)]


def test_a_part_places_each_key_where_javas_partitioner_does_in_timestamp_order_and_dead_letters_the_rest() -> None:
    out = tail.rekey_part(PLAN, SOURCE)
    alice = [dict(o.headers)[LINEAGE_HEADER].decode() for o in out if o.key == b"alice"]
    assert alice == ["orders/0/10", "orders/1/20", "orders/1/21"]  # merged by the order clock, not by partition
    assert {o.partition for o in out if o.key == b"alice"} == {partition_for(b"alice", 6)}
    dead = [o for o in out if o.topic == PLAN.dead_letter_topic]
    assert len(dead) == 1 and dict(dead[0].headers)[CODE_HEADER] == b"FIELD_MISSING" and dead[0].key is None
    assert sorted(o.value for o in out) == sorted(r.value for r in SOURCE)


def test_a_faithful_read_back_passes_with_the_counts_and_checksums_of_the_part() -> None:
    check = tail.check_part(PLAN, SOURCE, read_back(tail.rekey_part(PLAN, SOURCE)))
    assert check.ok, check.failures
    assert (check.source_records, check.target_records, check.dead_letters, check.expected_dead_letters) == (5, 4, 1, 1)
    assert f"{check.source_sum:016x}" == checksum(r.value for r in SOURCE) == f"{check.output_sum:016x}"


@pytest.mark.parametrize("fault, finding", [
    (lambda rs: rs[1:], "missing from the outputs"),
    (lambda rs: rs + rs[:1], "written more than once"),
    (lambda rs: [replace(r, partition=(r.partition + 1) % 6) if r.key == b"bob" else r for r in rs],
     "another output partition than planned"),
    (lambda rs: [replace(r, value=b"{}") if r.key == b"bob" else r for r in rs], "value differs"),
    (lambda rs: [replace(r, key=b"carol") if r.key == b"bob" else r for r in rs], "another key than the rule gives"),
    (lambda rs: rs + [Record("orders.v2", 0, 99, 0, b"x", b"y", ((LINEAGE_HEADER, b"orders/0/99"),))],
     "not of this part"),
    (lambda rs: [replace(r, headers=((LINEAGE_HEADER, dict(r.headers)[LINEAGE_HEADER]), (CODE_HEADER, b"NO_KEY")))
                 if r.topic == PLAN.dead_letter_topic else r for r in rs], "another reason code"),
    (lambda rs: sorted(rs, key=lambda r: r.header(LINEAGE_HEADER) != b"orders/1/21"), "out of per-key source order"),
])
def test_the_check_of_a_part_finds_each_fault(fault, finding) -> None:
    check = tail.check_part(PLAN, SOURCE, fault(read_back(tail.rekey_part(PLAN, SOURCE))))
    assert not check.ok and any(finding in f for f in check.failures), check.failures


def test_the_gate_report_adds_the_tail_to_the_backfills_report() -> None:
    first = tail.check_part(PLAN, SOURCE, read_back(tail.rekey_part(PLAN, SOURCE)))
    keys = tail.TailKeys()
    keys.add(first)
    report = replace(tail.add_part(tail.TailReport(began={0: 10, 1: 20}), first, {0: 12, 1: 23}), keys=keys.counts())
    backfill = IntegrityReport(source_records=3, target_records=3, dead_letters=0, expected_dead_letters=0,
                               source_checksum=checksum([b"a", b"b", b"c"]), output_checksum=checksum([b"a", b"b", b"c"]),
                               partitions=(PartitionIntegrity("orders.v2", 0, 3, 2, 0, 0, 0, 0, 0),),
                               source_topic="orders", target_topic="orders.v2", target_partitions=6, failures=())
    whole = tail.whole_copy(backfill, report)
    assert whole.ok and (whole.source_records, whole.target_records, whole.dead_letters) == (8, 7, 1)
    assert whole.source_checksum == checksum([b"a", b"b", b"c"] + [r.value for r in SOURCE]) == whole.output_checksum
    assert {r["name"] for r in whole.rows()} >= {"orders.v2-0 (backfill)", f"orders.v2-{partition_for(b'alice', 6)} (tail)"}
    assert tail.TailReport.from_dict(report.to_dict()) == report and report.position == {0: 12, 1: 23}
    assert IntegrityReport.from_dict(whole.to_dict()) == whole
    # the totals travel with the committed position, for a retried task (its keys do not)
    resumed = tail.TailReport.from_note(report.note(4000), report.position)
    assert resumed.resumed and resumed.keys == {} and replace(resumed, keys=report.keys, resumed=False) == report
    assert tail.TailReport.from_note(report.note(100), report.position).records == {}  # too long: the totals only


def test_a_part_reads_few_records_until_their_size_is_known_then_at_most_its_bytes() -> None:
    """A part holds its records until its commit: its size is capped in bytes too, from the mean record
    size so far, which travels in the report (and its note) to the next task's tail."""
    first = tail.check_part(PLAN, SOURCE, read_back(tail.rekey_part(PLAN, SOURCE)))
    assert tail.part_cap(3, 50_000, tail.TailReport()) == tail.FIRST_PART_RECORDS // 3  # no size known yet
    small = tail.add_part(tail.TailReport(), first, {0: 12, 1: 23}, source_bytes=5 * 200)  # 200-byte records
    assert small.source_bytes == 1_000 and tail.part_cap(3, 50_000, small) == 50_000 // 3  # the records cap holds
    big = tail.add_part(tail.TailReport(), first, {0: 12, 1: 23}, source_bytes=5 * 2**20)  # 1 MiB records
    assert tail.part_cap(2, 50_000, big) == tail.PART_BYTES // 2**20 // 2 == 32  # 64 MiB over 2 partitions
    assert tail.part_cap(2, 50_000, big, most_bytes=2**19) == 1  # a record larger than the cap: alone
    empty = tail.add_part(tail.TailReport(), first, {0: 12, 1: 23})  # keys and values of no bytes: the records cap
    assert empty.source_records and tail.part_cap(3, 50_000, empty) == 50_000 // 3
    assert tail.TailReport.from_note(big.note(4000), big.position).source_bytes == big.source_bytes
    assert tail.TailReport.from_dict({k: v for k, v in small.to_dict().items() if k != "source_bytes"}).source_bytes == 0


def test_the_progress_says_when_the_copy_catches_up_and_when_it_does_not_gain() -> None:
    assert tail.TailProgress(2_000, 1_000.0, 3_000.0, 5.0, 10, 50_000).eta_s == 1.0
    assert tail.TailProgress(2_000, 3_000.0, 3_000.0, 5.0, 10, 50_000).eta_s is None
    line = tail.TailProgress(2_000, 3_000.0, 2_000.0, 5.0, 10, 50_000).line(lambda s: f"{s} s")
    assert "not gaining on the source" in line and "lag 2,000" in line
    assert tail.rates((0.0, 100, 50), (2.0, 300, 450)) == (100.0, 200.0)


def test_a_capped_part_is_cut_at_one_moment_in_every_partition() -> None:
    """Partition 0 is written fast (its cap reached at ts 1004), partition 1 slowly: the part keeps every
    record up to ts 1004 of both, so partition 1's later records (ts 1005, 1010) wait for the next part."""
    fast = [source(0, o, 1000 + o, "alice") for o in range(5)]  # ts 1000..1004, capped at offset 5
    slow = [source(1, 20, 1002, "alice"), source(1, 21, 1005, "alice"), source(1, 22, 1010, "bob")]
    kept, ends = tail.cut_by_time(fast + slow, {0: 5, 1: 23}, more=[0])
    assert [(r.partition, r.offset) for r in kept] == [(0, o) for o in range(5)] + [(1, 20)]
    assert ends == {0: 5, 1: 21}
    # nothing capped, or nothing before the cut: the part is kept whole
    assert tail.cut_by_time(fast + slow, {0: 5, 1: 23}, more=[]) == (fast + slow, {0: 5, 1: 23})
    late = [source(0, 0, 2000, "alice"), source(0, 1, 1000, "alice")]
    assert tail.cut_by_time(late, {0: 2}, more=[0])[1] == {0: 2}


def test_a_part_keeps_the_source_headers_and_timestamp_and_appends_its_lineage_last() -> None:
    """Every output keeps the source record's headers in order (duplicates, null values and a lineage of an
    earlier copy included) and its timestamp; the copy's lineage, and a dead letter's code and detail, come
    after them. The check reads the last lineage, so a topic copied twice checks clean, and a copy that lost
    its own lineage is caught."""
    earlier = ((LINEAGE_HEADER, b"older/2/7"), ("trace", b"t1"), ("trace", None))
    records = [replace(r, headers=earlier) for r in SOURCE]
    out = tail.rekey_part(PLAN, records)
    for o in out:
        source = next(r for r in records if o.last_header(LINEAGE_HEADER) == f"orders/{r.partition}/{r.offset}".encode())
        assert o.timestamp == source.timestamp
        assert o.headers[:3] == earlier and o.headers[3][0] == LINEAGE_HEADER
        assert [k for k, _ in o.headers[4:]] == ([CODE_HEADER, "kafkaops.dead_letter_reason"]
                                                 if o.topic == PLAN.dead_letter_topic else [])
    check = tail.check_part(PLAN, records, read_back(out))
    assert check.ok, check.failures
    stripped = [replace(r, headers=r.headers[:3]) for r in read_back(out)]  # only the earlier copy's lineage left
    check = tail.check_part(PLAN, records, stripped)
    assert not check.ok and any("not of this part" in f for f in check.failures), check.failures


def test_a_window_store_part_writes_each_changelog_key_placed_and_ordered_by_its_store_key() -> None:
    import struct

    plan = replace(PLAN, key_rule="window_key")

    def changelog(partition: int, offset: int, ts: int, store: bytes, start: int) -> Record:
        return Record("orders", partition, offset, ts, store + struct.pack(">qi", start, 0), None if offset == 2 else b"{}")

    records = [changelog(0, 1, 1000, b"s1", 0), changelog(0, 2, 1001, b"s1", 60_000), changelog(1, 5, 999, b"s1", 0),
               changelog(1, 6, 1002, b"s2", 0), Record("orders", 1, 7, 1003, b"short", b"{}")]
    out = tail.rekey_part(plan, records)
    target = [o for o in out if o.topic == plan.target_topic]
    assert [o.key for o in target] == [records[2].key, records[0].key, records[1].key, records[3].key]  # s1 by time
    assert all(o.partition == partition_for(o.placement or b"", 6) and o.placement == (o.key or b"")[:-12]
               for o in target)
    assert target[2].value is None  # a tombstone stays a record
    (dead,) = [o for o in out if o.topic == plan.dead_letter_topic]
    assert dead.key == b"short" and dead.last_header(CODE_HEADER) == b"NOT_A_WINDOWED_KEY"
    check = tail.check_part(plan, records, read_back(out))
    assert check.ok, check.failures
    assert check.keys == {(plan.target_topic, partition_for(b"s1", 6)): frozenset({b"s1"}) |
                          ({b"s2"} if partition_for(b"s2", 6) == partition_for(b"s1", 6) else set()),
                          **({} if partition_for(b"s2", 6) == partition_for(b"s1", 6)
                             else {(plan.target_topic, partition_for(b"s2", 6)): frozenset({b"s2"})})}
    suffixless = [replace(r, key=r.key[:-12]) if r.topic == plan.target_topic and r.key else r for r in read_back(out)]
    assert any("another key than the rule gives" in f for f in tail.check_part(plan, records, suffixless).failures)
