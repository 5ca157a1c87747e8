"""The reassignment gates' frames: the plan gate (one row per move plus the load it leaves) and the
post-move gate (the cluster after against the plan and the cluster before). Pure: a
:class:`Cluster` or a :class:`ReassignmentPlan` in, pandas frames out; the Great Expectations run
is :func:`kafkaops.platform.gates.run`.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from itertools import chain
from typing import Any

import numpy as np
import pandas as pd

from kafkaops.errors import KafkaOpsError
from kafkaops.model import Cluster, TopicPartition
from kafkaops.platform.gates import GateError, id_list, topic_partitions, typed_frame
from kafkaops.reassign.planner.goals import Goals
from kafkaops.reassign.planner.plan import ReassignmentPlan
from kafkaops.reassign.planner.topology import replica_targets, resolve_topology


def _plan_base(plan: ReassignmentPlan, cluster: Cluster) -> Cluster:
    """The cluster the plan was made on, new brokers included."""
    if plan.cluster is not None:
        return plan.cluster
    base, _ = resolve_topology(cluster, Goals(), new=plan.new_brokers)
    return base


def allowed_spread(plan: ReassignmentPlan, cluster: Cluster) -> int:
    """The widest replica spread (most minus fewest replicas per balanced broker) the plan may
    leave: 1, or more where racks make an even split impossible (the planner's rack-feasible
    targets); a scale-out, which only moves replicas onto new brokers, may also keep the spread
    the old brokers already had; so may a drain that moves only what the drained brokers hold (no
    ``rebalance after`` part), among the brokers that stay."""
    base, topo = resolve_topology(_plan_base(plan, cluster), Goals(), new=plan.new_brokers,
                                  drain=plan.drained, exclude=plan.excluded)
    counts = base.replicas_per_broker()
    total = sum(n for b, n in counts.items() if b not in topo.fixed)
    targets = list(replica_targets(base, topo, counts, total).values())
    spread = max(1, max(targets) - min(targets))
    if plan.kind == "scale-out" or (plan.kind == "drain" and "rebalance after" not in dict(plan.part_moves)):
        old = [counts[b] for b in topo.eligible if b not in topo.new]
        spread = max(spread, max(old, default=0) - min(old, default=0))
    return spread


def _check_moves(plan: ReassignmentPlan, base: Cluster) -> None:
    """Refuse a plan that moves partitions or onto brokers the cluster does not have."""
    brokers = set(base.broker_ids)
    for m in plan.moves:
        try:
            base.partition(*m.topic_partition)
        except KafkaOpsError as err:
            raise GateError(f"plan moves {m.name}, which the cluster lacks: {err}; plan again from a fresh "
                            "snapshot") from err
        unknown = sorted(set(m.after) - brokers)
        if unknown:
            raise GateError(f"plan moves {m.name} onto broker(s) {unknown}, which the cluster lacks (brokers "
                            f"{sorted(brokers)}); plan again from a fresh snapshot")


PARTITION_DTYPES = {"name": "object", "topic": "object", "partition": "int64", "moved": "bool",
                    "replicas_before": "object", "replicas_after": "object", "replication_factor": "int64",
                    "distinct_brokers": "int64", "racks_after": "object", "racks_spanned": "int64",
                    "racks_required": "int64", "bytes_to_copy": "int64", "bytes_copied_so_far": "Int64",
                    "max_bytes": "Int64"}


def _partition_columns(partitions: Sequence[Any], after: Mapping[TopicPartition, Any], rack: Mapping[int, str | None],
                       racks: int, copies: Mapping[TopicPartition, int], so_far: Mapping[TopicPartition, int],
                       before_n: dict[int, int], after_n: dict[int, int]) -> dict[str, Any]:
    """The plan gate's partition rows as typed column arrays (a million partitions build in seconds,
    where a dict per row takes minutes); the texts and rack facts of a replica set are worked out
    once per distinct set. Sets the replicas per broker, before and after, in ``before_n`` and ``after_n``
    (given with every broker at 0)."""
    name, topic, number, moved, before_ids, after_ids = [], [], [], [], [], []
    rf, distinct, racks_after, spanned, to_copy, copied = [], [], [], [], [], []
    replicas_after: list[Sequence[int]] = []
    facts: dict[tuple[int, ...], tuple[str, int, int, str, int]] = {}  # text, RF, distinct, racks, spanned

    def facts_of(replicas: tuple[int, ...]) -> tuple[str, int, int, str, int]:
        seen = facts.get(replicas)
        if seen is None:
            seen = facts[replicas] = (id_list(replicas), len(replicas), len(set(replicas)),
                                      id_list(sorted({str(rack.get(b)) for b in replicas})),
                                      len({rack.get(b) for b in replicas}))
        return seen

    for p in partitions:
        key = p.topic_partition
        move = after.get(key)
        was = facts_of(p.replicas)
        now = facts_of(tuple(move.after)) if move is not None else was
        replicas_after.append(move.after if move is not None else p.replicas)
        name.append(p.name)
        topic.append(p.topic)
        number.append(p.partition)
        moved.append(move is not None)
        before_ids.append(was[0])
        after_ids.append(now[0])
        rf.append(now[1])
        distinct.append(now[2])
        racks_after.append(now[3])
        spanned.append(now[4])
        to_copy.append(copies.get(key, 0))
        copied.append(so_far.get(key))
    before_n.update(Counter(chain.from_iterable(p.replicas for p in partitions)))
    after_n.update(Counter(chain.from_iterable(replicas_after)))
    rows = len(name)
    return {"name": _objects(name), "topic": _objects(topic), "partition": np.array(number, dtype=np.int64),
            "moved": np.array(moved, dtype=bool), "replicas_before": _objects(before_ids),
            "replicas_after": _objects(after_ids), "replication_factor": np.array(rf, dtype=np.int64),
            "distinct_brokers": np.array(distinct, dtype=np.int64), "racks_after": _objects(racks_after),
            "racks_spanned": np.array(spanned, dtype=np.int64),
            "racks_required": np.minimum(np.array(rf, dtype=np.int64), racks),
            "bytes_to_copy": np.array(to_copy, dtype=np.int64),
            "bytes_copied_so_far": pd.array(copied, dtype="Int64"), "rows": rows}


def _objects(values: list[Any]) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def _columns_frame(columns: Mapping[str, Any], dtypes: Mapping[str, str]) -> pd.DataFrame:
    """A frame of ``columns`` (arrays already of ``dtypes``) in the order of ``dtypes``, without
    copying them again."""
    frame = pd.DataFrame({c: columns[c] for c in dtypes}, copy=False)
    wrong = {c: d for c, d in dtypes.items() if str(frame[c].dtype) != d}
    return frame.astype(wrong) if wrong else frame


def plan_frame(plan: ReassignmentPlan, cluster: Cluster, max_bytes: int | None = None, *,
               spread: int | None = None) -> dict[str, pd.DataFrame]:
    """The frames of the plan gate, over the cluster as the plan leaves it: ``partitions`` (one
    row per partition: distinct brokers, racks spanned against ``min(RF, racks)`` of ``cluster``,
    bytes copied so far in the plan's move order against ``max_bytes``) and ``brokers`` (one row per broker:
    replicas after against a ceiling of the fewest plus :func:`allowed_spread`, or ``spread``)."""
    base = _plan_base(plan, cluster)
    rack = {b.id: b.rack for b in base.brokers}
    racks = len({b.rack for b in cluster.brokers}) or 1
    after = {m.topic_partition: m for m in plan.moves}
    _check_moves(plan, base)
    index = {p.topic_partition: p for p in base.partitions}
    copies = {key: len(m.adding) * (index[key].copy_bytes or 0) for key, m in after.items()}
    copied, so_far = 0, {}
    for key in after:  # running total in the order the executor submits the moves
        copied += copies[key]
        so_far[key] = copied
    before, counts = dict.fromkeys(base.broker_ids, 0), dict.fromkeys(base.broker_ids, 0)
    columns = _partition_columns(base.partitions, after, rack, racks, copies, so_far, before, counts)
    columns["max_bytes"] = pd.array([max_bytes] * columns.pop("rows"), dtype="Int64")
    partitions = _columns_frame(columns, PARTITION_DTYPES)
    skip = set(plan.drained) | set(plan.excluded) | set(base.offline_broker_ids)
    balanced = [b for b in base.broker_ids if b not in skip]
    limit = allowed_spread(plan, cluster) if spread is None else spread
    fewest = min((counts[b] for b in balanced), default=0)
    brokers = typed_frame([{"broker": b, "rack": rack.get(b), "new": b in plan.new_brokers,
                       "drained": b in plan.drained, "balanced": b in balanced,
                       "replicas_before": before.get(b, 0), "replicas_after": counts[b],
                       "fewest": fewest, "allowed_spread": limit,
                       "ceiling": fewest + limit if b in balanced else None,
                       "left_on_drained": counts[b] if b in plan.drained else None} for b in sorted(counts)],
                     {"broker": "int64", "rack": "object", "new": "bool", "drained": "bool", "balanced": "bool",
                      "replicas_before": "int64", "replicas_after": "int64", "fewest": "int64",
                      "allowed_spread": "int64", "ceiling": "Int64", "left_on_drained": "Int64"})
    return {"partitions": partitions, "brokers": brokers}


def post_move_frame(before: Cluster, after: Cluster, desired: Mapping[TopicPartition, Iterable[int]] | ReassignmentPlan,
                    *, in_flight: Iterable[TopicPartition | Any] = ()) -> pd.DataFrame:
    """One row per partition of ``before`` or ``after``: replicas against the plan ``desired``
    (a plan, or replicas by key), replicas missing from the ISR (planned partitions), health,
    end offsets before and after, and whether a reassignment is still ``in_flight``."""
    if isinstance(desired, ReassignmentPlan):
        desired = {m.topic_partition: m.after for m in desired.moves}
    planned = {k: tuple(v) for k, v in desired.items()}
    old = {p.topic_partition: p for p in before.partitions}
    now = {p.topic_partition: p for p in after.partitions}
    moving = topic_partitions(in_flight)
    rows = []
    for key in sorted(set(old) | set(now) | set(planned)):
        p, was = now.get(key), old.get(key)
        missing = [r for r in p.replicas if r not in p.isr] if p is not None and key in planned else []
        rows.append({"name": f"{key[0]}-{key[1]}", "topic": key[0], "partition": key[1],
                     "present": p is not None, "replicas": id_list(p.replicas) if p else None,
                     "desired": id_list(planned[key]) if key in planned else None,
                     "isr": id_list(p.isr) if p else None, "isr_missing": id_list(missing) if missing else None,
                     "under_replicated": p.under_replicated if p else None, "offline": p.offline if p else None,
                     "reassigning": key in moving,
                     "end_offset_before": was.end_offset if was else None,
                     "end_offset_after": p.end_offset if p else None})
    return typed_frame(rows, {"name": "object", "topic": "object", "partition": "int64", "present": "bool",
                         "replicas": "object", "desired": "object", "isr": "object", "isr_missing": "object",
                         "under_replicated": "object", "offline": "object", "reassigning": "bool",
                         "end_offset_before": "Int64", "end_offset_after": "Int64"})


# -- suites ------------------------------------------------------------------------------------------
