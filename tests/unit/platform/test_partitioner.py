"""kafkaops.platform.partitioner against Kafka's own Java code (committed vectors and, with java, live) and
against librdkafka's ``murmur2_random`` as bundled with confluent-kafka."""
from __future__ import annotations

import ctypes
import json
import random
import shutil
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafkaops.errors import KafkaOpsError, SetupError
from kafkaops.platform.partitioner import (
    PartitionerError,
    PartitionerTypeError,
    murmur2,
    partition_for,
    partition_for_many,
    to_positive,
)
from tests.unit.data.gen_murmur2_vectors import VECTORS, java_vectors, vector_keys

DATA = json.loads(VECTORS.read_text())
COUNTS = DATA["partition_counts"]


def java_murmur2_reference(data: bytes) -> int:
    """Utils.murmur2 transcribed line by line: signed Java bytes, int overflow, ``>>>``."""

    def i32(x: int) -> int:  # Java int overflow
        x &= 0xFFFFFFFF
        return x - (1 << 32) if x >= 1 << 31 else x

    def ushr(x: int, n: int) -> int:  # x >>> n
        return (x & 0xFFFFFFFF) >> n

    b = [x - 256 if x > 127 else x for x in data]  # byte[] is signed in Java
    length, m, r = len(b), 0x5BD1E995, 24
    h = i32(0x9747B28C ^ length)
    for i in range(length // 4):
        i4 = i * 4
        k = i32((b[i4] & 0xFF) + ((b[i4 + 1] & 0xFF) << 8) + ((b[i4 + 2] & 0xFF) << 16)
                + ((b[i4 + 3] & 0xFF) << 24))
        k = i32(k * m)
        k ^= ushr(k, r)
        k = i32(k * m)
        h = i32(h * m)
        h = i32(h ^ k)
    rest, base = length % 4, length & ~3
    if rest >= 3:
        h = i32(h ^ ((b[base + 2] & 0xFF) << 16))
    if rest >= 2:  # fall-through
        h = i32(h ^ ((b[base + 1] & 0xFF) << 8))
    if rest >= 1:
        h = i32(h ^ (b[base] & 0xFF))
        h = i32(h * m)
    h = i32(h ^ ushr(h, 13))
    h = i32(h * m)
    return i32(h ^ ushr(h, 15))


def mismatches(vectors: list[dict], counts: list[int]) -> list[str]:
    """Every way this module disagrees with the Java-computed vectors, as readable lines."""
    out = []
    for v in vectors:
        key = bytes.fromhex(v["key_hex"])
        got = [murmur2(key)] + [partition_for(key, n) for n in counts]
        want = [v["murmur2"]] + [v["partition_for"][str(n)] for n in counts]
        if got != want:
            out.append(f"key {v['key_hex'] or '(empty)'}: got {got}, Java {want}")
    return out


def test_committed_vectors_match_java():
    assert mismatches(DATA["vectors"], COUNTS) == []


def test_committed_vectors_cover_the_cases_that_matter():
    keys = [bytes.fromhex(v["key_hex"]) for v in DATA["vectors"]]
    assert len(keys) >= 300
    assert set(range(41)) <= {len(k) for k in keys}  # all four tail lengths, many times
    assert max(map(len, keys)) > 1000
    assert sum(any(b >= 0x80 for b in k[len(k) & ~3:]) for k in keys) > 50  # high tail bytes
    assert b"account-00042" in keys and "user-ñandú".encode() in keys  # UTF-8 strings
    assert {v["murmur2"] < 0 for v in DATA["vectors"]} == {True, False}
    assert COUNTS == [1, 2, 3, 6, 7, 12, 100, 1000]


def test_reference_implementation_matches_java():
    assert [java_murmur2_reference(bytes.fromhex(v["key_hex"])) for v in DATA["vectors"]] == [
        v["murmur2"] for v in DATA["vectors"]
    ]


@given(st.binary(max_size=300))
def test_murmur2_equals_reference(data):
    assert murmur2(data) == java_murmur2_reference(data)


@given(st.binary(max_size=100), st.integers(1, 100_000))
def test_partition_in_range_deterministic_and_composed(key, n):
    p = partition_for(key, n)
    assert 0 <= p < n
    assert p == partition_for(bytes(key), n) == partition_for(bytearray(key), n)
    assert p == to_positive(murmur2(key)) % n
    assert -(2**31) <= murmur2(key) < 2**31


@given(st.lists(st.binary(max_size=40), max_size=50), st.integers(1, 1000))
def test_partition_for_many_is_partition_for_of_each(keys, n):
    assert partition_for_many(iter(keys), n) == [partition_for(k, n) for k in keys]


def test_to_positive_clears_the_sign_bit_not_abs():
    assert to_positive(-(2**31)) == 0 and to_positive(-1) == 2**31 - 1 and to_positive(5) == 5


@pytest.mark.parametrize("n", [0, -3])
def test_partition_count_below_one_is_refused(n):
    with pytest.raises(PartitionerError, match=rf"num_partitions {n} is below 1") as err:
        partition_for(b"k", n)
    assert isinstance(err.value, ValueError) and isinstance(err.value, KafkaOpsError)
    with pytest.raises(PartitionerError):
        partition_for_many([], n)


@pytest.mark.parametrize(("key", "hint"), [("account-00042", r"key\.encode\('utf-8'\)"),
                                           (None, "null key"), (42, "bytes or bytearray")])
def test_non_bytes_keys_are_refused_with_a_fix(key, hint):
    for call in (lambda: murmur2(key), lambda: partition_for(key, 3),
                 lambda: partition_for_many([b"ok", key], 3)):
        with pytest.raises(PartitionerTypeError, match=hint) as err:
            call()
        assert isinstance(err.value, TypeError) and isinstance(err.value, KafkaOpsError)


def test_non_integer_partition_count_is_refused():
    with pytest.raises(PartitionerTypeError, match=r"num_partitions 2\.0 is float"):
        partition_for(b"k", 2.0)


def test_librdkafka_murmur2_random_places_keys_like_java():
    """confluent-kafka's ``partitioner: murmur2_random`` is this C function for non-null keys
    (empty keys included); called through ctypes on the library the wheel bundles."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    root = Path(confluent_kafka.__file__).resolve().parents[1]
    libs = sorted(root.glob("confluent_kafka.libs/librdkafka*.so*")) or sorted(
        root.glob("confluent_kafka/.dylibs/librdkafka*.dylib"))
    if not libs:
        pytest.skip(f"no bundled librdkafka under {root} (confluent-kafka built from source?)")
    fn = ctypes.CDLL(str(libs[0])).rd_kafka_msg_partitioner_murmur2_random
    fn.restype = ctypes.c_int32
    fn.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int32,
                   ctypes.c_void_p, ctypes.c_void_p]
    got = {(v["key_hex"], n): fn(None, bytes.fromhex(v["key_hex"]), len(v["key_hex"]) // 2, n,
                                 None, None) for v in DATA["vectors"] for n in COUNTS}
    want = {(v["key_hex"], n): v["partition_for"][str(n)] for v in DATA["vectors"] for n in COUNTS}
    assert got == want


@pytest.mark.integration
def test_fresh_random_keys_match_live_java():
    if shutil.which("java") is None:
        pytest.skip("no 'java' on PATH: the live check runs Gen.java against kafka-clients")
    seed = random.SystemRandom().randrange(2**32)
    try:
        vectors = java_vectors(vector_keys(seed))
    except SetupError as exc:
        if "no jars" in str(exc):
            pytest.skip(str(exc))
        raise
    assert mismatches(vectors, COUNTS) == [], f"seed {seed}"
