"""The Python passes of spark_apps/backfill_verify.py (the functions Spark's mapInArrow runs) over Arrow
batches, without Spark: the key re-check gives keyrules' key and code, and both passes the value digest
halves that sum to check_integrity's checksum. The Spark jobs are tests/integration/rekey/test_backfill_verify.py's."""
from __future__ import annotations

import struct

import pyarrow as pa

from kafkaops.platform import keyrules
from kafkaops.rekey import backfill
from spark_apps import backfill_verify

VALUES = [b'{"key": "a"}', b'{"key": 7}', b"not json", None, b'{"other": 1}', b'{"key": null}']


def test_the_key_recheck_pass_gives_keyrules_keys_codes_and_digests() -> None:
    batch = pa.RecordBatch.from_pydict(
        {"partition": pa.array([0, 0, 1, 1, 2, 2], pa.int32()), "offset": pa.array(range(6), pa.int64()),
         "ts": pa.array([10] * 6, pa.int64()), "key": pa.array([b"k"] * 6, pa.binary()),
         "value": pa.array(VALUES, pa.binary())})
    (out,) = list(backfill_verify.rekeyed("field:key")(iter([batch])))
    assert out.schema.names == ["partition", "offset", "ts", "new_key", "written_key", "code", "digest_high",
                                "digest_low"]
    want = [keyrules.extract(b"k", v, "field:key") for v in VALUES]
    assert out.column("new_key").to_pylist() == [w.key for w in want] == [b"a", b"7", None, None, None, None]
    assert out.column("written_key").to_pylist() == out.column("new_key").to_pylist()  # a value rule writes it
    assert out.column("code").to_pylist() == [w.code for w in want]
    high, low = out.column("digest_high").to_pylist(), out.column("digest_low").to_pylist()
    assert backfill.checksum_of_sums(sum(high), sum(low)) == backfill.checksum(VALUES)


def test_the_output_pass_drops_the_value_for_its_digest() -> None:
    batch = pa.RecordBatch.from_pydict(
        {"topic": ["t"] * 6, "partition": pa.array([0] * 6, pa.int32()), "offset": pa.array(range(6), pa.int64()),
         "key": pa.array([b"k"] * 6, pa.binary()), "value": pa.array(VALUES, pa.binary()),
         "lineage": ["s/0/1"] * 6, "code": pa.array([None] * 6, pa.string())})
    (out,) = list(backfill_verify.digested("field:key")(iter([batch])))
    assert "value" not in out.schema.names and out.num_rows == 6
    assert [tuple(r) for r in zip(out.column("digest_high").to_pylist(), out.column("digest_low").to_pylist())] == \
        [backfill.digest_halves(v) for v in VALUES]
    assert out.column("place").to_pylist() == [b"k"] * 6  # a value rule's written key is its placement key


def test_a_window_store_copy_writes_the_changelog_key_and_is_placed_by_the_store_key() -> None:
    """window_key: the snapshot pass gives the store key (placement) and the whole changelog key (written,
    dead letters none); the output pass reads each written key's store key back (none: not windowed)."""
    changelog = [b"s1" + struct.pack(">qi", 60_000, 0), b"short", None]
    batch = pa.RecordBatch.from_pydict(
        {"partition": pa.array([0, 0, 1], pa.int32()), "offset": pa.array(range(3), pa.int64()),
         "ts": pa.array([10] * 3, pa.int64()), "key": pa.array(changelog, pa.binary()),
         "value": pa.array([b"{}", None, b"{}"], pa.binary())})
    (out,) = list(backfill_verify.rekeyed("window_key")(iter([batch])))
    assert out.column("new_key").to_pylist() == [b"s1", None, None]
    assert out.column("written_key").to_pylist() == [changelog[0], None, None]
    assert out.column("code").to_pylist() == [None, "NOT_A_WINDOWED_KEY", "NO_KEY"]
    written = pa.RecordBatch.from_pydict(
        {"topic": ["t"] * 3, "partition": pa.array([0] * 3, pa.int32()), "offset": pa.array(range(3), pa.int64()),
         "key": pa.array(changelog, pa.binary()), "value": pa.array([b"{}"] * 3, pa.binary()),
         "lineage": ["s/0/1"] * 3, "code": pa.array([None] * 3, pa.string())})
    (back,) = list(backfill_verify.digested("window_key")(iter([written])))
    assert back.column("key").to_pylist() == changelog and back.column("place").to_pylist() == [b"s1", None, None]
