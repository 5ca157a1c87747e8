"""kafkaops.reassign.engine: the pure steps (refusals, classification, batching, throttles, their removal,
progress), and the throttle teardown and the execute loop on an in-memory cluster."""
from __future__ import annotations

from dataclasses import replace

import pytest

from kafkaops.errors import KafkaOpsError
from kafkaops.model import Broker, Cluster, Move, PartitionAssignment, Reassignment
from kafkaops.platform import store
from kafkaops.platform.kafka import configs, metadata
from kafkaops.reassign.engine import (
    FOLLOWER_RATE,
    FOLLOWER_REPLICAS,
    LEADER_RATE,
    LEADER_REPLICAS,
    MAX_CONFIG_VALUE_BYTES,
    Executor,
    InvalidReassignment,
    Observation,
    Progress,
    ProgressLog,
    Receiver,
    ThrottleRecord,
    ThrottlesLeft,
    classify,
    clock,
    execute,
    measure,
    fenced_brokers,
    next_batch,
    normalize,
    observe,
    plan_batches,
    sole_in_sync,
    plan_throttle_removal,
    plan_throttles,
    problems,
    receivers_advice,
    remove_throttles,
    throttle_entries,
    throttle_lists_too_long,
    throttle_scope,
)
from tests.unit.reassign.fake_kafka import FakeKafka

CLUSTER = Cluster(brokers=tuple(Broker(i) for i in (1, 2, 3, 4)) + (Broker(9, online=False),),
                  partitions=(PartitionAssignment("orders", 0, (1, 2, 3), size_bytes=1000),
                              PartitionAssignment("orders", 1, (2, 3, 1), size_bytes=2000),
                              PartitionAssignment("orders", 2, (3, 1, 2), size_bytes=3000)))


@pytest.mark.parametrize(("options", "message"), [
    ({"throttle_bytes_per_s": 0}, "throttle_bytes_per_s is 0; give a positive rate"),
    ({"throttle_bytes_per_s": -5}, "throttle_bytes_per_s is -5"),
    ({"throttle_bytes_per_s": 10, "max_moves_per_broker": 0}, "max_moves_per_broker is 0; give 1 or more"),
    ({"throttle_bytes_per_s": 10, "max_moves_total": 0}, "max_moves_total is 0"),
])
def test_bad_parameters_are_refused_before_touching_the_cluster(options: dict, message: str) -> None:
    with pytest.raises(InvalidReassignment, match=message) as caught:
        Executor(None, {("orders", 0): (1, 2, 3)}, **options)  # type: ignore[arg-type]
    assert not caught.value.retriable
    assert "nothing was changed" in str(caught.value)


def test_a_desired_map_of_the_wrong_shape_is_refused() -> None:
    with pytest.raises(InvalidReassignment, match="'orders-0'.*give e.g.") as caught:
        normalize({"orders-0": (1, 2)})  # type: ignore[dict-item]
    assert caught.value.__cause__ is not None
    assert normalize({("orders", "1"): ["4", 2]}) == {("orders", 1): (4, 2)}


def test_problems_name_the_partition_the_numbers_and_a_fix() -> None:
    found, first = problems(CLUSTER, {("orders", 7): (1, 2), ("orders", 0): (1, 1, 2), ("orders", 1): (2, 5, 9),
                                      ("orders", 2): ()})
    assert found == [
        "partition orders-7 does not exist; orders has partitions 0..2",
        "orders-0: replicas [1, 1, 2] name broker(s) [1] more than once; list each broker once",
        "orders-1: replicas [2, 5, 9] name broker(s) [5, 9] that are not registered; registered brokers are "
        "[1, 2, 3, 4]",
        "orders-2: empty replica list; give at least one broker id"]
    assert isinstance(first, KafkaOpsError) and str(first) == found[0]  # the lookup's own error, kept as the cause


