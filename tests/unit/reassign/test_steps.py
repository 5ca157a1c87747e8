"""Pure parts of the operation lifecycle: params, approval text, the progress trigger's spec."""
from __future__ import annotations

import pytest

from kafkaops.platform import lifecycle
from kafkaops.reassign import steps
from kafkaops.errors import ConfigError
from kafkaops.reassign.planner import plan_scale_out
from kafkaops.model import Broker
from tests.unit.clusters import three_brokers_one_topic


def test_params_from_the_form_are_typed_and_defaults_are_safe() -> None:
    p = steps.OperationParams.from_params("scale_out", {"add_brokers": 2, "throttle_mb_per_s": "5",
                                                            "topics": ["orders"]})
    assert p.dry_run is True and p.approval == "manual"
    assert p.throttle_bytes_per_s == 5_000_000 and p.topics == ("orders",)


@pytest.mark.parametrize("kind, params, message", [
    ("scale_out", {"add_brokers": 1, "throttle_mb_per_s": 0}, "throttle_mb_per_s is 0.0"),
    ("scale_out", {}, "needs add_brokers > 0 or new_broker_ids"),
    ("scale_out", {"new_broker_ids": [4, 4]}, r"new_broker_ids \[4, 4\] repeat an id"),
    ("drain", {}, "a drain needs drain_brokers"),
    ("rebalance", {"approval": "maybe"}, "approval 'maybe' is unknown"),
    ("rebalance", {"max_moves_total": 0}, "give 1 or more"),
    ("rebalance", {"throttle_mb_per_s": "fast"}, "bad rebalance parameters"),
])
def test_bad_params_are_refused_before_anything_changes(kind: str, params: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        steps.OperationParams.from_params(kind, params)


def plan_data() -> dict:
    cluster = three_brokers_one_topic()
    plan = plan_scale_out(cluster, [Broker(4, rack="a")])
    return {"plan": plan.to_dict(), "kafka_json": plan.to_kafka_json(), "diff": list(plan.diff()),
            "table": list(plan.table()), "summary": plan.summary(), "eta_s": 12.0}, cluster


def test_approval_text_shows_summary_eta_table_and_moves() -> None:
    data, _ = plan_data()
    text = steps.approval_text(data, steps.OperationParams(kind="scale_out", add_brokers=1))
    assert data["summary"] in text and "ETA about 12 s" in text
    assert all(line in text for line in data["diff"])


def test_wait_spec_keeps_only_the_partitions_waited_for() -> None:
    data, cluster = plan_data()
    keys = [list(k) for k in steps.desired_of(data)][:1]
    spec = steps.wait_spec(data, keys, cluster.to_dict())
    assert [(e["topic"], e["partition"]) for e in spec["partitions"]] == [tuple(keys[0])]
    assert [(p["topic"], p["partition"]) for p in spec["before"]["partitions"]] == [tuple(keys[0])]
    assert len(spec["before"]["brokers"]) == 3
