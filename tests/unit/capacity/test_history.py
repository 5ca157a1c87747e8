"""The review history: append-only, survives a torn line, untouched by a failed snapshot."""
from __future__ import annotations

import pytest

from kafkaops.capacity.review import CapacityError, ReviewPoint
from kafkaops.capacity.history import ReviewHistory, history_path


def point(t: float, lag: int = 0) -> ReviewPoint:
    return ReviewPoint(taken_at=t, offsets={("o", 0): int(t) * 10}, sizes={("o", 0): None}, lags={"g": lag},
                       cluster_id="abc")


def test_points_round_trip_in_time_order(tmp_path) -> None:
    h = ReviewHistory("abc", tmp_path)
    for t in (2.0, 1.0, 3.0):
        h.append(point(t, int(t)))
    assert [p.taken_at for p in h.points()] == [1.0, 2.0, 3.0]
    assert h.points()[0] == point(1.0, 1) and [p.taken_at for p in h.points(last=2)] == [2.0, 3.0]
    assert h.path == history_path("abc", tmp_path) and h.path.name == "abc.jsonl"


def test_default_path_is_under_the_state_dir(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("KAFKAOPS_STATE_DIR", str(tmp_path))
    assert ReviewHistory("x/y").path == tmp_path / "capacity" / "x_y.jsonl"


def test_a_torn_line_is_skipped_and_the_next_append_stands_alone(tmp_path) -> None:
    h = ReviewHistory("abc", tmp_path)
    h.append(point(1.0))
    with h.path.open("ab") as f:
        f.write(b'{"taken_at": 2.0, "partit')  # a crash mid-write
    h.append(point(3.0))
    assert [p.taken_at for p in h.points()] == [1.0, 3.0]


def test_a_failed_snapshot_leaves_the_history_unchanged(tmp_path) -> None:
    h = ReviewHistory("abc", tmp_path)
    h.append(point(1.0))
    before = h.path.read_bytes()

    def unreachable():
        raise ConnectionError("cluster down")
    with pytest.raises(ConnectionError):
        h.append(ReviewPoint.of(unreachable()))
    assert h.path.read_bytes() == before


def test_a_point_of_another_cluster_is_refused(tmp_path) -> None:
    with pytest.raises(CapacityError, match="cluster abc"):
        ReviewHistory("other", tmp_path).append(point(1.0))
