"""The live migration's pure decisions: the lag behind the copy, when the catch-up stops, when a topic
counts as still, the operator's limits refused before anything changes, and the switch request."""
from __future__ import annotations

import pytest

from kafkaops.errors import ConfigError
from kafkaops.rekey import migration, tail
from kafkaops.rekey.backfill import BackfillPlan
from kafkaops.capacity.records import ReportNote
from kafkaops.platform.recommendations import Published, Recommended
from kafkaops.rekey.records import Cutover
from kafkaops.rekey.steps import PartitionParams

PASS = BackfillPlan("orders", ((0, 0, 100), (1, 0, 50), (2, 0, 0)), "orders.v2", 12).next_pass({0: 120, 1: 50, 2: 7})


@pytest.mark.parametrize(("lag", "elapsed", "quiesce", "words"), [
    (1000, 0.0, True, "at or below the threshold of 1,000"),
    (1000, 900.0, True, "at or below the threshold of 1,000"),  # the threshold first
    (5000, 600.0, False, "5,000 record(s) behind, the source written at 2,500 records/s and copied at 2,000"),
    (1001, 10.0, None, None),
])
def test_the_catch_up_asks_for_the_quiesce_within_the_threshold_and_abandons_past_the_budget(lag, elapsed, quiesce,
                                                                                           words) -> None:
    progress = tail.TailProgress(lag, 2500.0, 2000.0, elapsed, 7, 20_000)
    verdict = migration.catch_up_verdict(progress, migration.LivePolicy(quiesce="manual"))
    assert verdict is None if words is None else (verdict.quiesce is quiesce and words in verdict.why)


def test_the_acl_fence_waits_half_a_second_of_stillness_and_the_manual_quiesce_its_quiet_period() -> None:
    assert migration.quiet_period(migration.LivePolicy(quiesce="manual", quiet_s=10)) == 10
    assert migration.quiet_period(migration.LivePolicy(quiesce="acl", principals=("User:a",), quiet_s=10)) == 0.5
    assert migration.quiet_period(migration.LivePolicy(quiesce="acl", principals=("User:a",), quiet_s=0.2)) == 0.2


def test_a_topic_is_still_once_its_end_offsets_stayed_the_same_for_the_quiet_period() -> None:
    still = migration.Stillness(3.0)
    assert not still.see(0.0, {0: 5})
    assert not still.see(2.9, {0: 5})
    assert not still.see(3.5, {0: 6})  # moved: the quiet period starts again
    assert not still.see(6.0, {0: 6})
    assert still.see(6.5, {0: 6})


@pytest.mark.parametrize(("params", "words"), [
    ({"quiesce": "sometimes"}, "quiesce 'sometimes' is unknown"),
    ({"quiesce": "acl"}, "needs the producers' principals"),
    ({"quiesce": "acl", "quiesce_principals": "orders-app"}, "not Kafka principals"),
    ({"quiesce": "manual", "quiet_s": 900, "quiesce_timeout_s": 900}, "must be shorter than quiesce_timeout_s"),
    ({"quiesce": "manual", "mode": "in_place"}, "needs mode=migrate"),
    ({"quiesce": "manual", "switch_timeout_s": 0}, "switch_timeout_s is 0"),
])
def test_bad_live_limits_are_refused_before_anything_changes(params, words) -> None:
    with pytest.raises(ConfigError, match="nothing was changed") as err:
        PartitionParams.from_params({"topic": "orders", "new_partition_count": 12, **params})
    assert words in str(err.value)


def test_the_form_defaults_give_a_snapshot_migration_and_acl_principals_split() -> None:
    p = PartitionParams.from_params({"topic": "orders", "new_partition_count": 12})
    assert not p.policy.live and p.policy.quiesce == "none"
    acl = PartitionParams.from_params({"topic": "orders", "new_partition_count": 12, "quiesce": "acl",
                                       "quiesce_principals": "User:a, User:b"})
    assert acl.policy.principals == ("User:a", "User:b") and acl.policy.live


