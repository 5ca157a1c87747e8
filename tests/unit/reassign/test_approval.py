"""The approval body (Markdown for Airflow's Required actions page) and its ETA, over plans of the
named fixture clusters."""
from __future__ import annotations

import pytest

from kafkaops.model import Broker, Cluster, Move, PartitionAssignment
from kafkaops.reassign import approval, records, steps
from kafkaops.reassign.planner import Goals, plan_drain, plan_rebalance, plan_scale_out
from tests.unit.clusters import three_brokers_one_topic
from tests.unit.reassign.planner.clusters import skewed_four_brokers


def scale_out():
    """orders (3 partitions of 1000, 2000, 3000 bytes) on brokers 1-3, plus broker 4 on a rack of its own."""
    return plan_scale_out(three_brokers_one_topic(), [Broker(4, rack="d")])


def test_scale_out_body_shows_moves_bytes_per_broker_throttle_eta_distribution_and_the_new_broker() -> None:
    plan = scale_out()
    text = approval.approval_markdown(plan, steps.OperationParams(kind="scale_out", add_brokers=1))
    assert text.startswith("scale-out: 2 partitions change, 2 replica moves (the fewest possible), "
                           "2 leader changes, 4.9 KiB to copy.\n")
    assert ("**Throttle** 10 MB/s per broker, in and out. **ETA** 00:00:01 at the throttle: 4.9 KiB to copy in "
            "1 batch of at most 5 moves per broker and 20 in total") in text
    assert "| orders-1 | 2, 3, 1 | 3, 4, 1 | 2.0 KiB |\n| orders-2 | 3, 1, 2 | 4, 1, 2 | 2.9 KiB |" in text
    # broker 4 receives both copies; the leaders before (2 of orders-1, 3 of orders-2) send them
    assert "| 4 (new) | 0 → 2 | 0 → 1 | 0 B → 4.9 KiB | 4.9 KiB | 0 B |" in text
    assert "| 2 | 3 → 2 | 1 → 0 | 5.9 KiB → 3.9 KiB | 0 B | 2.0 KiB |" in text
    assert "| 3 | 3 → 2 | 1 → 1 | 5.9 KiB → 2.9 KiB | 0 B | 2.9 KiB |" in text
    assert ("- Broker 4 is new and not running yet: approving provisions it with the kafka_broker role and waits "
            "until the controller registers it; it holds replicas once these moves ran.") in text
    assert "- Approving then sets the throttle" in text
    assert ("- Rejecting changes nothing: no broker is started, no partition moves. The run then ends failed in "
            "Airflow and its record says rejected.") in text
    assert ("- If the run fails after that, it is stopped, removed and unregistered unless it holds replicas by "
            "then; the record names any that stay.") in text
    assert "will be stopped" not in text and "lower bound" not in text
    kept = approval.approval_markdown(scale_out(), steps.OperationParams(kind="scale_out", add_brokers=1,
                                                                         keep_new_brokers=True))
    assert ("- If the run fails after that, it keeps running (keep_new_brokers is on); the record names it."
            in kept), kept


def test_moves_beyond_the_cap_are_counted() -> None:
    text = approval.approval_markdown(scale_out(), steps.OperationParams(kind="scale_out", add_brokers=1), shown=1)
    assert "| orders-1 |" in text and "| orders-2 |" not in text
    assert "\nand 1 more\n" in text


@pytest.mark.parametrize("stop, says", [
    (True, "- Then broker 4 **will be stopped** (stop_drained is set), once the post-move gate passed."),
    (False, "- Broker 4 will hold no replicas and **keep running** (stop_drained is off)."),
])
def test_drain_body_says_whether_the_drained_broker_is_stopped(stop: bool, says: str) -> None:
    """Drain the broker the scale-out filled, as the demo does."""
    plan = plan_drain(scale_out().after, [4])
    params = steps.OperationParams(kind="drain", drain_brokers=(4,), stop_drained=stop, throttle_mb_per_s=0.001)
    text = approval.approval_markdown(plan, params)
    assert says in text
    assert "is new" not in text
    # orders-1 (2000 bytes, led by 3) goes to 2, orders-2 (3000 bytes, led by 4) to 3, in one batch: the busiest
    # broker moves 3000 bytes, 3 s at 1000 B/s
    assert "| 4 (drained) | 2 → 0 | 1 → 0 | 4.9 KiB → 0 B | 0 B | 2.9 KiB |" in text
    assert "| 3 | 2 → 3 | 1 → 1 | 2.9 KiB → 5.9 KiB | 2.9 KiB | 2.0 KiB |" in text
    assert "**ETA** 00:00:03 at the throttle" in text
    assert "**Drain** 2 replica moves: broker 4 holds 2 replicas, each moved to the broker furthest below" in text
    assert "Nothing else moves: the brokers that stay keep their replica spread" in text


