"""Where Kafka's Java producer puts a keyed record: ``murmur2`` and ``partition_for``, bit for bit.

The Java client places a record whose key is not null (and with ``partitioner.ignore.keys=false``
and no custom ``partitioner.class``) on ``BuiltInPartitioner.partitionForKey(keyBytes, n)``, which
is ``Utils.toPositive(Utils.murmur2(keyBytes)) % n`` with ``n`` the topic's partition count: all
partitions, not only the available ones. librdkafka's ``partitioner=murmur2_random`` (and so
confluent-kafka's) computes the same ``(murmur2(key) & 0x7fffffff) % n`` for non-null keys. The
default ``consistent_random`` is CRC32 and places keys elsewhere.

The Java semantics mirrored here (checked against kafka-clients 4.4.0, as against 4.3.1 before it, by the vectors in
``tests/unit/data/murmur2_vectors.json``):

* Java ``int`` arithmetic wraps modulo 2**32. Values are kept as unsigned 32-bit Python ints
  (``& 0xFFFFFFFF`` after each multiply); the low 32 bits of a product do not depend on sign, and
  Java's unsigned shift ``h >>> r`` is then Python's ``h >> r``. Only :func:`murmur2` converts the
  result to a signed int, as Java returns it.
* Seed ``0x9747b28c``, ``m = 0x5bd1e995``, ``r = 24``; ``h = seed ^ length``.
* The body reads 4-byte words little-endian (Kafka 4.x via a ``LITTLE_ENDIAN`` VarHandle, older
  versions as ``(b0 & 0xff) + ((b1 & 0xff) << 8) + ...``: the same value).
* The ``switch (length % 4)`` tail falls through cases 3, 2, 1: it XORs ``b2 << 16``, ``b1 << 8``
  and ``b0``, each masked with ``& 0xff`` so bytes >= 0x80 are not sign-extended, then multiplies
  once. That is ``h ^= int.from_bytes(tail, "little"); h *= m``.
* Final mix ``h ^= h >>> 13; h *= m; h ^= h >>> 15``.
* ``toPositive`` is ``h & 0x7fffffff``, not ``Math.abs`` (``abs(Integer.MIN_VALUE)`` is negative).

A null key is not hashed by either client (sticky or random placement), so ``None`` is refused.
Pure Python, stdlib only: about 0.5 million 16-byte keys a second on one CPython 3.11 core.
"""
from __future__ import annotations

import operator
import struct
from collections.abc import Callable, Iterable, Sequence

from kafkaops.errors import KafkaOpsError

__all__ = [
    "PartitionerError",
    "PartitionerTypeError",
    "murmur2",
    "partition_for",
    "partition_for_many",
    "to_positive",
]

SEED = 0x9747B28C
M = 0x5BD1E995
R = 24
_MASK32 = 0xFFFFFFFF
# One precompiled little-endian unpacker per word count: keys up to 252 bytes cost one C call.
_WORDS = [struct.Struct(f"<{n}I").unpack_from for n in range(64)]


class PartitionerError(KafkaOpsError, ValueError):
    """A partition count the Java partitioner cannot use."""


class PartitionerTypeError(KafkaOpsError, TypeError):
    """A key that is not serialized bytes, or a partition count that is not an integer."""


def _key_type_error(key: object) -> PartitionerTypeError:
    if key is None:
        fix = ("Kafka does not hash a null key (the Java producer and librdkafka place it "
               "sticky or at random), so its partition cannot be predicted")
    elif isinstance(key, str):
        fix = ("encode str keys first, the way the producer's serializer does, "
               "e.g. key.encode('utf-8') for Java's StringSerializer")
    else:
        fix = "pass the key as the producer serializes it (bytes or bytearray)"
    shown = repr(key)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    return PartitionerTypeError(f"partition key {shown} is {type(key).__name__}, not bytes: {fix}")


def _murmur2_u32(data: bytes | bytearray, _words: Sequence[Callable[[bytes | bytearray], tuple[int, ...]]] = _WORDS,
                 _m: int = M, _w: int = _MASK32) -> int:
    """``Utils.murmur2(data)`` as an unsigned 32-bit int: the hot path (constants are bound as
    default arguments, i.e. fast locals; the Java semantics are in the module docstring)."""
    if type(data) is not bytes and not isinstance(data, bytearray):
        raise _key_type_error(data)
    length = len(data)
    h = SEED ^ length
    n4 = length >> 2
    for k in _words[n4](data) if n4 < 64 else struct.unpack_from(f"<{n4}I", data):
        k = (k * _m) & _w
        h = ((h * _m) ^ (k ^ (k >> R)) * _m) & _w  # k *= m; k ^= k >>> r; k *= m; h *= m; h ^= k
    tail = length & 3
    if tail:  # switch (length % 4) { case 3: case 2: case 1: ... h *= m; }
        h = ((h ^ int.from_bytes(data[length - tail:], "little")) * _m) & _w
    h ^= h >> 13
    h = (h * _m) & _w
    return h ^ (h >> 15)


def murmur2(data: bytes | bytearray) -> int:
    """``org.apache.kafka.common.utils.Utils.murmur2(byte[])``: the same signed 32-bit int."""
    h = _murmur2_u32(data)
    return h - 0x1_0000_0000 if h & 0x8000_0000 else h


def to_positive(h: int) -> int:
    """``Utils.toPositive(int)``: clear the sign bit (``h & 0x7fffffff``), not ``abs``."""
    return h & 0x7FFFFFFF


def _partition_count(num_partitions: int) -> int:
    try:
        n = operator.index(num_partitions)
    except TypeError:
        raise PartitionerTypeError(
            f"num_partitions {num_partitions!r} is {type(num_partitions).__name__}, not int: "
            "pass the topic's partition count as an integer"
        ) from None
    if n < 1:
        raise PartitionerError(
            f"num_partitions {n} is below 1: pass the topic's partition count "
            "(all partitions, as in its metadata), which is at least 1"
        )
    return n


def partition_for(key: bytes | bytearray, num_partitions: int) -> int:
    """The partition the Java producer's default partitioner gives a non-null ``key``:
    ``toPositive(murmur2(key)) % num_partitions``, ``num_partitions`` being all of the topic's."""
    return (_murmur2_u32(key) & 0x7FFFFFFF) % _partition_count(num_partitions)


def partition_for_many(keys: Iterable[bytes | bytearray], num_partitions: int) -> list[int]:
    """:func:`partition_for` of each key, in order, checking ``num_partitions`` once."""
    n = _partition_count(num_partitions)
    h = _murmur2_u32
    return [(h(key) & 0x7FFFFFFF) % n for key in keys]
