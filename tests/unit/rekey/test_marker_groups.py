"""Which marker groups a migration's finish deletes, and when: only past its rollback point, only its targets'."""
from __future__ import annotations

import contextlib

from kafkaops.platform import lifecycle
from kafkaops.platform.kafka import offsets
from kafkaops.rekey import backfill
from kafkaops.rekey.backfill import BackfillPlan
from kafkaops.rekey.records import MarkersDeletedNote
from kafkaops.rekey.steps import PartitionPlan, delete_markers, marker_groups, past_rollback_point
from kafkaops.rekey.tail import tail_id

SNAPSHOT = BackfillPlan("orders", ((0, 0, 40_000), (1, 0, 40_000)), "orders.v2", 6, "field:customer")
MIGRATE = PartitionPlan("migrate", "orders", 2, 6, 1, backfill=SNAPSHOT.to_dict())


def done(*names: str, failed: str = "") -> list[dict]:
    return [{"name": n, "status": "success"} for n in names] + ([{"name": failed, "status": "failed"}] if failed else [])


def test_a_plain_migrate_is_past_its_rollback_point_once_cut_over_a_live_one_once_its_switch_is_confirmed() -> None:
    assert not past_rollback_point(MIGRATE, False, done("execute", "verify"))
    assert past_rollback_point(MIGRATE, False, done("execute", "verify", "cutover"))
    assert not past_rollback_point(MIGRATE, True, done("execute", "quiesce", "switch", failed="confirm"))
    assert past_rollback_point(MIGRATE, True, done("execute", "quiesce", "switch", "confirm"))
    in_place = PartitionPlan("in_place", "orders", 2, 6, 1, assignment=((1,),) * 4)
    assert not past_rollback_point(in_place, False, done("execute", "verify", "cutover"))


def test_the_marker_groups_are_those_of_copies_into_the_target_passes_and_tail_alike() -> None:
    later = BackfillPlan("orders", ((0, 40_000, 41_000), (1, 40_000, 41_000)), "orders.v2", 6, "field:customer")
    ours = [backfill.backfill_id(SNAPSHOT), backfill.backfill_id(later), tail_id(SNAPSHOT)]
    other_target = backfill.backfill_id(BackfillPlan("orders", ((0, 0, 1),), "orders.v2-x", 6, "field:customer"))
    found = marker_groups(MIGRATE, [*ours, other_target, "orders.v2.readers", "kafkaops-backfill-orders.v2"])
    assert found == sorted(ours)


def test_the_note_keeps_its_shape() -> None:
    note = MarkersDeletedNote("2 deleted", ("a", "b"), {"c": "has members"})
    stored = {**note.to_dict(), "ts": 5.0}
    assert stored["markers_deleted"] is True
    assert MarkersDeletedNote.from_dict(stored) == MarkersDeletedNote("2 deleted", ("a", "b"), {"c": "has members"},
                                                                      ts=5.0)


def test_a_retried_finish_deletes_nothing_more_and_records_nothing_more(local_store, monkeypatch) -> None:
    local_store.start_operation("kafka_partition_increase", "r1", kind="partition_increase", triggered_by="t",
                                params={})
    local_store.acquire("c1", "kafka_partition_increase", "r1")  # what begin does: the deletion is fenced by it
    ctx = lifecycle.OperationContext(dag_id="kafka_partition_increase", run_id="r1", conn_config={}, params=None)
    monkeypatch.setattr(lifecycle.OperationContext, "connect", lambda self: contextlib.nullcontext(None))
    ours = {backfill.backfill_id(SNAPSHOT), tail_id(SNAPSHOT)}
    groups = {*ours, "billing"}
    monkeypatch.setattr(offsets, "group_ids", lambda conn: sorted(groups))

    def delete(conn, ids):
        ids = sorted(ids)
        gone = tuple(g for g in ids if g in groups)
        groups.difference_update(ids)
        return offsets.GroupsDeleted(gone, tuple(g for g in ids if g not in gone))

    monkeypatch.setattr(offsets, "delete_consumer_groups", delete)
    first = delete_markers(ctx, MIGRATE, [])
    assert first is not None and set(first.deleted) == ours and not first.left and groups == {"billing"}
    notes = ctx.audit.summary()["notes"]
    assert delete_markers(ctx, MIGRATE, notes) is None  # the retry: nothing left, its note written already
    assert [n for n in ctx.audit.summary()["notes"] if n.get("markers_deleted")] == [n for n in notes
                                                                                     if n.get("markers_deleted")]
