"""Durable capacity-review history: one JSON line per review under
``state_dir()/capacity/<cluster_id>.jsonl`` (append-only, fsync'd).

A line is written whole, in one ``write`` on an ``O_APPEND`` descriptor, and only once a snapshot
has succeeded, so an unreachable cluster leaves the file as it was. A torn line (a crash mid-write)
is skipped on read, with a warning; the next append starts on a line of its own.
"""
from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from kafkaops.capacity.review import CapacityError, ReviewPoint
from kafkaops.platform.paths import safe_name, state_dir

log = logging.getLogger(__name__)


def history_path(cluster_id: str, root: Path | None = None) -> Path:
    return (root or state_dir() / "capacity") / f"{safe_name(cluster_id or 'unknown')}.jsonl"


class ReviewHistory:
    """The review points of one cluster, oldest first."""

    def __init__(self, cluster_id: str, root: Path | None = None) -> None:
        self.cluster_id = cluster_id
        self.path = history_path(cluster_id, root)

    def append(self, point: ReviewPoint) -> ReviewPoint:
        if point.cluster_id is not None and point.cluster_id != self.cluster_id:
            raise CapacityError(f"review point of cluster {point.cluster_id} cannot go into the history of "
                                f"{self.cluster_id} ({self.path}); use ReviewHistory({point.cluster_id!r})")
        line = (json.dumps(point.to_dict(), sort_keys=True, separators=(",", ":")) + "\n").encode()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                if os.fstat(fd).st_size and not self._ends_with_newline():
                    line = b"\n" + line  # close a torn last line, so this one stands alone
                os.write(fd, line)
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as err:
            raise CapacityError(f"cannot append to review history {self.path}: {err}; check that the state dir "
                                "(KAFKAOPS_STATE_DIR) is writable") from err
        return point

    def _ends_with_newline(self) -> bool:
        with self.path.open("rb") as f:
            f.seek(-1, os.SEEK_END)
            return f.read(1) == b"\n"

    def points(self, last: int | None = None) -> list[ReviewPoint]:
        """The stored points, oldest first (the ``last`` ones only, when given)."""
        if not self.path.exists():
            return []
        out = []
        for number, line in enumerate(self.path.read_bytes().splitlines(), start=1):
            if not line.strip():
                continue
            try:
                out.append(ReviewPoint.from_dict(json.loads(line)))
            except (ValueError, CapacityError) as err:
                log.warning("review history %s:%d is unreadable (%s); skipped", self.path, number, err)
        out.sort(key=lambda p: p.taken_at)
        return out[-last:] if last else out
