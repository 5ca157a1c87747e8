"""A Kafka Streams application as kafkaops reads and plans it (kafkaops.rekey.streams): stores told by where
Streams placed their changelog records, refusals before anything changes, and the plan's copies."""
from __future__ import annotations

import json
import struct

import pytest

from kafkaops.errors import ConfigError
from kafkaops.model import Broker, Cluster, ConsumerGroup, GroupPartitionLag, PartitionAssignment
from kafkaops.platform.partitioner import partition_for
from kafkaops.rekey.streams import (ChangelogSample, CopyDone, LiveCut, OffsetsMoved, StoreKind, StreamsCut, StreamsError,
                                    StreamsPlan, plan_migration, read_application, store_kind, undrained)

APP = "counts-app"
KEYS = [f"customer-{i}".encode() for i in range(60)]


def window_key(key: bytes, start: int, seq: int = 0) -> bytes:
    return key + struct.pack(">qi", start, seq)


def session_key(key: bytes, start: int, end: int) -> bytes:
    return key + struct.pack(">qq", end, start)


def placed(keys: list[bytes], partitions: int, base=lambda k: k) -> list[ChangelogSample]:
    """Each key where Streams writes it: the partition of the task owning its base key."""
    return [ChangelogSample(partition_for(base(k), partitions), k) for k in keys]


WINDOWED = [window_key(k, 1_700_000_000_000 + 60_000 * i) for i, k in enumerate(KEYS)]
SESSIONS = [session_key(k, 1_700_000_000_000 + i, 1_700_000_100_000 + i) for i, k in enumerate(KEYS)]


def test_a_key_value_store_is_told_by_its_policy_and_where_its_records_are() -> None:
    kind, how = store_kind("counts", f"{APP}-counts-changelog", 3, "compact", placed(KEYS, 3))
    assert kind is StoreKind.KEY_VALUE and "60 sampled records placed by the record_key rule" in how


def test_window_and_session_stores_are_told_apart_by_placement() -> None:
    kind, _ = store_kind("w", "c", 3, "compact,delete", placed(WINDOWED, 3, lambda k: k[:-12]))
    assert kind is StoreKind.WINDOW
    kind, _ = store_kind("s", "c", 3, "compact,delete", placed(SESSIONS, 3, lambda k: k[:-16]))
    assert kind is StoreKind.SESSION


def test_a_changelog_no_rule_explains_is_refused_naming_the_store_and_the_param() -> None:
    # windowed keys placed by their whole key: not what Streams does for any store kafkaops reads
    with pytest.raises(StreamsError, match=r"store 'w'.*no kind of store.*streams_store_kinds") as err:
        store_kind("w", "c", 3, "compact,delete", placed(WINDOWED, 3))
    assert "sampled records are not where its key would be" in str(err.value)


def test_the_operators_kind_is_held_to_the_data() -> None:
    with pytest.raises(StreamsError, match="the operator's kind session"):
        store_kind("w", "c", 3, "compact,delete", placed(WINDOWED, 3, lambda k: k[:-12]), StoreKind.SESSION)
    # one partition: placement proves nothing, and both windowed formats read these keys
    one = [ChangelogSample(0, session_key(b"k", 5, 10))]
    with pytest.raises(StreamsError, match="fit window and session stores alike"):
        store_kind("s", "c", 1, "compact,delete", one)
    assert store_kind("s", "c", 1, "compact,delete", one, StoreKind.SESSION)[0] is StoreKind.SESSION


def test_unknown_headers_and_changelog_versions_are_refused_not_guessed() -> None:
    with pytest.raises(StreamsError, match=r"header\(s\) \['x-new'\]"):
        store_kind("counts", "c", 3, "compact", [ChangelogSample(0, b"k", ("v", "x-new"), b"\x00")])
    with pytest.raises(StreamsError, match="changelog version 01"):
        store_kind("counts", "c", 3, "compact", [ChangelogSample(0, b"k", ("v",), b"\x01")])


