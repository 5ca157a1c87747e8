"""Capacity review, pure: throughput from offset deltas, indicators with the rule that fired,
recommendations that show their numbers. Stdlib and the model only; no Kafka, files or plots.

    points (ReviewPoint.of(cluster), kept by kafkaops.capacity.history) -> throughput
    Cluster + history + targets (+ key-skew result) -> review() -> Review (JSON round-trip)

Rules (the operator's, each :class:`Finding` names the one that produced it):

* ``disk_use``: a broker's log dirs are more than 70 % full ((total - usable) / total);
* ``replicas_per_broker``: more than 4,000 partition replicas on one broker;
* ``idle_consumers``: a group has more members than its topics have partitions;
* ``lag_growing``: a group's lag rose from review to review (at least 2 history points, never falling);
* ``partitions_not_multiple_of_brokers``: a topic's partition count is not a multiple of the broker count;
* ``hot_partition``: max / mean of a topic's partitions >= 2, by records or by bytes.

Recommendations:

* partitions = max(ceil(target / per-consumer throughput), max consumers), rounded up to a multiple
  of the broker count;
* brokers = max(ceil(bytes / room per broker), ceil(throughput / per-broker throughput)), the room being
  disk per broker x 0.7 less the other data on the disk;

Findings and recommendations about disks derive from one :class:`DiskVerdict` (free disk, add brokers,
rebalance, or enough), so a full disk holding mostly other data is never answered with "add brokers".
* a key change when one key's share of a topic's records is >= the key-share threshold.
"""
from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from kafkaops.capacity.findings import CapacityError, Finding
from kafkaops.capacity.load import RULES as RULES_OF_LOAD
from kafkaops.capacity.load import (LoadNeeds, LoadThresholds, LoadWindow, load_findings, load_needs,
                                    unobserved_findings)
from kafkaops.model import Cluster, TopicPartition
from kafkaops.platform import own


__all__ = ["CapacityError", "Finding", "RULES_OF_LOAD"]  # defined in kafkaops.capacity.findings, read here by older callers

RULES = ("disk_use", "replicas_per_broker", "idle_consumers", "lag_growing", "partitions_not_multiple_of_brokers",
         "hot_partition")


@dataclass(frozen=True)
class Thresholds:
    """The operator rule limits."""

    max_disk_use: float = 0.70
    max_replicas_per_broker: int = 4000
    hot_partition_ratio: float = 2.0
    key_share: float = 0.2
    min_lag_points: int = 2


# -- history points and throughput ---------------------------------------------------------------------------

@dataclass(frozen=True)
class ReviewPoint:
    """What one review keeps of a snapshot: end offsets and sizes per partition, lag per group."""

    taken_at: float
    offsets: Mapping[TopicPartition, int | None]
    sizes: Mapping[TopicPartition, int | None] = field(default_factory=dict)
    lags: Mapping[str, int] = field(default_factory=dict)
    cluster_id: str | None = None
    run_id: str | None = None

    @classmethod
    def of(cls, cluster: Cluster, run_id: str | None = None) -> ReviewPoint:
        if cluster.taken_at is None:
            raise CapacityError(f"snapshot of cluster {cluster.cluster_id} has no taken_at; take it with "
                                "kafkaops.platform.kafka.metadata.snapshot (which stamps the time) before a review")
        return cls(taken_at=cluster.taken_at, offsets={p.topic_partition: p.end_offset for p in cluster.partitions},
                   sizes={p.topic_partition: p.size_bytes for p in cluster.partitions},
                   lags={g.group_id: g.total_lag for g in cluster.groups}, cluster_id=cluster.cluster_id,
                   run_id=run_id)

    def to_dict(self) -> dict[str, Any]:
        return {"taken_at": self.taken_at, "cluster_id": self.cluster_id, "run_id": self.run_id,
                "partitions": [[t, p, self.offsets.get((t, p)), self.sizes.get((t, p))]
                               for t, p in sorted(set(self.offsets) | set(self.sizes))],
                "lags": dict(sorted(self.lags.items()))}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ReviewPoint:
        try:
            rows = data["partitions"]
            return cls(taken_at=float(data["taken_at"]), offsets={(t, int(p)): o for t, p, o, _ in rows},
                       sizes={(t, int(p)): s for t, p, _, s in rows},
                       lags={str(k): int(v) for k, v in (data.get("lags") or {}).items()},
                       cluster_id=data.get("cluster_id"), run_id=data.get("run_id"))
        except (KeyError, TypeError, ValueError) as err:
            raise CapacityError(f"cannot read a review point from {str(data)[:120]}: {err}; expected the shape "
                                "of ReviewPoint.to_dict()") from err


@dataclass(frozen=True)
class PartitionThroughput:
    """Records (and bytes, when both sizes are known) per second of one partition between two points."""

    topic: str
    partition: int
    records: int
    seconds: float
    bytes: int | None = None

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds

    @property
    def bytes_per_s(self) -> float | None:
        return None if self.bytes is None else self.bytes / self.seconds

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "records_per_s": self.records_per_s, "bytes_per_s": self.bytes_per_s}


@dataclass(frozen=True)
class TopicThroughput:
    topic: str
    partitions: int
    records_per_s: float
    bytes_per_s: float | None

    @property
    def empty(self) -> bool:
        return self.records_per_s == 0


def _point(value: Cluster | ReviewPoint) -> ReviewPoint:
    return value if isinstance(value, ReviewPoint) else ReviewPoint.of(value)