def test_classify_splits_done_in_flight_pending_and_conflicting() -> None:
    in_flight = {("orders", 1): Reassignment("orders", 1, (4, 3, 1, 2), adding=(4,), removing=(2,)),
                 ("orders", 2): Reassignment("orders", 2, (3, 1, 4, 2), adding=(4,), removing=(2,))}
    desired = {("orders", 0): (1, 2, 3), ("orders", 1): (4, 3, 1), ("orders", 2): (1, 3, 4)}
    done, resumed, pending, conflicts = classify(CLUSTER, in_flight, desired)
    assert done == (("orders", 0),)
    assert resumed == (Move("orders", 1, (3, 1, 2), (4, 3, 1), 2000),)
    assert pending == ()
    assert conflicts == ["orders-2: a reassignment to [3, 1, 4] is in flight, not the plan's [1, 3, 4]; wait for it "
                         "to finish or cancel it with kafkaops.reassign.engine.cancel(conn, [('orders', 2)])"]
    _, _, pending, _ = classify(CLUSTER, {}, {("orders", 2): (4, 1, 2)})
    assert pending == (Move("orders", 2, (3, 1, 2), (4, 1, 2), 3000),)


def test_a_move_knows_what_it_adds_removes_and_copies() -> None:
    move = Move("orders", 0, (1, 2, 3), (4, 2, 5), 100)
    assert (move.adding, move.removing, move.brokers, move.bytes) == ((4, 5), (1, 3), frozenset({1, 3, 4, 5}), 200)
    reorder = Move("orders", 0, (1, 2, 3), (3, 2, 1), 100)
    assert (reorder.brokers, reorder.bytes) == (frozenset(), 0)


def test_batches_respect_the_per_broker_and_total_caps() -> None:
    moves = [Move("t", i, (1, 2), (1, 3 + i % 3), size_bytes=i) for i in range(12)]
    batches = plan_batches(moves, max_moves_per_broker=2, max_moves_total=5)
    assert sorted(k for b in batches for k in b.keys) == [("t", i) for i in range(12)]
    for b in batches:
        assert len(b.moves) <= 5
        assert max(b.moves_per_broker().values()) <= 2
    assert [b.index for b in batches] == list(range(1, len(batches) + 1))
    # broker 2 loses a replica in every move: at most 2 per batch, so 6 batches
    assert len(batches) == 6
    assert plan_batches(moves, max_moves_per_broker=100, max_moves_total=100)[0].keys == tuple(("t", i) for i in range(12))


def test_moves_that_take_every_in_sync_replica_away_go_in_the_first_batch() -> None:
    # broker 1 is drained; t-7 and t-9 are in sync only on broker 1, the others everywhere
    parts = tuple(PartitionAssignment("t", i, (1, 2), leader=1, isr=(1,) if i in (7, 9) else (1, 2))
                  for i in range(12))
    cluster = Cluster((Broker(1), Broker(2), Broker(3)), parts)
    moves = [Move("t", i, (1, 2), (3, 2), size_bytes=100 - i) for i in range(12)]
    assert sole_in_sync(moves, cluster) == {("t", 7), ("t", 9)}
    batches = plan_batches(moves, max_moves_per_broker=2, max_moves_total=2, first=sole_in_sync(moves, cluster))
    assert batches[0].keys == (("t", 7), ("t", 9))
    assert plan_batches(moves, max_moves_per_broker=2, max_moves_total=2)[0].keys == (("t", 0), ("t", 1))


def test_throttles_follow_kafkas_tool_existing_replicas_lead_adding_ones_follow() -> None:
    brokers, entries = throttle_entries([Move("orders", 0, (1, 2, 3), (1, 4, 3)),
                                         Move("orders", 2, (3, 1, 2), (4, 1, 5)),
                                         Move("orders", 1, (2, 3, 1), (3, 2, 1))])  # reorder: no copy
    assert brokers == (1, 2, 3, 4, 5)
    assert entries == {("orders", FOLLOWER_REPLICAS): ["0:4", "2:4", "2:5"],
                       ("orders", LEADER_REPLICAS): ["0:1", "0:2", "0:3", "2:3", "2:1", "2:2"]}


