"""The pure key-skew helper against counts made here with the partitioner."""
from __future__ import annotations

import json
from collections import Counter

import pytest

from kafkaops.cli import datagen
from kafkaops.capacity import skew
from kafkaops.platform.partitioner import partition_for


def sample(records: int = 2000, share: float = 0.4) -> list[tuple[bytes, bytes]]:
    return list(datagen.generate_records(datagen.DatagenSpec(records=records, keys=50, skew="hot", hot_share=share,
                                                              record_bytes=100, seed=5)))


def test_hot_key_share_bytes_and_partition_loads() -> None:
    pairs = sample()
    result = skew.analyze("orders", pairs, partitions=3, candidates=(6,), candidate_field="id")
    counts = Counter(k for k, _ in pairs)
    hot, n = counts.most_common(1)[0]
    assert result["records"] == len(pairs) and result["keys"] == len(counts)
    assert result["bytes"] == sum(len(k) + len(v) for k, v in pairs)
    assert result["top_keys"][0] == {"key": hot.decode(), "records": n,
                                     "bytes": sum(len(k) + len(v) for k, v in pairs if k == hot),
                                     "share": n / len(pairs)}
    for parts in (3, 6):
        expected = [0] * parts
        for k in counts:
            expected[partition_for(k, parts)] += counts[k]
        assert result["what_if"][str(parts)]["per_partition"] == expected
    assert result["now"]["per_partition"] == result["what_if"]["3"]["per_partition"]
    cand = result["candidate"]
    assert cand["field"] == "id" and cand["keys"] == len(pairs) and cand["top_share"] == pytest.approx(1 / len(pairs))
    assert cand["max_mean_ratio"] < result["now"]["max_mean_ratio"]


def test_now_follows_the_partition_the_records_came_from() -> None:
    result = skew.analyze("t", [(b"a", b"{}", 1), (b"a", b"{}", 1), (b"b", b"{}", 0)], partitions=2)
    assert result["now"]["per_partition"] == [1, 2] and result["now"]["max_mean_ratio"] == pytest.approx(2 / 1.5)


def test_empty_sample_and_null_keys_are_reported_not_errors() -> None:
    empty = skew.analyze("t", [], partitions=3)
    assert empty["empty"] is True and empty["records"] == 0 and empty["top_keys"] == []
    nulls = skew.analyze("t", [(None, b"x"), (b"k", b"y")], partitions=1)
    assert nulls["null_key_records"] == 1 and nulls["records"] == 2 and nulls["top_keys"][0]["share"] == 0.5


def test_field_key_reads_a_candidate_by_the_key_rules() -> None:
    """The key a rekey backfill by the field would write (docs/key-rules.md), or None for a dead letter."""
    assert skew.field_key(json.dumps({"a": "x", "n": 7}).encode(), "a") == b"x"
    assert skew.field_key(b'{"n": 7.50}', "n") == b"7.50"  # the number's token as written
    assert skew.field_key(b'{"n": {"id": 1}}', "n") is None and skew.field_key(b'{"n": null}', "n") is None
    assert skew.field_key(b"not json", "a") is None and skew.field_key(b"{}", "a") is None
    assert skew.field_key(b'{"c": {"id": "c7"}}', "jsonpath:$.c.id") == b"c7"
    assert skew.candidate_rule("account_id").text == "field:account_id"
    with pytest.raises(skew.SkewError, match=r"candidate key field 'jsonpath:\$\.\.x' is not a key rule"):
        skew.candidate_rule("jsonpath:$..x")


def test_bad_partition_count_is_refused() -> None:
    with pytest.raises(skew.SkewError, match="0 partitions"):
        skew.analyze("t", [], partitions=0)


def test_the_sample_is_weighted_by_what_each_partition_stores() -> None:
    """orders as the review found it: 200,000 records, partition 4 holds 62,720 (stored max/mean 1.88); the
    sample takes each partition's share, so its load per partition has the stored ratio, not 1.00."""
    from kafkaops.model import Cluster, PartitionAssignment

    stored = [20_000, 25_000, 30_000, 31_280, 62_720, 31_000]
    cluster = Cluster(brokers=(), partitions=tuple(
        PartitionAssignment("orders", p, (1,), 1, start_offset=1_000, end_offset=1_000 + n)
        for p, n in enumerate(stored)))
    start, end = skew.sample_offsets(cluster, "orders", 10_000)
    taken = [end[p] - start[p] for p in range(6)]
    assert sum(taken) == 10_000 and end == {p: 1_000 + n for p, n in enumerate(stored)}
    assert taken == [1_000, 1_250, 1_500, 1_564, 3_136, 1_550]
    ratio = max(taken) / (sum(taken) / 6)
    assert abs(ratio - max(stored) / (sum(stored) / 6)) < 0.01 and round(ratio, 2) == 1.88
    everything = skew.sample_offsets(cluster, "orders", 500_000)  # the topic holds less: all of it
    assert everything == ({p: 1_000 for p in range(6)}, end)