def throughput(before: Cluster | ReviewPoint, after: Cluster | ReviewPoint) -> tuple[PartitionThroughput, ...]:
    """Per-partition throughput from end-offset (and size) deltas. New partitions of a topic ``before``
    knew count from offset 0; topics ``before`` did not hold are left out (no baseline); a delta below 0
    (topic recreated, log truncated) counts as 0."""
    b, a = _point(before), _point(after)
    seconds = a.taken_at - b.taken_at
    if seconds <= 0:
        raise CapacityError(f"the later snapshot (taken_at {a.taken_at}) is not after the earlier one "
                            f"({b.taken_at}): {seconds:.3f} s apart; pass (earlier, later)")
    known = {t for t, _ in b.offsets}
    out = []
    for key, end in sorted(a.offsets.items()):
        if end is None or key[0] not in known:
            continue
        start = b.offsets.get(key)
        records = max(0, end - (start or 0))
        size_a, size_b = a.sizes.get(key), b.sizes.get(key)
        delta_bytes = None
        if size_a is not None and (size_b is not None or key not in b.offsets):
            delta_bytes = max(0, size_a - (size_b or 0))
        out.append(PartitionThroughput(key[0], key[1], records, seconds, delta_bytes))
    return tuple(out)


def topic_throughput(parts: Iterable[PartitionThroughput]) -> tuple[TopicThroughput, ...]:
    """Sum per topic; bytes/s only when every partition of the topic has a byte delta."""
    by_topic: dict[str, list[PartitionThroughput]] = {}
    for p in parts:
        by_topic.setdefault(p.topic, []).append(p)
    out = []
    for topic, ps in sorted(by_topic.items()):
        bps = None if any(p.bytes is None for p in ps) else sum(p.bytes_per_s or 0.0 for p in ps)
        out.append(TopicThroughput(topic, len(ps), sum(p.records_per_s for p in ps), bps))
    return tuple(out)


# -- the disk verdict ------------------------------------------------------------------------------------------

def _gib(n: float) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


@dataclass(frozen=True)
class Disk:
    """One log-dir disk as its brokers report it. Brokers on one host reporting the same size share it
    (a laptop cluster), so its Kafka data is theirs together; the rest of what is used is other data."""

    brokers: tuple[int, ...]
    total_bytes: int
    used_bytes: int
    kafka_bytes: int

    @property
    def use(self) -> float:
        return self.used_bytes / self.total_bytes

    @property
    def other_bytes(self) -> int:
        return max(0, self.used_bytes - self.kafka_bytes)

    @property
    def subject(self) -> str:
        if len(self.brokers) == 1:
            return f"broker {self.brokers[0]}"
        return f"brokers {', '.join(map(str, self.brokers))} (one disk)"


DISK_ACTIONS = ("ok", "add_brokers", "rebalance", "free_disk")


@dataclass(frozen=True)
class DiskVerdict:
    """What the disks call for, from one set of numbers, so the ``disk_use`` findings and the brokers
    recommendation say the same thing:

    * ``free_disk``: a disk is above the limit with other data alone: more brokers would not lower it;
    * ``add_brokers``: Kafka's data needs more brokers than there are, at ``room_per_broker_bytes`` each;
    * ``rebalance``: a disk is above the limit though the brokers together have room;
    * ``ok``: no disk above the limit and the brokers are enough.

    ``room_per_broker_bytes`` is what one broker may hold below the limit: the operator's disk size x the
    limit, else the tightest measured disk's (size x limit - other data) shared by its brokers."""

    action: str
    max_use: float
    disks: tuple[Disk, ...]
    kafka_bytes: int
    room_per_broker_bytes: float | None
    brokers_needed: int
    current: int

    @property
    def over(self) -> tuple[Disk, ...]:
        return tuple(d for d in self.disks if d.use > self.max_use)

    def full_of_other_data(self, disk: Disk) -> bool:
        return disk.other_bytes >= disk.total_bytes * self.max_use

    def remedy(self, disk: Disk) -> str:
        """What to do about ``disk`` (above the limit), as the verdict sees it."""
        if self.full_of_other_data(disk):
            return ("other data alone fills it past the limit: free that disk or give the log dirs a disk of their "
                    "own; more brokers would not lower it")
        if self.action == "add_brokers":
            return f"Kafka's data needs {self.brokers_needed} brokers (today {self.current}): add brokers or disk"
        return (f"the brokers together have room ({self.brokers_needed} suffice, today {self.current}): rebalance "
                "(kafka_reassign operation=rebalance) or add disk")

    @property
    def text(self) -> str:
        """The verdict in one sentence or two."""
        room = "-" if self.room_per_broker_bytes is None else _gib(self.room_per_broker_bytes)
        fits = (f"Kafka's data ({_gib(self.kafka_bytes)}) needs {self.brokers_needed} broker(s) at {room} each "
                f"below {self.max_use:.0%} disk use; today {self.current}")
        if self.room_per_broker_bytes is None:
            fits = f"Kafka's data ({_gib(self.kafka_bytes)}) has no room below the limit on any disk"
        if self.action == "free_disk":
            full = [d for d in self.over if self.full_of_other_data(d)]
            return (f"Free disk: {', '.join(d.subject for d in full)} {'is' if len(full) == 1 else 'are'} above "
                    f"{self.max_use:.0%} with other data alone ({', '.join(_gib(d.other_bytes) for d in full)} not "
                    f"Kafka's); more brokers would not help. {fits}"
                    + (f": add {self.brokers_needed - self.current}." if self.brokers_needed > self.current else "."))
        if self.action == "add_brokers":
            return f"Add brokers: {fits}: add {self.brokers_needed - self.current}."
        if self.action == "rebalance":
            return (f"Rebalance: {', '.join(d.subject for d in self.over)} above {self.max_use:.0%} while {fits}, "
                    "enough in total.")
        return f"Brokers and disks are enough: {fits}."

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "text": self.text}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DiskVerdict:
        return cls(action=data["action"], max_use=float(data["max_use"]),
                   disks=tuple(Disk(tuple(d["brokers"]), d["total_bytes"], d["used_bytes"], d["kafka_bytes"])
                               for d in data.get("disks", ())),
                   kafka_bytes=int(data["kafka_bytes"]), room_per_broker_bytes=data.get("room_per_broker_bytes"),
                   brokers_needed=int(data["brokers_needed"]), current=int(data["current"]))


