"""The traffic check's accounting: lost, duplicated and out of order from per-key sequence numbers."""
from __future__ import annotations

import logging

from kafkaops.testing.traffic import ProducerIdentity, Received, account, decode, encode


def stored(*records: tuple[str, int, int, int]) -> list[Received]:
    return [Received(*r) for r in records]


def test_every_record_once_in_order_is_clean() -> None:
    got = stored(("a", 0, 0, 10), ("b", 0, 1, 5), ("a", 1, 0, 11), ("b", 1, 1, 6))
    report = account(4, [("a", 0), ("a", 1), ("b", 0), ("b", 1)], got)
    assert (report.sent, report.acknowledged, report.received, report.lost, report.duplicated,
            report.out_of_order, report.redelivered, report.keys) == (4, 4, 4, 0, 0, 0, 0, 2)
    assert report.ok and report.examples == ()


def test_an_acknowledged_record_never_read_is_lost_not_out_of_order() -> None:
    got = stored(("a", 0, 0, 0), ("a", 2, 0, 1))
    report = account(3, [("a", 0), ("a", 1), ("a", 2)], got)
    assert (report.lost, report.out_of_order, report.duplicated) == (1, 0, 0)
    assert not report.ok and report.examples == ("lost a#1",)


def test_a_record_stored_at_two_offsets_is_duplicated() -> None:
    got = stored(("a", 0, 0, 0), ("a", 1, 0, 1), ("a", 1, 0, 2), ("a", 1, 0, 3), ("a", 2, 0, 4))
    report = account(3, [("a", 0), ("a", 1), ("a", 2)], got)
    assert (report.duplicated, report.out_of_order, report.lost, report.received) == (2, 0, 0, 5)
    assert report.examples == ("duplicated a#1 at 0:1 and 0:2 and 0:3",) and not report.ok


def test_the_same_offset_handed_over_twice_is_a_redelivery_not_a_duplicate() -> None:
    got = stored(("a", 0, 0, 0), ("a", 1, 0, 1), ("a", 0, 0, 0), ("a", 1, 0, 1))
    report = account(2, [("a", 0), ("a", 1)], got)
    assert (report.redelivered, report.duplicated, report.out_of_order, report.received) == (2, 0, 0, 4)
    assert report.ok


def test_a_record_stored_after_a_later_one_of_its_key_is_out_of_order() -> None:
    # offset order is the log's order, whatever order the consumer was handed the records in
    got = stored(("a", 1, 2, 7), ("a", 0, 2, 8), ("a", 2, 2, 9), ("b", 0, 0, 1))
    report = account(4, [("a", 0), ("a", 1), ("a", 2), ("b", 0)], got)
    assert (report.out_of_order, report.lost, report.duplicated) == (1, 0, 0)
    assert report.examples == ("a#0 at 2:8 after a later one",)


def test_unacknowledged_sends_fail_the_check_and_records_read_anyway_are_not_lost() -> None:
    report = account(3, [("a", 0), ("a", 2)], stored(("a", 0, 0, 0), ("a", 1, 0, 1), ("a", 2, 0, 2)))
    assert (report.unacknowledged, report.lost, report.out_of_order) == (1, 0, 0)
    assert not report.ok and "unacknowledged 1" in str(report)


def test_values_of_another_check_or_another_producer_are_not_counted() -> None:
    assert decode(encode("traffic-001", 5, "r1"), "r1") == ("traffic-001", 5)
    assert decode(encode("traffic-001", 5, "r1"), "r2") is None
    assert decode(b'{"id": 1, "key": "account-1", "seq": 0}', "r1") is None
    assert decode(b"not json", "r1") is None and decode(None, "r1") is None


def test_a_duplicate_is_the_producers_only_when_it_changed_its_idempotence_identity() -> None:
    got = stored(("a", 0, 0, 0), ("a", 1, 0, 1), ("a", 1, 0, 2), ("a", 2, 0, 3))
    acked = [("a", 0), ("a", 1), ("a", 2)]
    clusters = account(3, acked, got)
    assert clusters.duplicated == 1 and not clusters.duplicates_by_the_producer and not clusters.cluster_ok
    producers = account(3, acked, got, producer_resets=1)
    assert producers.duplicates_by_the_producer and producers.cluster_ok and not producers.ok
    assert "changed its idempotence id or epoch 1 time(s)" in str(producers)
    assert producers.to_dict()["producer_resets"] == 1


def test_a_producer_reset_excuses_no_loss_and_no_disorder() -> None:
    lost = account(3, [("a", 0), ("a", 1), ("a", 2)], stored(("a", 0, 0, 0), ("a", 2, 0, 1)), producer_resets=2)
    late = account(2, [("a", 0), ("a", 1)], stored(("a", 1, 0, 0), ("a", 0, 0, 1)), producer_resets=2)
    clean = account(1, [("a", 0)], stored(("a", 0, 0, 0)), producer_resets=2)
    assert not lost.cluster_ok and not late.cluster_ok and clean.cluster_ok and not clean.duplicates_by_the_producer


def _line(message: str, level: int = logging.DEBUG) -> logging.LogRecord:
    return logging.LogRecord("rdkafka", level, __file__, 1, "%s [%s] %s", ("IDEMPSTATE", "rdkafka#producer-1",
                                                                            message), None)


def test_the_identity_watcher_counts_epoch_bumps_and_id_resets_from_librdkafkas_log() -> None:
    watcher = ProducerIdentity()
    for message in ("[thrd:main]: Idempotent producer state change Init -> RequestPID",
                    "[thrd:main]: Idempotent producer state change WaitPID -> Assigned",
                    "[thrd:main]: Idempotent producer state change Assigned -> DrainBump",
                    "[thrd:main]: Idempotent producer state change Assigned -> DrainReset",
                    "[thrd:main]: Idempotent producer state change DrainBump -> RequestPID"):
        watcher.handle(_line(message))
    assert watcher.lines == 5 and len(watcher.resets) == 2
    assert [r.split(" change ")[1] for r in watcher.resets] == ["Assigned -> DrainBump", "Assigned -> DrainReset"]
    assert watcher.client_config()["debug"] == "eos"