def test_a_throttle_record_merges_keeping_the_older_value_to_restore_and_travels_as_a_dict() -> None:
    first = ThrottleRecord(rates=((1, "leader.replication.throttled.rate", "777"),),
                           replicas=(("orders", LEADER_REPLICAS, ("0:1",)),))
    second = ThrottleRecord(rates=((1, "leader.replication.throttled.rate", "50000"),
                                   (2, "leader.replication.throttled.rate", None)),
                            replicas=(("orders", LEADER_REPLICAS, ("0:1", "1:2")),))
    merged = first.merged(second)
    assert merged.rates == ((1, "leader.replication.throttled.rate", "777"),
                            (2, "leader.replication.throttled.rate", None))
    assert merged.replicas == (("orders", LEADER_REPLICAS, ("0:1", "1:2")),)
    assert (merged.brokers, merged.topics) == ((1, 2), ("orders",))
    assert ThrottleRecord.from_dict(merged.to_dict()) == merged
    assert ThrottleRecord().empty and not merged.empty
    with pytest.raises(InvalidReassignment, match="ThrottleRecord.to_dict"):
        ThrottleRecord.from_dict({"rates": [[1]]})


def test_progress_counts_done_and_in_flight_bytes() -> None:
    moves = [Move("orders", 0, (1, 2, 3), (1, 2, 3), 1000),      # no-op, done
             Move("orders", 1, (2, 3, 1), (4, 3, 1), 2000),      # in flight, half copied
             Move("orders", 2, (3, 1, 2), (4, 5, 2), 3000)]      # pending, 2 replicas to add
    in_flight = {("orders", 1): Reassignment("orders", 1, (4, 3, 1, 2), (4,), (2,))}
    p = measure(moves, CLUSTER, in_flight, {("orders", 1, 4): 1000}, elapsed_s=10.0)
    assert (p.partitions_done, p.partitions_total, p.partitions_in_flight) == (1, 3, 1)
    assert (p.bytes_done, p.bytes_total) == (1000, 8000)
    assert p.rate_bytes_per_s == 100.0 and p.eta_s == 70.0 and not p.done
    assert str(p) == "12% (1000 B of 7.8 KiB), 1/3 partitions done, 1 moving, 0.00 MB/s, ETA 00:01:10"
    assert str(p).count("ETA") == 1
    assert Progress(3, 3, 0, 10, 10).eta_s == 0.0 and Progress(0, 3, 0, 0, 10).eta_s is None
    assert str(Progress(1, 4, 3, 0, 4096)) == "0% (0 B of 4.0 KiB), 1/4 partitions done, 3 moving, ETA unknown yet"
    assert Progress(1, 4, 3, 0, 0).percent == 25.0  # only reorders: partitions count