def disks_of(cluster: Cluster) -> tuple[Disk, ...]:
    """The log-dir disks the brokers report (brokers without a disk report are left out)."""
    size = cluster.bytes_per_broker()
    groups: dict[tuple[Any, ...], list[Any]] = {}
    for b in cluster.brokers:
        if not b.disk_total_bytes or b.disk_usable_bytes is None:
            continue
        key = (b.host, b.disk_total_bytes) if b.host else ("broker", b.id)
        groups.setdefault(key, []).append(b)
    return tuple(Disk(tuple(b.id for b in bs), bs[0].disk_total_bytes,
                      bs[0].disk_total_bytes - min(b.disk_usable_bytes for b in bs),
                      sum(size.get(b.id, 0) for b in bs))
                 for bs in sorted(groups.values(), key=lambda bs: bs[0].id))


def disk_verdict(cluster: Cluster, max_use: float = 0.70, *, disk_per_broker_bytes: int | None = None,
                 current: int | None = None) -> DiskVerdict:
    """The :class:`DiskVerdict` of ``cluster`` (``current``: its broker count, default the online ones)."""
    if not 0 < max_use <= 1:
        raise CapacityError(f"max disk use is {max_use}; give a share in (0, 1], e.g. 0.7")
    disks = disks_of(cluster)
    kafka = sum(cluster.bytes_per_broker().values())
    brokers = current if current is not None else (len(cluster.online_broker_ids) or len(cluster.brokers))
    if disk_per_broker_bytes:
        room: float | None = disk_per_broker_bytes * max_use
    else:
        rooms = [(d.total_bytes * max_use - d.other_bytes) / len(d.brokers) for d in disks
                 if d.total_bytes * max_use > d.other_bytes]
        room = min(rooms) if rooms else None
    needed = max(1, math.ceil(kafka / room)) if room else 0
    partial = DiskVerdict("ok", max_use, disks, kafka, room, needed, brokers)
    if any(partial.full_of_other_data(d) for d in partial.over):
        action = "free_disk"
    elif needed > brokers:
        action = "add_brokers"
    elif partial.over:
        action = "rebalance"
    else:
        action = "ok"
    return replace(partial, action=action)


# -- indicators -----------------------------------------------------------------------------------------------

def disk_findings(cluster: Cluster, max_use: float = 0.70, verdict: DiskVerdict | None = None) -> list[Finding]:
    """One finding per disk above ``max_use``, saying what the disk verdict (:func:`disk_verdict`) calls for."""
    verdict = verdict or disk_verdict(cluster, max_use)
    return [Finding("disk_use", d.subject, round(d.use, 4), max_use,
                    f"{d.subject}: log dirs {d.use:.1%} full (> {max_use:.0%}): {_gib(d.used_bytes)} used of "
                    f"{_gib(d.total_bytes)}, Kafka's data {_gib(d.kafka_bytes)}, other data {_gib(d.other_bytes)}; "
                    f"{verdict.remedy(d)}")
            for d in verdict.over]


def replica_findings(cluster: Cluster, limit: int = 4000) -> list[Finding]:
    return [Finding("replicas_per_broker", f"broker {b}", n, limit,
                    f"broker {b} holds {n} partition replicas (> {limit}); add brokers or reduce partitions")
            for b, n in sorted(cluster.replicas_per_broker().items()) if n > limit]


def idle_consumer_findings(cluster: Cluster) -> list[Finding]:
    """Groups with more members than the partitions of the topics they consume: the rest sit idle."""
    counts: dict[str, int] = {}
    for p in cluster.partitions:
        counts[p.topic] = counts.get(p.topic, 0) + 1
    out = []
    for g in cluster.groups:
        topics = sorted({x.topic for x in g.partitions})
        if not topics or g.members <= 0:
            continue
        partitions = sum(counts.get(t, 0) for t in topics)
        if g.members > partitions:
            out.append(Finding("idle_consumers", f"group {g.group_id}", g.members, partitions,
                               f"group {g.group_id}: {g.members} consumers for {partitions} partitions of "
                               f"{', '.join(topics)}: {g.members - partitions} idle; add partitions or remove "
                               "consumers"))
    return out


