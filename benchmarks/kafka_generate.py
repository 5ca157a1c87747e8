"""Kafka's own assignment algorithm, as Kafka 4.3's ``kafka-reassign-partitions --generate`` runs it.

What the real tool does (read from the 4.3.1 jars with ``javap -c``): ``ReassignPartitionsCommand``
holds one ``StripedReplicaPlacer(new Random())`` for the whole run. ``calculateAssignment`` groups
the current assignment by topic (a ``HashMap``) and, per topic, calls ``place(new PlacementSpec(0,
partitions, rf of the topic's first entry), describer)`` where the describer lists the target
brokers as ``UsableBroker(id, rack, fenced=false)`` (rack empty with ``--disable-rack-aware``).
Partition ``i`` gets the ``i``-th placement. This is the KRaft controller's placer; the old
``AdminUtils.assignReplicasToBrokers`` is no longer used.

The placer, ported here (4.3.1's version, without the later "previous offset" hints):

- racks are keyed by rack name; each rack's brokers are sorted and get a random start offset
  (racks initialised in ``HashMap`` order), then the rack names are sorted and the rack list gets
  a random start offset;
- a partition takes its leader from the rack at the rack offset (the next rack that still has a
  broker this round), then one replica from each following rack in turn, skipping the leader's
  rack once; every rack hands out brokers round-robin from its own offset, which advances by one
  the first time the rack is asked in a partition ("epoch");
- the rack offset advances by one per partition; after as many partitions as brokers the rack
  order and every rack's broker list are shuffled (``Collections.shuffle``) and the round restarts.

With all brokers unfenced the fenced lists are empty and draw nothing, so they are left out.
:class:`JavaRandom` is ``java.util.Random`` bit for bit, so a seeded run here repeats a seeded
run of the Java class exactly; the real tool's ``Random`` is unseeded, so
:func:`topic_outcomes` enumerates every sequence of draws instead, to say whether a real proposal
is one the algorithm can produce.

:func:`run_tool` runs the real thing instead of the port: the tool's own ``calculateAssignment``
from the tools jar (``KafkaGenerate.java`` beside this file, in one JVM for many clusters), for a
benchmark's same-run reference in moves and in time.
"""
from __future__ import annotations

import subprocess
from collections import defaultdict
from collections.abc import Hashable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Protocol

from kafkaops.model import Broker, Cluster
from kafkaops.platform.paths import jar_dir

TOOL_SOURCE = Path(__file__).with_name("KafkaGenerate.java")

_MULTIPLIER, _ADDEND, _MASK = 0x5DEECE66D, 0xB, (1 << 48) - 1
_HASHMAP_CAPACITY, _LOAD_FACTOR = 16, 0.75

Placement = tuple[tuple[int, ...], ...]


class Draws(Protocol):
    def next_int(self, bound: int) -> int: ...


class JavaRandom:
    """``java.util.Random``: the 48-bit linear congruential generator and its ``nextInt(bound)``."""

    def __init__(self, seed: int) -> None:
        self._seed = (seed ^ _MULTIPLIER) & _MASK

    def _next(self, bits: int) -> int:
        self._seed = (self._seed * _MULTIPLIER + _ADDEND) & _MASK
        return self._seed >> (48 - bits)

    def next_int(self, bound: int) -> int:
        if bound <= 0:
            raise ValueError(f"bound must be positive, got {bound}")
        r = self._next(31)
        m = bound - 1
        if bound & m == 0:  # a power of two: the high bits
            return (bound * r) >> 31
        u = r
        while True:  # reject the last, incomplete block (Java's int overflow test)
            r = u % bound
            if u - r + m < 1 << 31:
                return r
            u = self._next(31)


def java_shuffle(items: list, rand: Draws) -> None:
    """``Collections.shuffle(list, random)`` on a random-access list, in place."""
    for i in range(len(items), 1, -1):
        j = rand.next_int(i)
        items[i - 1], items[j] = items[j], items[i - 1]


def java_string_hash(s: str | None) -> int:
    """``String.hashCode()`` (``Optional.hashCode()`` of an empty rack is 0), as an unsigned int."""
    data = (s or "").encode("utf-16-be")
    h = 0
    for k in range(0, len(data), 2):  # UTF-16 code units, as Java's chars
        h = (31 * h + (data[k] << 8 | data[k + 1])) & 0xFFFFFFFF
    return h


def hashmap_order(keys: Sequence[Hashable], hash_of=java_string_hash) -> list:
    """The order a ``java.util.HashMap`` (default capacity and load factor) iterates ``keys``
    inserted in this order: by bucket, insertion order within one (treeified buckets aside)."""
    capacity = _HASHMAP_CAPACITY
    while len(keys) > capacity * _LOAD_FACTOR:
        capacity *= 2

    def bucket(key: Hashable) -> int:
        h = hash_of(key)
        return (h ^ (h >> 16)) & (capacity - 1)

    return sorted(keys, key=bucket)  # stable: insertion order within a bucket


