"""The migration harness's accounting: from the consumer's log across a source and a target topic,
lost, duplicated (read on both), out of order (across the switch too) and redelivered (same offset)."""
from __future__ import annotations

import json

from kafkaops.testing.traffic import (MigrationReport, Received, account_migration, customer_of, decode,
                                       device_key, encode_padded)

ACKED = [("a", 0), ("a", 1), ("a", 2), ("b", 0), ("b", 1)]


def read(*records: tuple[str, int, int, int, str]) -> list[Received]:
    """Deliveries in the consumer's order: (key, seq, partition, offset, topic)."""
    return [Received(*r) for r in records]


def clean_switch() -> list[Received]:
    return read(("a", 0, 1, 0, "S"), ("b", 0, 2, 0, "S"), ("a", 1, 1, 1, "S"),
                ("a", 2, 7, 4, "T"), ("b", 1, 3, 9, "T"))


def test_a_clean_switch_loses_duplicates_and_reorders_nothing() -> None:
    report = account_migration(5, ACKED, clean_switch(), write_window_s=0.8, total_s=6.0)
    assert (report.sent, report.acknowledged, report.unacknowledged, report.received, report.lost,
            report.duplicated, report.out_of_order, report.redelivered, report.keys) == (5, 5, 0, 5, 0, 0, 0, 0, 2)
    assert dict(report.received_by_topic) == {"S": 3, "T": 2} and report.ok and report.examples == ()
    assert str(report) == ("sent 5 over 2 keys, acknowledged 5, received 5 (S 3, T 2): lost 0, duplicated 0, "
                           "out of order 0; writes paused 0.80 s, 6.0 s in all")
    assert report.to_dict()["received_by_topic"] == {"S": 3, "T": 2} and report.to_dict()["ok"] is True
    assert json.dumps(report.to_dict())


def test_a_record_read_on_the_source_and_again_on_the_target_is_duplicated() -> None:
    # the copy of a#1 on T was read although the group had read it on S: offsets translated too low
    got = read(("a", 0, 1, 0, "S"), ("a", 1, 1, 1, "S"), ("a", 1, 7, 3, "T"), ("a", 2, 7, 4, "T"),
               ("b", 0, 2, 0, "S"), ("b", 1, 3, 9, "T"))
    report = account_migration(5, ACKED, got)
    assert (report.duplicated, report.lost, report.out_of_order, report.redelivered) == (1, 0, 0, 0)
    assert report.examples == ("duplicated a#1 at S-1:1 and T-7:3",) and not report.ok


def test_an_acknowledged_record_read_on_neither_topic_is_lost() -> None:
    got = [r for r in clean_switch() if (r.key, r.seq) != ("a", 1)]
    report = account_migration(5, ACKED, got)
    assert (report.lost, report.duplicated, report.out_of_order) == (1, 0, 0)
    assert report.examples == ("lost a#1",) and not report.ok


def test_a_key_whose_seq_goes_back_across_the_switch_is_out_of_order() -> None:
    # a#2 reached the source's log, a#1 only the target's: read in that order, a#1 comes late
    got = read(("a", 0, 1, 0, "S"), ("a", 2, 1, 1, "S"), ("b", 0, 2, 0, "S"),
               ("a", 1, 7, 0, "T"), ("b", 1, 3, 0, "T"))
    report = account_migration(5, ACKED, got)
    assert (report.out_of_order, report.lost, report.duplicated) == (1, 0, 0)
    assert report.examples == ("a#1 at T-7:0 after a later one",) and not report.ok


def test_the_same_offset_handed_again_is_redelivered_not_duplicated() -> None:
    got = clean_switch()
    got.insert(3, Received("a", 1, 1, 1, "S"))  # a rebalance handed S-1:1 again before the switch
    report = account_migration(5, ACKED, got)
    assert (report.redelivered, report.duplicated, report.out_of_order, report.lost, report.received) == \
        (1, 0, 0, 0, 6)
    assert dict(report.received_by_topic) == {"S": 4, "T": 2} and report.ok
    assert "redelivered at the same offset: 1" in str(report)


def test_unacknowledged_sends_fail_the_report() -> None:
    report = account_migration(6, ACKED, clean_switch())
    assert report.unacknowledged == 1 and not report.ok and isinstance(report, MigrationReport)


def test_values_are_padded_json_that_the_check_decodes() -> None:
    value = encode_padded(device_key(42), 7, "r1", customer=customer_of(42, 20), record_bytes=200)
    body = json.loads(value)
    assert len(value) == 200 and (body["key"], body["seq"], body["customer"], body["check"]) == \
        ("dev-00042", 7, "cust-002", "r1")
    assert decode(value, "r1") == ("dev-00042", 7) and decode(value, "r2") is None
    assert json.loads(encode_padded("dev-00001", 0, "r1", customer="cust-001", record_bytes=10))["pad"] == ""
