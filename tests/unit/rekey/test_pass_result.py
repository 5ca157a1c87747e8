"""The rekey backfill app's result (spark_apps/rekey_backfill.py writes a PassResult's to_dict; the
migration steps read it with PassResult.from_dict): the JSON it wrote before the types reads back and
writes out unchanged, with the app's counters typed and unknown ones kept."""
from __future__ import annotations

from kafkaops.rekey.records import BackfillRun, PassResult

PLAN = {"source_topic": "orders", "target_topic": "orders.v2"}
APP_RUN = {"plan": PLAN, "mode": "direct", "mode_reason": "every key in one source partition", "rewritten": False,
           "already_written": 3, "slices": 2, "written": 7, "skipped": 3, "seconds": 1.25}


def test_the_apps_run_reads_typed_and_writes_out_the_same_json() -> None:
    run = BackfillRun.from_dict(APP_RUN)
    assert (run.mode_reason, run.rewritten, run.already_written, run.slices, run.skipped) == \
        ("every key in one source partition", False, 3, 2, 3)
    assert run.written == 7 and not run.extra and run.to_dict() == APP_RUN
    assert BackfillRun.from_dict(run.to_dict()) == run


def test_a_result_without_the_counters_or_with_others_keeps_its_shape() -> None:
    old = {"plan": PLAN, "written": 5, "mode": "merged", "seconds": 2.0, "lag": 4}
    run = BackfillRun.from_dict(old)
    assert run.slices is None and run.extra == {"lag": 4} and run.to_dict() == old


def test_the_pass_result_round_trips_through_json_keys() -> None:
    result = PassResult(run=BackfillRun.from_dict(APP_RUN), integrity={"ok": True}, target_ends={0: 8, 1: 9})
    data = result.to_dict()
    assert data == {"run": APP_RUN, "integrity": {"ok": True}, "target_ends": {0: 8, 1: 9}}
    assert PassResult.from_dict({**data, "target_ends": {"0": 8, "1": 9}}) == result  # XCom's text keys
    assert PassResult(integrity={"ok": False}).to_dict() == {"integrity": {"ok": False}}  # verify only
