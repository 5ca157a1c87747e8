"""A reassignment's own events folded (kafkaops.reassign.records): each batch's status from the step that
submitted it, the throttles; the generic record is kafkaops.platform.state's."""
from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from kafkaops.errors import KafkaOpsError
from kafkaops.model import Broker, TopicStorage
from kafkaops.platform.state import AuditEvent
from kafkaops.reassign import approval, records, steps
from kafkaops.reassign.planner import PlanInputError, ReassignmentPlan, plan_rebalance, plan_scale_out
from kafkaops.reassign.records import BatchSubmitted, ThrottleRemoved, ThrottleSet, fold, summarize
from tests.unit.clusters import three_brokers_one_topic
from tests.unit.platform.test_audit import rerun_events
from tests.unit.reassign.planner.clusters import skewed_four_brokers


def batch(ts: float, index: int, remaining: int) -> AuditEvent:
    return AuditEvent(ts, "batch", BatchSubmitted(index, 2, 10, (("orders", index),), remaining).to_dict(),
                      "execute_batches", 1)


def step(ts: float, status: str, try_number: int = 1) -> AuditEvent:
    return AuditEvent(ts, "step", {"name": "execute_batches", "status": status}, "execute_batches", try_number)


def test_a_batch_is_done_when_the_next_is_submitted_or_its_step_succeeds() -> None:
    events = [step(1, "started"), batch(2, 1, 1), batch(5, 2, 0), step(9, "success")]
    record = summarize(events)
    assert [(b["index"], b["status"], b["ended_at"]) for b in record["batches"]] == [(1, "done", 5), (2, "done", 9)]
    assert record["batches"][0]["keys"] == [["orders", 1]] and record["steps"][0]["status"] == "success"
    running = summarize(events[:3])
    assert [b["status"] for b in running["batches"]] == ["done", "submitted"]


def test_a_batch_whose_step_failed_is_failed_until_a_retry_completes_it() -> None:
    events = [step(1, "started"), batch(2, 1, 0), step(3, "failed")]
    assert [b.status for b in fold(events).batches] == ["failed"]
    retried = fold([*events, step(4, "started", 2), step(8, "success", 2)])
    assert [(b.status, b.ended_at) for b in retried.batches] == [("done", 8)]
    died = fold([step(1, "started"), batch(2, 1, 0), AuditEvent(3, "outcome", {"outcome": "failed"})])
    assert [b.status for b in died.batches] == ["unfinished"]


def test_a_rerun_keeps_the_first_attempts_batch_listed_as_never_ended() -> None:
    """An old record's batch event (only its index) reads too."""
    [only] = summarize(rerun_events())["batches"]
    assert (only["ts"], only["index"], only["step"], only["status"], only["ended_at"]) == (
        3, 1, "execute_batches", "unfinished", None)


def test_throttles_set_and_removed_in_this_attempt() -> None:
    set_ = ThrottleSet((1, 4), ("orders",), 1_000_000, {"brokers": [1, 4]})
    events = [AuditEvent(1, "started", {}), AuditEvent(2, "throttle_set", set_.to_dict())]
    assert fold(events).throttles_in_place(1) == ThrottleSet(**{**set_.__dict__, "ts": 2})
    removed = ThrottleRemoved((1, 4), ("orders",), {4: ["leader.replication.throttled.rate"]})
    done = fold([*events, AuditEvent(3, "throttle_removed", removed.to_dict())])
    assert done.throttles_in_place(1) is None and done.throttles_removed[0].left == {
        "4": ("leader.replication.throttled.rate",)}
    assert done.to_dict()["throttles_removed"] == [{"ts": 3, "brokers": [1, 4], "topics": ["orders"],
                                                    "left": {"4": ["leader.replication.throttled.rate"]}}]
    assert fold(events).throttles_in_place(5) is None  # set by an earlier attempt


