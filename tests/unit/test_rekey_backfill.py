"""The Python step of the merged copy (spark_apps.rekey_backfill), without Spark: columns in,
columns out, and the Arrow wrapper over them."""
from __future__ import annotations

import json

import pyarrow as pa
import pytest

from kafkaops import backfill
from kafkaops.backfill import BackfillPlan, OrderClock
from kafkaops.partitioner import partition_for
from spark_apps import rekey_backfill


def plan(rule: str) -> BackfillPlan:
    return BackfillPlan("orders", ((0, 0, 10), (1, 0, 10)), "orders.v2", 12, rule)


def test_record_key_rule_places_like_the_java_producer_and_sends_null_keys_to_dead_letters():
    keys = [b"alice", None, b"bob", b"alice"]
    out, order, new_keys, reasons = rekey_backfill.rekey_columns(
        plan("record_key"), OrderClock(), [0, 0, 0, 0], [0, 1, 2, 3], [100, 101, 102, 103], keys, None)
    assert out == [partition_for(b"alice", 12), 0, partition_for(b"bob", 12), partition_for(b"alice", 12)]
    assert new_keys == keys
    assert reasons == [None, backfill.NO_KEY, None, None]
    assert order == [100, 101, 102, 103]


def test_field_rule_reads_the_value_and_names_why_a_record_has_no_key():
    values = [json.dumps({"account": "a-1"}).encode(), b"not json", json.dumps({"other": 1}).encode(),
              json.dumps({"account": 7}).encode()]
    out, _, new_keys, reasons = rekey_backfill.rekey_columns(
        plan("field:account"), OrderClock(), [1] * 4, [5, 6, 7, 8], [0] * 4, [b"k"] * 4, values)
    assert new_keys == [b"a-1", None, None, b"7"]
    assert out == [partition_for(b"a-1", 12), 0, 0, partition_for(b"7", 12)]
    assert reasons[0] is None and "not JSON" in reasons[1] and "no field 'account'" in reasons[2]


def test_order_timestamp_is_the_running_maximum_per_key_and_partition():
    _, order, _, _ = rekey_backfill.rekey_columns(
        plan("record_key"), OrderClock(), [0, 0, 0, 1], [0, 1, 2, 0], [50, 40, 60, 10], [b"k", b"k", b"j", b"k"], None)
    assert order == [50, 50, 60, 10]


def test_offsets_going_backwards_in_a_partition_are_refused():
    with pytest.raises(backfill.BackfillError, match="offset 3 came after 4"):
        rekey_backfill.rekey_columns(plan("record_key"), OrderClock(), [0, 0], [4, 3], [1, 2], [b"a", b"b"], None)


def test_arrow_batches_pass_partition_offset_and_value_through():
    batch = pa.RecordBatch.from_pydict({
        "partition": pa.array([1, 1], pa.int32()), "offset": pa.array([7, 8], pa.int64()),
        "ts": pa.array([1000, 999], pa.int64()), "key": pa.array([b"x", None], pa.binary()),
        "value": pa.array([b'{"account": "z"}', None], pa.binary())})
    (out,) = list(rekey_backfill.rekey_batches(plan("field:account"), [batch]))
    assert out.schema.names == [name for name, _ in rekey_backfill._STEP_FIELDS]
    rows = out.to_pylist()
    assert rows[0] == {"out_partition": partition_for(b"z", 12), "order_ts": 1000, "src_partition": 1,
                       "src_offset": 7, "key": b"z", "value": b'{"account": "z"}', "reason": None}
    assert rows[1]["key"] is None and rows[1]["out_partition"] == 0 and "tombstone" in rows[1]["reason"]
