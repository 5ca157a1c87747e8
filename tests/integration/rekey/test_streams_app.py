"""The tests' Kafka Streams application (jvm/streams-app through kafkaops.testing.streams) on a real broker:
its outputs equal what Python computes from the records produced, its changelogs are where and how the
changelog copy of issue 33 expects them (a key-value store's record keyed by the record key, a window store's
by ``<key><8-byte window start><4-byte seqnum>``, each in the partition the Java client gives the record key),
and its state survives a restart on new instances (two, with empty state dirs: restored from the changelogs).
"""
from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from kafkaops.platform import provision
from kafkaops.platform.kafka import configs, connection, metadata, records
from kafkaops.platform.partitioner import partition_for
from kafkaops.rekey import steps, streams_steps
from kafkaops.rekey.streams import StreamsError
from kafkaops.testing import streams
from kafkaops.testing.streams import InputRecord, StreamsApp, StreamsTopics
from tests.conftest import wait_for

pytestmark = pytest.mark.integration

PARTITIONS = 3
WINDOW_MS = 10_000
STEP_MS = 25  # 2,000 records span 50 s: five windows
KEYS = [f"user-{i:02d}" for i in range(40)]
UNJOINED = ["lonely-0", "lonely-1"]  # stream keys with no table record: never joined