def test_progress_names_each_receiving_broker_with_its_free_bytes_and_what_is_still_to_copy() -> None:
    moves = [Move("orders", 1, (2, 3, 1), (4, 3, 1), 2000),      # in flight onto 4, half copied
             Move("orders", 2, (3, 1, 2), (4, 9, 2), 3000)]      # in flight onto 4 and 9 (down)
    in_flight = {("orders", 1): Reassignment("orders", 1, (4, 3, 1, 2), (4,), (2,)),
                 ("orders", 2): Reassignment("orders", 2, (4, 9, 3, 1, 2), (4, 9), (3, 1))}
    disks = {4: metadata.LogDirs(total_bytes=8 << 20, usable_bytes=2500, offline=0)}
    p = measure(moves, CLUSTER, in_flight, {("orders", 1, 4): 1000}, log_dirs=disks, seen_at=1_796_000_000.0)
    four, nine = p.receivers
    assert four == Receiver(4, 1000 + 3000, True, 8 << 20, 2500, 0, 1_796_000_000.0)
    assert four.short_of_room and four.in_trouble
    assert nine == Receiver(9, 3000, online=False) and nine.in_trouble and not nine.short_of_room
    assert str(four) == "broker 4: 2.4 KiB free of 8.0 MiB; 3.9 KiB still to copy onto it (not enough room)"
    assert str(nine) == "broker 9: down; its log dirs never answered; 2.9 KiB still to copy onto it"
    assert measure(moves, CLUSTER, in_flight, {}).receivers == ()  # not asked for: none
    # a broker that went down is shown with what it last answered
    gone = replace(four, online=False, total_bytes=None, usable_bytes=None, seen_at=None).remembering(four)
    assert (gone.usable_bytes, gone.total_bytes, gone.seen_at, gone.online) == (2500, 8 << 20, 1_796_000_000.0, False)
    assert str(gone) == ("broker 4: down; last seen 2026-11-30 00:53:20 UTC with 2.4 KiB free of 8.0 MiB; 3.9 KiB "
                         "still to copy onto it (not enough room)")
    assert four.remembering(None) is four and nine.remembering(Receiver(9, 5)) == nine  # never seen: nothing to add
    assert Receiver.from_dict(gone.to_dict()) == gone and Receiver.from_dict(nine.to_dict()) == nine
    full_dir = Receiver(5, 10, True, 100, 90, offline_dirs=1, seen_at=1.0)
    assert full_dir.in_trouble and "1 log dir(s) offline (full or failing)" in str(full_dir)
    assert not Receiver(6, 10, True, 100, 90, seen_at=1.0).in_trouble


def test_the_advice_for_receivers_in_trouble_names_what_to_do_with_which_broker() -> None:
    ok = Receiver(1, 10, True, 100, 90, seen_at=1.0)
    assert receivers_advice([ok]) == ""
    assert receivers_advice([ok, Receiver(4, 100, True, 100, 10, seen_at=1.0)]) == (
        "free space on the log dirs of broker(s) [4] (or give them larger ones)")
    assert receivers_advice([Receiver(5, 100, False, 100, 10, seen_at=1.0), Receiver(9, 5, online=False)]) == (
        "free space on the log dirs of broker(s) [5] (or give them larger ones); start broker(s) [5, 9] (a broker "
        "whose log dir filled stops)")
    assert receivers_advice([Receiver(9, 5, online=False)]) == "start broker(s) [9]"


@pytest.mark.parametrize("seconds, text", [(70, "00:01:10"), (0.2, "00:00:01"), (0, "00:00:00"),
                                           (3600 * 100 + 5, "100:00:05"), (None, "-")])
def test_clock(seconds: float | None, text: str) -> None:
    assert clock(seconds) == text


def test_a_progress_line_is_due_when_progress_changed_else_every_30_s() -> None:
    lines = ProgressLog(every_s=30.0)
    still = Progress(1, 3, 1, 500, 2000)
    assert lines.due(still, now=0.0)                      # the first line
    assert not lines.due(still, now=2.0) and not lines.due(still, now=29.0)
    assert lines.due(still, now=30.0)                     # alive, nothing moved
    assert lines.due(Progress(1, 3, 1, 900, 2000), now=32.0)             # bytes moved
    assert not lines.due(Progress(1, 3, 1, 900, 2000, 5.0), now=34.0)    # only time passed
    assert lines.due(Progress(2, 3, 1, 900, 2000), now=36.0)             # a partition finished


# -- the next batch ------------------------------------------------------------------------------------

def observed(resumed: tuple[Move, ...] = (), pending: tuple[Move, ...] = ()) -> Observation:
    return Observation(CLUSTER, (), resumed, pending)


