"""kafkaops.reassign.verify over built snapshots: each way a reassignment can be unfinished or lossy."""
from __future__ import annotations

from kafkaops.model import Broker, Cluster, PartitionAssignment
from kafkaops.reassign.verify import Failure, VerificationResult, verify_reassignment


def part(topic: str, n: int, replicas: tuple[int, ...], *, isr: tuple[int, ...] | None = None,
         leader: int | None = -1, end: int | None = 100) -> PartitionAssignment:
    return PartitionAssignment(topic, n, replicas, leader=replicas[0] if leader == -1 else leader,
                               isr=replicas if isr is None else isr, start_offset=0, end_offset=end)


def cluster(*partitions: PartitionAssignment, brokers: int = 4) -> Cluster:
    return Cluster(brokers=tuple(Broker(i) for i in range(1, brokers + 1)), partitions=partitions)


BEFORE = cluster(part("orders", 0, (1, 2, 3)), part("orders", 1, (2, 3, 1)), part("orders", 2, (3, 1, 2)))
PLAN = {("orders", 0): (1, 4, 3), ("orders", 2): (4, 1, 2)}
DONE = cluster(part("orders", 0, (1, 4, 3), end=120), part("orders", 1, (2, 3, 1), end=100),
               part("orders", 2, (4, 1, 2), end=101))


def reasons(result: VerificationResult) -> list[str]:
    return [str(f) for f in result.failures]


def test_a_finished_reassignment_is_ok() -> None:
    result = verify_reassignment(BEFORE, DONE, PLAN, in_flight=())
    assert result == VerificationResult(ok=True, failures=())
    assert "verified" in str(result)


def test_replicas_other_than_the_plan_are_named_with_both_lists() -> None:
    after = cluster(part("orders", 0, (1, 2, 3)), part("orders", 1, (2, 3, 1)), part("orders", 2, (4, 1, 2)))
    assert reasons(verify_reassignment(BEFORE, after, PLAN, ())) == ["orders-0: replicas [1, 2, 3] but plan [1, 4, 3]"]


def test_replica_order_counts() -> None:
    after = cluster(part("orders", 0, (4, 1, 3)), part("orders", 1, (2, 3, 1)), part("orders", 2, (4, 1, 2)))
    assert reasons(verify_reassignment(BEFORE, after, PLAN, ())) == ["orders-0: replicas [4, 1, 3] but plan [1, 4, 3]"]


def test_a_planned_replica_out_of_the_isr_is_named_once() -> None:
    after = cluster(part("orders", 0, (1, 4, 3), isr=(1, 3)), part("orders", 1, (2, 3, 1)),
                    part("orders", 2, (4, 1, 2)))
    assert reasons(verify_reassignment(BEFORE, after, PLAN, ())) == ["orders-0: replicas [4] not in ISR [1, 3]"]


def test_reassignments_in_flight_fail_even_outside_the_plan() -> None:
    result = verify_reassignment(BEFORE, DONE, PLAN, in_flight=[("orders", 1), ("orders", 1)])
    assert not result.ok
    assert result.failures == (Failure("orders-1", "reassignment still in flight"),)


def test_under_replicated_and_offline_partitions_anywhere_fail() -> None:
    after = cluster(part("orders", 0, (1, 4, 3)), part("orders", 1, (2, 3, 1), isr=(2, 3)),
                    part("orders", 2, (4, 1, 2)), part("other", 0, (3,), leader=None, isr=()))
    before = cluster(*BEFORE.partitions, part("other", 0, (3,)))
    assert reasons(verify_reassignment(before, after, PLAN, ())) == [
        "orders-1: under-replicated: ISR [2, 3] of replicas [2, 3, 1]",
        "other-0: offline: no leader among replicas [3]"]


def test_an_end_offset_that_went_back_is_data_loss() -> None:
    after = cluster(part("orders", 0, (1, 4, 3), end=90), part("orders", 1, (2, 3, 1)), part("orders", 2, (4, 1, 2)))
    assert reasons(verify_reassignment(BEFORE, after, PLAN, ())) == [
        "orders-0: end offset went back from 100 to 90 (10 records lost)"]


def test_unknown_end_offsets_are_not_judged() -> None:
    after = cluster(part("orders", 0, (1, 4, 3), end=None), part("orders", 1, (2, 3, 1)),
                    part("orders", 2, (4, 1, 2)))
    assert verify_reassignment(BEFORE, after, PLAN, ()).ok


def test_partitions_that_vanished_are_named() -> None:
    after = cluster(part("orders", 1, (2, 3, 1)), part("orders", 2, (4, 1, 2)))
    assert reasons(verify_reassignment(BEFORE, after, PLAN, ())) == [
        "orders-0: missing from the cluster; plan [1, 4, 3]",
        "orders-0: was in the cluster before (end offset 100), missing now"]


def test_every_failure_is_reported_and_summarised() -> None:
    after = cluster(part("orders", 0, (1, 2, 3), end=50), part("orders", 1, (2, 3, 1)), part("orders", 2, (3, 1, 2)))
    result = verify_reassignment(BEFORE, after, PLAN, [("orders", 2)])
    assert len(result.failures) == 4
    assert str(result).startswith("reassignment not verified, 4 failure(s): orders-0: replicas [1, 2, 3] but plan")
