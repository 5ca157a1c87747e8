"""A reassignment's own events folded (kafkaops.reassign.records): each batch's status from the step that
submitted it, the throttles; the generic record is kafkaops.platform.state's."""
from __future__ import annotations

import json

from kafkaops.platform.state import AuditEvent
from kafkaops.reassign import records
from kafkaops.reassign.records import BatchSubmitted, ThrottleRemoved, ThrottleSet, fold, summarize
from tests.unit.platform.test_audit import rerun_events


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