def test_the_next_batch_waits_for_moves_in_flight_and_numbers_on_from_those_submitted() -> None:
    pending = tuple(Move("t", i, (1, 2), (1, 3), size_bytes=10 * i) for i in range(5))
    first = next_batch(observed(pending=pending), max_moves_per_broker=2, max_moves_total=10)
    assert first is not None and (first.index, first.of, first.label) == (1, 3, "batch 1/3")
    assert first.keys == (("t", 3), ("t", 4))  # largest first
    later = next_batch(observed(pending=pending[:3]), max_moves_per_broker=2, max_moves_total=10, submitted=1)
    assert later is not None and (later.label, later.keys) == ("batch 2/3", (("t", 1), ("t", 2)))
    assert next_batch(observed(resumed=pending[:1], pending=pending[1:]), max_moves_per_broker=2,
                      max_moves_total=10) is None  # in flight: wait, never resubmit
    assert next_batch(observed(), max_moves_per_broker=2, max_moves_total=10) is None


def test_the_throttle_scope_is_every_broker_holding_or_getting_a_replica() -> None:
    assert throttle_scope([Move("a", 0, (1, 2), (3, 2)), Move("b", 1, (4,), (4,))]) == ((1, 2, 3, 4), ("a", "b"))


# -- the throttle removal (pure) -------------------------------------------------------------------------

LR, FR = LEADER_RATE, FOLLOWER_RATE


def test_a_broker_that_is_down_keeps_its_rate_in_the_ledger() -> None:
    record = ThrottleRecord(rates=((1, LR, None), (4, LR, None), (4, FR, "500")))
    removal = plan_throttle_removal(record, {}, online={1, 2, 3})
    assert removal.delete == ((1, LR),) and removal.restore == ()
    assert removal.keep == ((4, FR), (4, LR))
    assert removal.left == removal.ledger == {"4": [FR, LR]}


def test_a_stale_ledger_rate_on_an_online_broker_is_deleted_not_restored() -> None:
    # broker 2 was down when an earlier run ended: the "777" read before this run was that run's throttle
    record = ThrottleRecord(rates=((2, LR, "777"), (2, FR, None)))
    removal = plan_throttle_removal(record, {"2": [LR], "5": [FR, LR]}, online={1, 2, 5})
    assert removal.restore == ()
    assert removal.delete == ((2, FR), (2, LR), (5, FR), (5, LR))  # broker 5: an earlier run's only
    assert removal.keep == removal.carried == () and removal.ledger == {}


def test_a_rate_that_existed_before_the_run_is_restored() -> None:
    record = ThrottleRecord(rates=((1, LR, "777"), (1, FR, None)),
                            replicas=(("orders", LEADER_REPLICAS, ("0:1",)),))
    removal = plan_throttle_removal(record, {}, online={1})
    assert removal.restore == ((1, LR, "777"),) and removal.delete == ((1, FR),)
    assert removal.replicas == record.replicas and removal.clear_topics == ()
    assert [(op.key, op.op, op.value) for op in removal.broker_ops(1)] == [(LR, "SET", "777"), (FR, "DELETE", None)]


def test_without_a_record_every_throttle_on_the_plan_brokers_and_topics_goes() -> None:
    removal = plan_throttle_removal(None, {"9": [LR]}, online={1, 2}, brokers=[2, 1, 3], topics=["orders", "logs"])
    assert removal.delete == ((1, FR), (1, LR), (2, FR), (2, LR))
    assert removal.keep == ((3, FR), (3, LR))  # broker 3 is down
    assert removal.carried == ((9, LR),)  # an earlier run's, still down: stays in the ledger
    assert removal.clear_topics == ("logs", "orders") and removal.topics == ("logs", "orders")
    assert removal.ledger == {"3": [FR, LR], "9": [LR]} and removal.left == {"3": [FR, LR]}


