"""Named fixture clusters, hypothesis strategies and goal checks for the planner tests."""
from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from hypothesis import strategies as st

from kafkaops.model import Broker, Cluster, PartitionAssignment
from kafkaops.reassign.planner import ReassignmentPlan


def round_robin(brokers: Sequence[Broker], topics: dict[str, int], rf: int,
                sizes: dict[str, int] | None = None) -> Cluster:
    """Partitions laid out like Kafka's rack-alternated round robin (balanced, rack-spread)."""
    by_rack: dict[str | None, list[int]] = {}
    for b in sorted(brokers):
        by_rack.setdefault(b.rack, []).append(b.id)
    order = [ids[i] for i in range(max(map(len, by_rack.values()))) for ids in by_rack.values() if i < len(ids)]
    parts, start = [], 0
    for topic, count in topics.items():
        for p in range(count):
            first = start + p
            reps = tuple(order[(first + j) % len(order)] for j in range(rf))
            size = (sizes or {}).get(topic)
            parts.append(PartitionAssignment(topic, p, reps, size_bytes=size * (p + 1) if size else None))
        start += count
    return Cluster(tuple(brokers), tuple(parts))


def six_brokers_three_racks(sizes: bool = False) -> Cluster:
    """Brokers 1..6 on racks a,b,c,a,b,c; orders (12 partitions) and payments (6), RF 3."""
    brokers = tuple(Broker(i, rack="abc"[(i - 1) % 3]) for i in range(1, 7))
    return round_robin(brokers, {"orders": 12, "payments": 6}, 3,
                       {"orders": 1_000, "payments": 50_000} if sizes else None)


def three_brokers_one_rack() -> Cluster:
    """Brokers 1..3 without racks; orders (6 partitions) at RF 2."""
    return round_robin(tuple(Broker(i) for i in range(1, 4)), {"orders": 6}, 2)


def skewed_four_brokers() -> Cluster:
    """Brokers 1..4 without racks; every replica on brokers 1 and 2."""
    parts = tuple(PartitionAssignment("events", p, (1, 2) if p % 2 else (2, 1)) for p in range(8))
    return Cluster(tuple(Broker(i) for i in range(1, 5)), parts)


# -- strategies ------------------------------------------------------------------------------------
@st.composite
def clusters(draw: st.DrawFn, *, max_brokers: int = 7, rack_valid: bool = False, sized: bool | None = None,
             max_rf: int = 3) -> Cluster:
    """Random clusters: 1..max_brokers brokers on 0 (no racks) to 3 racks, 1..3 topics of 1..10
    partitions, RF 1..max_rf. ``rack_valid`` spreads each partition over min(RF, racks) racks."""
    n = draw(st.integers(1, max_brokers))
    rack_count = draw(st.integers(0, min(3, n)))
    brokers = tuple(Broker(i, rack=f"r{i % rack_count}" if rack_count else None) for i in range(1, n + 1))
    ids = [b.id for b in brokers]
    rack_of = {b.id: b.rack for b in brokers}
    need_racks = max(1, rack_count)
    with_sizes = draw(st.booleans()) if sized is None else sized
    parts = []
    for t in range(draw(st.integers(1, 3))):
        rf = draw(st.integers(1, min(max_rf, n)))
        for p in range(draw(st.integers(1, 10))):
            order = draw(st.permutations(ids))
            if rack_valid:
                picked: list[int] = []
                for b in order:  # new racks first until the partition spans enough of them
                    if len({rack_of[x] for x in picked}) < min(rf, need_racks) and rack_of[b] in {rack_of[x] for x in picked}:
                        continue
                    picked.append(b)
                    if len(picked) == rf:
                        break
                reps = tuple(picked)
            else:
                reps = tuple(order[:rf])
            size = draw(st.integers(0, 10_000)) if with_sizes else None
            parts.append(PartitionAssignment(f"t{t}", p, reps, size_bytes=size))
    return Cluster(brokers, tuple(parts))


# -- checks ------------------------------------------------------------------------------------------
def final_assignment(plan: ReassignmentPlan) -> dict[tuple[str, int], tuple[int, ...]]:
    assert plan.cluster is not None
    replicas = {p.topic_partition: p.replicas for p in plan.cluster.partitions}
    replicas.update({(m.topic, m.partition): m.after for m in plan.moves})
    return replicas