def test_the_switch_request_names_topics_groups_and_offsets_in_partition_order() -> None:
    # as it comes through XCom: JSON, partitions as text
    text = migration.switch_request(Cutover.from_dict({"source_topic": "orders", "target_topic": "orders.v2", "groups": {
        "billing": {"target": {"10": 7, "2": 3}, "redelivered": 0, "committed_for": "billing"}}}))
    assert "from orders to orders.v2" in text and "Reject abandons" in text
    assert "| billing | billing | 2: 3, 10: 7 | 0 |" in text
    assert "No consumer group" in migration.switch_request(Cutover("s", "t", {}))


@pytest.mark.parametrize(("given", "roll_back", "fails", "words"), [
    (dict(planned=False), False, False, "nothing was planned"),
    (dict(dry_run=True, failed=["plan"]), False, True, "step(s) plan failed; nothing was planned or changed"),
    (dict(live=False), False, False, "not a live migration"),
    (dict(switch=True), False, False, "the switch was made"),
    (dict(switch=False), True, True, "the switch was refused"),
    (dict(), True, True, "stopped before the switch"),
    (dict(failed=["quiesce", "verify"]), True, True, "quiesce failed: producers did not stop; verify failed: see its log"),
    (dict(failed=["quiesce"], steps=[{"name": "quiesce", "status": "success"},
                                     {"name": "final_pass", "status": "success"},
                                     {"name": "verify", "status": "failed", "error": "GateFailed: 1 of 9 failed"}]),
     True, True, "quiesce failed at its step verify: GateFailed: 1 of 9 failed"),
])
def test_the_abandon_step_rolls_back_only_a_live_migration_stopped_before_the_switch(given, roll_back, fails,
                                                                                       words) -> None:
    args = dict(planned=True, dry_run=False, live=True, failed=[], switch=None,
                steps=[{"name": "quiesce", "status": "failed", "error": "producers did not stop"},
                       {"name": "plan", "status": "success"}])
    decision = migration.abandon_decision(**{**args, **given})
    assert (decision.roll_back, decision.fails) == (roll_back, fails) and words in decision.text
    assert decision.release == (given == dict(switch=True))  # the ACL goes after a confirmed switch too


def test_the_newest_capacity_review_of_the_topic_is_shown_beside_the_chosen_count(local_store) -> None:
    """Reviews publish through capacity.records.ReportNote (r1: a note in the raw shape reviews wrote
    before it); the partition increase finds them through the platform's query, by cluster and topic."""
    from kafkaops.rekey.steps import capacity_advice

    def review(run_id: str, at: float, outcome: str, recommended: list, cluster: str = "prod-a") -> None:
        dag = "kafka_capacity_review"
        local_store.start_operation(dag, run_id, kind="capacity_review", triggered_by="cron", params={}, at=at)
        local_store.append_event(dag, run_id, "started", {"operation": "capacity_review"}, ts=at)
        note = {"text": "capacity report", "cluster_id": cluster, "recommended": recommended} if run_id == "r1" else \
            ReportNote("capacity report", None, published=Published(cluster, tuple(
                Recommended.from_dict(r) for r in recommended))).to_dict()
        local_store.append_event(dag, run_id, "note", note, ts=at + 1)
        local_store.update_operation(dag, run_id, state="finished", outcome=outcome)

    def partitions(topic: str, n: int) -> dict:
        return {"kind": "partitions", "subject": f"topic {topic}", "value": n,
                "message": f"topic {topic}: {n} partitions = max(ceil(9000 / 1000) = 9, 4 consumers) rounded up"}

    assert capacity_advice(local_store, "prod-a", "orders", 12) is None  # no review yet
    review("r1", 1_795_426_812.0, "success", [partitions("orders", 9), partitions("payments", 6)])
    review("r2", 1_795_430_000.0, "failed", [partitions("orders", 30)])  # a failed review is not advice
    review("r3", 1_795_431_000.0, "success", [{"kind": "brokers", "subject": "cluster", "value": 4, "message": "x"}])
    # the newest review recommending for "orders" is of another cluster: not advice for prod-a
    review("r4", 1_795_432_000.0, "success", [partitions("orders", 48)], cluster="staging")
    advice = capacity_advice(local_store, "prod-a", "orders", 12)
    assert advice is not None
    recorded = advice.to_dict()  # what the plan records
    assert (recorded["run_id"], recorded["recommended"], recorded["differs"]) == ("r1", 9, True)
    assert "The capacity review of 2026-11-23 09:40:13 UTC recommends 9 partitions for orders" in recorded["text"]
    assert "you chose 12: allowed, but it is more than the review's count" in advice.text
    assert capacity_advice(local_store, "prod-a", "payments", 6).text.endswith("the same count")
    assert capacity_advice(local_store, "staging", "orders", 48).recommendation.run_id == "r4"
    assert capacity_advice(local_store, "staging", "payments", 6) is None
    assert capacity_advice(local_store, None, "orders", 12) is None  # a cluster without an id matches none
    # an empty new_partition_count takes the review's count when it is larger than now, else doubles
    from kafkaops.rekey.steps import new_partition_count_for

    assert new_partition_count_for(local_store, "prod-a", "orders", 3, 5) == (5, "")  # given: as given
    count, why = new_partition_count_for(local_store, "prod-a", "orders", 3, None)
    assert count == 9 and why.startswith("the count the capacity review of 2026-11-23 09:40:13 UTC recommends")
    assert new_partition_count_for(local_store, "prod-a", "orders", 9, None)[0] == 18  # not larger: twice
    count, why = new_partition_count_for(local_store, "prod-a", "refunds", 4, None)
    assert count == 8 and "twice the current 4" in why and "no capacity review recommends" in why


