from __future__ import annotations

from pathlib import Path

import pytest

from kafkaops.platform import state


def test_second_holder_is_refused_with_the_first_named(tmp_path: Path) -> None:
    state.acquire_lock("prod", "kafka_scale_out/run-1", root=tmp_path)
    with pytest.raises(state.ClusterBusy, match="cluster prod is busy: run kafka_scale_out/run-1 holds it"):
        state.acquire_lock("prod", "kafka_reassign/run-7", root=tmp_path)
    # a retried task of the holder gets the lock again
    assert state.acquire_lock("prod", "kafka_scale_out/run-1", root=tmp_path).holder == "kafka_scale_out/run-1"


def test_release_frees_only_the_holders_lock(tmp_path: Path) -> None:
    state.acquire_lock("prod", "a", root=tmp_path)
    assert state.release_lock("prod", "b", root=tmp_path) is False
    assert state.lock_holder("prod", root=tmp_path).holder == "a"
    assert state.release_lock("prod", "a", root=tmp_path) is True
    assert state.lock_holder("prod", root=tmp_path) is None
    assert state.acquire_lock("prod", "b", root=tmp_path).holder == "b"
    assert state.lock_holder("prod", root=tmp_path).holder == "b"


def test_clusters_lock_independently(tmp_path: Path) -> None:
    state.acquire_lock("prod", "a", root=tmp_path)
    state.acquire_lock("staging", "b", root=tmp_path)
    assert {state.lock_holder(c, root=tmp_path).holder for c in ("prod", "staging")} == {"a", "b"}
