"""Which copy a run of a backfill writes (kafkaops.rekey.backfill.choose_copy, after_direct_pass): pure,
with the probes (an exact count of spanning keys, a sample of the source) as stand-ins that record each
call. spark_apps/rekey_backfill.run only carries the choice out; tests/integration/rekey/test_backfill.py
runs it on a cluster."""
from __future__ import annotations

from dataclasses import replace

import pytest

from kafkaops.rekey.backfill import (DIRECT, MERGED, BackfillError, BackfillPlan, CommittedOutput, after_direct_pass,
                                     choose_copy)

BY_VALUE = BackfillPlan("orders", ((0, 0, 100), (1, 0, 100)), "orders.v2", 6, "field:account")
BY_KEY = replace(BY_VALUE, key_rule="record_key")
CATCH_UP = BY_KEY.next_pass({0: 150, 1: 120})
NOTHING = CommittedOutput(None, 0)


class Probes:
    """The two probes of choose_copy, answering ``spanning`` and ``sample``, recording the calls."""

    def __init__(self, spanning: int = 0, sample: bool = False) -> None:
        self.answers = (spanning, sample)
        self.calls: list[str] = []

    def choose(self, plan: BackfillPlan, before: CommittedOutput):
        def spanning_keys() -> int:
            self.calls.append("count")
            return self.answers[0]

        def sample_spans() -> bool:
            self.calls.append("sample")
            return self.answers[1]

        return choose_copy(plan, before, spanning_keys=spanning_keys, sample_spans=sample_spans)


@pytest.mark.parametrize("plan", [BY_KEY, BY_VALUE], ids=["record key", "value rule"])
def test_a_fresh_copy_whose_sample_shows_nothing_is_direct_and_left_to_its_own_pass(plan: BackfillPlan) -> None:
    probes = Probes()
    choice = probes.choose(plan, NOTHING)
    assert (choice.mode, choice.checked_by_pass, choice.catch_up, choice.rewrite) == (DIRECT, True, False, False)
    assert choice.describe() == "direct copy"
    assert probes.calls == (["sample"] if plan.rule.needs_value else [])  # the record key needs no sample


def test_a_value_rule_whose_sample_shows_a_spanning_key_goes_merged_at_once() -> None:
    probes = Probes(sample=True)
    choice = probes.choose(BY_VALUE, NOTHING)
    assert (choice.mode, choice.checked_by_pass) == (MERGED, False)
    assert choice.describe() == "merged copy (a sample of the source has a key in two source partitions)"
    assert probes.calls == ["sample"]


@pytest.mark.parametrize("plan", [BY_KEY, BY_VALUE, CATCH_UP], ids=["record key", "value rule", "catch-up"])
def test_a_copy_resumes_as_what_earlier_runs_began_without_probing(plan: BackfillPlan) -> None:
    probes = Probes(spanning=5, sample=True)
    merged = probes.choose(plan, CommittedOutput(MERGED, 40))
    assert (merged.mode, merged.reason, merged.checked_by_pass) == (MERGED, "the merged copy was begun before", False)
    direct = probes.choose(plan, CommittedOutput(DIRECT, 40))
    assert (direct.mode, direct.checked_by_pass) == (DIRECT, True)  # its pass checks every key, also the resumed
    assert probes.calls == []


@pytest.mark.parametrize(("spanning", "mode", "words"), [
    (0, DIRECT, "every key of this pass has its records in one source partition (an exact count before writing)"),
    (3, MERGED, "3 key(s) of this pass have records in more than one source partition (an exact count"),
])
def test_a_catch_up_pass_decides_by_an_exact_count_before_writing(spanning: int, mode: str, words: str) -> None:
    probes = Probes(spanning=spanning, sample=True)
    choice = probes.choose(CATCH_UP, NOTHING)
    assert (choice.mode, choice.catch_up, choice.checked_by_pass) == (mode, True, False)
    assert words in choice.reason and choice.describe().startswith(f"catch-up pass, {mode} copy (")
    assert probes.calls == ["count"]  # never the sample: the count is exact


def test_a_direct_pass_that_found_no_spanning_key_stands() -> None:
    choice = after_direct_pass(BY_KEY, 0, "no record off its key's home partition")
    assert (choice.mode, choice.rewrite) == (DIRECT, False)
    assert choice.reason == "every key's records are in one source partition (no record off its key's home partition)"


def test_a_direct_pass_that_found_spanning_keys_is_rewritten_merged() -> None:
    choice = after_direct_pass(BY_VALUE, 4, "the copy's key hashes per source partition")
    assert (choice.mode, choice.rewrite) == (MERGED, True)
    assert choice.reason == ("4 key(s) have records in more than one source partition (the copy's key hashes per "
                             "source partition)")


def test_a_catch_up_pass_resumed_as_direct_that_finds_spanning_keys_stops_and_rewrites_nothing() -> None:
    with pytest.raises(BackfillError, match="catch-up pass into orders.v2: 2 key.*stay as written.*start the "
                                            "migration again"):
        after_direct_pass(CATCH_UP, 2, "an exact count of keys per source partition")
    assert after_direct_pass(CATCH_UP, 0, "an exact count").mode == DIRECT
