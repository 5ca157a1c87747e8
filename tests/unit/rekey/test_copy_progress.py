"""The progress line a backfill pass logs while Spark runs (kafkaops.rekey.backfill.CopyProgress)."""
from __future__ import annotations

import pytest

from kafkaops.platform.render import duration
from kafkaops.rekey.backfill import CopyProgress


def test_half_way_the_line_gives_the_share_the_rate_and_the_time_left() -> None:
    now = CopyProgress(written=100_000, total=200_000, elapsed_s=20.0)
    assert now.rate == 5_000 and now.eta_s == 20.0
    assert now.line("backfill", duration) == ("backfill: about 50% (100,000 of 200,000 records) after 20.0 s, "
                                              "5,000 records/s, ETA 20.0 s")


def test_before_anything_is_written_it_says_spark_is_starting() -> None:
    now = CopyProgress(written=0, total=200_000, elapsed_s=15.0)
    assert now.rate is None and now.eta_s is None
    assert "Spark is starting (ETA unknown yet)" in now.line("pass2", duration)


@pytest.mark.parametrize("checking, rest", [(True, "checking the whole copy"), (False, "committing and finishing")])
def test_once_written_it_says_what_spark_still_does(checking: bool, rest: str) -> None:
    # transaction markers take offsets too: written may pass the total
    now = CopyProgress(written=200_012, total=200_000, elapsed_s=75.0, checking=checking)
    assert now.eta_s == 0.0
    assert now.line("backfill", duration) == (f"backfill: 200,000 of 200,000 records written after 1 min 15 s; "
                                              f"Spark is {rest}")


def test_an_empty_pass_reads_as_written() -> None:
    assert "0 of 0 records written" in CopyProgress(written=0, total=0, elapsed_s=3.0).line("pass3", duration)


def test_the_rate_is_the_recent_one_not_one_diluted_by_sparks_start() -> None:
    first = CopyProgress(written=3_000, total=10_000, elapsed_s=20.0)  # 18 s of start-up, then 2 s of writing
    assert first.rate == 150
    later = CopyProgress(written=7_000, total=10_000, elapsed_s=22.0, previous=(20.0, 3_000))
    assert later.rate == 2_000 and later.eta_s == 1.5
    stalled = CopyProgress(written=7_000, total=10_000, elapsed_s=24.0, previous=(22.0, 7_000))
    assert stalled.rate is None and "nothing written since the last line (ETA unknown yet)" in stalled.line("b", duration)
