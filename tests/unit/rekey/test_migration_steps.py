"""The live migration's steps that talk to Kafka, on an in-memory topic pair behind
:mod:`kafkaops.platform.kafka`'s functions: the rollback (of a topic and of a Kafka Streams application), the
observed switch, the groups settling, and the finish's safety net for a DENY Write ACL left behind."""
from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from kafkaops.errors import KafkaOpsError, KafkaUnreachable
from kafkaops.model import Cluster, ConsumerGroup, GroupPartitionLag
from kafkaops.platform.kafka import acls, metadata, offsets, records, topics
from kafkaops.rekey import migration, streams_steps
from kafkaops.rekey.backfill import BackfillPlan
from kafkaops.rekey.records import Abandonment, PassResult, Quiesced
from kafkaops.rekey.streams import InputMove, LiveCut, StreamsCut, StreamsPlan
from kafkaops.rekey.tail import TailReport

PLAN = BackfillPlan("orders", ((0, 0, 100), (1, 0, 50)), "orders.v2", 4)
ACL = migration.LivePolicy(quiesce="acl", principals=("User:orders-app",), quiet_s=3, switch_timeout_s=20)
QUIESCED = Quiesced.from_dict({"how": "acl", "ends": {"0": 100, "1": 50}})  # through XCom: partitions as text