def test_every_rate_of_the_record_and_the_ledger_lands_in_exactly_one_place() -> None:
    record = ThrottleRecord(rates=tuple((b, k, p) for b in (1, 2, 3, 4) for k, p in ((LR, "7"), (FR, None))))
    ledger = {"2": [LR], "4": [FR], "6": [LR], "7": [FR]}
    removal = plan_throttle_removal(record, ledger, online={1, 2, 3, 6})
    places = ([(b, k) for b, k, _ in removal.restore] + list(removal.delete) + list(removal.keep)
              + list(removal.carried))
    assert sorted(places) == sorted({(b, k) for b, k, _ in record.rates} | {(2, LR), (4, FR), (6, LR), (7, FR)})
    assert len(places) == len(set(places))
    assert removal.restore == ((1, LR, "7"), (3, LR, "7"))


def test_a_failed_broker_keeps_its_changes() -> None:
    removal = plan_throttle_removal(ThrottleRecord(rates=((1, LR, "7"), (2, LR, None))), {}, online={1, 2})
    failed = removal.failed([1], "broker 1: no answer")
    assert failed.restore == () and failed.delete == ((2, LR),) and failed.keep == ((1, LR),)
    assert failed.failures == ("broker 1: no answer",) and failed.ledger == {"1": [LR]}


def test_a_record_inheriting_the_ledger_deletes_what_it_names() -> None:
    record = ThrottleRecord(rates=((1, LR, "7"), (2, LR, "9")))
    assert record.inheriting({"2": [LR]}).rates == ((1, LR, "7"), (2, LR, None))


# -- the steps and the loop on an in-memory cluster -------------------------------------------------------

@pytest.fixture
def kafka(monkeypatch: pytest.MonkeyPatch, local_store) -> FakeKafka:
    return FakeKafka(replicas={("orders", p): (1, 2) for p in range(4)}, online={1, 2, 3},
                     sizes={("orders", p): 1000 * (p + 1) for p in range(4)}).install(monkeypatch)


def test_remove_throttles_saves_the_ledger_when_a_broker_fails(kafka: FakeKafka) -> None:
    kafka.configs = {("broker", "1"): {LR: "5", FR: "5"}, ("broker", "2"): {LR: "5"},
                     ("topic", "orders"): {LEADER_REPLICAS: "0:1,0:2,9:9"}}
    kafka.refusing = {2}
    record = ThrottleRecord(rates=((1, LR, "777"), (1, FR, None), (2, LR, None)),
                            replicas=(("orders", LEADER_REPLICAS, ("0:1", "0:2")),))
    with pytest.raises(ThrottlesLeft, match=r"rates stay on broker\(s\) \[2\].*ledger of cluster fake-cluster") \
            as caught:
        remove_throttles(kafka.conn(), record)
    assert caught.value.removal.keep == ((2, LR),) and "broker 2" in caught.value.removal.failures[0]
    assert kafka.configs[("broker", "1")] == {LR: "777"}  # restored, the other deleted
    assert kafka.configs[("topic", "orders")] == {LEADER_REPLICAS: "9:9"}  # someone else's entry stays
    assert store.current().throttle_ledger("fake-cluster") == {"2": [LR]}

    kafka.refusing = set()  # broker 2 answers again: the next teardown deletes its rate, the ledger empties
    remove_throttles(kafka.conn(), ThrottleRecord())
    assert kafka.configs[("broker", "2")] == {} and store.current().throttle_ledger("fake-cluster") == {}


def test_remove_throttles_keeps_every_rate_in_the_ledger_when_the_cluster_does_not_answer(kafka: FakeKafka) -> None:
    kafka.unreachable = True
    with pytest.raises(KafkaOpsError, match="no answer"):
        remove_throttles(kafka.conn(), ThrottleRecord(rates=((1, LR, "7"),)), cluster_id="fake-cluster")
    assert store.current().throttle_ledger("fake-cluster") == {"1": [LR]}