class _BrokerList:
    """``StripedReplicaPlacer.BrokerList``: brokers handed out round-robin, once each per epoch."""

    def __init__(self) -> None:
        self.brokers: list[int] = []
        self.index = 0
        self.offset = 0
        self.epoch = 0

    def initialize(self, rand: Draws) -> None:
        if self.brokers:
            self.brokers.sort()
            self.offset = rand.next_int(len(self.brokers))

    def next(self, epoch: int) -> int:
        n = len(self.brokers)
        if not n:
            return -1
        if self.epoch != epoch:
            self.epoch, self.index, self.offset = epoch, 0, (self.offset + 1) % n
        if self.index >= n:
            return -1
        broker = self.brokers[(self.index + self.offset) % n]
        self.index += 1
        return broker


class _RackList:
    """``StripedReplicaPlacer.RackList`` over unfenced brokers."""

    def __init__(self, rand: Draws, brokers: Sequence[tuple[int, str | None]]) -> None:
        self.rand = rand
        self.racks: dict[str | None, _BrokerList] = {}
        for broker_id, rack in brokers:
            self.racks.setdefault(rack, _BrokerList()).brokers.append(broker_id)
        self.hash_order = hashmap_order(list(self.racks))
        for rack in self.hash_order:
            self.racks[rack].initialize(rand)
        self.names = sorted(self.racks, key=lambda r: (r is not None, r or ""))  # empty rack first
        self.brokers = len(brokers)
        self.epoch = 0
        self.offset = rand.next_int(len(self.names)) if self.names else 0

    def shuffle(self) -> None:
        java_shuffle(self.names, self.rand)
        for rack in self.hash_order:
            java_shuffle(self.racks[rack].brokers, self.rand)

    def place(self, rf: int) -> tuple[int, ...]:
        if self.epoch == self.brokers and self.brokers > 1:
            self.shuffle()
            self.epoch = 0
        if self.offset == len(self.names):
            self.offset = 0
        count = len(self.names)
        first = self.offset
        while True:  # the leader: the first rack from the offset with a broker left this epoch
            leader = self.racks[self.names[first]].next(self.epoch)
            if leader >= 0:
                break
            first = (first + 1) % count
        replicas = [leader]
        at = self.offset
        for _ in range(1, rf):
            while True:  # the next rack in turn, passing over the leader's rack once
                if at == first:
                    first, got = -1, -1
                else:
                    got = self.racks[self.names[at]].next(self.epoch)
                at = (at + 1) % count
                if got >= 0:
                    break
            replicas.append(got)
        self.epoch += 1
        self.offset += 1
        return tuple(replicas)


def _members(brokers: Sequence[Broker], rack_aware: bool) -> list[tuple[int, str | None]]:
    members = [(b.id, b.rack if rack_aware else None) for b in brokers]
    if rack_aware and any(r is None for _, r in members) and any(r is not None for _, r in members):
        raise ValueError("Not all brokers have rack information; pass rack_aware=False "
                         "(the tool's --disable-rack-aware)")
    return members


def place_topic(brokers: Sequence[Broker], partitions: int, rf: int, rand: Draws, *,
                rack_aware: bool = True) -> Iterator[tuple[int, ...]]:
    """``StripedReplicaPlacer.place`` for one topic: partition 0's replicas first. Lazy, so a
    caller can stop at the first partition it does not want (:func:`topic_outcomes`)."""
    if rf <= 0:
        raise ValueError(f"Invalid replication factor {rf}: the replication factor must be positive.")
    if rf > len(brokers):
        raise ValueError(f"The target replication factor of {rf} cannot be reached because only "
                         f"{len(brokers)} broker(s) are registered.")
    racks = _RackList(rand, _members(brokers, rack_aware))
    for _ in range(partitions):
        yield racks.place(rf)


def generate(cluster: Cluster, brokers: Sequence[Broker], rand: Draws, *,
             rack_aware: bool = True) -> dict[tuple[str, int], tuple[int, ...]]:
    """What ``--generate`` proposes for every partition of ``cluster`` on ``brokers``: topics in
    ``HashMap`` order of their names (one generator for the run, as the tool's static placer),
    each placed afresh with its partition 0's replication factor (Kafka takes its first map
    entry's; the same when a topic's partitions share one RF)."""
    by_topic: dict[str, list] = defaultdict(list)
    for p in cluster.partitions:
        by_topic[p.topic].append(p)
    proposal = {}
    for topic in hashmap_order(sorted(by_topic)):
        parts = sorted(by_topic[topic], key=lambda p: p.partition)
        for p, replicas in zip(parts, place_topic(brokers, len(parts), parts[0].replication_factor, rand,
                                                  rack_aware=rack_aware)):
            proposal[(topic, p.partition)] = replicas
    return proposal