class Clock:
    """A clock that moves only when the step sleeps."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class Audit:
    notes: list[dict[str, Any]] = field(default_factory=list)
    _ts: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    def append(self, kind: str, **data: Any) -> None:
        self.notes.append({"kind": kind, "ts": float(next(self._ts)), **data})

    def summary(self) -> dict[str, Any]:
        return {"notes": list(self.notes), "started_at": 0.0}


@dataclass
class Ctx:
    """The parts of an OperationContext the steps use."""

    audit: Audit = field(default_factory=Audit)
    conn_config: Mapping[str, str] = field(default_factory=dict)
    fenced: list[str] = field(default_factory=list)

    @contextmanager
    def connect(self) -> Iterator[object]:
        yield object()

    def fence(self, action: str) -> int:
        self.fenced.append(action)
        return 1


@dataclass
class Topics:
    """End offsets per topic; ``timestamps[(topic, partition, offset)]`` the records that exist (an
    offset without one is a transaction marker); ``denied`` the DENY Write ACLs."""

    ends: dict[str, dict[int, int]]
    timestamps: dict[tuple[str, int, int], int] = field(default_factory=dict)
    denied: set[tuple[str, str]] = field(default_factory=set)
    acl_fails: bool = False
    deleted: list[str] = field(default_factory=list)
    groups: list[list[ConsumerGroup]] = field(default_factory=list)  # one list per snapshot, the last repeats
    on_end_offsets: Any = None

    def install(self, monkeypatch: pytest.MonkeyPatch) -> Topics:
        monkeypatch.setattr(records, "end_offsets", self.end_offsets)
        monkeypatch.setattr(records, "read_ranges", self.read_ranges)
        monkeypatch.setattr(acls, "allow_writes", self.allow_writes)
        monkeypatch.setattr(topics, "delete_topics", self.delete_topics)
        monkeypatch.setattr(metadata, "snapshot", self.snapshot)
        return self

    def end_offsets(self, config: Any, topic: str) -> dict[int, tuple[int, int]]:
        if self.on_end_offsets is not None:
            self.on_end_offsets(topic)
        return {p: (0, e) for p, e in self.ends[topic].items()}

    def read_ranges(self, config: Any, topic: str, ranges: Mapping[int, tuple[int, int]]) -> Iterator[records.Record]:
        for p, (start, end) in sorted(ranges.items()):
            for o in range(start, end):
                ts = self.timestamps.get((topic, p, o))
                if ts is not None:
                    yield records.Record(topic, p, o, ts, b"k", b"v")

    def allow_writes(self, conn: Any, topic: str, principals: Any) -> int:
        if self.acl_fails:
            raise KafkaUnreachable("the cluster did not answer within 10 s")
        gone = {(topic, p) for p in principals} & self.denied
        self.denied -= gone
        return len(gone)

    def delete_topics(self, conn: Any, topics: Any) -> None:
        self.deleted += list(topics)

    def snapshot(self, conn: Any, **_: Any) -> Cluster:
        groups = self.groups.pop(0) if len(self.groups) > 1 else self.groups[0]
        return Cluster(brokers=(), partitions=(), groups=tuple(groups))


def denied_note(ctx: Ctx) -> None:
    ctx.audit.append("note", text="writes denied", action="writes_denied", acl=["User:orders-app"], topic="orders")


# -- the finish's safety net ---------------------------------------------------------------------------------

def test_the_finish_removes_a_deny_acl_no_step_removed(monkeypatch) -> None:
    kafka = Topics({}, denied={("orders", "User:orders-app")}).install(monkeypatch)
    ctx = Ctx()
    denied_note(ctx)
    said = migration.release_left_writes(ctx, ctx.audit.notes)
    assert kafka.denied == set()
    assert said is not None and "allowed again by the finish: 1 DENY Write ACL(s) removed" in said
    assert ctx.audit.notes[-1]["action"] == "writes_allowed"
    # the next finish (a retried teardown) has nothing to do
    assert migration.release_left_writes(ctx, ctx.audit.notes) is None


def test_the_finish_leaves_alone_what_a_step_already_allowed_or_never_denied(monkeypatch) -> None:
    kafka = Topics({}, denied={("orders", "User:orders-app")}).install(monkeypatch)
    ctx = Ctx()
    assert migration.release_left_writes(ctx, ctx.audit.notes) is None
    denied_note(ctx)
    ctx.audit.append("note", text="writes allowed", action="writes_allowed")
    assert migration.release_left_writes(ctx, ctx.audit.notes) is None
    assert kafka.denied == {("orders", "User:orders-app")}  # untouched: the record says it was removed
    denied_note(ctx)  # a later quiesce (a retried run) denied again: that one is not allowed yet
    assert migration.release_left_writes(ctx, ctx.audit.notes) is not None and kafka.denied == set()


def test_the_finish_removes_the_deny_acl_of_every_input_a_streams_quiesce_left(monkeypatch) -> None:
    """A Kafka Streams application's quiesce denies writes to each input; the one a step allowed again stays
    allowed, every other is removed."""
    kafka = Topics({}, denied={("orders", "User:orders-app"), ("customers", "User:orders-app"),
                               ("payments", "User:orders-app")}).install(monkeypatch)
    ctx = Ctx()
    for topic in ("orders", "customers", "payments"):
        ctx.audit.append("note", text="writes denied", action="writes_denied", acl=["User:orders-app"], topic=topic)
    ctx.audit.append("note", text="writes allowed", action="writes_allowed", topic="customers")
    kafka.denied.discard(("customers", "User:orders-app"))
    assert [n.topic for n in migration.outstanding_denials(ctx.audit.notes)] == ["orders", "payments"]
    said = migration.release_left_writes(ctx, ctx.audit.notes)
    assert said is not None and "orders" in said and "payments" in said and "customers" not in said
    assert kafka.denied == set() and migration.outstanding_denials(ctx.audit.notes) == ()


def test_a_failed_removal_in_the_finish_is_said_with_the_command_and_does_not_raise(monkeypatch) -> None:
    Topics({}, denied={("orders", "User:orders-app")}, acl_fails=True).install(monkeypatch)
    ctx = Ctx()
    denied_note(ctx)
    said = migration.release_left_writes(ctx, ctx.audit.notes)
    assert said is not None and ("kafka-acls --remove --topic orders --operation Write --deny-principal "
                                 "User:orders-app") in said
    assert "did not answer within 10 s" in said and ctx.audit.notes[-1]["action"] == "writes_left_denied"


# -- the rollback ---------------------------------------------------------------------------------------------

def test_abandon_allows_writes_and_deletes_a_target_nobody_wrote_to(monkeypatch) -> None:
    kafka = Topics({"orders.v2": {0: 90, 1: 60}}, denied={("orders", "User:orders-app")}).install(monkeypatch)
    ctx = Ctx()
    denied_note(ctx)
    policy = migration.LivePolicy(quiesce="acl", principals=("User:orders-app",), delete_target_on_abandon=True)
    out = migration.abandon(ctx, PLAN, policy, "the switch was refused", copied_ends={"0": 90, "1": 60})
    assert out == Abandonment("the switch was refused", target_deleted=True, target_new_writes=0)
    assert kafka.denied == set() and kafka.deleted == ["orders.v2", PLAN.dead_letter_topic]
    note = ctx.audit.notes[-1]
    assert note["abandoned"] and "orders stays authoritative; target orders.v2 deleted" in note["text"]


def test_abandon_never_deletes_a_target_that_got_writes_after_the_copy(monkeypatch) -> None:
    kafka = Topics({"orders.v2": {0: 95, 1: 60}}).install(monkeypatch)
    ctx = Ctx()
    policy = migration.LivePolicy(quiesce="manual", delete_target_on_abandon=True)
    out = migration.abandon(ctx, PLAN, policy, "the switch was refused", copied_ends={"0": 90, "1": 60})
    assert out.target_deleted is False and out.target_new_writes == 5 and kafka.deleted == []
    assert "kept: it holds 5 offset(s) written after the copy" in ctx.audit.notes[-1]["text"]


def test_abandon_says_a_failed_acl_removal_then_fails(monkeypatch) -> None:
    kafka = Topics({"orders.v2": {0: 90, 1: 60}}, denied={("orders", "User:orders-app")},
                   acl_fails=True).install(monkeypatch)
    ctx = Ctx()
    denied_note(ctx)
    with pytest.raises(KafkaUnreachable):
        migration.abandon(ctx, PLAN, ACL, "producers did not stop")
    assert kafka.deleted == []  # delete_target_on_abandon is off: kept and said
    text = ctx.audit.notes[-1]["text"]
    assert "could NOT be removed" in text and "--deny-principal User:orders-app" in text and "kept, not authoritative" in text


def test_abandon_before_any_deny_touches_no_acl_and_says_nothing_of_one(monkeypatch) -> None:
    """The quiesce never denied writes (e.g. its ACL request failed): the rollback has nothing to remove,
    so it asks nothing of the ACLs (which would fail here) and its note claims no ACL."""
    kafka = Topics({"orders.v2": {0: 90, 1: 60}}, acl_fails=True).install(monkeypatch)
    ctx = Ctx()
    out = migration.abandon(ctx, PLAN, ACL, "denying writes failed")
    assert out.target_deleted is False and kafka.deleted == []
    note = ctx.audit.notes[-1]
    assert note["abandoned"] and note["writes_released"] is False
    assert "ACL" not in note["text"] and "orders stays authoritative" in note["text"]


def test_a_failed_deny_removes_what_it_may_have_created_and_records_no_deny(monkeypatch) -> None:
    from kafkaops.platform import lifecycle

    kafka = Topics({"orders": {0: 100, 1: 50}}, denied={("orders", "User:orders-app")}).install(monkeypatch)

    def half_denied(conn: Any, topic: str, principals: Any) -> int:
        raise KafkaOpsError("Kafka refused DENY Write ACLs on orders: SECURITY_DISABLED")
    monkeypatch.setattr(acls, "deny_writes", half_denied)
    monkeypatch.setattr(lifecycle, "now", lambda: 1.0)
    ctx = Ctx()
    with pytest.raises(KafkaOpsError, match="SECURITY_DISABLED"):
        migration.quiesce(ctx, PLAN, ACL)  # type: ignore[arg-type]
    assert kafka.denied == set() and migration.denied_writes(ctx.audit.notes) is None
    assert not any(n.get("action") for n in ctx.audit.notes)


def test_the_tail_copies_a_part_before_the_fence_goes_up_and_on_until_the_source_is_still(monkeypatch) -> None:
    """The window opens with the deny: the tail's lag is copied (its consumers connected) before it, so that
    after it only the last moment's records are left, and the quiesce ends once the copy reached the still ends."""
    from kafkaops.platform import lifecycle

    events: list[str] = []
    clock = Clock()
    ends = iter([{0: 100, 1: 50}, {0: 110, 1: 52}, {0: 112, 1: 52}] + [{0: 112, 1: 52}] * 40)

    class Copy:
        position = {0: 90, 1: 48}
        report = TailReport()

        def source_ends(self) -> dict[int, int]:
            return dict(next(ends))

        def part(self, upto: Mapping[int, int]) -> int:
            moved = sum(upto.values()) - sum(self.position.values())
            self.position = dict(upto)
            events.append(f"part {moved}")
            return moved

    Topics({"orders": {0: 100, 1: 50}}).install(monkeypatch)
    monkeypatch.setattr(acls, "deny_writes", lambda conn, topic, principals: events.append("deny") or 1)
    monkeypatch.setattr(lifecycle, "now", clock)
    copy = Copy()
    quiesced = migration.quiesce(Ctx(), PLAN, ACL, copy=copy, clock=clock, sleep=clock.sleep)  # type: ignore[arg-type]
    assert events[:4] == ["part 12", "deny", "part 12", "part 2"] and set(events[4:]) <= {"part 0"}, events
    assert dict(quiesced.ends) == {0: 112, 1: 52} == copy.position and clock.now >= migration.ACL_QUIET_S


