"""The partition increase's approval body: the plan as tables, the capacity advice, the cut-over and the
steps after approval, for a live migration, a snapshot copy and an in-place growth."""
from __future__ import annotations

import re

from kafkaops.platform.recommendations import PartitionRecommendation
from kafkaops.rekey.records import CapacityAdvice
from kafkaops.rekey.backfill import BackfillPlan
from kafkaops.rekey.steps import KeyChange, KeySample, PartitionParams, PartitionPlan, approval_markdown

SNAPSHOT = BackfillPlan("orders", ((0, 0, 40_000), (1, 0, 40_000), (2, 0, 40_000)), "orders.v2", 12, "field:customer")


def migrate_plan() -> PartitionPlan:
    return PartitionPlan("migrate", "orders", 3, 12, 3, backfill=SNAPSHOT.to_dict(),
                         key_change=KeySample(1000, 2))


def rows(text: str) -> dict[str, list[str]]:
    """The markdown table rows of ``text``: first cell -> the other cells."""
    found = {}
    for line in text.splitlines():
        if line.startswith("|") and not line.startswith("|---"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            found[cells[0]] = cells[1:]
    return found


def steps_of(text: str) -> list[str]:
    return [m.group(1) for m in re.finditer(r"^\d+\. (.*)$", text.split("#### What follows", 1)[1], re.M)]


def test_a_live_migration_shows_source_and_target_side_by_side_and_every_step_in_the_dags_order() -> None:
    advice = CapacityAdvice(PartitionRecommendation("prod-a", "orders", 9, "x", "r1", 1_795_426_813.0), chosen=12)
    assert advice.text == ("The capacity review of 2026-11-23 09:40:13 UTC recommends 9 partitions for orders (x); "
                           "you chose 12: allowed, but it is more than the review's count")
    params = PartitionParams(topic="orders", new_partition_count=12, quiesce="manual", cutover_groups="late.readers")
    text = approval_markdown(migrate_plan(), params, advice)
    assert text.startswith("Migrate **orders** into **orders.v2**: 3 → 12 partitions, keyed by field:customer.")
    table = rows(text)
    assert table["Topic"] == ["orders", "orders.v2"] and table["Partitions"] == ["3", "12"]
    assert table["Records"][0] == "120,000 in the snapshot" and "catch-up passes" in table["Records"][1]
    assert table["Dead letters"][1] == "orders.v2.dlq: records without a key (2 of 1,000 sampled)"
    assert "recommends 9 partitions for orders" in text.split("#### Capacity review", 1)[1]
    assert "Live cut-over (quiesce=manual)" in text.split("#### Cut-over", 1)[1]
    done = steps_of(text)
    assert [s.split()[0] for s in done] == ["Create", "Copy", "Catch-up", "Verify", "Wait", "The"]
    assert "late.readers" in done[4] and "for the group itself" in done[4]
    assert "second approval" in done[5]
    assert not re.search(r"\{[\"']|\['|\.\.$", text, re.M), f"raw reprs or a doubled period:\n{text}"


def test_a_snapshot_copy_says_nothing_is_committed_without_a_suffix_and_where_it_commits_with_one() -> None:
    bare = approval_markdown(migrate_plan(), PartitionParams(topic="orders", new_partition_count=12))
    assert "records written to orders after the snapshot are not copied" in bare
    assert "No capacity review of this cluster recommends a partition count for orders." in bare
    assert [s.split()[0] for s in steps_of(bare)] == ["Create", "Copy", "Verify", "Translate"]
    assert "nothing is committed" in steps_of(bare)[-1]
    suffixed = approval_markdown(migrate_plan(), PartitionParams(topic="orders", new_partition_count=12,
                                                                 cutover_group_suffix=".v2"))
    assert steps_of(suffixed)[-1].endswith("commit them for <group>.v2.")


def test_an_in_place_growth_lists_each_new_partitions_replicas_and_the_keys_that_move() -> None:
    plan = PartitionPlan("in_place", "orders", 3, 5, 3, assignment=((1, 2, 3), (2, 3, 1)),
                         key_change=KeyChange(sampled_records=120, keyed_records=100, distinct_keys=100, moved_keys=40,
                                              moved_records=40, old_partitions=3, new_partitions=5))
    text = approval_markdown(plan, PartitionParams(topic="orders", new_partition_count=5, mode="in_place"))
    assert text.startswith("Grow **orders** in place: 3 → 5 partitions.")
    table = rows(text)
    assert table["3"] == ["1, 2, 3"] and table["4"] == ["2, 3, 1"] and table["Partitions"] == ["3", "5"]
    assert ("40 of 100 distinct keys (40 of 100 keyed records, 40.0%) in a sample of 120 would change partition "
            "going from 3 to 5 partitions.") in text
    assert steps_of(text) == ["Add partitions 3-4 to orders; its records stay where they are, so the keys above "
                              "change partition for new records only."]
    assert "#### Cut-over" not in text


def test_a_plans_key_change_round_trips_as_its_own_type() -> None:
    from kafkaops.rekey.steps import key_change_of

    change = KeyChange(sampled_records=120, keyed_records=100, distinct_keys=100, moved_keys=40, moved_records=40,
                       old_partitions=3, new_partitions=5)
    grown = PartitionPlan("in_place", "orders", 3, 5, 3, assignment=((1, 2, 3), (2, 3, 1)), key_change=change)
    assert PartitionPlan.from_dict(grown.to_dict()) == grown
    assert grown.to_dict()["key_change"]["summary"] == change.summary()
    assert PartitionPlan.from_dict(migrate_plan().to_dict()).key_change == KeySample(1000, 2)
    assert key_change_of({}) is None and key_change_of(None) is None
    assert PartitionPlan.from_dict({**grown.to_dict(), "key_change": {}}).key_change is None
