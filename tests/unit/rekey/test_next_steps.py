"""A partition increase's closing "what to do now" (kafkaops.rekey.steps.next_steps, left_topics) and the
generic one every outcome gets (kafkaops.platform.lifecycle.NEXT_STEPS), folded into the record."""
from __future__ import annotations

import pytest

from kafkaops.model import Broker, Cluster, PartitionAssignment
from kafkaops.platform import lifecycle, state
from kafkaops.rekey.steps import PartitionParams, PartitionPlan, left_topics, next_steps
from tests.unit.rekey.test_partition_approval import SNAPSHOT, migrate_plan

SNAPSHOT_PARAMS = PartitionParams.from_params({"topic": "orders", "new_partition_count": 12})
LIVE_PARAMS = PartitionParams.from_params({"topic": "orders", "new_partition_count": 12, "quiesce": "manual"})


def cluster(*topics: str) -> Cluster:
    return Cluster(brokers=(Broker(1),), partitions=tuple(PartitionAssignment(t, 0, (1,)) for t in topics))


def test_a_live_migration_that_switched_says_the_source_is_no_longer_written_and_when_to_delete_it() -> None:
    text = next_steps(migrate_plan(), LIVE_PARAMS, "success", ())
    assert "Producers and consumers run on orders.v2" in text and "delete it" in text
    assert f"{SNAPSHOT.dead_letter_topic} holds the records the key rule found no key in" in text


def test_a_snapshot_migration_says_what_is_not_copied_and_the_order_of_the_moves() -> None:
    text = next_steps(migrate_plan(), SNAPSHOT_PARAMS, "success", ())
    assert "as it was at the snapshot" in text and "are not in it" in text
    assert text.index("consumers") < text.index("producers")


def test_an_in_place_growth_names_the_new_count_and_when_producers_use_it() -> None:
    plan = PartitionPlan("in_place", "orders", 3, 5, 3, assignment=((1, 2, 3), (2, 3, 1)))
    text = next_steps(plan, SNAPSHOT_PARAMS, "success", ())
    assert "orders has 5 partitions now" in text and "metadata.max.age.ms" in text


def test_a_failed_migration_names_the_topics_it_made_and_the_way_on() -> None:
    plan = migrate_plan()
    left = left_topics(plan, cluster("orders"), cluster("orders", "orders.v2", SNAPSHOT.dead_letter_topic))
    assert left == ("orders.v2", SNAPSHOT.dead_letter_topic)
    text = next_steps(plan, SNAPSHOT_PARAMS, "failed", left)
    assert text.startswith(lifecycle.NEXT_STEPS["failed"])
    assert f"orders.v2 and {SNAPSHOT.dead_letter_topic}, made by this run, stay" in text


def test_a_failed_streams_migration_names_every_copy_it_made() -> None:
    from dataclasses import replace

    from kafkaops.rekey.streams import InputMove, Store, StoreKind, StoreMove, StreamsPlan

    store = Store("counts", "app-counts-changelog", 3, StoreKind.KEY_VALUE, "test")
    made = StreamsPlan("app", "app-p12", 3, 12, (InputMove("orders", "orders.v2"),),
                       (StoreMove(store, "app-p12-counts-changelog"),))
    plan = replace(migrate_plan(), streams=made.to_dict())
    after = cluster("orders", "orders.v2", SNAPSHOT.dead_letter_topic, "app-p12-counts-changelog")
    assert left_topics(plan, cluster("orders"), after) == ("orders.v2", SNAPSHOT.dead_letter_topic,
                                                          "app-p12-counts-changelog")


def test_a_target_that_existed_before_the_run_is_not_said_to_be_made_by_it() -> None:
    assert left_topics(migrate_plan(), cluster("orders", "orders.v2"), cluster("orders", "orders.v2")) == ()
    assert left_topics(None, None, cluster("orders")) == ()


@pytest.mark.parametrize("outcome", ["dry_run", "rejected", "refused", "abandoned"])
def test_other_outcomes_get_the_generic_sentence(outcome: str) -> None:
    assert next_steps(migrate_plan(), SNAPSHOT_PARAMS, outcome, ()) == lifecycle.NEXT_STEPS[outcome]
    assert next_steps(None, SNAPSHOT_PARAMS, outcome, ()) == lifecycle.NEXT_STEPS[outcome]


def test_every_outcome_has_a_closing_sentence_and_the_record_carries_it_for_its_attempt_only() -> None:
    assert set(lifecycle.NEXT_STEPS) >= {"success", "dry_run", "rejected", "refused", "failed", "abandoned"}
    assert lifecycle.next_steps_of("unknown")

    def event(kind: str, ts: float, **data: object) -> state.AuditEvent:
        return state.AuditEvent(kind=kind, ts=ts, data=data)

    first = [event("started", 1.0, operation="x"), event("outcome", 2.0, outcome="failed", reason="r",
                                                           next_steps="do this")]
    assert state.summarize(first)["next_steps"] == "do this"
    assert "next_steps" not in state.summarize([*first, event("started", 3.0, operation="x")])


def test_a_record_whose_plan_this_kafkaops_cannot_read_has_none() -> None:
    from kafkaops.rekey.steps import _recorded_plan

    assert _recorded_plan({"plan": {"plan": {"mode": "migrate"}}}) is None  # an older record's shape
    assert _recorded_plan({"plan": None}) is None and _recorded_plan({}) is None
    assert _recorded_plan({"plan": {"plan": migrate_plan().to_dict()}}) == migrate_plan()
