from __future__ import annotations

from kafkaops.platform.render import human_bytes, render_snapshot
from tests.unit.clusters import three_brokers_one_down, three_brokers_one_topic


def test_snapshot_table_lists_brokers_partitions_and_the_hottest() -> None:
    text = render_snapshot(three_brokers_one_topic())
    assert "3 brokers (0 offline)" in text
    assert "orders-2" in text and "hottest partitions (mean 200 records)" in text
    hottest_section = text.split("hottest partitions")[1]
    assert hottest_section.index("orders-2") < hottest_section.index("orders-0")
    assert "1.50" in hottest_section  # orders-2 holds 300 records, 1.5x the mean


def test_offline_broker_is_marked() -> None:
    text = render_snapshot(three_brokers_one_down())
    assert "OFFLINE" in text and "3 under-replicated" in text


def test_human_bytes() -> None:
    assert human_bytes(512) == "512 B"
    assert human_bytes(1536) == "1.5 KiB"
    assert human_bytes(None) == "-"


def test_utc_time_duration_and_plain() -> None:
    from kafkaops.platform.render import duration, plain, utc_time

    assert utc_time(1_795_426_812.0) == "2026-11-23 09:40:12 UTC" and utc_time(None) == "-"
    assert [duration(s) for s in (0.421, 12.34, 245, 7380, None)] == ["0.42 s", "12.3 s", "4 min 05 s",
                                                                       "2 h 03 min", "-"]
    assert [plain(v) for v in (["a", 1], [], None, "", True, {"b": 1})] == ["a, 1", "(none)", "-", "-", "yes",
                                                                            '{"b": 1}']