def test_a_principal_the_acl_does_not_name_abandons_the_quiesce_and_is_named_with_what_it_wrote(monkeypatch) -> None:
    """With acl, end offsets that still move at the timeout are writes the DENY did not stop: the error says
    how many since it went up, where and when, and which principals it names; with manual, the producers."""
    from kafkaops.platform import lifecycle

    clock = Clock()
    kafka = Topics({"orders": {0: 100, 1: 50}}, timestamps={("orders", 1, o): 1_795_000_000_000 + o for o in range(50, 99)})
    kafka.install(monkeypatch)

    def another_writer(topic: str) -> None:  # 2 records a second into partition 1, whatever the ACL says
        kafka.ends["orders"][1] = 50 + int(clock.now * 2)
    kafka.on_end_offsets = another_writer
    monkeypatch.setattr(acls, "deny_writes", lambda conn, topic, principals: 1)
    monkeypatch.setattr(lifecycle, "now", clock)
    policy = migration.LivePolicy(quiesce="acl", principals=("User:orders-app",), quiesce_timeout_s=20)
    with pytest.raises(migration.MigrationAbandoned) as err:
        migration.quiesce(Ctx(), PLAN, policy, clock=clock, sleep=clock.sleep)  # type: ignore[arg-type]
    said = str(err.value)
    assert "orders's end offsets still moved after 20 s" in said
    assert "record(s) were written to orders since the DENY Write ACL went up, in partition(s) 1 (4" in said, said
    assert "a principal the DENY Write ACL does not name (it names User:orders-app) still writes to it" in said
    assert "orders stays authoritative" in said and "quiesce_principals" in said
    clock.now = 0.0
    with pytest.raises(migration.MigrationAbandoned, match="producers did not stop"):
        migration.quiesce(Ctx(), PLAN, migration.LivePolicy(quiesce="manual", quiesce_timeout_s=20),  # type: ignore[arg-type]
                          clock=clock, sleep=clock.sleep)


