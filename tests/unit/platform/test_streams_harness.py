"""The Kafka Streams harness's pure parts (kafkaops.testing.streams): the outputs the application must compute,
a window store's changelog key, an instance's settings file; no broker, no JVM."""
from __future__ import annotations

import stat
from collections import Counter
from pathlib import Path

import pytest

from kafkaops.platform.spark import read_client_config
from kafkaops.testing import streams
from kafkaops.testing.streams import InputRecord, Outputs, StreamsApp, StreamsTopics

TOPICS = StreamsTopics(input="in", table="tab", counts="c", windowed="w", joined="j")


def test_the_reference_counts_windows_and_joins_with_the_latest_earlier_table_row() -> None:
    table = [InputRecord("a", "A1", 5), InputRecord("a", "A2", 150), InputRecord("b", "B", 1_200)]
    stream = [InputRecord("a", "1", 100), InputRecord("b", "2", 200), InputRecord("a", "3", 1_500),
              InputRecord("b", "4", 1_999), InputRecord("c", "5", 2_000)]
    ref = streams.reference_outputs(stream, table, 1_000)
    assert ref.counts == {"a": 2, "b": 2, "c": 1}
    assert ref.windowed == {("a", 0): 1, ("b", 0): 1, ("a", 1_000): 1, ("b", 1_000): 1, ("c", 2_000): 1}
    # "2" of b came before b's table row; "3" of a after its update; c has no row
    assert ref.joined == Counter({("a", "1|A1"): 1, ("a", "3|A2"): 1, ("b", "4|B"): 1})


def test_the_same_join_twice_is_counted_twice_and_a_difference_is_said() -> None:
    stream = [InputRecord("a", "1", 10), InputRecord("a", "1", 20)]
    ref = streams.reference_outputs(stream, [InputRecord("a", "A", 0)], 60_000)
    assert ref.joined == Counter({("a", "1|A"): 2})
    seen = Outputs({"a": 2}, {("a", 0): 1}, Counter({("a", "1|A"): 1, ("a", "x|A"): 1}))
    said = seen.differences(ref)
    assert said[0].startswith("windowed: 1 of 1 keys differ, e.g. ('a', 0): 1 not 2")
    assert said[1].startswith("joined: 1 of 2 missing") and "1 extra" in said[1]
    assert ref.differences(ref) == [] and seen != ref
    with pytest.raises(ValueError):
        streams.reference_outputs(stream, [], 0)


def test_a_window_store_changelog_key_is_the_key_the_window_start_and_a_seqnum() -> None:
    raw = b"user-1" + (1_700_000_000_000).to_bytes(8, "big") + (0).to_bytes(4, "big")
    assert streams.window_changelog_key(raw) == (b"user-1", 1_700_000_000_000, 0)
    with pytest.raises(ValueError):
        streams.window_changelog_key(b"short")
    assert streams.changelog("app", streams.WINDOWED_STORE) == "app-windowed-counts-changelog"


def test_an_instance_settings_file_is_private_and_has_the_app_keys(tmp_path: Path) -> None:
    config = {"bootstrap.servers": "127.0.0.1:9092", "security.protocol": "SASL_PLAINTEXT",
              "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "u", "sasl.password": "p"}
    app = StreamsApp(config, "app-1", TOPICS, instances=2, window_ms=5_000, workdir=tmp_path,
                     extra_config={"commit.interval.ms": "100"})
    settings = app.config(app.instances[1])
    assert settings["application.id"] == "app-1" and settings["bootstrap.servers"] == "127.0.0.1:9092"
    assert settings["state.dir"] == str(tmp_path / "instance-1" / "state")
    assert settings["sasl.jaas.config"].startswith("org.apache.kafka.common.security.scram.ScramLoginModule")
    assert (settings["app.input"], settings["app.table"], settings["app.output.joined"], settings["app.window.ms"],
            settings["commit.interval.ms"]) == ("in", "tab", "j", "5000", "100")
    assert "sasl.password" not in settings  # the Java client's form only: in the JAAS line
    path = app.write_settings(app.instances[1])
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and path == app.instances[1].settings
    assert read_client_config(path) == settings
    assert app.write_settings(app.instances[1]) == path  # written anew at the next start