def assert_hard_goals(before: Cluster, plan: ReassignmentPlan, rack_aware: bool = True) -> None:
    """Distinct brokers, RF kept, racks spread over min(RF, racks of the cluster before)."""
    rack_of = {b.id: b.rack for b in plan.cluster.brokers}
    racks = len({b.rack for b in before.brokers}) if rack_aware else 1
    known = set(plan.cluster.broker_ids)
    after = final_assignment(plan)
    for p in before.partitions:
        reps = after[p.topic_partition]
        assert len(reps) == p.replication_factor, p.name
        assert len(set(reps)) == len(reps), (p.name, reps)
        assert set(reps) <= known, (p.name, reps)
        assert len({rack_of[b] for b in reps}) >= min(len(reps), racks), (p.name, reps)
    for m in plan.moves:
        assert m.before != m.after and before.partition(m.topic, m.partition).replicas == m.before


def spread(counts: dict[int, int], brokers: Sequence[int]) -> int:
    values = [counts.get(b, 0) for b in brokers]
    return max(values) - min(values)


def leader_balance_feasible(after: dict[tuple[str, int], tuple[int, ...]], eligible: Sequence[int]) -> bool:
    """Whether some choice of leaders (each partition led by one of its eligible replicas; those
    led outside ``eligible`` stay) puts every eligible broker within one: a flow with bounds."""
    members = set(eligible)
    scope = [tuple(b for b in reps if b in members) for reps in after.values() if reps[0] in members]
    low, extra = divmod(len(scope), len(eligible))
    high = low + (1 if extra else 0)
    # First every partition gets a leader with no broker above `high` (bipartite matching with
    # capacities); then brokers below `low` take one along alternating paths, which keeps the caps.
    owner: dict[int, int] = {}
    load = Counter({b: 0 for b in eligible})

    def augment(i: int, cap: int, seen: set[int]) -> bool:
        for b in scope[i]:
            if b in seen:
                continue
            seen.add(b)
            if load[b] < cap:
                owner[i] = b
                load[b] += 1
                return True
            for j, o in list(owner.items()):
                if o == b and augment_from(j, b, cap, seen):
                    owner[i] = b
                    load[b] += 1
                    return True
        return False

    def augment_from(j: int, b: int, cap: int, seen: set[int]) -> bool:
        load[b] -= 1
        del owner[j]
        if augment(j, cap, seen):
            return True
        owner[j] = b
        load[b] += 1
        return False

    for i in range(len(scope)):
        if not augment(i, high, set()):
            return False
    # Raise brokers below `low` by paths from a broker above `low` (reverse alternating paths).
    for w in eligible:
        while load[w] < low:
            if not _raise(w, scope, owner, load, low):
                return False
    return True


def _raise(w: int, scope: list[tuple[int, ...]], owner: dict[int, int], load: Counter, low: int) -> bool:
    parent: dict[int, tuple[int, int] | None] = {w: None}
    queue = [w]
    while queue:
        b = queue.pop(0)
        for i, reps in enumerate(scope):
            o = owner[i]
            if b in reps and o != b and o not in parent:
                parent[o] = (i, b)
                if load[o] > low:
                    node = o
                    while parent[node] is not None:
                        i_, to = parent[node]
                        load[owner[i_]] -= 1
                        owner[i_] = to
                        load[to] += 1
                        node = to
                    return True
                queue.append(o)
    return False


# -- feasibility oracles: a small max-flow with lower bounds ---------------------------------------
class _Flow:
    """Edmonds-Karp on a dict graph; edges with lower bounds through the usual circulation."""

    def __init__(self) -> None:
        self.cap: dict[object, dict[object, int]] = {}
        self.excess: Counter = Counter()

    def edge(self, u: object, v: object, high: int, low: int = 0) -> None:
        self.cap.setdefault(u, {}).setdefault(v, 0)
        self.cap.setdefault(v, {}).setdefault(u, 0)
        self.cap[u][v] += high - low
        self.excess[v] += low
        self.excess[u] -= low

    def _max_flow(self, s: object, t: object) -> int:
        flow = 0
        while True:
            parent = {s: None}
            queue = [s]
            while queue and t not in parent:
                u = queue.pop(0)
                for v, c in self.cap[u].items():
                    if c > 0 and v not in parent:
                        parent[v] = u
                        queue.append(v)
            if t not in parent:
                return flow
            path, v = [], t
            while parent[v] is not None:
                path.append((parent[v], v))
                v = parent[v]
            push = min(self.cap[u][v] for u, v in path)
            for u, v in path:
                self.cap[u][v] -= push
                self.cap[v][u] += push
            flow += push

    def feasible(self, source: object, sink: object) -> bool:
        """Whether a flow from ``source`` to ``sink`` meets every lower and upper bound."""
        self.edge(sink, source, 10**9)
        for node, ex in list(self.excess.items()):
            if ex > 0:
                self.edge("S*", node, ex)
            elif ex < 0:
                self.edge(node, "T*", -ex)
        need = sum(ex for ex in self.excess.values() if ex > 0)
        self.cap.setdefault("S*", {})
        self.cap.setdefault("T*", {})
        return self._max_flow("S*", "T*") == need


