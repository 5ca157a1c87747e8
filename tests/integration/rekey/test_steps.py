"""The rows of the backfill (spark_apps.rekey_backfill.rekey_rows over the jvm/spark-udf functions NewKey,
KafkaKeyHash and OrderClock) against the Python side of kafkaops.rekey, on rows made in Spark (no Kafka
cluster): the new key and dead-letter reason code (keyrules.extract), the output partition
(partition_for), the order timestamp (OrderClock), the key spread of a direct copy, and offsets going
backwards refused."""
from __future__ import annotations

import json
import struct

import pytest

from kafkaops.platform import keyrules
from kafkaops.rekey.backfill import BackfillPlan, OrderClock
from kafkaops.platform.partitioner import partition_for

pytestmark = pytest.mark.integration

SCHEMA = "partition int, offset bigint, ts bigint, key binary, value binary"


def plan(rule: str) -> BackfillPlan:
    return BackfillPlan("orders", ((0, 0, 100), (1, 0, 100)), "orders.v2", 12, rule)


def step(spark, rows: list[tuple], rule: str) -> list:
    from spark_apps import common, rekey_backfill

    common.register_functions(spark, plan(rule))
    frame = spark.createDataFrame(rows, SCHEMA).coalesce(1)  # one task, rows in the order given
    return rekey_backfill.rekey_rows(frame, plan(rule), ordered=True).collect()


def expected(rows: list[tuple], rule: str) -> list[tuple]:
    p = plan(rule)
    clock = OrderClock()
    out = []
    for partition, offset, ts, key, value in rows:
        new_key, code, _ = keyrules.extract(key, value, p.rule)
        order = clock.tick(partition, offset, ts, new_key)
        topic, target = (p.target_topic, partition_for(new_key, 12)) if new_key is not None else (p.dead_letter_topic, 0)
        out.append((topic, target, order, partition, offset, keyrules.written_key(key, new_key, p.rule), value, code,
                    new_key, ts))
    return out


def actual(rows: list) -> list[tuple]:
    """The rows as :func:`expected` gives them: the reason code, not the free-text detail (only a dead
    letter has both); the written key, and the new key it is placed by (``place``); the source timestamp."""
    assert all((r.code is None) == (r.detail is None) for r in rows)
    return [(r.out_topic, r.out_partition, r.order_ts, r.src_partition, r.src_offset,
             None if r.key is None else bytes(r.key), None if r.value is None else bytes(r.value), r.code,
             None if r.place is None else bytes(r.place), r.ts)
            for r in rows]


MIXED = [
    (0, 0, 100, b"r1", json.dumps({"account": "a-1", "n": 1}).encode()),
    (0, 1, 90, b"r2", json.dumps({"account": "a-1", "n": 2}).encode()),  # clock went back: order stays 100
    (0, 2, 95, None, b"not json"),
    (0, 3, 96, b"r3", json.dumps({"other": 1}).encode()),
    (0, 4, 97, b"r4", None),
    (0, 5, 98, b"r5", json.dumps({"account": 7}).encode()),
    (0, 6, 99, b"r6", json.dumps({"account": 1e16}).encode()),
    (0, 7, 120, b"r7", json.dumps({"account": "\u00e9t\u00e9 \U0001F600"}).encode()),
    (0, 8, 101, b"r8", b'{"account": "first", "account": "last"}'),
    (0, 9, 102, b"r9", b'{"account": null}'),
    (1, 0, 80, b"r1", json.dumps({"account": "a-1"}).encode()),
    (1, 1, 130, b"r2", json.dumps({"account": ["x"]}).encode()),
    (1, 2, 70, b"r3", json.dumps({"account": "a-1"}).encode()),
]


def store_rows(rule: str) -> list[tuple]:
    """Kafka Streams store changelog rows for ``window_key`` (key, window start, sequence number) or
    ``session_key`` (key, window end, window start): store keys in two source partitions, a tombstone, an
    empty store key, and records no such store writes."""
    def key(store: bytes, start: int, other: int) -> bytes:  # other: the sequence number, or the session's end
        return store + (struct.pack(">qi", start, other) if rule == "window_key" else struct.pack(">qq", other, start))

    return [
        (0, 0, 100, key(b"s1", 0, 0), b'{"n": 1}'),
        (0, 1, 90, key(b"s1", 60_000, 60_000), None),  # a tombstone: a record like any other
        (0, 2, 95, None, b'{"n": 2}'),
        (0, 3, 96, b"short", b'{"n": 3}'),
        (0, 4, 97, key(b"s2", -1, 0), b'{"n": 4}'),  # a negative window start
        (0, 5, 98, key(b"", 5, 9), b'{"n": 5}'),  # an empty store key
        (0, 6, 99, key(b"s2", 10, 10), b"not json"),  # the value is not read
        (1, 0, 80, key(b"s1", 0, 1), b'{"n": 6}'),
        (1, 1, 130, key(b"s3", 0, 0), None),
        (1, 2, 70, key(b"s1", 120_000, 120_000), b'{"n": 7}'),
    ]


def rows_of(rule: str) -> list[tuple]:
    return store_rows(rule) if rule in ("window_key", "session_key") else MIXED


