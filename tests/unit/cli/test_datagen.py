from __future__ import annotations

import json
from collections import Counter

import pytest

from kafkaops.cli.datagen import DatagenSpec, generate_records
from kafkaops.errors import ConfigError


def test_same_seed_same_records_other_seed_other_records() -> None:
    spec = DatagenSpec(records=500, keys=50, seed=9)
    assert list(generate_records(spec)) == list(generate_records(spec))
    assert list(generate_records(spec)) != list(generate_records(DatagenSpec(records=500, keys=50, seed=10)))


def test_hot_key_takes_its_share() -> None:
    records = list(generate_records(DatagenSpec(records=20_000, keys=100, skew="hot", hot_share=0.4, seed=1)))
    counts = Counter(k for k, _ in records)
    assert counts.most_common(1)[0][0] == b"account-000000"
    assert 0.38 < counts[b"account-000000"] / len(records) < 0.42


def test_zipf_is_skewed_and_uniform_is_not() -> None:
    zipf = Counter(k for k, _ in generate_records(DatagenSpec(records=20_000, keys=200, skew="zipf", zipf_s=1.2)))
    flat = Counter(k for k, _ in generate_records(DatagenSpec(records=20_000, keys=200, skew="uniform")))
    assert zipf.most_common(1)[0][1] > 10 * (20_000 / 200)
    assert flat.most_common(1)[0][1] < 2 * (20_000 / 200)


def test_values_are_json_of_the_asked_size_with_per_key_sequence() -> None:
    spec = DatagenSpec(records=2_000, keys=30, record_bytes=300, seed=4)
    last_seq: dict[bytes, int] = {}
    for i, (key, value) in enumerate(generate_records(spec)):
        body = json.loads(value)
        assert len(value) == 300
        assert body["id"] == i and body["key"].encode() == key
        assert body["seq"] == last_seq.get(key, -1) + 1
        last_seq[key] = body["seq"]


@pytest.mark.parametrize("kwargs, message", [
    ({"records": -1}, "records is -1"),
    ({"records": 1, "keys": 0}, "keys is 0"),
    ({"records": 1, "skew": "pareto"}, "skew 'pareto' is unknown"),
    ({"records": 1, "skew": "hot", "hot_share": 1.5}, "hot_share is 1.5"),
    ({"records": 1, "record_bytes": 10}, "record_bytes is 10"),
])
def test_bad_specs_are_refused(kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        DatagenSpec(**kwargs)