def lag_findings(history: Sequence[ReviewPoint], min_points: int = 2) -> list[Finding]:
    """Groups whose lag never fell and rose overall across the last reviews (>= ``min_points``)."""
    points = sorted(history, key=lambda p: p.taken_at)
    groups = sorted({g for p in points for g in p.lags})
    out = []
    for g in groups:
        series = [(p.taken_at, p.lags[g]) for p in points if g in p.lags]
        if len(series) < max(2, min_points):
            continue
        lags = [lag for _, lag in series]
        if all(b >= a for a, b in zip(lags, lags[1:])) and lags[-1] > lags[0]:
            seconds = series[-1][0] - series[0][0]
            rate = (lags[-1] - lags[0]) / seconds if seconds > 0 else float("inf")
            out.append(Finding("lag_growing", f"group {g}", lags[-1] - lags[0], 0,
                               f"group {g}: lag grew from {lags[0]:,} to {lags[-1]:,} records over {len(lags)} reviews "
                               f"({rate:.2f} records/s): consumers fall behind; add consumers (and partitions) "
                               "or speed up processing"))
    return out


def multiple_findings(cluster: Cluster, recommended: Mapping[str, int] | None = None) -> list[Finding]:
    """Topics whose partition count is not a multiple of the brokers. One number per topic: where the
    review recommends a partition count for the topic (``recommended``, a multiple of the brokers), the
    finding names that count, not another."""
    brokers = len(cluster.online_broker_ids) or len(cluster.brokers)
    out = []
    for topic in cluster.topics:
        n = len(cluster.partitions_of(topic))
        if brokers and n % brokers:
            count = (recommended or {}).get(topic)
            advice = (f"use a multiple of {brokers}: {count}, as recommended below" if count
                      else f"use a multiple of {brokers}, e.g. {math.ceil(n / brokers) * brokers}")
            out.append(Finding("partitions_not_multiple_of_brokers", f"topic {topic}", n, brokers,
                               f"topic {topic}: {n} partitions over {brokers} brokers leaves load uneven; {advice}"))
    return out


def _hot_cause(topic: str, skews: Mapping[str, Mapping[str, Any]], key_share: float) -> str:
    """What a hot partition's finding says of its cause: what the key-skew sample of ``topic`` found, or
    how to find out."""
    found = skews.get(topic)
    if found is None:
        return "is one key dominant? run the review with key_skew on for this topic"
    top = (found.get("top_keys") or [None])[0]
    if not top:
        return "the key-skew sample has no keyed records: the producers choose the partitions"
    said = f"the key-skew sample's hottest key {top['key']} holds {float(top['share']):.0%} of its records"
    if float(top["share"]) >= key_share:
        return f"{said}: change the key or split that key (see the key change recommended below)"
    return (f"{said}, under the {key_share:.0%} of a dominant key: the partition's keys together make it hot; "
            "more partitions spread them (see the what-if in the key-skew result)")


def hot_partition_findings(cluster: Cluster, parts: Sequence[PartitionThroughput] = (),
                           ratio: float = 2.0, skews: Sequence[Mapping[str, Any]] = (),
                           key_share: float = 0.2) -> tuple[list[Finding], list[str]]:
    """Hot partitions by records (the throughput window when it saw records, else records stored)
    and by bytes stored, each with what the key-skew sample of its topic says of the cause (``skews``).
    Returns the findings and the topics with no records at all (empty)."""
    by_topic = {str(k.get("topic")): k for k in skews}
    window: dict[str, dict[int, int]] = {}
    for p in parts:
        window.setdefault(p.topic, {})[p.partition] = p.records
    findings, empty = [], []
    for topic in cluster.topics:
        ps = cluster.partitions_of(topic)
        stored = {p.partition: p.records or 0 for p in ps}
        recent = window.get(topic, {})
        if not any(stored.values()) and not any(recent.values()):
            empty.append(topic)
            continue
        measures = []
        if any(recent.values()):
            measures.append(("records/s window", {p.partition: recent.get(p.partition, 0) for p in ps}))
        else:
            measures.append(("records stored", stored))
        if all(p.size_bytes is not None for p in ps) and any(p.size_bytes for p in ps):
            measures.append(("bytes stored", {p.partition: p.size_bytes or 0 for p in ps}))
        if len(ps) < 2:
            continue
        for basis, values in measures:
            mean = sum(values.values()) / len(values)
            hot, top = max(values.items(), key=lambda kv: (kv[1], -kv[0]))
            if mean > 0 and top / mean >= ratio:
                amounts = ((_gib(top), _gib(mean)) if basis == "bytes stored" else (f"{top:,}", f"{mean:,.1f}"))
                findings.append(Finding("hot_partition", f"{topic}-{hot}", round(top / mean, 4), ratio,
                                        f"partition {topic}-{hot} carries {top / mean:.2f} x the mean by {basis} "
                                        f"({amounts[0]} vs mean {amounts[1]}); "
                                        f"{_hot_cause(topic, by_topic, key_share)}"))
    return findings, empty


# -- recommendations ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Recommendation:
    """What to change, the rule (formula) and the numbers that went into it."""

    kind: str
    subject: str
    value: float
    rule: str
    inputs: Mapping[str, Any]
    message: str


def round_up_to_multiple(n: int, step: int) -> int:
    return max(step, math.ceil(n / step) * step)


def _positive(name: str, value: float | None, fix: str) -> float:
    if value is None or not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
        raise CapacityError(f"{name} is {value!r}; it must be a number above 0: {fix}")
    return float(value)