def partitions(topic: str, count: int, end: int = 100, start: int = 0) -> list[PartitionAssignment]:
    return [PartitionAssignment(topic, p, (1,), 1, (1,), start, end) for p in range(count)]


def cluster(*, table_count: int = 3, repartition_committed: int = 100) -> Cluster:
    parts = (partitions("orders", 3) + partitions("customers", table_count)
             + partitions(f"{APP}-counts-changelog", 3) + partitions(f"{APP}-windowed-counts-changelog", 3)
             + partitions(f"{APP}-KSTREAM-AGGREGATE-0000000003-repartition", 3, end=100, start=40)
             + partitions("unrelated", 5))
    committed = [GroupPartitionLag(t, p, o, 100) for t in ("orders", "customers") for p in range(3) for o in (90,)]
    committed += [GroupPartitionLag(f"{APP}-KSTREAM-AGGREGATE-0000000003-repartition", p, repartition_committed, 100)
                  for p in range(3)]
    return Cluster((Broker(1),), tuple(parts), "c1", 1, (ConsumerGroup(APP, "Empty", 0, tuple(committed)),))


CONFIGS = {f"{APP}-counts-changelog": {"cleanup.policy": "compact"},
           f"{APP}-windowed-counts-changelog": {"cleanup.policy": "compact,delete", "retention.ms": "86400000"}}
SAMPLES = {f"{APP}-counts-changelog": placed(KEYS, 3),
           f"{APP}-windowed-counts-changelog": placed(WINDOWED, 3, lambda k: k[:-12])}


def test_the_application_is_read_from_its_group_and_its_topics_names() -> None:
    app = read_application(APP, cluster(), CONFIGS, SAMPLES)
    assert [(i.name, i.partitions, i.lag) for i in app.inputs] == [("customers", 3, 30), ("orders", 3, 30)]
    assert [(s.name, s.kind) for s in app.stores] == [("counts", StoreKind.KEY_VALUE),
                                                      ("windowed-counts", StoreKind.WINDOW)]
    assert app.stores[1].records == 300 and dict(app.stores[1].configs)["retention.ms"] == "86400000"
    assert [(r.name, r.lag) for r in app.repartitions] == [(f"{APP}-KSTREAM-AGGREGATE-0000000003-repartition", 0)]
    lagging = read_application(APP, cluster(repartition_committed=95), CONFIGS, SAMPLES)
    assert [r.lag for r in undrained(lagging.repartitions)] == [15]


def test_inputs_of_different_counts_and_unknown_applications_are_refused_with_the_numbers() -> None:
    with pytest.raises(StreamsError, match="different partition counts .customers 4, orders 3"):
        read_application(APP, cluster(table_count=4), CONFIGS, SAMPLES)
    with pytest.raises(StreamsError, match="no consumer group of that id"):
        read_application("other-app", cluster(), CONFIGS, SAMPLES)
    with pytest.raises(ConfigError, match=r"names store\(s\) \['nope'\]"):
        read_application(APP, cluster(), CONFIGS, SAMPLES, kinds={"nope": StoreKind.WINDOW})


def test_the_plan_moves_every_input_and_changelog_and_drains_the_repartition_topics() -> None:
    app = read_application(APP, cluster(), CONFIGS, SAMPLES)
    made = plan_migration(app, new_application_id=f"{APP}-v2", new_partitions=12,
                          targets={"orders": "orders-12"}, existing=cluster().topics)
    assert made.copies() == (("customers", "customers.v2", "record_key"), ("orders", "orders-12", "record_key"),
                             (f"{APP}-counts-changelog", f"{APP}-v2-counts-changelog", "record_key"),
                             (f"{APP}-windowed-counts-changelog", f"{APP}-v2-windowed-counts-changelog", "window_key"))
    plans = made.backfills({t: {p: (0, 100) for p in range(3)} for t, _, _ in made.copies()})
    assert [(b.target_partitions, b.key_rule) for b in plans][-1] == (12, "window_key")
    assert StreamsPlan.from_dict(made.to_dict()) == made
    text = made.markdown()
    for name in ("customers.v2", "orders-12", "window store `windowed-counts`", "repartition topic",
                 f"application.id={APP}-v2"):
        assert name in text
    assert "stop every instance of the application (the cut waits" in text and "live cut-over" not in text
    live = made.markdown("acl")
    assert "live cut-over, quiesce=acl" in live and "DENY Write ACLs" in live and "keep running" in live
    assert "stop every producer of `customers`, `orders`" in made.markdown("manual")