def test_the_provisioned_brokers_cross_xcom_as_they_were_and_a_skipped_provision_is_none() -> None:
    local = records.NewBroker(4, "rack-b", host="127.0.0.1", port=39001)
    remote = records.NewBroker(5, None, hostname="kafka-5")
    provisioned = records.Provisioned((local, remote))
    data = json.loads(json.dumps(provisioned.to_dict()))
    assert records.Provisioned.from_dict(data) == provisioned and provisioned.ids == [4, 5]
    assert data["new_brokers"][1] == {"id": 5, "rack": None, "hostname": "kafka-5"}
    assert (local.where, remote.where) == ("127.0.0.1:39001", "kafka-5")
    assert records.Provisioned.from_dict(None) == records.Provisioned() == records.Provisioned.from_dict({})


def test_a_progress_event_crosses_the_triggerer_as_the_dict_it_was_and_reads_back_typed() -> None:
    from kafkaops.reassign.engine import Progress

    polled = records.Polled(Progress(1, 3, 2, 600, 2000, 3.0), ("orders-1", "orders-2"))
    done = records.ProgressEvent("done", records.Polled(Progress(3, 3, 0, 2000, 2000, 9.0)))
    stalled = records.ProgressEvent("stalled", polled, 120.0)
    silent = records.ProgressEvent("stalled", None, 120.0)
    for event in (done, stalled, silent):
        data = json.loads(json.dumps(event.to_dict()))
        assert records.ProgressEvent.from_dict(data) == event
    data = stalled.to_dict()  # the keys an event had before these types
    assert (data["status"], data["stalled_for_s"], data["in_flight"], data["percent"], data["text"]) == (
        "stalled", 120.0, ["orders-1", "orders-2"], 30.0, str(polled.progress))
    assert stalled.stalled and not done.stalled and done.polled is not None and done.polled.done
    assert silent.describe() == "no answer from the cluster" and silent.to_dict()["in_flight"] == []


def test_a_stalled_poll_carries_its_receivers_and_names_the_broker_down_with_its_last_free_bytes() -> None:
    from kafkaops.reassign.engine import Progress, Receiver

    seen = Receiver(5, 9 << 20, True, 8 << 20, 1 << 20, seen_at=1_796_000_000.0)
    up = Receiver(4, 1 << 20, True, 1 << 30, 1 << 29, seen_at=1_796_000_001.0)
    polled = records.Polled(Progress(1, 3, 2, 600, 2000, 3.0, (Receiver(5, 9 << 20, online=False), up)), ("o-1",))
    event = records.ProgressEvent("stalled", polled.remembering({5: seen}), 30.0)
    back = records.ProgressEvent.from_dict(json.loads(json.dumps(event.to_dict())))
    assert back == event and back.polled is not None
    five, four = back.polled.progress.receivers
    assert (five.online, five.usable_bytes, five.seen_at) == (False, 1 << 20, 1_796_000_000.0)
    assert back.polled.stall_text() == (
        "receiving brokers: broker 5: down; last seen 2026-11-30 00:53:20 UTC with 1.0 MiB free of 8.0 MiB; 9.0 MiB "
        "still to copy onto it (not enough room); broker 4: 512.0 MiB free of 1.0 GiB; 1.0 MiB still to copy onto "
        "it. Before resuming: free space on the log dirs of broker(s) [5] (or give them larger ones); start "
        "broker(s) [5] (a broker whose log dir filled stops)")
    assert records.Polled(Progress(1, 3, 2, 600, 2000)).stall_text() == ""  # an event of before: nothing to add


