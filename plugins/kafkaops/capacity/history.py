"""Durable capacity-review history: one point per review in the kafkaops store's
``kafkaops_capacity_history`` table, so every Airflow component reads the same history.

A point is written whole, in one INSERT, and only once a snapshot has succeeded, so an unreachable
cluster leaves the history as it was. An unreadable stored point is skipped on read, with a warning.
"""
from __future__ import annotations

import logging

from kafkaops.capacity.review import CapacityError, ReviewPoint
from kafkaops.platform import store as store_

log = logging.getLogger(__name__)


class ReviewHistory:
    """The review points of one cluster, oldest first."""

    def __init__(self, cluster_id: str, store: store_.Store | None = None) -> None:
        self.cluster_id = cluster_id or "unknown"
        self._store = store

    @property
    def store(self) -> store_.Store:
        return self._store or store_.current()

    def append(self, point: ReviewPoint) -> ReviewPoint:
        if point.cluster_id is not None and point.cluster_id != self.cluster_id:
            raise CapacityError(f"review point of cluster {point.cluster_id} cannot go into the history of "
                                f"{self.cluster_id}; use ReviewHistory({point.cluster_id!r})")
        self.store.append_capacity_point(self.cluster_id, point.taken_at, point.to_dict(), run_id=point.run_id)
        return point

    def points(self, last: int | None = None) -> list[ReviewPoint]:
        """The stored points, oldest first (the ``last`` ones only, when given)."""
        out = []
        for number, data in enumerate(self.store.capacity_points(self.cluster_id), start=1):
            try:
                out.append(ReviewPoint.from_dict(data))
            except (ValueError, KeyError, TypeError, CapacityError) as err:
                log.warning("review history of %s: point %d is unreadable (%s); skipped", self.cluster_id, number,
                            err)
        out.sort(key=lambda p: p.taken_at)
        return out[-last:] if last else out
