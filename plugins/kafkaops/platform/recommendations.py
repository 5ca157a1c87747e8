"""What one capability publishes in its records for another to act on, and the typed query that
finds it: a capacity review (:mod:`kafkaops.capacity`) publishes its recommendations, and a partition
increase (:mod:`kafkaops.rekey`) shows the newest partition count recommended for its topic beside the
count chosen. Neither capability imports the other: both go through this module.

    Published                     what a run publishes in one note: its cluster and recommendations
    Recommended                   one recommendation (kind, subject, value, why)
    PartitionRecommendation       a partition count for one topic of one cluster, with the run that published it
    latest_partition_recommendation(store, cluster_id, topic)   the query

Invariant: a published note stores ``cluster_id`` and ``recommended`` (a list of ``kind``, ``subject``,
``value``, ``message``), the shape capacity reviews wrote before this module, so older reviews count.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kafkaops.platform import state
from kafkaops.platform import store as store_

PUBLISHER_KIND = "capacity_review"
"""The kind of operation whose finished runs publish recommendations (a capacity review)."""


@dataclass(frozen=True)
class Recommended:
    """One recommendation: what to change (``kind``: partitions, brokers, ...), of what (``subject``:
    ``topic <name>``, the cluster), to what ``value``, and why (``message``)."""

    kind: str
    subject: str
    value: float
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "subject": self.subject, "value": self.value, "message": self.message}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Recommended:
        return cls(str(data.get("kind") or ""), str(data.get("subject") or ""), float(data.get("value") or 0),
                   str(data.get("message") or ""))


@dataclass(frozen=True)
class Published:
    """The recommendations one run published for cluster ``cluster_id`` (the fields of its note)."""

    cluster_id: str | None
    recommended: tuple[Recommended, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"cluster_id": self.cluster_id, "recommended": [r.to_dict() for r in self.recommended]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Published:
        return cls(data.get("cluster_id"), tuple(Recommended.from_dict(r) for r in data.get("recommended") or ()))

    def partitions_for(self, topic: str) -> Recommended | None:
        return next((r for r in self.recommended if r.kind == "partitions" and r.subject == f"topic {topic}"), None)


@dataclass(frozen=True)
class PartitionRecommendation:
    """A partition count recommended for ``topic`` of cluster ``cluster_id``, by run ``run_id`` at ``at``."""

    cluster_id: str
    topic: str
    partitions: int
    message: str
    run_id: str
    at: float | None = None


def latest_partition_recommendation(cluster_id: str | None, topic: str, *, store: store_.Store | None = None,
                                    runs: int = 20) -> PartitionRecommendation | None:
    """The newest partition count published for ``topic`` of cluster ``cluster_id`` by the last ``runs``
    finished publishing runs (of any cluster); None when none has one. Only runs that succeeded count,
    and a recommendation for another cluster (the same topic name elsewhere) never does; a cluster
    without an id matches none."""
    if cluster_id is None:
        return None
    found = store or store_.current()
    for op in found.list_operations(limit=runs, kind=PUBLISHER_KIND):
        if op.get("outcome") != "success":
            continue
        notes = state.AuditLog(op["dag_id"], op["run_id"], store=found).summary()["notes"]
        for note in reversed(notes):
            published = Published.from_dict(note)
            rec = published.partitions_for(topic) if published.cluster_id == cluster_id else None
            if rec is not None:
                return PartitionRecommendation(cluster_id, topic, int(rec.value), rec.message, op["run_id"],
                                               note.get("ts"))
    return None