def test_cordons_set_and_lifted_in_this_attempt() -> None:
    cordoned = records.CordonSet((4,), (5,), None, {"prior": [[4, None]], "kept": [5], "skipped": None})
    events = [AuditEvent(1, "started", {}), AuditEvent(2, "cordon_set", cordoned.to_dict())]
    assert fold(events).cordons_in_place(1) == records.CordonSet(**{**cordoned.__dict__, "ts": 2})
    lifted = records.CordonLifted((), (4,), ("kafka-configs.sh ... --entity-name 4 --delete-config cordoned.log.dirs",))
    done = fold([*events, AuditEvent(3, "cordon_lifted", lifted.to_dict())])
    assert done.cordons_in_place(1) is None and done.cordons_lifted[0].left == (4,)
    assert done.to_dict()["cordons_lifted"] == [{"ts": 3, "brokers": [], "left": [4], "commands": list(lifted.commands)}]
    assert fold(events).cordons_in_place(5) is None  # set by an earlier attempt
    skipped = records.CordonSet((), skipped="brokers too old")
    assert fold([AuditEvent(1, "started", {}), AuditEvent(2, "cordon_set", skipped.to_dict())]).cordons_in_place(1) is None
    assert summarize(events)["cordons_set"][0]["brokers"] == [4]


# -- the plan task's value ----------------------------------------------------------------------------------