# -- the observed switch ------------------------------------------------------------------------------------

def test_the_switch_is_confirmed_after_the_quiet_period_with_the_window_from_the_records(monkeypatch) -> None:
    """The source's last offsets are commit markers (no record): the window comes from the last real record."""
    clock = Clock()
    kafka = Topics({"orders": {0: 100, 1: 50}, "orders.v2": {0: 90, 1: 60, 2: 40, 3: 10}},
                   timestamps={("orders", 0, 97): 10_000, ("orders", 1, 48): 10_400,  # 98, 99, 49: markers
                               ("orders.v2", 2, 40): 12_900, ("orders.v2", 2, 41): 13_000}).install(monkeypatch)

    def switch_after_2_s(topic: str) -> None:
        if clock.now >= 2 and topic == "orders.v2":
            kafka.ends["orders.v2"][2] = 42
    kafka.on_end_offsets = switch_after_2_s
    out = migration.confirm_switch(Ctx(), PLAN, QUIESCED, {"0": 90, "1": 60, "2": 40, "3": 10},
                                   ACL, clock=clock, sleep=clock.sleep)
    assert out.write_window_s == pytest.approx(2.5)
    assert out.last_source_write_ms == 10_400 and out.first_target_write_ms == 12_900
    assert out.target_partitions_written == (2,) and clock.now >= 2 + ACL.quiet_s


