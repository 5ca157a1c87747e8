"""Key skew of a topic sample, pure: records and bytes per key, the hottest keys, per-partition load
now and under candidate partition counts (Kafka's Java placement, :func:`partition_for`), and what a
candidate key field of the value would give, read by the key-rule contract of docs/key-rules.md
(:func:`candidate_rule`), as a rekey backfill by that field would key the records.

:func:`analyze` reads ``(key, value[, partition])`` tuples; ``spark_apps/key_skew.py`` aggregates per
key in Spark and calls :func:`summarize` with the same counts, so both give the same result.
A record's bytes are ``len(key) + len(value)``. Records without a key are counted, not placed.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kafkaops.errors import KafkaOpsError
from kafkaops.platform import keyrules
from kafkaops.platform.partitioner import partition_for

DEFAULT_CANDIDATES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)
HISTOGRAM_KEYS = 2000  # records of the busiest keys kept for the histogram


class SkewError(KafkaOpsError):
    """A sample or option the key-skew analysis cannot use."""


def candidate_rule(candidate: str) -> keyrules.KeyRule:
    """The key rule of a candidate key field: a key rule as is (``field:NAME``, ``jsonpath:...``), or
    a bare top-level name as ``field:NAME``."""
    text = candidate if candidate.startswith(("field:", "jsonpath:")) else f"field:{candidate}"
    try:
        return keyrules.rule_of(text)
    except keyrules.KeyRuleError as err:
        raise SkewError(f"candidate key field {candidate!r} is not a key rule: {err}") from err


def field_key(value: bytes | None, name: str) -> bytes | None:
    """The key a rekey backfill by candidate field ``name`` (:func:`candidate_rule`) gives a record
    value (a string as UTF-8, a number as its token text, true/false); None for a dead letter."""
    return keyrules.extract_key(None, value, candidate_rule(name))


def _show(key: bytes) -> str:
    try:
        return key.decode("utf-8")
    except UnicodeDecodeError:
        return "0x" + key.hex()


def load(per_key: Mapping[bytes, tuple[int, int]], partitions: int) -> list[int]:
    """Records per partition when each key goes where the Java producer puts it on ``partitions``."""
    out = [0] * partitions
    for key, (records, _) in per_key.items():
        out[partition_for(key, partitions)] += records
    return out


def _spread(values: Sequence[int]) -> dict[str, Any]:
    total = sum(values)
    mean = total / len(values) if values else 0.0
    top = max(values, default=0)
    return {"per_partition": list(values), "max": top, "mean": mean,
            "max_mean_ratio": (top / mean) if mean else 0.0, "max_share": (top / total) if total else 0.0}


def summarize(topic: str, per_key: Mapping[bytes, tuple[int, int]], *, partitions: int,
              per_partition_now: Mapping[int, int] | None = None, null_key_records: int = 0, null_key_bytes: int = 0,
              candidates: Iterable[int] = DEFAULT_CANDIDATES, candidate_field: str | None = None,
              candidate_per_key: Mapping[bytes, tuple[int, int]] | None = None, top: int = 10) -> dict[str, Any]:
    """The key-skew result from per-key ``(records, bytes)`` counts (JSON-safe dict)."""
    if partitions < 1:
        raise SkewError(f"topic {topic} has {partitions} partitions; pass its partition count (1 or more)")
    counts = sorted(set(int(n) for n in candidates) | {partitions})
    if counts[0] < 1:
        raise SkewError(f"candidate partition counts {counts} include {counts[0]}; give counts of 1 or more")
    records = sum(r for r, _ in per_key.values()) + null_key_records
    size = sum(b for _, b in per_key.values()) + null_key_bytes
    ranked = sorted(per_key.items(), key=lambda kv: (-kv[1][0], -kv[1][1], kv[0]))
    now = [0] * partitions
    if per_partition_now is not None:
        for p, n in per_partition_now.items():
            if 0 <= p < partitions:
                now[p] += n
    else:
        now = load(per_key, partitions)
    result: dict[str, Any] = {
        "topic": topic, "partitions": partitions, "records": records, "bytes": size, "keys": len(per_key),
        "null_key_records": null_key_records, "empty": records == 0,
        "top_keys": [{"key": _show(k), "records": r, "bytes": b, "share": r / records if records else 0.0}
                     for k, (r, b) in ranked[:top]],
        "key_histogram": sorted((r for r, _ in per_key.values()), reverse=True)[:HISTOGRAM_KEYS],
        "now": _spread(now),
        "what_if": {str(n): _spread(load(per_key, n)) for n in counts},
        "candidate": None,
    }
    if candidate_field:
        cand = candidate_per_key or {}
        c_records = sum(r for r, _ in cand.values())
        c_top = max(cand.items(), key=lambda kv: (kv[1][0], kv[0]), default=None)
        spread = _spread(load(cand, partitions)) if cand else _spread([0] * partitions)
        result["candidate"] = {
            "field": candidate_field, "records": c_records, "keys": len(cand), "missing": records - c_records,
            "top_key": _show(c_top[0]) if c_top else None,
            "top_share": (c_top[1][0] / c_records) if c_top and c_records else 0.0,
            "max_mean_ratio": spread["max_mean_ratio"], "per_partition": spread["per_partition"],
            "what_if": {str(n): _spread(load(cand, n))["max_mean_ratio"] for n in counts} if cand else {}}
    return result


def analyze(topic: str, records: Iterable[Sequence[Any]], *, partitions: int,
            candidates: Iterable[int] = DEFAULT_CANDIDATES, candidate_field: str | None = None,
            top: int = 10) -> dict[str, Any]:
    """The key-skew result of ``(key, value)`` or ``(key, value, partition)`` tuples. With a partition,
    the load "now" is where the records are; without, where the Java producer would put the key."""
    per_key: dict[bytes, list[int]] = {}
    cand: dict[bytes, list[int]] = {}
    now: dict[int, int] = {}
    placed = True
    null_records = null_bytes = 0
    for item in records:
        key, value = item[0], item[1]
        nbytes = len(key or b"") + len(value or b"")
        if len(item) > 2 and item[2] is not None:
            now[int(item[2])] = now.get(int(item[2]), 0) + 1
        else:
            placed = False
        if key is None:
            null_records += 1
            null_bytes += nbytes
        else:
            slot = per_key.setdefault(bytes(key), [0, 0])
            slot[0] += 1
            slot[1] += nbytes
        if candidate_field:
            new = field_key(value, candidate_field)
            if new is not None:
                slot = cand.setdefault(new, [0, 0])
                slot[0] += 1
                slot[1] += nbytes
    return summarize(topic, {k: (r, b) for k, (r, b) in per_key.items()}, partitions=partitions,
                     per_partition_now=now if placed and now else None, null_key_records=null_records,
                     null_key_bytes=null_bytes, candidates=candidates, candidate_field=candidate_field,
                     candidate_per_key={k: (r, b) for k, (r, b) in cand.items()}, top=top)


def sample_offsets(cluster: Any, topic: str, records: int) -> tuple[dict[int, int], dict[int, int]]:
    """A bounded sample of ``topic`` from a snapshot (:class:`kafkaops.model.Cluster`), weighted by what
    each partition stores: the latest records of each, as many as its share of the topic's records
    (largest remainders first, so the sizes add up to ``records``). A partition holding a third of the
    topic gives a third of the sample, so the sample's load per partition is the topic's and a hot
    partition is sampled hot; the whole topic when it holds at most ``records``. Returns ``(start, end)``
    offsets (pure)."""
    if records < 1:
        raise SkewError(f"sample size is {records}; give 1 or more records")
    parts = cluster.partitions_of(topic)
    ends = {p.partition: p.end_offset or 0 for p in parts}
    stored = {p.partition: max(0, (p.end_offset or 0) - (p.start_offset or 0)) for p in parts}
    total = sum(stored.values())
    if total <= records:
        take = dict(stored)
    else:
        exact = {p: records * n / total for p, n in stored.items()}
        take = {p: int(x) for p, x in exact.items()}
        for p in sorted(exact, key=lambda q: (take[q] - exact[q], q))[:records - sum(take.values())]:
            take[p] += 1
    return {p: ends[p] - take[p] for p in ends}, ends