def recommend_partitions(topic: str, target_per_s: float, per_consumer_per_s: float, max_consumers: int,
                         brokers: int, *, current: int | None = None, unit: str = "records/s") -> Recommendation:
    """partitions = max(ceil(target / per consumer), max consumers), rounded up to a multiple of brokers."""
    target = _positive(f"target throughput of {topic}", target_per_s,
                       f"give the peak {unit} the topic must sustain, e.g. 2x today's")
    per_consumer = _positive(f"per-consumer throughput of {topic}", per_consumer_per_s,
                             f"give the {unit} one consumer handles, measured in a load test")
    if brokers < 1:
        raise CapacityError(f"broker count is {brokers}; a topic needs at least 1 broker")
    if max_consumers < 0:
        raise CapacityError(f"max consumers of {topic} is {max_consumers}; give 0 or more")
    by_throughput = math.ceil(target / per_consumer)
    needed = max(by_throughput, max_consumers)
    value = round_up_to_multiple(needed, brokers)
    change = "" if current is None else (f"; today {current}" + (" (enough)" if current >= value else ""))
    return Recommendation(
        "partitions", f"topic {topic}", value,
        "max(ceil(target / per_consumer), max_consumers) rounded up to a multiple of brokers",
        {"target_per_s": target, "per_consumer_per_s": per_consumer, "max_consumers": max_consumers,
         "brokers": brokers, "by_throughput": by_throughput, "current": current, "unit": unit},
        f"topic {topic}: {value} partitions = max(ceil({target:g} / {per_consumer:g}) = {by_throughput}, "
        f"{max_consumers} consumers) rounded up to a multiple of {brokers} brokers{change}")


def recommend_brokers(total_bytes: int, disk_per_broker_bytes: int, *, throughput_bytes_per_s: float = 0.0,
                      per_broker_bytes_per_s: float | None = None, max_disk_use: float = 0.70,
                      current: int | None = None, disk: DiskVerdict | None = None,
                      load: LoadNeeds | None = None) -> Recommendation:
    """brokers = max(ceil(bytes / room per broker), ceil(throughput / per-broker capacity), by CPU, by network, 1),
    the last two from the brokers' load (:func:`kafkaops.capacity.load.load_needs`) when it was measured.
    ``total_bytes`` counts every replica (what the disks hold). The room per broker is
    ``disk_per_broker_bytes x max_disk_use``, or, given the review's :class:`DiskVerdict`, the verdict's
    (other data on the disks taken off), and the message then states the verdict."""
    size = _positive("disk per broker", disk_per_broker_bytes, "give each broker's log-dir capacity in bytes")
    if total_bytes < 0:
        raise CapacityError(f"total bytes is {total_bytes}; give the bytes all replicas hold (0 or more)")
    if not 0 < max_disk_use <= 1:
        raise CapacityError(f"max disk use is {max_disk_use}; give a share in (0, 1], e.g. 0.7")
    room = size * max_disk_use if disk is None else disk.room_per_broker_bytes
    by_disk = disk.brokers_needed if disk is not None else math.ceil(total_bytes / (size * max_disk_use))
    by_throughput = 0
    if per_broker_bytes_per_s is not None:
        capacity = _positive("per-broker throughput capacity", per_broker_bytes_per_s,
                             "give the bytes/s one broker sustains (produce plus replication), from a load test")
        by_throughput = math.ceil(throughput_bytes_per_s / capacity)
    by_cpu = load.by_cpu if load is not None else None
    by_network = load.by_network if load is not None else None
    value = max(by_disk, by_throughput, by_cpu or 0, by_network or 0, 1)
    needs = {"disk": by_disk, "throughput": by_throughput, "CPU": by_cpu or 0, "network": by_network or 0}
    largest = [name for name, n in needs.items() if n == value and n > 0] or ["disk"]
    add = None if current is None else max(0, value - current)
    action = None if disk is None else disk.action
    if current is None:
        tail = ""
    elif add:
        tail = f"; today {current}: add {add}"
    else:
        tail = f"; today {current}: " + ("add none, more would not help" if action == "free_disk" else "enough")
    if disk is not None and action in ("free_disk", "rebalance") and largest == ["disk"]:
        tail += f". {disk.text}"
    by_disk_text = (f"ceil({_gib(total_bytes)} / {_gib(room)} room per broker) = {by_disk}" if room
                    else "no disk has room for Kafka below the limit")
    by_throughput_text = ("no per-broker throughput given" if per_broker_bytes_per_s is None else
                          f"ceil({_gib(throughput_bytes_per_s)}/s / {_gib(per_broker_bytes_per_s)}/s) = {by_throughput}")
    load_text = "" if load is None else f"; {load.text()}"
    return Recommendation(
        "brokers", "cluster", value,
        "max(ceil(bytes / room_per_broker), ceil(throughput / per_broker_throughput), ceil(sum CPU p95 / max_cpu), "
        "ceil(sum network p95 / (max_network x capacity))); room_per_broker = disk x max_disk_use - other data on "
        "the disk",
        {"total_bytes": total_bytes, "disk_per_broker_bytes": size, "max_disk_use": max_disk_use,
         "room_per_broker_bytes": room, "by_disk": by_disk, "throughput_bytes_per_s": throughput_bytes_per_s,
         "per_broker_bytes_per_s": per_broker_bytes_per_s, "by_throughput": by_throughput, "current": current,
         "add": add, "disk_action": None if disk is None else disk.action, "by_cpu": by_cpu,
         "by_network": by_network, "largest": largest, "load": None if load is None else dict(load.inputs)},
        f"{value} broker(s): by disk {by_disk_text}; by throughput {by_throughput_text}{load_text}{tail}")


