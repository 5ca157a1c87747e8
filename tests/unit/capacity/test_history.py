"""The review history in the store: ordered by time, untouched by a failed snapshot."""
from __future__ import annotations

import pytest

from kafkaops.capacity.review import CapacityError, ReviewPoint
from kafkaops.capacity import steps as capacity_steps
from kafkaops.capacity.history import ReviewHistory
from kafkaops.model import Broker, Cluster, PartitionAssignment


def point(t: float, lag: int = 0) -> ReviewPoint:
    return ReviewPoint(taken_at=t, offsets={("o", 0): int(t) * 10}, sizes={("o", 0): None}, lags={"g": lag},
                       cluster_id="abc")


def test_points_round_trip_in_time_order(local_store) -> None:
    h = ReviewHistory("abc")
    for t in (2.0, 1.0, 3.0):
        h.append(point(t, int(t)))
    assert [p.taken_at for p in h.points()] == [1.0, 2.0, 3.0]
    assert h.points()[0] == point(1.0, 1) and [p.taken_at for p in h.points(last=2)] == [2.0, 3.0]
    assert ReviewHistory("other").points() == []


def test_an_unreadable_point_is_skipped(local_store, caplog) -> None:
    h = ReviewHistory("abc")
    h.append(point(1.0))
    local_store.append_capacity_point("abc", 2.0, {"taken_at": "not a time"})
    h.append(point(3.0))
    assert [p.taken_at for p in h.points()] == [1.0, 3.0]
    assert "unreadable" in caplog.text


def test_a_snapshot_without_a_time_leaves_the_history_unchanged(local_store) -> None:
    """The review step's own path: a snapshot that was never stamped (not taken by metadata.snapshot) is refused
    before the store is written, and the points already there stay as they were."""
    h = ReviewHistory("abc")
    h.append(point(1.0))
    before = h.points()
    untaken = Cluster(brokers=(Broker(1),), partitions=(PartitionAssignment("o", 0, (1,), end_offset=20),),
                      cluster_id="abc", taken_at=None)
    with pytest.raises(CapacityError, match="snapshot of cluster abc has no taken_at"):
        capacity_steps.append_history(untaken.to_dict(), "r2")
    assert h.points() == before and len(local_store.capacity_points("abc")) == 1


def test_a_point_of_another_cluster_is_refused(local_store) -> None:
    with pytest.raises(CapacityError, match="cluster abc"):
        ReviewHistory("other").append(point(1.0))
    assert ReviewHistory("other").points() == []