def _rack_caps(rf: int, racks: int) -> tuple[int, int]:
    """Fewest and most replicas of one partition a rack may hold so that it spans min(RF, racks)
    racks. Exact for RF <= 3 (the strategies' range); asserted, not assumed."""
    assert rf <= 3, "the rack oracle is exact for RF <= 3 only"
    need = min(rf, racks)
    return (1 if need == racks and rf >= racks else 0), rf - need + 1


def balanced_placement_feasible(cluster: Cluster, *, per_topic: bool = False) -> bool:
    """Whether some assignment (moves free) keeps every hard goal with every broker's replica count
    within one of the others, and, with ``per_topic``, every topic's replicas per broker within
    one as well. Brokers are all eligible; racks are those of the cluster."""
    rack_of = {b.id: b.rack for b in cluster.brokers}
    racks = sorted({r for r in rack_of.values()}, key=str)
    ids = list(cluster.broker_ids)
    flow = _Flow()
    total = sum(p.replication_factor for p in cluster.partitions)
    low, extra = divmod(total, len(ids))
    for b in ids:
        flow.edge(("b", b), "t", low + (1 if extra else 0), low)
    by_topic: dict[str, int] = Counter()
    for p in cluster.partitions:
        by_topic[p.topic] += p.replication_factor
    for p in cluster.partitions:
        rf = p.replication_factor
        lo, hi = _rack_caps(rf, len(racks))
        flow.edge("s", ("p", p.topic_partition), rf, rf)
        for r in racks:
            flow.edge(("p", p.topic_partition), ("pr", p.topic_partition, r), hi, lo)
            for b in ids:
                if rack_of[b] == r:
                    target = ("tb", p.topic, b) if per_topic else ("b", b)
                    flow.edge(("pr", p.topic_partition, r), target, 1)
    if per_topic:
        for topic, count in by_topic.items():
            t_low, t_extra = divmod(count, len(ids))
            for b in ids:
                flow.edge(("tb", topic, b), ("b", b), t_low + (1 if t_extra else 0), t_low)
    return flow.feasible("s", "t")


def uneven_cluster(partitions: int, brokers: int, rf: int, racks: int, seed: int = 15) -> Cluster:
    """A large cluster shaped like real ones: heavy-tailed topics (most 1-12 partitions, a few
    hundreds), each created on a random subset of the brokers that existed then (the first half
    of the brokers are older), racks alternating so every partition spans min(RF, racks) racks."""
    import random

    rand = random.Random(seed)
    rack = {b: f"r{b % racks}" if racks > 1 else None for b in range(1, brokers + 1)}
    parts, t = [], 0
    while len(parts) < partitions:
        count = min(partitions - len(parts), rand.randint(1, 12) if rand.random() < 0.9 else rand.randint(100, 400))
        alive = brokers // 2 if rand.random() < 0.6 else brokers
        share = rand.uniform(0.2, 1.0)
        lanes: dict[str | None, list[int]] = {}
        for b in range(1, alive + 1):
            lanes.setdefault(rack[b], []).append(b)
        lanes = {r: sorted(rand.sample(members, max(rf, int(len(members) * share)))) for r, members in lanes.items()}
        order = [lane[i] for i in range(max(map(len, lanes.values()))) for lane in lanes.values() if i < len(lane)]
        start = rand.randrange(len(order))
        for p in range(count):
            reps: list[int] = []
            k = start + p
            while len(reps) < rf:  # the next brokers in order, new racks first until min(RF, racks) are spanned
                b = order[k % len(order)]
                k += 1
                if b not in reps and (len({rack[x] for x in reps}) >= min(rf, racks) or rack[b] not in
                                      {rack[x] for x in reps}):
                    reps.append(b)
            parts.append(PartitionAssignment(f"topic{t}", p, tuple(reps), size_bytes=int(rand.paretovariate(1.3) * 1000)))
        t += 1
    return Cluster(tuple(Broker(b, rack=rack[b]) for b in range(1, brokers + 1)), tuple(parts))
