"""One sanitiser makes run ids, DAG ids and cluster ids file names; the names on disk stay as they were."""
from __future__ import annotations

from pathlib import Path

import pytest

from kafkaops.capacity.history import history_path
from kafkaops.platform import state
from kafkaops.platform.paths import safe_name


@pytest.mark.parametrize("name, expected", [
    ("manual__2026-11-22T10:00:00+00:00", "manual__2026-11-22T10_00_00_00_00"),
    ("scheduled__2026-01-01T00:00:00.123456+00:00", "scheduled__2026-01-01T00_00_00.123456_00_00"),
    ("kafka_scale_out", "kafka_scale_out"),
    ("a b/../c", "a_b_.._c"),
    ("../../etc/passwd", ".._.._etc_passwd"),
    (42, "42"),
])
def test_safe_name(name: object, expected: str) -> None:
    assert safe_name(name) == expected


def test_safe_name_is_cut_at_the_limit() -> None:
    assert safe_name("x" * 500) == "x" * 200 and safe_name("abcdef", limit=3) == "abc"


def test_every_state_file_uses_it(tmp_path: Path) -> None:
    run_id = "manual__2026-11-22T10:00:00+00:00"
    assert state.AuditLog.for_run("kafka_scale_out", run_id, root=tmp_path).path == \
        tmp_path / "kafka_scale_out" / "manual__2026-11-22T10_00_00_00_00.jsonl"
    assert history_path("c/1", root=tmp_path) == tmp_path / "c_1.jsonl"
    assert history_path("", root=tmp_path) == tmp_path / "unknown.jsonl"
    state.acquire_lock("prod cluster", "me", root=tmp_path)
    assert (tmp_path / "prod_cluster.lock").exists()


def test_the_data_docs_of_a_run_go_under_its_safe_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kafkaops.platform.lifecycle import OperationContext

    monkeypatch.setenv("KAFKAOPS_STATE_DIR", str(tmp_path))
    ctx = OperationContext("kafka_scale_out", "manual__2026-11-22T10:00:00+00:00", {}, params=None)
    assert ctx.docs_dir == tmp_path / "docs" / "kafka_scale_out" / "manual__2026-11-22T10_00_00_00_00"