def recommend_key_change(skew: Mapping[str, Any], share_threshold: float = 0.2) -> Recommendation | None:
    """A key change when the hottest key of a key-skew result (``kafkaops.capacity.skew``) holds >= the threshold."""
    top = skew.get("top_keys") or []
    if not top or not skew.get("records"):
        return None
    hot = top[0]
    if hot["share"] < share_threshold:
        return None
    topic, n = skew.get("topic"), skew.get("partitions")
    inputs: dict[str, Any] = {"key": hot["key"], "share": hot["share"], "records": hot["records"],
                              "sample_records": skew["records"], "threshold": share_threshold, "partitions": n}
    hint = "e.g. a composite key (key + a sub-id) or split the hot key"
    candidate = skew.get("candidate")
    if candidate and candidate.get("records"):
        inputs["candidate_field"] = candidate["field"]
        inputs["candidate_top_share"] = candidate["top_share"]
        inputs["candidate_max_mean"] = candidate["max_mean_ratio"]
        hint = (f"field {candidate['field']!r} as key would give a top share of {candidate['top_share']:.1%} and "
                f"max/mean {candidate['max_mean_ratio']:.2f} over {n} partitions")
    return Recommendation(
        "key_change", f"topic {topic}", hot["share"], "top key share >= key_share threshold", inputs,
        f"topic {topic}: key {hot['key']!r} carries {hot['share']:.1%} of {skew['records']} sampled records "
        f"(>= {share_threshold:.0%}); more partitions cannot spread one key: {hint}")


# -- the review ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TopicTarget:
    """Throughput a topic must sustain and what one consumer handles (same unit)."""

    topic: str
    target_per_s: float
    per_consumer_per_s: float
    max_consumers: int | None = None
    unit: str = "records/s"


@dataclass(frozen=True)
class CapacityTargets:
    topics: tuple[TopicTarget, ...] = ()
    per_broker_bytes_per_s: float | None = None
    disk_per_broker_bytes: int | None = None


@dataclass(frozen=True)
class BrokerLoad:
    broker: int
    replicas: int
    leaders: int
    bytes: int
    disk_total_bytes: int | None = None
    disk_usable_bytes: int | None = None

    @property
    def disk_use(self) -> float | None:
        if not self.disk_total_bytes or self.disk_usable_bytes is None:
            return None
        return (self.disk_total_bytes - self.disk_usable_bytes) / self.disk_total_bytes


@dataclass(frozen=True)
class PartitionLag:
    group: str
    topic: str
    partition: int
    lag: int


@dataclass(frozen=True)
class Review:
    """A capacity review: findings, recommendations, per-broker load, throughput and lag."""

    cluster_id: str | None
    taken_at: float
    previous_taken_at: float | None
    findings: tuple[Finding, ...]
    recommendations: tuple[Recommendation, ...]
    broker_load: tuple[BrokerLoad, ...]
    throughput: tuple[PartitionThroughput, ...]
    lag: tuple[PartitionLag, ...]
    group_lag: Mapping[str, int] = field(default_factory=dict)
    empty_topics: tuple[str, ...] = ()
    history_points: int = 0
    disk: DiskVerdict | None = None
    load: LoadWindow | None = None
    """The brokers' load over the window the load rules read (None: the review was not given one)."""
    load_thresholds: LoadThresholds | None = None
    skipped: Mapping[str, str] = field(default_factory=dict)
    """The load rules not checked, each with why (no Prometheus, a metric missing, no capacity stated)."""
    brokers_verdict: str | None = None
    """What the broker-count recommendation and the load findings call for (:func:`verdict_of`)."""
    verdict_action: str | None = None

    @property
    def verdict(self) -> str | None:
        """What the disks, the load and the brokers call for in a sentence or two (findings and recommendations
        agree with it)."""
        return self.brokers_verdict or (None if self.disk is None else self.disk.text)

    @property
    def verdict_ok(self) -> bool:
        """Whether the verdict asks for nothing (the page shows it green)."""
        action = self.verdict_action or (None if self.disk is None else self.disk.action)
        return action == "ok"

    def rules_fired(self) -> set[str]:
        return {f.rule for f in self.findings}

    def recommendation(self, kind: str) -> Recommendation | None:
        return next((r for r in self.recommendations if r.kind == kind), None)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["throughput"] = [p.to_dict() for p in self.throughput]
        data["broker_load"] = [{**asdict(b), "disk_use": b.disk_use} for b in self.broker_load]
        data["disk"] = None if self.disk is None else self.disk.to_dict()
        data["load"] = None if self.load is None else self.load.to_dict()
        data["load_thresholds"] = None if self.load_thresholds is None else asdict(self.load_thresholds)
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, indent=1)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Review:
        try:
            return cls(
                cluster_id=data.get("cluster_id"), taken_at=data["taken_at"],
                previous_taken_at=data.get("previous_taken_at"),
                findings=tuple(Finding(**f) for f in data.get("findings", ())),
                recommendations=tuple(Recommendation(**r) for r in data.get("recommendations", ())),
                broker_load=tuple(BrokerLoad(**{k: v for k, v in b.items() if k != "disk_use"})
                                  for b in data.get("broker_load", ())),
                throughput=tuple(PartitionThroughput(**{k: v for k, v in p.items()
                                                        if k not in ("records_per_s", "bytes_per_s")})
                                 for p in data.get("throughput", ())),
                lag=tuple(PartitionLag(**x) for x in data.get("lag", ())),
                group_lag=dict(data.get("group_lag") or {}), empty_topics=tuple(data.get("empty_topics", ())),
                history_points=int(data.get("history_points", 0)),
                disk=DiskVerdict.from_dict(data["disk"]) if data.get("disk") else None,
                load=LoadWindow.from_dict(data["load"]) if data.get("load") else None,
                load_thresholds=LoadThresholds(**data["load_thresholds"]) if data.get("load_thresholds") else None,
                skipped=dict(data.get("skipped") or {}), brokers_verdict=data.get("brokers_verdict"),
                verdict_action=data.get("verdict_action"))
        except (KeyError, TypeError, ValueError) as err:
            raise CapacityError(f"cannot read a review from this dict: {err}; expected Review.to_dict()") from err

    @classmethod
    def from_json(cls, text: str) -> Review:
        return cls.from_dict(json.loads(text))