def test_a_write_to_the_source_after_the_quiesce_stops_the_confirm(monkeypatch) -> None:
    clock = Clock()
    kafka = Topics({"orders": {0: 100, 1: 50}, "orders.v2": {0: 90, 1: 60}}).install(monkeypatch)

    def stray_after_1_s(topic: str) -> None:
        if clock.now >= 1 and topic == "orders":
            kafka.ends["orders"][1] = 53
    kafka.on_end_offsets = stray_after_1_s
    with pytest.raises(KafkaOpsError, match=r"3 record\(s\) were written to orders after the quiesce"):
        migration.confirm_switch(Ctx(), PLAN, QUIESCED, {"0": 90, "1": 60}, ACL,
                                 clock=clock, sleep=clock.sleep)


def test_no_write_on_the_target_by_the_switch_timeout_stops_the_confirm(monkeypatch) -> None:
    clock = Clock()
    Topics({"orders": {0: 100, 1: 50}, "orders.v2": {0: 90, 1: 60}}).install(monkeypatch)
    with pytest.raises(KafkaOpsError, match="no write reached orders.v2 within 20 s"):
        migration.confirm_switch(Ctx(), PLAN, QUIESCED, {"0": 90, "1": 60}, ACL,
                                 clock=clock, sleep=clock.sleep)
    assert 20 < clock.now <= 22


# -- the groups settling ------------------------------------------------------------------------------------

def group(name: str, members: int, committed: Mapping[int, int | None], topic: str = "orders") -> ConsumerGroup:
    return ConsumerGroup(name, "Stable" if members else "Empty", members,
                         tuple(GroupPartitionLag(topic, p, c, None) for p, c in committed.items()))


def test_groups_settle_once_none_has_a_member(monkeypatch) -> None:
    clock = Clock()
    Topics({}, groups=[
        [group("billing", 2, {0: 80, 1: 50}), group("audit", 0, {0: 100, 1: 50}),
         group("kafkaops-backfill-marker-x", 1, {0: 1}), group("other-topic", 1, {0: 3}, topic="payments")],
        [group("billing", 0, {0: 95, 1: 50}), group("audit", 0, {0: 100, 1: 50})],
    ]).install(monkeypatch)
    states = migration.settle_groups(Ctx(), "orders", {0: 100, 1: 50}, timeout_s=60, clock=clock, sleep=clock.sleep)
    assert states == {"billing": "not drained", "audit": "drained"} and clock.now == 1.0


def test_a_group_still_consuming_at_the_timeout_is_said_so(monkeypatch) -> None:
    clock = Clock()
    Topics({}, groups=[[group("billing", 1, {0: 100, 1: 50})]]).install(monkeypatch)
    states = migration.settle_groups(Ctx(), "orders", {0: 100, 1: 50}, timeout_s=5, clock=clock, sleep=clock.sleep)
    assert states == {"billing": "still active"} and 5 < clock.now <= 7


def test_the_window_of_a_source_already_still_before_the_quiesce_begins_with_the_quiesce() -> None:
    """A source whose last record is 1,923 s older than the quiesce was not unavailable for 1,923 s."""
    assert migration.write_window(10_000, 12_500, None) == (2.5, migration.LAST_WRITE_BEGAN)
    assert migration.write_window(10_000, 12_500, 9.0) == (2.5, migration.LAST_WRITE_BEGAN)  # written after the ask
    assert migration.write_window(10_000, 1_935_000, 1_933.0) == (2.0, migration.QUIESCE_BEGAN)
    assert migration.write_window(None, 12_500, 11.0) == (1.5, migration.QUIESCE_BEGAN)  # an empty source
    assert migration.write_window(10_000, None, 9.0) == (None, migration.LAST_WRITE_BEGAN)
    assert migration.write_window(None, 12_500, None) == (None, migration.LAST_WRITE_BEGAN)


