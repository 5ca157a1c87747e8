"""Who may hold, receive and give replicas, on which rack, and how many each broker should hold.

:func:`resolve_topology` validates a request (broker ids, racks, replication factors against the
brokers and racks left) before any placement happens; :func:`replica_targets` turns the result
into per-broker replica counts.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from kafkaops.model import Broker, Cluster, PartitionAssignment
from kafkaops.reassign.planner.errors import PlanInfeasible, PlanInputError
from kafkaops.reassign.planner.goals import Goals

NO_RACK = "no rack"


@dataclass(frozen=True)
class Topology:
    """The brokers of one planning request.

    ``eligible`` receive replicas and are balanced; ``fixed`` (excluded or offline) keep what they
    hold and receive nothing; ``drained`` must end with no replica; ``new`` are the scale-out
    brokers. ``required_racks`` is the number of racks a partition spreads over (capped by its
    replication factor): the racks of the cluster before the plan, or 1 when rack-unaware.
    """

    racks: Mapping[int, str]
    eligible: tuple[int, ...]
    fixed: tuple[int, ...] = ()
    drained: tuple[int, ...] = ()
    new: tuple[int, ...] = ()
    required_racks: int = 1

    def racks_needed(self, replication_factor: int) -> int:
        return min(replication_factor, self.required_racks)


def _ids(label: str, values: Iterable[int | Broker]) -> list[int]:
    ids = [v.id if isinstance(v, Broker) else v for v in values]
    for i in ids:
        if isinstance(i, bool) or not isinstance(i, int) or i < 0:
            raise PlanInputError(f"{label} {i!r} is not a broker id; broker ids are integers >= 0")
    dupes = sorted(i for i, n in Counter(ids).items() if n > 1)
    if dupes:
        raise PlanInputError(f"{label} {ids} name broker(s) {dupes} more than once; list each broker once")
    return ids


def _with_new_brokers(cluster: Cluster, new: Sequence[int | Broker], held: Mapping[int, int]) -> Cluster:
    ids = _ids("new brokers", new)
    known = set(cluster.broker_ids)
    added = []
    for value, broker_id in zip(new, ids):
        if broker_id in known:
            if held.get(broker_id):
                raise PlanInputError(
                    f"broker {broker_id} is already in the cluster and holds {held[broker_id]} replicas; "
                    f"a scale-out takes new broker ids only (the cluster has {list(cluster.broker_ids)})")
            continue  # registered but empty: it is new in every sense that counts
        added.append(value if isinstance(value, Broker) else Broker(broker_id))
    if not added:
        return cluster
    return replace(cluster, brokers=cluster.brokers + tuple(added), _index=None)


def _rack_map(cluster: Cluster, rack_aware: bool) -> dict[int, str]:
    with_rack = [b.id for b in cluster.brokers if b.rack is not None]
    without = [b.id for b in cluster.brokers if b.rack is None]
    if with_rack and without:
        raise PlanInputError(
            f"brokers {with_rack} have a rack but brokers {without} do not; give every broker a rack "
            f"(e.g. --racks {without[0]}:RACK) or none")
    if not rack_aware:
        return {b.id: NO_RACK for b in cluster.brokers}
    return {b.id: b.rack if b.rack is not None else NO_RACK for b in cluster.brokers}


def _check_replicas(cluster: Cluster) -> None:
    known = set(cluster.broker_ids)
    for p in cluster.partitions:
        if not known.issuperset(p.replicas):
            b = next(b for b in p.replicas if b not in known)
            raise PlanInputError(
                f"{p.name} has a replica on broker {b}, which is not in the cluster (brokers are "
                f"{list(cluster.broker_ids)}); add broker {b} to the brokers or fix the assignment")


FAILURES_NAMED = 5
"""How many of the partitions a refused plan cannot place its error names."""


def _first_failure(failing: list[PartitionAssignment], message: str) -> PlanInfeasible:
    """The refusal: ``message`` for the first partitions of ``failing`` by name, then how many more."""
    named = ", ".join(p.name for p in failing[:FAILURES_NAMED])
    extra = len(failing) - FAILURES_NAMED
    more = "" if extra <= 0 else " (1 more partition fails the same way)" if extra == 1 else \
        f" ({extra} more partitions fail the same way)"
    return PlanInfeasible(f"cannot place {named}: {message}{more}")


def _check_capacity(cluster: Cluster, topo: Topology, drained_note: str) -> None:
    hosts = set(topo.eligible) | set(topo.fixed)
    alive = len({topo.racks[b] for b in hosts})
    by_rf = Counter(p.replication_factor for p in cluster.partitions)
    for rf in sorted(by_rf, reverse=True):
        def failing() -> list[PartitionAssignment]:
            return [p for p in cluster.partitions if p.replication_factor == rf]

        if rf > len(hosts):
            raise _first_failure(failing(), f"replication factor {rf} needs {rf} brokers, {len(hosts)} can "
                                            f"hold replicas{drained_note}; add brokers or lower the RF")
        need = topo.racks_needed(rf)
        if alive < need:
            raise _first_failure(failing(), f"{alive} racks alive, replication factor {rf} needs {need}"
                                            f"{drained_note}; add a rack or lower the RF")


def resolve_topology(cluster: Cluster, goals: Goals, *, new: Sequence[int | Broker] = (),
                     drain: Sequence[int] = (), exclude: Sequence[int] = ()) -> tuple[Cluster, Topology]:
    """Validate a request and return the cluster with any new brokers added, and its topology."""
    _check_replicas(cluster)
    held = cluster.replicas_per_broker()
    base = _with_new_brokers(cluster, new, held)
    new_ids = tuple(sorted(set(_ids("new brokers", new))))
    drained = tuple(sorted(_ids("drained brokers", drain)))
    excluded = tuple(sorted(_ids("excluded brokers", exclude)))
    known = set(base.broker_ids)
    for label, ids in (("drain", drained), ("exclude", excluded)):
        unknown = [b for b in ids if b not in known]
        if unknown:
            raise PlanInputError(f"cannot {label} broker(s) {unknown}: not in the cluster; brokers are "
                                 f"{list(base.broker_ids)}")
    racks = _rack_map(base, goals.rack_aware)
    before_racks = {racks[b.id] for b in cluster.brokers}
    offline = set(base.offline_broker_ids)
    eligible = tuple(b for b in base.broker_ids if b not in drained and b not in excluded and b not in offline)
    receiving = set(eligible)  # membership in a set: a tuple's is linear, quadratic over many brokers
    fixed = tuple(b for b in base.broker_ids if b not in drained and b not in receiving)
    topo = Topology(racks=racks, eligible=eligible, fixed=fixed, drained=drained, new=new_ids,
                    required_racks=max(1, len(before_racks)))
    if not eligible:
        raise PlanInfeasible(f"no broker can receive replicas: brokers {list(base.broker_ids)}, drained "
                             f"{list(drained)}, excluded or offline {list(fixed)}; add a broker or drain fewer")
    gone = sorted({topo.racks[b] for b in drained} - {topo.racks[b] for b in set(topo.eligible) | set(topo.fixed)}
                  - {NO_RACK})
    emptied = f" (every broker of rack{'s' if len(gone) > 1 else ''} {', '.join(map(str, gone))})" if gone else ""
    note = f" after draining {list(drained)}{emptied}" if drained else ""
    _check_capacity(base, topo, note)
    return base, topo


# -- targets -------------------------------------------------------------------------------------
def even_split(total: int, brokers: Sequence[int], current: Mapping[int, int]) -> dict[int, int]:
    """``total`` spread over ``brokers`` as evenly as possible; the extra ones go to the brokers
    that hold most now (ties: lower id), which keeps the moves needed to reach it minimal."""
    if not brokers:
        return {}
    floor, extra = divmod(total, len(brokers))
    ranked = sorted(brokers, key=lambda b: (-current.get(b, 0), b))
    return {b: floor + (1 if rank < extra else 0) for rank, b in enumerate(ranked)}


def _rack_bounds(rf_counts: Mapping[int, int], sizes: Mapping[str, int],
                 topo: Topology) -> dict[str, tuple[int, int]]:
    """Fewest and most replicas each rack can hold while every partition keeps its rack spread."""
    bounds = dict.fromkeys(sizes, (0, 0))
    for rf, count in rf_counts.items():
        need = topo.racks_needed(rf)
        hi = {r: min(n, rf - need + 1) for r, n in sizes.items()}
        total_hi = sum(hi.values())
        for r in sizes:
            lo = max(0, rf - (total_hi - hi[r]), 1 if need >= len(sizes) else 0)
            lo_sum, hi_sum = bounds[r]
            bounds[r] = (lo_sum + lo * count, hi_sum + hi[r] * count)
    return bounds


def _fill_racks(sizes: Mapping[str, int], bounds: Mapping[str, tuple[int, int]], total: int) -> dict[str, int]:
    """Rack loads as proportional to rack size as the bounds allow (water-filling), in integers."""
    def loads(level: float) -> dict[str, float]:
        return {r: min(max(level * n, bounds[r][0]), bounds[r][1]) for r, n in sizes.items()}

    low, high = 0.0, float(total) + 1.0
    for _ in range(100):
        mid = (low + high) / 2
        if sum(loads(mid).values()) < total:
            low = mid
        else:
            high = mid
    exact = loads(high)
    result = {r: min(int(x), bounds[r][1]) for r, x in exact.items()}
    short = total - sum(result.values())
    for r in sorted(sizes, key=lambda r: (-(exact[r] - result[r]), r)):
        if short <= 0:
            break
        if result[r] < bounds[r][1]:
            result[r] += 1
            short -= 1
    return result


def replica_targets(cluster: Cluster, topo: Topology, current: Mapping[int, int], total: int) -> dict[int, int]:
    """Replicas each eligible broker should end with: an even split, unless the racks cannot take
    it; then each rack holds what its partitions' rack spread allows, split evenly inside it."""
    targets = even_split(total, topo.eligible, current)
    by_rack: dict[str, list[int]] = {}
    for b in topo.eligible:
        by_rack.setdefault(topo.racks[b], []).append(b)
    if len(by_rack) < 2:
        return targets
    sizes = {r: len(members) for r, members in sorted(by_rack.items())}
    rf_counts = Counter(p.replication_factor for p in cluster.partitions)
    bounds = _rack_bounds(rf_counts, sizes, topo)
    fits = all(lo <= sum(targets[b] for b in by_rack[r]) <= hi for r, (lo, hi) in bounds.items())
    if fits or sum(lo for lo, _ in bounds.values()) > total or sum(hi for _, hi in bounds.values()) < total:
        return targets
    loads = _fill_racks(sizes, bounds, total)
    result: dict[int, int] = {}
    for r, members in by_rack.items():
        result.update(even_split(loads[r], members, current))
    return result


def scale_out_shares(total: int, existing: int, new: Sequence[int]) -> dict[int, int]:
    """What each new broker takes in an even split of ``total`` replicas over ``existing`` + new
    brokers when the existing brokers keep the larger shares: the scale-out lower bound."""
    if not new:
        return {}
    floor, extra = divmod(total, existing + len(new))
    spill = max(0, extra - existing)
    return {b: floor + (1 if rank < spill else 0) for rank, b in enumerate(sorted(new))}