#: The load rules whose finding says a broker cannot keep up (a hot broker is its own finding).
PRESSURE_RULES = ("cpu", "network", "request_handler_idle", "produce_p99")


def verdict_of(disk: DiskVerdict | None, brokers: Recommendation | None, load: Sequence[Finding],
               measured: int = 0, *, brokers_total: int | None = None) -> tuple[str, str] | None:
    """The review's one verdict, from the broker-count recommendation (the largest of the disk, throughput, CPU
    and network needs) and the load findings, so that it never says "enough" beside a recommendation to add or
    beside a broker past its load limits:

    * more brokers needed: "Add brokers", naming the need that decides (the disk's own words when it is the disk);
    * enough brokers, but some brokers past a load limit (:data:`PRESSURE_RULES`) or hot: "Rebalance", naming
      them and their rules (the others have room; more brokers would not move the load off them);
    * enough brokers, every one of the ``measured`` brokers past a limit that is not CPU or network (request
      handlers, Produce latency): "Look into the brokers", as more brokers are not what the numbers ask for (when
      fewer than the cluster's ``brokers_total`` were measured, it says every measured one, of how many);
    * otherwise the disk verdict (free disk, rebalance a full disk, or enough).

    Returns the action (``add_brokers``, ``rebalance``, ``look_into``, or the disk verdict's: ``free_disk``,
    ``rebalance``, ``add_brokers``, ``ok``) and the text; None: neither a recommendation nor a disk verdict."""
    add = int(brokers.inputs.get("add") or 0) if brokers is not None else 0
    largest = list(brokers.inputs.get("largest") or ["disk"]) if brokers is not None else ["disk"]
    also = f" Also: {disk.text}" if disk is not None and disk.action == "free_disk" else ""
    blind = "".join(f" Not counted in the load: {f.subject} (no series in Prometheus; see the findings)."
                    for f in load if f.rule == "load_unobserved")
    if brokers is not None and add > 0:
        if largest == ["disk"] and disk is not None and disk.action == "add_brokers":
            return disk.action, disk.text + blind
        current = brokers.inputs.get("current")
        return "add_brokers", (f"Add brokers: the {' and '.join(n for n in largest)} need{'s' if len(largest) == 1 else ''} "
                f"{brokers.value:g} broker(s), today {current}: add {add} (each need with its formula in the "
                f"recommendation).{also}{blind}")
    pressed: dict[str, list[str]] = {}
    for f in load:
        if f.rule in PRESSURE_RULES or f.rule == "hot_broker":
            pressed.setdefault(f.subject, []).append(f.rule.replace("_", " "))
    measured_only = " for the load Prometheus shows" if blind else ""
    enough = "" if brokers is None else (f" The brokers together are enough{measured_only}: {brokers.value:g} needed "
                                         f"by the {' and '.join(largest)}, today {brokers.inputs.get('current')}.")
    if pressed:
        names = ", ".join(f"{b} ({', '.join(dict.fromkeys(rules))})" for b, rules in sorted(pressed.items()))
        if measured and len(pressed) >= measured:
            every = ("every broker" if brokers_total is None or measured >= brokers_total
                     else f"every broker Prometheus shows ({measured} of {brokers_total})")
            return "look_into", (f"Look into the brokers: {every} is past a load limit ({names}) though the CPU, "
                    f"network and disk needs ask for no more brokers; see the findings.{enough}{also}{blind}")
        return "rebalance", (f"Rebalance: {names} {'is' if len(pressed) == 1 else 'are'} past {'its' if len(pressed) == 1 else 'their'} "
                f"load limits while the other brokers have room; run kafka_reassign (operation rebalance) to move "
                f"leaders and partitions off {'it' if len(pressed) == 1 else 'them'}, more brokers would not."
                f"{enough}{also}{blind}")
    if disk is not None:
        return disk.action, disk.text + blind
    return None if brokers is None else ("ok", f"Brokers are enough: {brokers.message}.{blind}")


def broker_load(cluster: Cluster) -> tuple[BrokerLoad, ...]:
    replicas, leaders, size = cluster.replicas_per_broker(), cluster.leaders_per_broker(), cluster.bytes_per_broker()
    return tuple(BrokerLoad(b.id, replicas.get(b.id, 0), leaders.get(b.id, 0), size.get(b.id, 0),
                            b.disk_total_bytes, b.disk_usable_bytes) for b in cluster.brokers)