def test_the_confirm_of_a_still_source_records_the_window_from_the_quiesce(monkeypatch) -> None:
    clock = Clock()
    kafka = Topics({"orders": {0: 100, 1: 50}, "orders.v2": {0: 90, 1: 60, 2: 40, 3: 10}},
                   timestamps={("orders", 0, 97): 10_000, ("orders", 1, 48): 10_400,
                               ("orders.v2", 2, 40): 1_935_400}).install(monkeypatch)
    kafka.ends["orders.v2"][2] = 41
    quiesced = Quiesced.from_dict({"how": "manual", "asked_at": 1_933.0, "ends": {"0": 100, "1": 50}})
    ctx = Ctx()
    out = migration.confirm_switch(ctx, PLAN, quiesced, {"0": 90, "1": 60, "2": 40, "3": 10}, ACL,  # type: ignore[arg-type]
                                   clock=clock, sleep=clock.sleep)
    assert out.write_window_s == pytest.approx(2.4) and out.window_from == migration.QUIESCE_BEGAN
    said = [n["text"] for n in ctx.audit.notes if n["text"].startswith("switch observed")]
    assert said and "write-unavailable window 2.4 s, from the quiesce" in said[0], said
    assert "last write came 32 min 02 s before the quiesce: it was already still" in said[0], said
    assert migration.SwitchObserved.from_dict(out.to_dict()) == out


def test_writes_after_the_quiesce_are_counted_per_partition() -> None:
    assert migration.strays({"0": 100, "1": 50}, {0: 100, 1: 53, 2: 9}) == {1: 3}  # a partition not quiesced: not ours
    assert migration.strays({0: 100, 1: 50}, {0: 100, 1: 50}) == {}


def test_a_producer_the_quiesce_did_not_stop_refuses_the_switch_naming_where_and_when(monkeypatch) -> None:
    """Records past the quiesced end (a principal the ACL does not name): the switch is not asked, and the error
    says how many, in which partitions, written when, and that the source stays authoritative."""
    kafka = Topics({"orders": {0: 104, 1: 50}, "orders.v2": {0: 90, 1: 60}},
                   timestamps={("orders", 0, 100): 1_795_870_000_000, ("orders", 0, 103): 1_795_870_002_000}
                   ).install(monkeypatch)
    with pytest.raises(migration.MigrationAbandoned) as refused:
        migration.refuse_stray_writes(Ctx(), PLAN, QUIESCED, ACL)  # type: ignore[arg-type]
    said = str(refused.value)
    assert said.startswith("4 record(s) were written to orders after the quiesce, in partition(s) 0 (4), written "
                           "from 2026-11-28 12:46:40 UTC to 2026-11-28 12:46:42 UTC"), said
    assert "a principal the DENY Write ACL does not name (it names User:orders-app)" in said
    assert "the switch is not asked: the migration is abandoned and orders stays authoritative" in said
    kafka.ends["orders"][0] = 100
    migration.refuse_stray_writes(Ctx(), PLAN, QUIESCED, ACL)  # type: ignore[arg-type]  # still: nothing said
    manual = migration.LivePolicy(quiesce="manual")
    kafka.ends["orders"][1] = 51
    with pytest.raises(migration.MigrationAbandoned, match=r"in partition\(s\) 1 \(1\): a producer that was not "
                                                           r"stopped still writes to it"):
        migration.refuse_stray_writes(Ctx(), PLAN, QUIESCED, manual)  # type: ignore[arg-type]