def test_remove_throttles_keeps_the_unreached_brokers_when_interrupted(kafka: FakeKafka, monkeypatch) -> None:
    calls = []

    def interrupted(conn, resource, changes):
        calls.append(changes)
        if len(calls) == 2:
            raise KeyboardInterrupt
    monkeypatch.setattr(configs, "incremental_alter_configs", interrupted)
    record = ThrottleRecord(rates=tuple((b, LR, None) for b in (1, 2, 3)))
    with pytest.raises(KeyboardInterrupt):
        remove_throttles(kafka.conn(), record)
    assert store.current().throttle_ledger("fake-cluster") == {"2": [LR], "3": [LR]}


def test_remove_throttles_skips_a_topic_deleted_meanwhile(kafka: FakeKafka) -> None:
    kafka.configs = {("broker", "1"): {LR: "5"}}
    removal = remove_throttles(kafka.conn(), ThrottleRecord(rates=((1, LR, None),),
                                                            replicas=(("gone", LEADER_REPLICAS, ("0:1",)),)))
    assert removal.failures == () and kafka.throttles() == {}


def test_the_execute_loop_runs_batch_by_batch_and_keeps_the_ledger(kafka: FakeKafka) -> None:
    kafka.configs = {("broker", "1"): {LR: "777"}, ("broker", "3"): {FR: "50"}}
    store.current().save_throttle_ledger("fake-cluster", {"3": [FR]})  # an earlier run left it: not someone else's
    desired = {("orders", p): (1, 3) for p in range(4)}
    seen: list[dict] = []
    run = Executor(kafka.conn(), desired, throttle_bytes_per_s=100, max_moves_per_broker=2, dry_run=False,
                   poll_interval_s=0, on_throttles=lambda _: seen.append(kafka.throttles()))
    report = run.execute()
    assert [list(s) for s in kafka.submitted] == [[("orders", 2), ("orders", 3)], [("orders", 0), ("orders", 1)]]
    assert [b.label for b in report.batches] == ["batch 1/2", "batch 2/2"]
    assert report.submitted == (("orders", 2), ("orders", 3), ("orders", 0), ("orders", 1))
    assert report.progress is not None and report.progress.done
    assert kafka.replicas == desired
    assert len(seen) == 2 and seen[1][("broker", "3")] == {LR: "100", FR: "100"}  # throttled while moving
    assert kafka.throttles() == {("broker", "1"): {LR: "777"}}  # restored; the stale rate on broker 3 deleted
    assert store.current().throttle_ledger("fake-cluster") == {}


def test_the_execute_loop_resumes_moves_in_flight_without_resubmitting(kafka: FakeKafka) -> None:
    kafka.polls = 3
    kafka.alter_partition_reassignments(None, {("orders", 0): (1, 3)})  # a killed run's move
    kafka.submitted.clear()
    report = execute(kafka.conn(), {("orders", 0): (1, 3), ("orders", 1): (1, 3)}, throttle_bytes_per_s=100,
                     dry_run=False, poll_interval_s=0)
    assert [m.topic_partition for m in report.resumed] == [("orders", 0)]
    assert kafka.submitted == [{("orders", 1): (1, 3)}]
    assert report.submitted == (("orders", 1),) and kafka.throttles() == {}


def test_a_dry_run_changes_nothing(kafka: FakeKafka) -> None:
    report = execute(kafka.conn(), {("orders", p): (2, 3) for p in range(4)}, throttle_bytes_per_s=100)
    assert report.dry_run and len(report.batches) == 1 and report.submitted == ()
    assert kafka.submitted == [] and kafka.config_calls == []


def test_fenced_brokers_are_those_holding_replicas_without_a_registration() -> None:
    assert fenced_brokers(CLUSTER, {("orders", 0): (1, 9), ("orders", 1): (2, 99)}) == [9]
    assert fenced_brokers(CLUSTER, {("orders", 0): (1, 2, 99)}) == []