def tiered_scale_out() -> tuple[ReassignmentPlan, steps.OperationParams]:
    """A scale-out onto broker 4 of a tiered ``orders`` (its new replicas copy the leader's local log), sized."""
    cluster = three_brokers_one_topic()
    cluster = replace(cluster, partitions=tuple(replace(p, leader_size_bytes=(p.size_bytes or 0) // 4)
                                                for p in cluster.partitions), _index=None)
    plan = plan_scale_out(cluster, [Broker(4, rack="a")]).with_storage([TopicStorage("orders", remote=True)])
    return plan, steps.OperationParams(kind="scale_out", add_brokers=1)


def dict_before_the_type(plan: ReassignmentPlan, params: steps.OperationParams, refused: str,
                         new_brokers: tuple[records.NewBroker, ...] | None) -> dict[str, Any]:
    """The plan task's value as make_plan built it by hand before PlannedReassignment (its code, verbatim)."""
    flows = approval.plan_traffic(plan, params)
    data: dict[str, Any] = {
        "plan": plan.to_dict(), "kafka_json": plan.to_kafka_json(), "diff": list(plan.diff()),
        "table": list(plan.table()), "summary": plan.summary() + (f". {refused}" if refused else ""),
        "moves": len(plan.moves), "replica_moves": plan.replica_moves, "bytes_to_move": plan.bytes_to_move,
        "tiered_moves": len(plan.tiered_moves), "tiered_bytes": sum(m.bytes for m in plan.tiered_moves),
        "eta_s": flows.eta_s,
        "approval": approval.approval_markdown(plan, params) + (f"\n\n**{refused}**" if refused else "")}
    if new_brokers is not None:
        data["new_brokers"] = records.Provisioned(new_brokers).to_dict()["new_brokers"]
    return data


@pytest.mark.parametrize("refused", ["", "A real run would be refused here: inventory /nowhere/hosts.yml is not a "
                                         "readable file"])
def test_the_planned_reassignment_is_the_dict_the_plan_step_wrote_before_and_reads_back_as_itself(refused: str
                                                                                                   ) -> None:
    plan, params = tiered_scale_out()
    new = (records.NewBroker(4, "a", host="127.0.0.1", port=39004),)
    planned = records.PlannedReassignment(
        plan, plan.summary() + (f". {refused}" if refused else ""), approval.plan_traffic(plan, params).eta_s,
        approval.approval_markdown(plan, params) + (f"\n\n**{refused}**" if refused else ""), new)
    before = dict_before_the_type(plan, params, refused, new)
    assert planned.to_dict() == before and list(planned.to_dict()) == list(before)  # the same keys, in order
    assert before["tiered_moves"] and before["tiered_bytes"] and before["eta_s"] > 0  # every key has a value here

    stored = json.loads(json.dumps(planned.to_dict()))  # XCom, and the audit's plan event
    again = records.PlannedReassignment.from_dict(stored)
    assert again == planned and json.loads(json.dumps(again.to_dict())) == stored  # (the cluster's lists are tuples)
    assert again.plan.cluster is not None and again.plan.cluster.to_dict() == plan.cluster.to_dict()
    # the accessors the steps read, instead of the keys they dug before
    assert again.moves.desired == {(e["topic"], e["partition"]): tuple(e["replicas"]) for e in stored["kafka_json"][
        "partitions"]}
    assert again.moves.storage == (TopicStorage("orders", remote=True),) and again.provisioned.new_brokers == new


def test_a_rebalance_plans_onto_no_new_broker_and_writes_none() -> None:
    plan = plan_rebalance(skewed_four_brokers())
    planned = records.PlannedReassignment(plan, plan.summary(), 3.5, "approve?")
    params = steps.OperationParams(kind="rebalance")
    assert planned.to_dict() == {**dict_before_the_type(plan, params, "", None), "eta_s": 3.5, "approval": "approve?"}
    assert "new_brokers" not in planned.to_dict()
    again = records.PlannedReassignment.from_dict(json.loads(json.dumps(planned.to_dict())))
    assert again == planned and again.new_brokers is None and again.provisioned == records.Provisioned()
    assert again.moves.storage == () and len(again.moves.desired) == len(plan.moves) > 0


@pytest.mark.parametrize("data, message", [
    (None, r"the plan task's value is a NoneType, not a planned reassignment \(PlannedReassignment.to_dict\(\)\); "
           "nothing was changed: run the DAG again so its plan task plans anew"),
    ({"kafka_json": {"version": 1, "partitions": []}},
     r"the plan task's value lacks 'plan', 'summary', 'eta_s', 'approval' \(it has \['kafka_json'\]\): not a "
     r"planned reassignment"),
    ({"plan": {"kind": "rebalance"}, "summary": "", "eta_s": 0, "approval": ""},
     "cannot read a reassignment plan from this dict: KeyError.'moves'.; expected the shape of "
     r"ReassignmentPlan.to_dict\(\)"),
    ("bad new brokers", r"cannot read the scale-out plan's value: KeyError\('id'\); expected the shape of "
                        r"PlannedReassignment.to_dict\(\); nothing was changed"),
    ("bad eta", r"cannot read the scale-out plan's value: ValueError"),
])
def test_a_dict_that_is_no_planned_reassignment_is_refused_naming_what_is_missing(data: Any, message: str) -> None:
    plan, _ = tiered_scale_out()
    good = records.PlannedReassignment(plan, plan.summary(), 1.0, "", (records.NewBroker(4),)).to_dict()
    data = {"bad new brokers": {**good, "new_brokers": [{"rack": "a"}]},
            "bad eta": {**good, "eta_s": "soon"}}.get(data, data) if isinstance(data, str) else data
    with pytest.raises(PlanInputError, match=message) as refused:
        records.PlannedReassignment.from_dict(data)
    assert isinstance(refused.value, KafkaOpsError) and refused.value.final


def test_the_batch_loop_reads_the_planned_moves_without_the_plans_cluster() -> None:
    """PlannedMoves reads the target replicas and storage of PlannedReassignment.to_dict() (what every batch pass
    needs) and gives what the whole value gives; a value that is not one is refused naming the shape."""
    from kafkaops.reassign.records import PlannedMoves

    plan, params = tiered_scale_out()
    planned = records.PlannedReassignment(plan, plan.summary(), 1.0, "approve?", (records.NewBroker(4, "a"),))
    data = json.loads(json.dumps(planned.to_dict()))
    moves = PlannedMoves.from_dict(data)
    assert dict(moves.desired) == planned.moves.desired and moves.desired
    assert moves.storage == planned.moves.storage
    del data["plan"]["cluster"]  # not read
    assert PlannedMoves.from_dict(data) == moves
    for bad in (None, {}, {"kafka_json": {"partitions": [{"topic": "t"}]}}):
        with pytest.raises(PlanInputError, match="expected the shape of PlannedReassignment.to_dict"):
            PlannedMoves.from_dict(bad)