def test_the_approval_says_what_the_cut_over_will_do_in_each_quiesce_mode() -> None:
    snapshot = migration.cutover_summary(migration.LivePolicy(), "orders")
    assert "records written to orders after the snapshot are not copied" in snapshot
    manual = migration.cutover_summary(migration.LivePolicy(quiesce="manual", catch_up_lag_records=5000), "orders")
    assert manual.startswith("Live cut-over (quiesce=manual): after the backfill a tail copy follows orders, each part "
                             "checked before it is committed, until it is at most 5,000 records behind")
    assert "you are asked (in the run's record) to stop the producers of orders" in manual
    assert "not still for 10 s within 900 s" in manual and "second approval" in manual
    acl = migration.cutover_summary(migration.LivePolicy(quiesce="acl", principals=("User:a", "User:b")), "orders")
    assert "kafkaops denies Write on orders to User:a, User:b (a DENY ACL" in acl and "not still for 0.5 s within" in acl
    # what the fence does to a running producer, as tests/integration/rekey/test_acl_fence.py measures it
    assert "refused at once with TOPIC_AUTHORIZATION_FAILED, which producers do not retry" in acl
    assert "A producer with acks=0 gets no answer" in acl and "Other principals are not stopped" in acl


def test_the_finish_names_the_step_that_failed_not_the_abandon_that_failed_the_run_after_it(local_store) -> None:
    """A plan refused (no partition to add): abandon then fails on purpose so nothing after it runs; the headline
    names the plan, not abandon "before it recorded a step", and the run is refused, not failed."""
    from kafkaops.rekey import steps

    dag = "kafka_partition_increase"
    local_store.start_operation(dag, "r1", kind="partition_increase", triggered_by="t", params={})
    ctx = steps.context({}, {"topic": "orders", "new_partition_count": 6}, dag_id=dag, run_id="r1")
    ctx.audit.append("started", operation="partition_increase")
    ctx.step("plan", "failed", error="ConfigError: topic orders has 6 partitions; new_partition_count 6 must be larger",
             refusal=True)
    done = steps.finish(ctx, None, failed_tasks=["plan", "abandon"])
    assert done["outcome"] == "refused", done
    assert done["reason"].startswith("refused at plan, before anything changed: ConfigError"), done
    assert "abandon" not in done["reason"]