def test_a_broker_fenced_for_a_moment_is_observed_again_not_refused(kafka: FakeKafka, monkeypatch) -> None:
    """Broker 2 misses its heartbeats (fenced under load) for two snapshots, then is back: the run goes on."""
    kafka.online = {1, 3}
    snapshot, calls = kafka.snapshot, []

    def flapping(conn, **kw):
        calls.append(1)
        if len(calls) == 3:
            kafka.online = {1, 2, 3}
        return snapshot(conn, **kw)
    monkeypatch.setattr(metadata, "snapshot", flapping)
    monkeypatch.setattr("kafkaops.reassign.engine.time.sleep", lambda s: None)
    seen = observe(kafka.conn(), {("orders", 0): (2, 3)}, fenced_grace_s=60)
    assert len(calls) == 3 and [m.topic_partition for m in seen.pending] == [("orders", 0)]


def test_an_id_never_seen_is_refused_at_once_and_a_fenced_broker_after_the_grace(kafka: FakeKafka,
                                                                                  monkeypatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr("kafkaops.reassign.engine.time.sleep", slept.append)
    with pytest.raises(InvalidReassignment, match=r"name broker\(s\) \[99\] that are not registered"):
        observe(kafka.conn(), {("orders", 0): (1, 99)}, fenced_grace_s=60)
    assert slept == []
    kafka.online = {1, 3}
    with pytest.raises(InvalidReassignment, match=r"nothing was changed: broker\(s\) \[2\] hold replicas but "
                                                  r"stayed unregistered for 0 s; check their logs"):
        observe(kafka.conn(), {("orders", 0): (2, 3)}, fenced_grace_s=0.3)
    assert kafka.submitted == []


def test_a_throttled_replica_list_past_kafkas_config_value_is_found_with_what_the_topic_holds() -> None:
    # Kafka's readers refuse a config value of more than 32,767 bytes (3.9 and 4.4 alike)
    entries = {("big", LEADER_REPLICAS): [f"{p}:{b}" for p in range(3000) for b in (101, 102, 103)],
               ("small", LEADER_REPLICAS): ["0:1", "0:2"], ("star", LEADER_REPLICAS): [f"{p}:1" for p in range(9000)]}
    too_long = throttle_lists_too_long(entries, {"small": {LEADER_REPLICAS: ",".join(f"{p}:1" for p in range(6000))},
                                                 "star": {LEADER_REPLICAS: "*"}})
    assert [(t, k) for t, k, _, _ in too_long] == [("big", LEADER_REPLICAS), ("small", LEADER_REPLICAS)]
    assert all(size > MAX_CONFIG_VALUE_BYTES for _, _, size, _ in too_long)
    assert too_long[1][3] == 6001  # what the topic holds counts, its entries once each
    fits = {("t", LEADER_REPLICAS): [f"{p}:{b}" for p in range(1000) for b in (1, 2, 3)]}
    assert len(",".join(fits[("t", LEADER_REPLICAS)])) <= MAX_CONFIG_VALUE_BYTES
    assert throttle_lists_too_long(fits, {}) == []


def test_a_plan_whose_throttle_list_kafka_would_refuse_is_refused_before_any_change(monkeypatch, local_store) -> None:
    kafka = FakeKafka(replicas={("orders", p): (101, 102, 103) for p in range(3000)}, online={101, 102, 103, 104},
                      ).install(monkeypatch)
    moves = [Move("orders", p, (101, 102, 103), (104, 102, 103)) for p in range(3000)]
    with pytest.raises(InvalidReassignment, match=r"orders leader.replication.throttled.replicas: [\d,]+ bytes .*"
                                                  r"Nothing was changed.*entity-name orders"):
        plan_throttles(kafka.conn(), moves)
    assert kafka.config_calls == []
    assert plan_throttles(kafka.conn(), moves, inherit=True).replicas  # a cancel or resume goes on
    kafka.configs[("topic", "orders")] = {LEADER_REPLICAS: "*"}
    record = plan_throttles(kafka.conn(), moves)  # a '*' list: left alone, so no list to refuse
    assert [k for _, k, _ in record.replicas] == [FOLLOWER_REPLICAS]
