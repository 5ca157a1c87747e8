"""The receiving brokers' disk room (pure): a plan is held to each receiving broker's free log-dir bytes, what it
receives counted and what it gives away not credited, with 10 % of its disk kept free."""
from __future__ import annotations

from dataclasses import replace

import pytest

from kafkaops.model import Broker, Cluster, Move, PartitionAssignment, TopicStorage
from kafkaops.reassign.planner import plan_drain, plan_rebalance, plan_scale_out
from kafkaops.reassign.planner.room import MIN_FREE_FRACTION, NotEnoughRoom, check_room, require_room

GiB = 1 << 30


def disks(cluster: Cluster, free: dict[int, int], total: int = 100 * GiB) -> Cluster:
    """``cluster`` with each broker's log dirs ``total`` bytes, ``free[id]`` of them free (unknown when not given)."""
    return replace(cluster, brokers=tuple(
        replace(b, disk_total_bytes=total, disk_usable_bytes=free[b.id]) if b.id in free else b
        for b in cluster.brokers), _index=None)


def orders(brokers: int = 3, partitions: int = 6, size: int = 8 * GiB) -> Cluster:
    """Brokers 1..n on racks a, b, c in turn; ``orders`` with RF 3, each replica ``size`` bytes."""
    ids = range(1, brokers + 1)
    parts = tuple(PartitionAssignment("orders", p, replicas=tuple(1 + (p + k) % 3 for k in range(3)),
                                      leader=1 + p % 3, isr=tuple(1 + (p + k) % 3 for k in range(3)),
                                      size_bytes=size, leader_size_bytes=size) for p in range(partitions))
    return Cluster(brokers=tuple(Broker(i, rack="abc"[(i - 1) % 3]) for i in ids), partitions=parts)


def test_a_rebalance_onto_a_broker_with_room_passes_and_its_note_names_the_least_free_share() -> None:
    cluster = disks(orders(brokers=4), {1: 40 * GiB, 2: 40 * GiB, 3: 40 * GiB, 4: 90 * GiB})
    plan = plan_rebalance(cluster)
    room = require_room(check_room(plan.moves, cluster.brokers), "the rebalance plan")
    assert [b.broker for b in room.brokers] == [4] and room.brokers[0].incoming_bytes == plan.bytes_to_move > 0
    assert room.ok and not room.unchecked
    assert room.note() == (f"disk room checked on receiving broker(s) [4]: each keeps at least 10% of its log dirs "
                           f"free after its copies (the least: broker 4, "
                           f"{(90 * GiB - plan.bytes_to_move) / (100 * GiB):.0%} free after receiving "
                           f"{plan.bytes_to_move / GiB:.1f} GiB)")


def test_a_broker_that_would_keep_less_than_a_tenth_of_its_disk_free_refuses_the_plan_naming_its_numbers() -> None:
    """Broker 4 (rack a, with broker 1) takes half of rack a's 12 replicas, 6 of 5 GiB (30 GiB), and has 38 GiB
    free of 100: 8 GiB would be left, below the 10 GiB it must keep. Each short broker is named with its free
    bytes, what it would receive and what to do."""
    cluster = disks(orders(brokers=4, partitions=12, size=5 * GiB),
                    {1: 60 * GiB, 2: 60 * GiB, 3: 60 * GiB, 4: 38 * GiB})
    plan = plan_rebalance(cluster)
    room = check_room(plan.moves, cluster.brokers)
    [four] = room.brokers
    assert four.incoming_bytes == 30 * GiB and four.keep_bytes == 10 * GiB and four.room_bytes == 28 * GiB
    assert four.short and room.short == (four,) and not room.ok
    with pytest.raises(NotEnoughRoom) as refused:
        require_room(room, "the rebalance plan")
    assert str(refused.value) == (
        "not enough room on the log dirs of broker(s) [4] for the rebalance plan; nothing was changed: broker 4: "
        "38.0 GiB free of 100.0 GiB, would receive 30.0 GiB; it must keep 10.0 GiB (10%) free, so it has room for "
        "28.0 GiB. Bytes leaving a broker are not counted: Kafka frees them only after the copies complete. What to "
        "do: free space on the log dirs of broker(s) [4] (or give them larger disks), add brokers (kafka_scale_out), "
        "or keep broker(s) [4] out of the plan (exclude_brokers=[4], or fewer topics), then trigger the run again")
    assert refused.value.final and refused.value.room is room
    # excluding it, as the error says, gives a plan that copies nothing onto it
    assert not check_room(plan_rebalance(cluster, exclude=[4]).moves, cluster.brokers).brokers


def test_the_bytes_a_broker_gives_away_are_not_credited_to_what_it_receives() -> None:
    """A swap: broker 2 gives 6 GiB of one partition away and receives 6 GiB of another. With 9 GiB free of 40 it
    would end where it started, but while the copies run it holds both: 3 GiB would be left, below the 4 GiB (10 %)
    it must keep."""
    brokers = (Broker(1, disk_total_bytes=40 * GiB, disk_usable_bytes=30 * GiB),
               Broker(2, disk_total_bytes=40 * GiB, disk_usable_bytes=9 * GiB))
    moves = (Move("a", 0, (1,), (2,), 6 * GiB), Move("b", 0, (2,), (1,), 6 * GiB))
    room = {b.broker: b for b in check_room(moves, brokers).brokers}
    assert room[2].incoming_bytes == 6 * GiB and room[2].room_bytes == 5 * GiB and room[2].short
    assert room[1].incoming_bytes == 6 * GiB and not room[1].short


