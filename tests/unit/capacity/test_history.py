"""The review history in the store: ordered by time, untouched by a failed snapshot."""
from __future__ import annotations

import pytest

from kafkaops.capacity.review import CapacityError, ReviewPoint
from kafkaops.capacity.history import ReviewHistory


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


def test_a_failed_snapshot_leaves_the_history_unchanged(local_store) -> None:
    h = ReviewHistory("abc")
    h.append(point(1.0))
    before = h.points()

    def unreachable():
        raise ConnectionError("cluster down")
    with pytest.raises(ConnectionError):
        h.append(ReviewPoint.of(unreachable()))
    assert h.points() == before


def test_a_point_of_another_cluster_is_refused(local_store) -> None:
    with pytest.raises(CapacityError, match="cluster abc"):
        ReviewHistory("other").append(point(1.0))
    assert ReviewHistory("other").points() == []