def test_a_plan_that_would_touch_the_old_application_or_clash_is_refused() -> None:
    app = read_application(APP, cluster(), CONFIGS, SAMPLES)
    with pytest.raises(StreamsError, match="must differ from the old one"):
        plan_migration(app, new_application_id=APP, new_partitions=12)
    with pytest.raises(StreamsError, match="already has internal topics"):
        plan_migration(app, new_application_id="counts", new_partitions=12,
                       existing=["counts-x-changelog"])
    with pytest.raises(StreamsError, match="not more than the inputs' 3.*target topic unrelated"):
        plan_migration(app, new_application_id="v2", new_partitions=3, targets={"orders": "unrelated"},
                       existing=cluster().topics)


def test_the_cuts_record_reads_back_as_written() -> None:
    app = read_application(APP, cluster(), CONFIGS, SAMPLES)
    made = plan_migration(app, new_application_id="v2", new_partitions=6)
    cut = StreamsCut(made, app.repartitions, (CopyDone("orders", "orders.v2", "record_key", 10, 10, 0, True),),
                     (OffsetsMoved("orders", "orders.v2", ((0, 5),), ((0, 2), (1, 3)), 0),))
    assert StreamsCut.from_dict(cut.to_dict()) == cut and cut.ready
    assert "application.id=v2" in cut.plan.start_text() and "unchanged for a rollback" in cut.plan.start_text()


def test_the_internal_topics_of_a_longer_application_id_are_that_applications() -> None:
    """The application migrated to ``<app>-p12`` has ``<app>-p12-counts-changelog`` (12 partitions): it is not a
    store ``p12-counts`` of the application, whether the new id is named or its group already exists."""
    new = f"{APP}-p12"
    base = cluster()
    theirs = (partitions(f"{new}-counts-changelog", 12) + partitions(f"{new}-KSTREAM-AGGREGATE-0000000003-repartition", 12))
    grown = Cluster(base.brokers, base.partitions + tuple(theirs), "c1", 1, base.groups)
    with pytest.raises(StreamsError, match="p12-counts"):  # read as the application's own: a wrong count
        read_application(APP, grown, CONFIGS, SAMPLES)
    app = read_application(APP, grown, CONFIGS, SAMPLES, others=[new])
    assert [s.name for s in app.stores] == ["counts", "windowed-counts"]
    assert [r.name for r in app.repartitions] == [f"{APP}-KSTREAM-AGGREGATE-0000000003-repartition"]
    with_group = Cluster(base.brokers, grown.partitions, "c1", 1, (*base.groups, ConsumerGroup(new, "Stable", 4, ())))
    assert [s.name for s in read_application(APP, with_group, CONFIGS, SAMPLES).stores] == ["counts", "windowed-counts"]


def test_a_live_cut_says_how_long_the_application_was_down_and_reads_back_as_written() -> None:
    live = LiveCut("acl", 100.0, 130.5, 134.0, {"orders": {0: 5, 1: 7}}, {"orders.v2": {0: 3, 11: 9}}, 40, 6)
    assert live.stopped_s == pytest.approx(3.5) and live.window_s == pytest.approx(34.0)
    assert LiveCut.from_dict(json.loads(json.dumps(live.to_dict()))) == live