def base_ms() -> int:
    """The first stream record's timestamp: an hour ago (a broker refuses timestamps more than an hour ahead,
    log.message.timestamp.after.max.ms), at a window's start."""
    return (time.time_ns() // 1_000_000 - 3_600_000) // WINDOW_MS * WINDOW_MS


def stream_batch(base: int, start: int, count: int) -> list[InputRecord]:
    """``count`` stream records from sequence number ``start`` on, in timestamp order, keys round robin (every
    17th record to a key without a table record)."""
    batch = []
    for seq in range(start, start + count):
        key = UNJOINED[seq % len(UNJOINED)] if seq % 17 == 0 else KEYS[seq % len(KEYS)]
        batch.append(InputRecord(key, f"v{seq}", base + seq * STEP_MS))
    return batch


def table_batch(base: int) -> list[InputRecord]:
    """A row per key before the first stream record, every third key updated once more before it too: a join
    takes the latest."""
    rows = [InputRecord(k, f"t1-{k}", base - 2_000) for k in KEYS]
    return rows + [InputRecord(k, f"t2-{k}", base - 1_000) for k in KEYS[::3]]


@pytest.fixture
def app_topics(rekey_cluster: provision.ClusterSpec) -> Iterator[tuple[str, StreamsTopics]]:
    application_id, names = streams.named("sa")
    streams.create_topics(rekey_cluster.bootstrap, names, PARTITIONS)
    yield application_id, names
    streams.delete_application(rekey_cluster.bootstrap, application_id, names)  # the shared broker keeps nothing


def latest(read: list[records.Record]) -> dict[bytes, bytes | None]:
    """The latest value of each key in a changelog (a key is in one partition: offset order is its order)."""
    values: dict[bytes, bytes | None] = {}
    for r in read:
        assert r.key is not None, f"{r.topic}-{r.partition}@{r.offset} has no key"
        values[r.key] = r.value
    return values


def test_the_streams_app_computes_its_outputs_and_keeps_its_state_across_a_restart(
        rekey_cluster: provision.ClusterSpec, app_topics: tuple[str, StreamsTopics], tmp_path: Path) -> None:
    bootstrap = rekey_cluster.bootstrap
    application_id, names = app_topics
    base = base_ms()
    table, first = table_batch(base), stream_batch(base, 0, 2_000)
    streams.produce(bootstrap, names.table, table)
    streams.produce(bootstrap, names.input, first)

    with StreamsApp(bootstrap, application_id, names, window_ms=WINDOW_MS, workdir=tmp_path / "first") as app:
        app.wait_running(60)
        streams.wait_caught_up(app, 60)
        # a migration's cut waits for the application to stop, then refuses naming its members
        ctx = steps.context({"bootstrap.servers": bootstrap}, {"topic": names.input}, dag_id="test", run_id="cut")
        with pytest.raises(StreamsError, match=rf"{application_id} still has 1 member\(s\) .*@.*Stop every instance"):
            streams_steps.wait_stopped(ctx, application_id, timeout_s=2)
        outputs = streams.read_outputs(bootstrap, names)
        expected = streams.reference_outputs(first, table, WINDOW_MS)
        assert outputs == expected, outputs.differences(expected)
        assert app.stop() == {0: 0} and app.failures() == {}, app.describe()

    # -- the changelogs: one per store, partitioned as the input, keyed as the changelog copy expects
    with connection.connect(bootstrap) as conn:
        for store in streams.STORES:
            meta = metadata.topic_metadata(conn, streams.changelog(application_id, store))
            assert meta is not None and meta.error is None, f"no changelog of store {store}"
            assert len(meta.partitions) == PARTITIONS, f"changelog of {store}: {len(meta.partitions)} partitions"
        # the topic configs Kafka Streams gave them (a copy of a changelog keeps them): compacted, and a window
        # store's also deleted after the window's retention (its size, no grace) plus a day (Streams' default)
        made = configs.describe_configs(conn, "topic", [streams.changelog(application_id, s) for s in streams.STORES])
        policy = {name.removeprefix(f"{application_id}-"): c.get("cleanup.policy") for name, c in made.items()}
        assert policy == {"counts-changelog": "compact", "table-store-changelog": "compact",
                          "windowed-counts-changelog": "compact,delete"}, made
        windowed_retention = made[streams.changelog(application_id, streams.WINDOWED_STORE)].get("retention.ms")
        assert windowed_retention == str(WINDOW_MS + 86_400_000), made
    config = {"bootstrap.servers": bootstrap}

    counts_log = records.read_topic(config, streams.changelog(application_id, streams.COUNTS_STORE))
    misplaced = [(r.key, r.partition) for r in counts_log if r.partition != partition_for(r.key or b"", PARTITIONS)]
    assert not misplaced, f"counts changelog records not in murmur2(key) % {PARTITIONS}: {misplaced[:5]}"
    # a count's changelog value: the count as 8 bytes, big-endian (Serdes.Long)
    assert {k.decode(): int.from_bytes(v or b"", "big") for k, v in latest(counts_log).items()} == expected.counts

    windowed_log = records.read_topic(config, streams.changelog(application_id, streams.WINDOWED_STORE))
    windowed: dict[tuple[str, int], int] = {}
    for r in windowed_log:
        assert r.key is not None and len(r.key) > streams.WINDOW_KEY_SUFFIX, f"windowed changelog key {r.key!r}"
        key, start, seqnum = streams.window_changelog_key(r.key)
        assert seqnum == 0 and start % WINDOW_MS == 0, f"windowed changelog key {r.key!r}: start {start}, seq {seqnum}"
        assert r.partition == partition_for(key, PARTITIONS), (
            f"windowed changelog key {r.key!r} in partition {r.partition}, not murmur2({key!r}) % {PARTITIONS} = "
            f"{partition_for(key, PARTITIONS)}")
        windowed[(key.decode(), start)] = int.from_bytes(r.value or b"", "big")
    assert windowed == expected.windowed

    table_log = records.read_topic(config, streams.changelog(application_id, streams.TABLE_STORE))
    assert {k.decode(): (v or b"").decode() for k, v in latest(table_log).items()} == {
        r.key: r.value for r in sorted(table, key=lambda r: r.timestamp_ms)}
    assert all(r.partition == partition_for(r.key or b"", PARTITIONS) for r in table_log)

    # -- two new instances (empty state dirs: the state comes back from the changelogs), more records
    second = stream_batch(base, 2_000, 1_000)
    with StreamsApp(bootstrap, application_id, names, instances=2, window_ms=WINDOW_MS,
                    workdir=tmp_path / "second") as app:
        app.wait_running(60)
        streams.produce(bootstrap, names.input, second)
        streams.wait_caught_up(app, 60)
        outputs = streams.read_outputs(bootstrap, names)
        expected = streams.reference_outputs(first + second, table, WINDOW_MS)
        assert outputs == expected, outputs.differences(expected)
        assert app.stop() == {0: 0, 1: 0} and app.failures() == {}, app.describe()


def test_an_instance_that_dies_or_is_refused_its_settings_is_named_with_its_last_lines(
        rekey_cluster: provision.ClusterSpec, tmp_path: Path) -> None:
    run = uuid.uuid4().hex[:8]
    missing = StreamsTopics(*(f"sa-missing-{part}-{run}" for part in ("in", "table", "counts", "windowed", "joined")))
    # its source topics do not exist: Kafka Streams stops its thread, the instance says FATAL and exits 1 (its
    # member stays in the group until its session times out, the group then goes: nothing to delete now)
    with StreamsApp(rekey_cluster.bootstrap, f"kafkaops-stateful-{run}", missing, workdir=tmp_path / "dies") as app:
        with pytest.raises(streams.StreamsAppError, match=r"(?s)instance\(s\) \[0\] died: FATAL .*"
                                                          r"MissingSourceTopicException.*its last lines") as raised:
            app.wait_running(60)
        assert "instance 0 (pid" in str(raised.value)
        wait_for(lambda: app.instances[0].poll() is not None, timeout=45, what="the dead instance's exit")
        assert app.exit_codes() == {0: 1} and app.instances[0].states()[-2:] == ["PENDING_ERROR", "ERROR"], \
            app.describe()
    # a setting Kafka Streams refuses: exit 2 before it connects, the reason on stderr (in the log)
    with StreamsApp(rekey_cluster.bootstrap, f"kafkaops-stateful-{run}", missing, workdir=tmp_path / "refused",
                    extra_config={"processing.guarantee": "sometimes"}) as app:
        with pytest.raises(streams.StreamsAppError, match=r"(?s)died: exited 2.*processing\.guarantee"):
            app.wait_running(30)
