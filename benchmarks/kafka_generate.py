"""Kafka's own assignment algorithm, as ``kafka-reassign-partitions --generate`` runs it.

A faithful Python port of ``AdminUtils.assignReplicasToBrokers`` (rack-unaware and rack-aware
variants, random start index and replica shift) and of ``--generate``'s per-topic use of it:
every topic is assigned afresh over the target brokers, with the replication factor of its first
partition. Kafka draws from an unseeded ``java.util.Random``; here a seeded ``random.Random``
stands in, so runs repeat.
"""
from __future__ import annotations

import random
from collections.abc import Iterator, Mapping, Sequence

from kafkaops.model import Broker, Cluster


def _replica_index(first: int, shift: int, j: int, n: int) -> int:
    return (first + 1 + (shift + j) % (n - 1)) % n


def _rounds(n_partitions: int, n: int, rand: random.Random, fixed_start: int,
            start_partition: int) -> Iterator[tuple[int, int, int]]:
    """(partition id, first replica index, replica shift) as both of Kafka's variants step them:
    a random start and shift, the shift growing by one after every round of ``n`` partitions."""
    start = fixed_start if fixed_start >= 0 else rand.randrange(n)
    shift = fixed_start if fixed_start >= 0 else rand.randrange(n)
    pid = max(0, start_partition)
    for _ in range(n_partitions):
        if pid > 0 and pid % n == 0:
            shift += 1
        yield pid, (pid + start) % n, shift
        pid += 1


def assign_rack_unaware(n_partitions: int, rf: int, brokers: Sequence[int], rand: random.Random,
                        fixed_start: int = -1, start_partition: int = -1) -> dict[int, list[int]]:
    n = len(brokers)
    return {pid: [brokers[first]] + [brokers[_replica_index(first, shift, j, n)] for j in range(rf - 1)]
            for pid, first, shift in _rounds(n_partitions, n, rand, fixed_start, start_partition)}


def rack_alternated(rack_of: Mapping[int, str]) -> list[int]:
    """Brokers taking turns by rack (racks sorted, brokers sorted within a rack)."""
    by_rack: dict[str, list[int]] = {}
    for b, r in sorted(rack_of.items()):
        by_rack.setdefault(r, []).append(b)
    iters = {r: iter(bs) for r, bs in by_rack.items()}
    racks = sorted(iters)
    result: list[int] = []
    i = 0
    while len(result) < len(rack_of):
        nxt = next(iters[racks[i]], None)
        if nxt is not None:
            result.append(nxt)
        i = (i + 1) % len(racks)
    return result


def assign_rack_aware(n_partitions: int, rf: int, rack_of: Mapping[int, str], rand: random.Random,
                      fixed_start: int = -1, start_partition: int = -1) -> dict[int, list[int]]:
    num_racks = len(set(rack_of.values()))
    arranged = rack_alternated(rack_of)
    n = len(arranged)
    result = {}
    for pid, first, shift in _rounds(n_partitions, n, rand, fixed_start, start_partition):
        leader = arranged[first]
        replicas = [leader]
        racks_with, brokers_with = {rack_of[leader]}, {leader}
        k = 0
        for _ in range(rf - 1):
            while True:
                broker = arranged[_replica_index(first, shift * num_racks, k, n)]
                rack = rack_of[broker]
                k += 1
                if ((rack not in racks_with or len(racks_with) == num_racks)
                        and (broker not in brokers_with or len(brokers_with) == n)):
                    replicas.append(broker)
                    racks_with.add(rack)
                    brokers_with.add(broker)
                    break
        result[pid] = replicas
    return result


def assign_replicas_to_brokers(brokers: Sequence[Broker], n_partitions: int, rf: int,
                               rand: random.Random) -> dict[int, list[int]]:
    """``AdminUtils.assignReplicasToBrokers`` over brokers sorted by id."""
    brokers = sorted(brokers)
    if rf > len(brokers):
        raise ValueError(f"replication factor {rf} larger than available brokers {len(brokers)}")
    if all(b.rack is None for b in brokers):
        return assign_rack_unaware(n_partitions, rf, [b.id for b in brokers], rand)
    if any(b.rack is None for b in brokers):
        raise ValueError("not all brokers have rack information")
    return assign_rack_aware(n_partitions, rf, {b.id: b.rack for b in brokers}, rand)


def generate(cluster: Cluster, brokers: Sequence[Broker], rand: random.Random) -> dict[tuple[str, int], tuple[int, ...]]:
    """What ``--generate`` proposes for every partition of ``cluster`` on ``brokers``."""
    proposal = {}
    by_topic: dict[str, list] = {}
    for p in cluster.partitions:
        by_topic.setdefault(p.topic, []).append(p)
    for topic, parts in by_topic.items():
        assigned = assign_replicas_to_brokers(brokers, len(parts), parts[0].replication_factor, rand)
        for p in parts:
            proposal[(topic, p.partition)] = tuple(assigned[p.partition])
    return proposal


def replica_moves(cluster: Cluster, proposal: Mapping[tuple[str, int], Sequence[int]]) -> int:
    """Replicas the proposal places on a broker that did not hold them."""
    return sum(len(set(proposal[p.key]) - set(p.replicas)) for p in cluster.partitions)