class _OutOfDraws(Exception):
    def __init__(self, bound: int) -> None:
        super().__init__(bound)
        self.bound = bound


class Scripted:
    """Hands out the given draws, then stops the run to ask for the next one."""

    def __init__(self, draws: Sequence[int]) -> None:
        self.draws = draws
        self.used = 0

    def next_int(self, bound: int) -> int:
        if self.used == len(self.draws):
            raise _OutOfDraws(bound)
        value = self.draws[self.used]
        self.used += 1
        return value


def topic_outcomes(brokers: Sequence[Broker], partitions: int, rf: int, *, rack_aware: bool = True,
                   want: Sequence[Sequence[int]] | None = None, limit: int = 2_000_000) -> dict[Placement, float]:
    """Every placement the placer can give one topic, with its probability (each draw of
    ``nextInt(n)`` uniform, as Java's is), found by running it on every sequence of draws. With
    ``want``, only the sequences that produce ``want`` are followed (a run stops at the first
    partition that differs), so the answer is ``{want: probability}`` or empty. Raises
    ``ValueError`` after ``limit`` runs."""
    target = [tuple(r) for r in want] if want is not None else None
    found: dict[Placement, float] = defaultdict(float)
    stack: list[tuple[tuple[int, ...], float]] = [((), 1.0)]
    runs = 0
    while stack:
        draws, weight = stack.pop()
        runs += 1
        if runs > limit:
            raise ValueError(f"more than {limit} draw sequences for {partitions} partitions at RF {rf} on "
                             f"{len(brokers)} brokers; pass want= to prune, or a larger limit")
        got: list[tuple[int, ...]] = []
        try:
            for replicas in place_topic(brokers, partitions, rf, Scripted(draws), rack_aware=rack_aware):
                if target is not None and replicas != target[len(got)]:
                    break
                got.append(replicas)
            else:
                found[tuple(got)] += weight
        except _OutOfDraws as need:
            stack.extend((draws + (v,), weight / need.bound) for v in range(need.bound))
    return dict(found)


def replica_moves(cluster: Cluster, proposal: Mapping[tuple[str, int], Sequence[int]]) -> int:
    """Replicas the proposal places on a broker that did not hold them."""
    return sum(len(set(proposal[p.topic_partition]) - set(p.replicas)) for p in cluster.partitions)


#: How long the tools-jar reference may take for all cases of one benchmark run.
TOOL_TIMEOUT_S = 1800.0


def run_tool(cases: Sequence[tuple[Cluster, Sequence[Broker]]]) -> list[tuple[dict[tuple[str, int], tuple[int, ...]], float]]:
    """The real ``--generate`` computation on each ``(cluster, target brokers)``: Kafka's
    ``ReassignPartitionsCommand.calculateAssignment`` from the tools jar, all cases in one JVM, rack
    aware when the brokers have racks. Per case: the proposal and the seconds of the call alone (the
    JVM's start and the input's parsing left out; the first case's call is a cold JVM's, as the
    tool's one call is). The tool's placer draws from an unseeded ``java.util.Random``, so proposals
    vary from run to run."""
    lines = []
    for k, (cluster, brokers) in enumerate(cases):
        lines.append(f"case {k}")
        lines.append("brokers " + " ".join(f"{b.id}:{b.rack or '-'}" for b in brokers))
        lines += (f"p {p.topic} {p.partition} {','.join(map(str, p.replicas))}" for p in cluster.partitions)
        lines.append("end")
    cmd = ["java", "-cp", f"{jar_dir('tools')}/*", str(TOOL_SOURCE)]
    # a JVM start, the source compiled, then one call per case: minutes at the most for the largest shapes
    done = subprocess.run(cmd, input="\n".join(lines) + "\n", capture_output=True, text=True,
                          timeout=TOOL_TIMEOUT_S)
    if done.returncode:
        raise RuntimeError(f"{TOOL_SOURCE.name} failed (exit {done.returncode}) on {len(cases)} case(s): "
                           f"{done.stderr.strip()[-2000:]}")
    results: list[tuple[dict[tuple[str, int], tuple[int, ...]], float]] = []
    proposal: dict[tuple[str, int], tuple[int, ...]] = {}
    seconds = 0.0
    for line in done.stdout.splitlines():
        fields = line.split()
        if fields[0] == "case":
            proposal, seconds = {}, int(fields[2]) / 1e9
        elif fields[0] == "end":
            results.append((proposal, seconds))
        else:
            proposal[(fields[0], int(fields[1]))] = tuple(int(r) for r in fields[2].split(","))
    return results