def test_the_final_part_after_a_quiesce_whose_copy_reached_the_end_gates_the_whole_copy_without_copying(
        monkeypatch) -> None:
    """The quiesce's tail copied up to the quiesced ends: the final part opens no copy, and the gate's report
    adds the backfill's check and the tail's parts (the backfill wrote 150, the tail 25 more)."""
    from kafkaops.rekey import tail
    from kafkaops.rekey.backfill import IntegrityReport
    from kafkaops.rekey.records import BackfillRun, CatchUp, PassRow

    Topics({"orders": {0: 110, 1: 65}, "orders.v2": {0: 60, 1: 50, 2: 40, 3: 30}}).install(monkeypatch)
    monkeypatch.setattr(migration, "Tail", None)  # opening a copy would fail here
    copied = IntegrityReport(source_records=150, target_records=150, dead_letters=0, expected_dead_letters=0,
                             source_checksum="0" * 15 + "5", output_checksum="0" * 15 + "5", partitions=(),
                             source_topic="orders", target_topic="orders.v2", target_partitions=4, failures=())
    report = tail.TailReport(parts=3, source_records=25, target_records=25, source_sum=7, output_sum=7,
                             records={"orders.v2-0": 25}, keys={"orders.v2-0": 4}, began={0: 100, 1: 50},
                             position={0: 110, 1: 65})
    caught = CatchUp(PLAN.next_pass({0: 105, 1: 60}).to_dict(), (PassRow(2, 15, 15, "tail", 3.0, 15),), 5, "ok")
    quiesced = Quiesced("acl", 1.0, 2.0, {0: 110, 1: 65}, report)
    ctx = Ctx()
    done = migration.final_part(ctx, caught, quiesced, PassResult(BackfillRun(PLAN.to_dict(), 150), copied.to_dict()))
    whole = IntegrityReport.from_dict(done.integrity or {})
    assert whole.ok and (whole.source_records, whole.target_records) == (175, 175)
    assert whole.source_checksum == whole.output_checksum == "0" * 15 + "c"
    assert done.target_ends == {0: 60, 1: 50, 2: 40, 3: 30}
    assert ctx.audit.notes[-1]["final_pass"]["written"] == 0 and "3 tail part(s), each checked" in ctx.audit.notes[-1]["text"]


def test_the_target_is_made_ready_in_one_task_step_by_step_and_stops_at_the_first_failure(monkeypatch) -> None:
    """``steps.ready_target``: quiesce (with the tail open), last part, gate, cut-over, each recorded as its
    own step in that order; a failing gate records its step failed and runs no cut-over."""
    from kafkaops.rekey import steps
    from kafkaops.platform.gates import GateResult
    from kafkaops.rekey.records import CatchUp, Cutover, GateVerdict, TargetReady

    done: list[tuple[str, str]] = []

    @contextmanager
    def step(name: str) -> Iterator[None]:
        done.append((name, "started"))
        try:
            yield
        except Exception:
            done.append((name, "failed"))
            raise
        done.append((name, "success"))

    class OpenTail:
        def __init__(self, *_: object) -> None:
            self.open = False

        def __enter__(self) -> OpenTail:
            self.open = True
            return self

        def __exit__(self, *_: object) -> None:
            self.open = False
            done.append(("tail", "closed"))

    final = PassResult(integrity={"ok": True}, target_ends={0: 7})
    cut = Cutover("orders", "orders.v2", switch_text="switch now")
    monkeypatch.setattr(migration, "Tail", OpenTail)
    monkeypatch.setattr(migration, "quiesce", lambda ctx, plan, policy, copy: (
        done.append(("quiesce ran", "tail open" if copy.open else "tail closed")), QUIESCED)[1])
    monkeypatch.setattr(migration, "final_part", lambda ctx, caught, quiesced, copied: final)
    # the verdict only inside the window: its Data Docs come after the switch is asked (docs_after)
    monkeypatch.setattr(steps, "backfill_gate", lambda ctx, result, docs_after: GateVerdict(
        GateResult("backfill", result is final and docs_after), {"source_records": 7}))
    monkeypatch.setattr(steps, "cutover", lambda ctx, plan, before, quiesced: cut if quiesced is QUIESCED else None)
    ctx = Ctx()
    ctx.params = SimpleNamespace(policy=ACL)  # type: ignore[attr-defined]
    caught = CatchUp(backfill=PLAN.to_dict())
    ready = steps.ready_target(ctx, None, {}, PLAN, caught, PassResult(), step)  # type: ignore[arg-type]
    assert done == [("quiesce", "started"), ("quiesce ran", "tail open"), ("tail", "closed"), ("quiesce", "success"),
                    ("final_pass", "started"), ("final_pass", "success"), ("verify", "started"),
                    ("verify", "success"), ("cutover", "started"), ("cutover", "success")]
    assert tuple(n for n, s in done if s == "started") == migration.READY_STEPS  # as the abandon step names them
    assert ready == TargetReady(QUIESCED, final, GateVerdict(GateResult("backfill", True), {"source_records": 7}), cut)
    assert TargetReady.from_dict(ready.to_dict()) == ready  # as it crosses XCom

    def refused(ctx: object, result: object, docs_after: bool) -> GateVerdict:
        raise KafkaOpsError("gate backfill failed: 1 of 9 expectations")

    monkeypatch.setattr(steps, "backfill_gate", refused)
    done.clear()
    with pytest.raises(KafkaOpsError, match="gate backfill failed"):
        steps.ready_target(ctx, None, {}, PLAN, caught, PassResult(), step)  # type: ignore[arg-type]
    assert done[-2:] == [("verify", "started"), ("verify", "failed")] and not any(n == "cutover" for n, _ in done)


