"""Bad input through the Trigger form's API (issue 36, item 6): each value the params refuse, refused before any
change with a message naming the param, fast (no cluster: the params, the pure checks against a cluster's
brokers and topics, the inventory's path and file, the planner's time budget, a dry run's begin without a lock).
The same payloads through Airflow's REST API on a deployment: tests/deployment/test_bad_input.py."""
from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

import pytest

from kafkaops.errors import ConfigError
from kafkaops.model import Broker, Cluster, PartitionAssignment
from kafkaops.platform import lifecycle, params as form, provision, store
from kafkaops.platform.kafka import connection, metadata
from kafkaops.reassign import steps
from kafkaops.reassign.planner import PlanTimedOut, plan_rebalance, plan_scale_out, time_budget
from kafkaops.rekey import steps as rekey


def refused(kind: str, params: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as err:
        steps.OperationParams.from_params(kind, params)
    message = str(err.value)
    assert message.startswith(f"refusing the {kind} run, nothing was changed: "), message
    return message


def refused_increase(params: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as err:
        rekey.PartitionParams.from_params({"topic": "orders", **params})
    message = str(err.value)
    assert message.startswith("refusing the partition increase, nothing was changed: "), message
    return message


# -- counts the operator can bound ---------------------------------------------------------------------------

def test_add_brokers_above_max_add_brokers_is_refused_naming_the_bound_and_how_to_raise_it() -> None:
    message = refused("scale_out", {"add_brokers": 100_000})
    assert "add_brokers is 100,000, more than max_add_brokers (16)" in message
    assert "raise max_add_brokers" in message
    assert "new_broker_ids names 17 brokers, more than max_add_brokers (16)" in refused(
        "scale_out", {"new_broker_ids": list(range(10, 27))})
    raised = steps.OperationParams.from_params("scale_out", {"add_brokers": 40, "max_add_brokers": 40})
    assert (raised.add_brokers, raised.max_add_brokers) == (40, 40)
    assert "max_add_brokers is 0" in refused("scale_out", {"max_add_brokers": 0})


def test_new_partition_count_above_max_partition_count_is_refused_naming_the_bound() -> None:
    message = refused_increase({"new_partition_count": 100_000_000})
    assert "new_partition_count is 100,000,000, more than max_partition_count (10,000)" in message
    assert "raise max_partition_count" in message
    raised = rekey.PartitionParams.from_params({"topic": "orders", "new_partition_count": 20_000,
                                                "max_partition_count": 20_000})
    assert raised.new_partition_count == 20_000


def test_racks_whose_count_differs_from_the_new_brokers_are_refused() -> None:
    message = refused("scale_out", {"add_brokers": 2, "new_broker_racks": ["a", "b", "c"]})
    assert "new_broker_racks names 3 rack(s) for 2 new broker(s) (add_brokers)" in message
    assert "new_broker_racks names 1 rack(s) for 2 new broker(s) (new_broker_ids)" in refused(
        "scale_out", {"new_broker_ids": [7, 8], "new_broker_racks": ["a"]})
    ok = steps.OperationParams.from_params("scale_out", {"new_broker_ids": [7, 8], "new_broker_racks": ["a", "b"]})
    assert ok.new_broker_racks == ("a", "b")


def test_the_planning_budget_is_bounded_and_positive() -> None:
    assert "plan_timeout_s is 0" in refused("rebalance", {"plan_timeout_s": 0})
    assert "plan_timeout_s is 1e+06" in refused("rebalance", {"plan_timeout_s": 1e6})
    assert steps.OperationParams.from_params("rebalance", {}).plan_timeout_s == 300.0


# -- lists: duplicates, contradictions, what the cluster does not have ---------------------------------------

def test_duplicate_and_contradictory_broker_lists_are_refused() -> None:
    assert "drain_brokers names broker(s) 2 more than once" in refused("drain", {"drain_brokers": [2, 2]})
    assert "exclude_brokers names broker(s) 1 more than once" in refused("rebalance", {"exclude_brokers": [1, 1]})
    assert "broker(s) 2 are in drain_brokers and in exclude_brokers" in refused(
        "drain", {"drain_brokers": [2], "exclude_brokers": [2]})
    assert "new broker(s) 9 are in exclude_brokers" in refused("scale_out", {"new_broker_ids": [9],
                                                                            "exclude_brokers": [9]})
    assert "drain_brokers, stop_drained belong to operation=drain" in refused(
        "rebalance", {"drain_brokers": [1], "stop_drained": True})
    assert "new_broker_ids [4, 4] repeat an id" in refused("scale_out", {"new_broker_ids": [4, 4]})
    assert "a drain needs drain_brokers" in refused("drain", {"drain_brokers": []})


def test_duplicate_topics_and_names_kafka_does_not_take_are_refused() -> None:
    assert "param topics names orders more than once" in refused("rebalance", {"topics": ["orders", "orders"]})
    message = refused("rebalance", {"topics": ["../../etc/passwd"]})
    assert "param topics names topic '../../etc/passwd', which is no Kafka topic name" in message
    assert "which is no Kafka topic name" in refused("rebalance", {"topics": ["<script>alert(1)</script>"]})
    assert "Kafka's topic names have at most 249" in refused("rebalance", {"topics": ["t" * 300]})
    assert "which is no Kafka topic name" in refused_increase({"topic": "a/b"})
    assert "param target_topic names topic" in refused_increase({"target_topic": "<b>x</b>"})


def test_what_the_cluster_does_not_have_is_named() -> None:
    def problems(kind: str, **params: Any) -> list[str]:
        return steps.OperationParams.from_params(kind, params).cluster_problems([1, 2, 3], ["orders"])

    assert problems("rebalance") == []
    assert problems("drain", drain_brokers=[9]) == [
        "drain_brokers names broker(s) 9, which the cluster does not have (its brokers: 1, 2, 3)"]
    assert "exclude_brokers names broker(s) 7" in problems("rebalance", exclude_brokers=[7])[0]
    assert "exclude_brokers name every broker of the cluster (1, 2, 3)" in problems(
        "rebalance", exclude_brokers=[1, 2, 3])[0]
    assert "exclude_brokers and drain_brokers name every broker" in problems(
        "drain", drain_brokers=[1], exclude_brokers=[2, 3])[0]
    assert "none could give a replica to the new brokers" in problems("scale_out", exclude_brokers=[1, 2, 3])[0]
    assert "new_broker_ids names broker(s) 2, which the cluster has already" in problems(
        "scale_out", new_broker_ids=[2])[0]
    assert problems("rebalance", topics=["orders", "nope"]) == ["topics names nope, which the cluster does not hold"]


# -- wrong types, oversized and non-UTF-8 text ---------------------------------------------------------------

@pytest.mark.parametrize("params, named", [
    ({"throttle_mb_per_s": "fast"}, "param throttle_mb_per_s is 'fast', not a number"),
    ({"throttle_mb_per_s": "nan"}, "param throttle_mb_per_s is 'nan', not a finite number"),
    ({"max_moves_total": 2.5}, "param max_moves_total is 2.5; give a whole number"),
    ({"max_moves_total": 10 ** 400}, "param max_moves_total is 1000000"),
    ({"dry_run": "maybe"}, "param dry_run is 'maybe'; give true or false"),
    ({"exclude_brokers": {"a": 1}}, "param exclude_brokers is {'a': 1}; give a list"),
    ({"exclude_brokers": ["one"]}, "param exclude_brokers holds 'one', not a whole number"),
    ({"topics": [{"name": "x"}]}, "param topics holds {'name': 'x'}, not text"),
    ({"kafka_conn_id": ["kafka_default"]}, "param kafka_conn_id is ['kafka_default'], not text"),
    ({"kafka_conn_id": "k" * 5000}, "param kafka_conn_id is 5,000 characters long; give at most 1,000"),
    ({"kafka_conn_id": "bad\udc80id"}, "param kafka_conn_id holds text that is not valid UTF-8"),
    ({"kafka_conn_id": "a\x00b"}, "param kafka_conn_id holds a control character"),
    ({"approval": "yes please"}, "approval 'yes please' is unknown; use one of manual, auto_approve, auto_reject"),
], ids=lambda v: str(v)[:40])
def test_wrong_types_and_text_no_run_can_take_are_refused_naming_the_param(params: dict[str, Any],
                                                                           named: str) -> None:
    assert named in refused("rebalance", params)


def test_flags_read_the_words_the_form_and_the_api_send() -> None:
    assert form.flag_of({"x": "false"}, "x", True) is False  # bool("false") would be True
    assert form.flag_of({"x": "True"}, "x", False) is True
    assert form.flag_of({"x": 0}, "x", True) is False
    assert form.flag_of({"x": None}, "x", True) is True and form.flag_of({"x": ""}, "x", False) is False


def test_a_key_rule_that_does_not_parse_and_a_contradictory_mode_are_refused() -> None:
    assert "param key_rule: key rule" in refused_increase({"key_rule": "jsonpath:$$..["})
    assert "needs mode=migrate" in refused_increase({"mode": "in_place", "quiesce": "acl"})
    assert "new_partition_count is 0" in refused_increase({"new_partition_count": 0})


def test_the_current_partition_count_is_checked_at_the_begin(monkeypatch: pytest.MonkeyPatch) -> None:
    class Topic:
        def __init__(self, n: int) -> None:
            self.partitions, self.error = dict.fromkeys(range(n)), None

    class Metadata:
        topics = {"orders": Topic(6)}

    monkeypatch.setattr(metadata, "cluster_metadata", lambda conn: Metadata())
    rekey.check_topic(rekey.PartitionParams.from_params({"topic": "orders", "new_partition_count": 12}), None)
    with pytest.raises(ConfigError, match="topic orders has 6 partitions; new_partition_count 3 must be larger"):
        rekey.check_topic(rekey.PartitionParams.from_params({"topic": "orders", "new_partition_count": 3}), None)
    with pytest.raises(ConfigError, match="param topic names nope, which the cluster does not hold"):
        rekey.check_topic(rekey.PartitionParams.from_params({"topic": "nope"}), None)


# -- the inventory -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("inventory, named", [
    ("/etc/passwd", "param inventory '/etc/passwd' is no inventory"),
    ("../../../x.json", "param inventory '../../../x.json' climbs out of its folder (..)"),
    ("/srv/inventories/../../etc/x.yml", "climbs out of its folder"),
    ("spec.json", "param inventory 'spec.json' is a relative path"),
    ("/srv/<b>.html", "is no inventory"),
])
def test_an_inventory_that_is_not_one_is_refused_naming_the_param(inventory: str, named: str,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(provision.INVENTORY_DIRS_SETTING, raising=False)
    assert named in refused("scale_out", {"inventory": inventory})


def test_inventories_only_from_the_configured_folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    kept, elsewhere = tmp_path / "inventories", tmp_path / "elsewhere"
    kept.mkdir()
    elsewhere.mkdir()
    (kept / "prod.yml").write_text("all:\n  hosts:\n    kafka-4:\n")
    (kept / "escape.yml").symlink_to(elsewhere / "x.yml")
    monkeypatch.setenv(provision.INVENTORY_DIRS_SETTING, str(kept))
    assert steps.OperationParams.from_params("scale_out", {"inventory": "prod.yml"}).inventory == str(kept / "prod.yml")
    assert steps.OperationParams.from_params("scale_out", {"inventory": str(kept / "prod.yml")}).inventory == str(
        kept / "prod.yml")
    assert f"is outside the folders {provision.INVENTORY_DIRS_SETTING} names" in refused(
        "scale_out", {"inventory": str(elsewhere / "x.yml")})
    assert "is outside" in refused("scale_out", {"inventory": "escape.yml"})  # a link out of the folder


def test_an_inventory_file_that_is_not_an_inventory_is_refused_at_the_begin_dry_runs_too(tmp_path: Path) -> None:
    spec, hosts = tmp_path / "spec.json", tmp_path / "hosts.yml"
    spec.write_text('{"not": "a spec"}')
    hosts.write_text("all:\n  hosts: {}\n")
    for path in (spec, hosts, tmp_path / "missing.yml"):
        p = steps.OperationParams.from_params("scale_out", {"inventory": str(path), "dry_run": True})
        with pytest.raises(ConfigError, match=f"param inventory {path}"):
            steps.check_inventory_file(p)
    steps.check_inventory_file(steps.OperationParams.from_params("rebalance", {"inventory": str(spec)}))  # unused


# -- the planning budget ---------------------------------------------------------------------------------------

def many_partitions(brokers: int = 3, partitions: int = 600) -> Cluster:
    return Cluster(brokers=tuple(Broker(id=i) for i in range(1, brokers + 1)),
                   partitions=tuple(PartitionAssignment(topic=f"t{k % 20}", partition=k,
                                                        replicas=tuple(1 + (k + j) % brokers for j in range(3)))
                                    for k in range(partitions)))


def test_planning_past_its_budget_stops_naming_the_budget_and_how_to_raise_it() -> None:
    began = time.monotonic()
    with pytest.raises(PlanTimedOut) as stopped, time_budget(0.05, raise_it="Raise plan_timeout_s"):
        plan_scale_out(many_partitions(), list(range(100, 20_100)))  # 20,000 new brokers: minutes unbounded
    assert time.monotonic() - began < 10
    message = str(stopped.value)
    assert "its time budget is 0.05 s. Nothing was changed. Raise plan_timeout_s" in message, message
    assert stopped.value.final  # a refusal: a retry would end the same way
    with time_budget(60):
        assert plan_rebalance(many_partitions(4, 60)).moves  # inside its budget: planned as before
    with time_budget(None):
        plan_rebalance(many_partitions(4, 60))


# -- a dry run's begin takes no lock ---------------------------------------------------------------------------

@pytest.fixture
def fake_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(connection, "connect", lambda *a, **k: contextlib.nullcontext(object()))
    monkeypatch.setattr(metadata, "describe_cluster", lambda conn: ("c1", 1, [Broker(1), Broker(2), Broker(3)]))


def context(run_id: str, **params: Any) -> lifecycle.OperationContext:
    return lifecycle.OperationContext(dag_id="kafka_reassign", run_id=run_id, conn_config={},
                                      params=steps.OperationParams.from_params("rebalance", params))


def test_a_dry_run_takes_no_lock_and_a_real_run_beside_it_is_not_blocked(local_store: store.Store,
                                                                          fake_cluster: None) -> None:
    dry = lifecycle.begin(context("dry"), {})
    assert dry["lock_token"] is None and dry["busy_with"] is None
    assert local_store.lease("c1") is None or local_store.lease("c1").free
    real = lifecycle.begin(context("real", dry_run=False), {"dry_run": False})  # not held back by the dry run
    assert real["lock_token"] and local_store.lease("c1").holder == "kafka_reassign/real"
    second = lifecycle.begin(context("dry2"), {})  # a dry run beside it reads who holds the cluster
    assert second["busy_with"] == "kafka_reassign/real"
    notes = [n["text"] for n in context("dry2").audit.summary()["notes"]]
    assert any("no lock taken on cluster c1; kafka_reassign/real holds it" in n for n in notes), notes
    with pytest.raises(store.LockLost, match="never took the lock"):  # a change it attempted would be fenced off
        context("dry2").fence("set throttles")
    lifecycle.conclude(context("dry2"), "dry_run", "", "c1")
    assert local_store.lease("c1").holder == "kafka_reassign/real"  # its finish freed nothing of the real run's


def test_a_cluster_check_refuses_the_run_before_the_lock(local_store: store.Store, fake_cluster: None) -> None:
    ctx = context("bad", dry_run=False, exclude_brokers=[1, 2, 3])
    with pytest.raises(ConfigError, match="exclude_brokers name every broker of the cluster"):
        lifecycle.begin(ctx, {}, cluster_checks=[lambda brokers, conn: steps.check_cluster(ctx.params, brokers, conn)])
    assert local_store.lease("c1") is None or local_store.lease("c1").free
    assert local_store.operation("kafka_reassign", "bad")["outcome"] == "refused"


def test_a_run_whose_params_cannot_be_read_is_recorded_as_refused(local_store: store.Store) -> None:
    lifecycle.refuse_unread("kafka_scale_out", "r1", kind="scale_out", triggered_by="operator",
                            raw_params={"add_brokers": 100_000}, reason="refusing the scale_out run: add_brokers ...")
    assert local_store.operation("kafka_scale_out", "r1")["outcome"] == "refused"
    record = lifecycle.OperationContext(dag_id="kafka_scale_out", run_id="r1", conn_config={},
                                        params=steps.OperationParams.from_params("scale_out", {})).audit.summary()
    assert record["outcome"] == "refused" and "add_brokers" in record["outcome_reason"], record