def test_a_drain_with_a_rebalance_after_shows_both_parts_apart() -> None:
    plan = plan_drain(skewed_four_brokers(), [1], rebalance_after=True)
    text = approval.approval_markdown(plan, steps.OperationParams(kind="drain", drain_brokers=(1,),
                                                                  rebalance_after=True))
    assert "**Drain** 8 replica moves: broker 1 holds 8 replicas" in text
    assert "**Rebalance after** 2 replica moves more, to even out the brokers that stay" in text
    assert "Nothing else moves" not in text


def test_leader_only_changes_are_shown_apart_from_the_moves_and_turned_off_by_a_param() -> None:
    # broker 1 leads all six partitions of t on 1-3: evening leaders reorders four, moving nothing
    cluster = Cluster(tuple(Broker(i) for i in (1, 2, 3)),
                      tuple(PartitionAssignment("t", p, (1, 2, 3)) for p in range(6)))
    params = steps.OperationParams.from_params("rebalance", {})
    assert params.balance_leaders
    text = approval.approval_markdown(plan_rebalance(cluster), params)
    assert ("**Leaders** 4 preferred leader changes, elected once the moves ran: 4 leader-only (the partition "
            "keeps its replicas in a new order: no data moves), 0 with the partitions' moves.") in text
    off = steps.OperationParams.from_params("rebalance", {"balance_leaders": False})
    assert not off.balance_leaders
    assert plan_rebalance(cluster, Goals(leaders=off.balance_leaders)).moves == ()
    moved = approval.approval_markdown(scale_out(), steps.OperationParams(kind="scale_out", add_brokers=1))
    assert "elected once the moves ran, all with the partitions' moves (no leader-only change)." in moved


def test_a_drained_broker_that_is_the_only_in_sync_replica_is_named_and_its_partitions_go_first() -> None:
    # orders on 1-4 at RF 2; orders-2 and orders-5 are in sync only on broker 1, which is drained
    parts = tuple(PartitionAssignment("orders", p, (1 + p % 4, 1 + (p + 1) % 4), leader=1 + p % 4,
                                      isr=(1,) if p in (4, 0) else (1 + p % 4, 1 + (p + 1) % 4), size_bytes=10 * p)
                  for p in range(8))
    cluster = Cluster(tuple(Broker(i) for i in (1, 2, 3, 4)), parts)
    plan = plan_drain(cluster, [1])
    params = steps.OperationParams(kind="drain", drain_brokers=(1,), max_moves_per_broker=1)
    text = approval.approval_markdown(plan, params)
    assert ("**Only in-sync copy** broker 1 holds the only in-sync replicas of 2 partitions this plan moves away "
            "(orders-0, orders-4): they are under-replicated now and their data is only there until the new "
            "replicas catch up. They move in the first batches; keep it running until the run has ended.") in text
    assert "Only in-sync copy" not in approval.approval_markdown(plan_drain(skewed_four_brokers(), [1]), params)


def test_the_body_is_what_the_plan_task_returns() -> None:
    plan = scale_out()
    params = steps.OperationParams(kind="scale_out", add_brokers=1)
    data = records.PlannedReassignment(plan, plan.summary(), 0.0, "").to_dict()
    assert steps.approval_text(data, params) == approval.approval_markdown(plan, params)


def test_eta_sums_batches_each_as_long_as_its_busiest_broker() -> None:
    """Two 1 MB copies from different leaders to different brokers: 1 s side by side, 2 s when the
    caps put them in two batches; bytes in and out land on the receiving and the leading broker."""
    moves = [Move("t", 0, (1, 2), (1, 3), 1_000_000), Move("t", 1, (2, 1), (2, 4), 1_000_000)]
    together = approval.traffic(moves, throttle_bytes_per_s=1e6, max_moves_per_broker=5, max_moves_total=20)
    assert (together.batches, together.eta_s) == (1, 1.0)
    assert together.bytes_in == {3: 1_000_000, 4: 1_000_000} and together.bytes_out == {1: 1_000_000, 2: 1_000_000}
    apart = approval.traffic(moves, throttle_bytes_per_s=1e6, max_moves_per_broker=5, max_moves_total=1)
    assert (apart.batches, apart.eta_s) == (2, 2.0)
    # the current leader sends, when it is a replica; else the first replica
    led = approval.traffic(moves, throttle_bytes_per_s=1e6, max_moves_per_broker=5, max_moves_total=20,
                           leaders={("t", 0): 2, ("t", 1): 7})
    assert led.bytes_out == {2: 2_000_000} and led.eta_s == 2.0


def test_nothing_to_move_says_so() -> None:
    plan = plan_scale_out(three_brokers_one_topic(), [])  # no new broker: nothing moves
    text = approval.approval_markdown(plan, steps.OperationParams(kind="scale_out", add_brokers=1))
    assert "Nothing to move" in text and "#### Moves" not in text
