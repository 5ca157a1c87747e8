"""A drain's cordons as values (kafkaops.reassign.cordons): which brokers a run cordons and what it gives back,
when brokers are too old for it; the cordons on real brokers are tests/integration/reassign/test_engine.py's."""
from __future__ import annotations

import pytest

from kafkaops.errors import KafkaOpsError
from kafkaops.reassign import cordons
from kafkaops.reassign.cordons import CordonLift, CordonRecord


def test_a_broker_cordoned_whole_by_an_operator_is_kept_and_a_partial_cordon_given_back() -> None:
    current = {"3": {cordons.CORDON_KEY: "*"}, "4": {cordons.CORDON_KEY: "/data/a"}, "5": {}}
    record = cordons.plan_from([5, 4, 3, 4], current)
    assert record == CordonRecord(prior=((4, "/data/a"), (5, None)), kept=(3,))
    assert record.brokers == (4, 5) and not record.empty
    assert CordonRecord.from_dict(record.to_dict()) == record
    assert cordons.plan_from([], current).empty
    down = cordons.plan_from([3, 4, 5], current, down=[5])
    assert down == CordonRecord(prior=((4, "/data/a"),), kept=(3,), down=(5,))
    assert CordonRecord.from_dict(down.to_dict()) == down


def test_brokers_below_kafka_4_3_are_named_and_not_cordoned() -> None:
    assert cordons.too_old(30, [2]) is None and cordons.too_old(31, [2]) is None
    reason = cordons.too_old(21, [2, 1])
    assert reason is not None and "[1, 2]" in reason and "level 21, below 30 (Kafka 4.3-IV0)" in reason
    assert "reports no metadata.version" in (cordons.too_old(None, [1]) or "")


def test_the_lift_command_gives_back_what_was_there() -> None:
    assert cordons.lift_command("k:9092", 4, None) == (
        "kafka-configs.sh --bootstrap-server k:9092 --alter --entity-type brokers --entity-name 4 "
        "--delete-config cordoned.log.dirs")
    assert cordons.lift_command("k:9092", 4, "/a,/b").endswith("--add-config 'cordoned.log.dirs=[/a,/b]'")
    lift = CordonLift(restored=(5,), deleted=(2,), left=(4,), commands=("x",), failures=("broker 4: down",))
    assert lift.brokers == (2, 5) and CordonLift.from_dict(lift.to_dict()) == lift


def test_a_record_that_is_not_one_is_refused() -> None:
    with pytest.raises(KafkaOpsError, match="cannot read a cordon record"):
        CordonRecord.from_dict({"prior": [["x", None]]})
