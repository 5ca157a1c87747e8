from __future__ import annotations

from pathlib import Path

import pytest

from kafkaops import lock


def test_second_holder_is_refused_with_the_first_named(tmp_path: Path) -> None:
    lock.acquire("prod", "kafka_scale_out/run-1", root=tmp_path)
    with pytest.raises(lock.ClusterBusy, match="cluster prod is busy: run kafka_scale_out/run-1 holds it"):
        lock.acquire("prod", "kafka_reassign/run-7", root=tmp_path)
    # a retried task of the holder gets the lock again
    assert lock.acquire("prod", "kafka_scale_out/run-1", root=tmp_path).holder == "kafka_scale_out/run-1"


def test_release_frees_only_the_holders_lock(tmp_path: Path) -> None:
    lock.acquire("prod", "a", root=tmp_path)
    assert lock.release("prod", "b", root=tmp_path) is False
    assert lock.holder_of("prod", root=tmp_path).holder == "a"
    assert lock.release("prod", "a", root=tmp_path) is True
    assert lock.holder_of("prod", root=tmp_path) is None
    lock.acquire("prod", "b", root=tmp_path)


def test_clusters_lock_independently(tmp_path: Path) -> None:
    lock.acquire("prod", "a", root=tmp_path)
    lock.acquire("staging", "b", root=tmp_path)
    assert {lock.holder_of(c, root=tmp_path).holder for c in ("prod", "staging")} == {"a", "b"}