def max_consumers_of(cluster: Cluster, topic: str) -> int:
    """The largest member count among the groups consuming ``topic`` (0 when none)."""
    return max((g.members for g in cluster.groups if any(x.topic == topic for x in g.partitions)), default=0)


def is_kafkaops_own(subject: str, cluster: Cluster) -> bool:
    """Whether a finding's ``subject`` (``topic T``, ``group G``, ``T-p``) is an object kafkaops made
    (:mod:`kafkaops.platform.own`): its dead-letter topics and its groups are not the operator's to act on."""
    kind, _, name = subject.partition(" ")
    topics = own.own_topics(cluster.topics)
    if kind == "group":
        return own.is_own_group(name)
    if kind == "topic":
        return name in topics
    return subject.rsplit("-", 1)[0] in topics  # a partition: topic-p


def review(current: Cluster, history: Sequence[ReviewPoint] = (), *, targets: CapacityTargets = CapacityTargets(),
           skews: Sequence[Mapping[str, Any]] = (), thresholds: Thresholds = Thresholds(),
           load: LoadWindow | None = None, load_thresholds: LoadThresholds = LoadThresholds()) -> Review:
    """Review ``current`` against the earlier ``history`` points (the current one is added when missing) and the
    brokers' ``load`` (its rules and needs: :mod:`kafkaops.capacity.load`; its rules skipped, with why, when it
    could not be read)."""
    now = ReviewPoint.of(current)
    points = sorted((p for p in history if p.taken_at != now.taken_at), key=lambda p: p.taken_at)
    earlier = [p for p in points if p.taken_at < now.taken_at]
    previous = earlier[-1] if earlier else None
    parts = throughput(previous, now) if previous is not None else ()
    brokers = len(current.online_broker_ids) or len(current.brokers)
    verdict = disk_verdict(current, thresholds.max_disk_use, disk_per_broker_bytes=targets.disk_per_broker_bytes,
                           current=brokers)
    findings: list[Finding] = []
    findings += disk_findings(current, thresholds.max_disk_use, verdict)
    findings += replica_findings(current, thresholds.max_replicas_per_broker)
    findings += idle_consumer_findings(current)
    recs: list[Recommendation] = []
    for t in targets.topics:
        consumers = t.max_consumers if t.max_consumers is not None else max_consumers_of(current, t.topic)
        existing = len(current.partitions_of(t.topic)) if t.topic in current.topics else None
        recs.append(recommend_partitions(t.topic, t.target_per_s, t.per_consumer_per_s, consumers, brokers,
                                         current=existing, unit=t.unit))
    findings += lag_findings([*earlier, now], thresholds.min_lag_points)
    findings += multiple_findings(current, {t.topic: int(r.value) for t, r in zip(targets.topics, recs)})
    hot, empty = hot_partition_findings(current, parts, thresholds.hot_partition_ratio, skews, thresholds.key_share)
    findings += hot
    findings = [f for f in findings if not is_kafkaops_own(f.subject, current)]
    skipped: dict[str, str] = {}
    needs = None
    if load is not None:
        replicas = {f"broker {b}": n for b, n in current.replicas_per_broker().items()}
        loaded, skipped = load_findings(load, load_thresholds, replicas)
        findings += loaded + unobserved_findings(load, [b.id for b in current.brokers])
        needs = load_needs(load, load_thresholds, brokers=len(current.brokers))
    disk = targets.disk_per_broker_bytes or min((b.disk_total_bytes for b in current.brokers if b.disk_total_bytes),
                                                default=None)
    if disk:
        ingress = sum(p.bytes_per_s or 0.0 for p in parts)
        recs.append(recommend_brokers(sum(current.bytes_per_broker().values()), disk,
                                      throughput_bytes_per_s=ingress,
                                      per_broker_bytes_per_s=targets.per_broker_bytes_per_s,
                                      max_disk_use=thresholds.max_disk_use, current=brokers, disk=verdict,
                                      load=needs))
    for skew in skews:
        rec = recommend_key_change(skew, thresholds.key_share)
        if rec is not None:
            recs.append(rec)
    said = verdict_of(verdict if (verdict.disks or disk) else None, next((r for r in recs if r.kind == "brokers"), None),
                      [f for f in findings if f.rule in RULES_OF_LOAD or f.rule == "load_unobserved"], len(load.brokers()) if load is not None else 0,
                      brokers_total=len(current.brokers))
    theirs = [g for g in current.groups if not own.is_own_group(g.group_id)]  # kafkaops' markers are not lag
    lag = tuple(PartitionLag(g.group_id, x.topic, x.partition, x.lag or 0) for g in theirs for x in g.partitions)
    return Review(cluster_id=current.cluster_id, taken_at=now.taken_at,
                  previous_taken_at=previous.taken_at if previous else None, findings=tuple(findings),
                  recommendations=tuple(recs), broker_load=broker_load(current), throughput=parts, lag=lag,
                  group_lag={g.group_id: g.total_lag for g in theirs}, empty_topics=tuple(empty),
                  history_points=len(earlier) + 1, disk=verdict if (verdict.disks or disk) else None,
                  load=load, load_thresholds=load_thresholds if load is not None else None, skipped=skipped,
                  brokers_verdict=said[1] if said else None, verdict_action=said[0] if said else None)