@pytest.mark.parametrize("rule", ["field:account", "jsonpath:$.account", "record_key", "window_key", "session_key"])
def test_the_jvm_step_gives_what_the_python_reference_gives(spark, rule) -> None:
    got = actual(step(spark, rows_of(rule), rule))
    assert got == expected(rows_of(rule), rule)
    codes = [r[7] for r in got]
    if rule == "record_key":
        assert codes.count(keyrules.NO_KEY) == 1
    elif rule in ("window_key", "session_key"):  # placed by the store key, tombstones too; the key written whole
        assert codes == [None, None, "NO_KEY", "NOT_A_WINDOWED_KEY", "NOT_A_WINDOWED_KEY", None, None, None, None, None]
        assert [r[8] for r in got if r[8] is not None] == [b"s1", b"s1", b"", b"s2", b"s1", b"s3", b"s1"]
        assert [r[5] for r in got] == [row[3] for row in rows_of(rule)]  # every record keeps its key
    else:  # every kind of dead letter is present, and the keyed records are placed
        assert set(codes) == {None, "NOT_JSON", "FIELD_MISSING", "NO_VALUE", "NULL_VALUE", "NOT_A_SCALAR"}
        assert got[8][5] == b"first" and got[6][5] == b"1e+16"  # the first duplicate; the number as written


def test_the_direct_copy_by_a_value_rule_places_in_offset_order_and_reports_keys_in_two_source_partitions(
        spark) -> None:
    from spark_apps import common, rekey_backfill

    def direct(rows: list[tuple], slices: int) -> tuple[list[tuple], int | None]:
        spread = common.key_spread(spark)
        common.register_functions(spark, plan("field:account"), spread)
        frame = spark.createDataFrame(rows, SCHEMA).repartition(slices, "partition").sortWithinPartitions("offset")
        got = actual(rekey_backfill.rekey_rows(frame, plan("field:account")).collect())
        return sorted(got, key=lambda r: (r[3], r[4])), common.spanning_keys_of(spark, spread)

    got, spanning = direct(MIXED, 2)
    assert {r[2] for r in got} == {0}  # no order timestamp: offset order is the order
    assert [r[:2] + r[3:] for r in got] == [r[:2] + r[3:] for r in expected(MIXED, "field:account")]
    assert spanning == 1  # a-1 is in source partitions 0 and 1
    assert direct([r for r in MIXED if r[0] == 0], 1)[1] == 0


def test_offsets_going_backwards_in_a_source_partition_are_refused(spark) -> None:
    rows = [(0, 4, 1, b"a", b'{"k": 1}'), (0, 3, 2, b"b", b'{"k": 2}')]
    with pytest.raises(Exception, match="offset 3 came after 4"):
        step(spark, rows, "field:k")


def test_the_merged_copy_gives_each_output_partition_a_task_of_its_own_in_order(spark) -> None:
    """output_frame: target partition p in Spark task p, the dead letters in task N, each task in
    (order timestamp, source partition, source offset) order, whatever the topic names hash to."""
    from pyspark.sql import functions as F

    from spark_apps import common, rekey_backfill

    rows = [(p, o, 1000 - o % 7, f"r{o % 50}".encode(), json.dumps({"account": f"a-{o % 40}"}).encode())
            for p in (0, 1) for o in range(100)] + [(1, 100, 5, b"x", b"not json")]
    common.register_functions(spark, plan("field:account"))
    planned = rekey_backfill.rekey_rows(spark.createDataFrame(rows, SCHEMA).repartition(2, "partition")
                                        .sortWithinPartitions("offset"), plan("field:account"), ordered=True)
    out = rekey_backfill.output_frame(planned, plan("field:account")).select(
        "topic", "partition", F.spark_partition_id().alias("task"), "lineage_partition", "lineage_offset").collect()
    want = {(r[3], r[4]): r[2] for r in expected(sorted(rows), "field:account")}  # (partition, offset) -> order
    tasks: dict[int, list[tuple[int, int, int]]] = {}
    for r in out:
        source = (r.lineage_partition, r.lineage_offset)  # the sink's lineage header: orders/<partition>/<offset>
        assert r.task == (r.partition if r.topic == "orders.v2" else 12), r
        tasks.setdefault(r.task, []).append((want[source], *source))
    assert len(out) == len(rows) and len(tasks) >= 10  # 40 keys over 12 partitions
    for task, order in tasks.items():
        assert order == sorted(order), f"task {task} is not in (order_ts, partition, offset) order"


@pytest.mark.parametrize("rule", ["field:account", "jsonpath:$.account", "record_key", "window_key"])
def test_the_tail_copy_writes_what_the_jvm_step_plans_in_the_same_order(spark, rule) -> None:
    """The tail (kafkaops.rekey.tail.rekey_part, the Python side of the contract) against the backfill's JVM
    step on the same rows: the same output topic, partition, key, value and reason code for every record,
    and each output partition in the merged copy's (order timestamp, source partition, source offset) order."""
    from kafkaops.platform.kafka.records import Record
    from kafkaops.rekey import tail
    from kafkaops.rekey.backfill import CODE_HEADER, LINEAGE_HEADER, format_lineage

    rows = sorted(rows_of(rule), key=lambda r: r[:2])  # each source partition in offset order, as the tail reads it
    jvm = actual(step(spark, rows, rule))
    written = tail.rekey_part(plan(rule), [Record("orders", p, o, ts, k, v) for p, o, ts, k, v in rows])
    lineage = {format_lineage("orders", r[3], r[4]).encode(): r for r in jvm}
    assert sorted(lineage) == sorted(dict(o.headers)[LINEAGE_HEADER] for o in written)
    for o in written:
        want = lineage[dict(o.headers)[LINEAGE_HEADER]]
        assert (o.topic, o.partition, o.key, o.value, (dict(o.headers).get(CODE_HEADER) or b"").decode() or None,
                o.placement, o.timestamp) == (want[0], want[1], want[5], want[6], want[7], want[8], want[9])
    for topic, partition in {(o.topic, o.partition) for o in written}:
        here = [lineage[dict(o.headers)[LINEAGE_HEADER]] for o in written if (o.topic, o.partition) == (topic, partition)]
        assert here == sorted(here, key=lambda r: (r[2], r[3], r[4]))