def test_exactly_the_tenth_kept_passes_and_one_byte_more_refuses() -> None:
    brokers = (Broker(2, disk_total_bytes=1000, disk_usable_bytes=600),)
    fits = check_room((Move("t", 0, (1,), (2,), 500),), brokers)
    assert fits.ok and fits.brokers[0].keep_bytes == 100
    assert not check_room((Move("t", 0, (1,), (2,), 501),), brokers).ok
    assert MIN_FREE_FRACTION == 0.10
    strict = check_room((Move("t", 0, (1,), (2,), 500),), brokers, min_free_fraction=0.2)
    assert not strict.ok and strict.brokers[0].keep_bytes == 200


def test_a_tiered_move_counts_the_leaders_local_log_as_the_plan_sizes_it() -> None:
    """A tiered topic's new replica copies the leader's local log (1 GiB), not the 50 GiB the topic keeps in all:
    a broker with 5 GiB free of 20 takes it."""
    parts = (PartitionAssignment("logs", 0, (1, 2), leader=1, isr=(1, 2), size_bytes=50 * GiB,
                                 leader_size_bytes=1 * GiB),)
    cluster = Cluster(brokers=(Broker(1, rack="a", disk_total_bytes=100 * GiB, disk_usable_bytes=40 * GiB),
                               Broker(2, rack="b", disk_total_bytes=100 * GiB, disk_usable_bytes=40 * GiB),
                               Broker(3, rack="c", disk_total_bytes=20 * GiB, disk_usable_bytes=5 * GiB)),
                      partitions=parts)
    plan = plan_drain(cluster, [2]).with_storage([TopicStorage("logs", remote=True, local_retention_bytes=GiB)])
    room = check_room(plan.moves, cluster.brokers)
    assert [(b.broker, b.incoming_bytes) for b in room.brokers] == [(3, GiB)] and room.ok
    untiered = plan_drain(cluster, [2]).with_storage([TopicStorage("logs")])  # the whole log: 50 GiB
    assert not check_room(untiered.moves, cluster.brokers).ok


def test_a_scale_outs_new_brokers_and_brokers_without_a_log_dir_answer_are_not_refused_and_the_note_says_so() -> None:
    cluster = disks(orders(), {1: 1 * GiB, 2: 1 * GiB})  # broker 3: no log-dir answer
    plan = plan_scale_out(cluster, [Broker(4, rack="a")])
    room = check_room(plan.moves, cluster.brokers, new=plan.new_brokers)
    assert [b.broker for b in room.unchecked] == [4] and room.ok
    assert room.note() == ("the room of new broker(s) [4] is checked once they are provisioned, before any replica "
                           "moves")
    onto_three = (Move("orders", 0, (1, 2), (3, 2), 8 * GiB), Move("orders", 1, (2, 1), (2, 3), None))
    unknown = check_room(onto_three, cluster.brokers)
    assert unknown.ok and [(b.broker, b.unsized, b.known) for b in unknown.brokers] == [(3, 1, False)]
    assert "disk room NOT checked on receiving broker(s) [3]: their log dirs gave no free bytes" in unknown.note()
    assert "1 copy(ies) of unknown size counted as 0 B" in unknown.note()
    # Kafka before 3.3 answers DescribeLogDirs without sizes: read as 0 of 0, not known
    old = (Broker(3, disk_total_bytes=0, disk_usable_bytes=0),)
    assert check_room(onto_three, old).ok and not check_room(onto_three, old).brokers[0].known


def test_only_brokers_that_receive_a_copy_are_checked() -> None:
    """A reorder (a new preferred leader) or a removed replica copies nothing: a full broker is not refused for
    it; a plan that copies nothing has no note."""
    full = (Broker(1, disk_total_bytes=GiB, disk_usable_bytes=0), Broker(2, disk_total_bytes=GiB, disk_usable_bytes=0))
    moves = (Move("t", 0, (1, 2), (2, 1), GiB), Move("t", 1, (1, 2, 3), (1, 2), GiB))
    room = check_room(moves, full)
    assert room.brokers == () and room.ok and room.note() == ""
    # an empty partition moved onto a full broker copies 0 bytes: not refused either
    assert check_room((Move("t", 2, (3,), (1,), 0),), full).ok


def test_several_short_brokers_are_each_named_and_a_share_outside_0_to_1_is_refused() -> None:
    brokers = tuple(Broker(i, disk_total_bytes=10 * GiB, disk_usable_bytes=2 * GiB) for i in (4, 5))
    moves = (Move("t", 0, (1,), (4,), 3 * GiB), Move("t", 1, (2,), (5,), 3 * GiB))
    with pytest.raises(NotEnoughRoom, match=r"broker\(s\) \[4, 5\] for the plan; nothing was changed: broker 4: "
                                            r"2\.0 GiB free of 10\.0 GiB, would receive 3\.0 GiB.*; broker 5: 2\.0 GiB"):
        require_room(check_room(moves, brokers), "the plan")
    with pytest.raises(ValueError, match="min_free_fraction 1.0 is not a share"):
        check_room(moves, brokers, min_free_fraction=1.0)
