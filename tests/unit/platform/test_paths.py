"""One sanitiser makes run ids, DAG ids and cluster ids artifact path segments."""
from __future__ import annotations

import pytest

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


def test_the_artifacts_of_a_run_go_under_its_safe_name() -> None:
    from kafkaops.platform.lifecycle import OperationContext

    ctx = OperationContext("kafka_scale_out", "manual__2026-11-22T10:00:00+00:00", {}, params=None)
    assert ctx.artifact_prefix == "kafka_scale_out/manual__2026-11-22T10_00_00_00_00"