# -- a Kafka Streams application's rollback -------------------------------------------------------------------

def streams_plan() -> StreamsPlan:
    return StreamsPlan("app", "app-p12", 3, 12, (InputMove("orders", "orders.v2"), InputMove("customers",
                                                                                             "customers.v2")), (), ())


def test_a_streams_rollback_allows_every_input_again_and_deletes_the_copies_it_made(monkeypatch) -> None:
    kafka = Topics({"orders.v2": {0: 10}, "customers.v2": {0: 4}},
                   denied={("orders", "User:orders-app"), ("customers", "User:orders-app")}).install(monkeypatch)
    monkeypatch.setattr(metadata, "topic_names", lambda conn: ["orders", "customers", "orders.v2", "customers.v2",
                                                                "orders.v2.dlq"])
    dropped: list[str] = []
    monkeypatch.setattr(offsets, "group_members", lambda conn, group: ("Empty", ()))
    monkeypatch.setattr(offsets, "delete_consumer_group", lambda conn, group, **_: dropped.append(group))
    ctx = Ctx()
    for topic in ("orders", "customers"):
        ctx.audit.append("note", text="writes denied", action="writes_denied", acl=["User:orders-app"], topic=topic)
    policy = migration.LivePolicy(quiesce="acl", principals=("User:orders-app",), delete_target_on_abandon=True)
    done = streams_steps.abandon(ctx, streams_plan(), policy, "quiesce failed: the application did not stop")
    assert done == Abandonment("quiesce failed: the application did not stop", True, 0)
    assert kafka.denied == set() and migration.outstanding_denials(ctx.audit.notes) == ()
    # only what exists is deleted (customers.v2.dlq was never made), and the offsets committed for the new id
    assert sorted(kafka.deleted) == ["customers.v2", "orders.v2", "orders.v2.dlq"] and dropped == ["app-p12"]
    said = ctx.audit.notes[-1]["text"]
    assert "start it again with application.id=app" in said and "deleted" in said


def test_a_streams_rollback_keeps_every_copy_once_producers_wrote_to_a_new_input(monkeypatch) -> None:
    kafka = Topics({"orders.v2": {0: 15}, "customers.v2": {0: 4}}).install(monkeypatch)
    made = streams_plan()
    cut = StreamsCut(made, (), (), (), LiveCut("manual", 1.0, 2.0, 3.0, {"orders": {0: 10}, "customers": {0: 4}},
                                               {"orders.v2": {0: 10}, "customers.v2": {0: 4}}))
    policy = migration.LivePolicy(quiesce="manual", delete_target_on_abandon=True)
    done = streams_steps.abandon(Ctx(), made, policy, "switch refused", cut=cut)
    assert done == Abandonment("switch refused", False, 5) and kafka.deleted == []
