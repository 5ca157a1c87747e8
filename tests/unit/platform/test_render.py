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
