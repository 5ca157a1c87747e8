"""The reassignment steps: params, approval text, the progress trigger's spec (pure), and batching and
throttling over the engine on an in-memory cluster."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from kafkaops.platform import lifecycle, provision, store
from kafkaops.reassign import engine, records, steps
from kafkaops.errors import ConfigError
from kafkaops.reassign.planner import plan_scale_out
from kafkaops.model import Broker, Cluster
from tests.unit.clusters import three_brokers_one_topic
from tests.unit.platform.test_gates import hand_plan
from tests.unit.reassign.fake_kafka import FakeKafka


def test_params_from_the_form_are_typed_and_defaults_are_safe() -> None:
    p = steps.OperationParams.from_params("scale_out", {"add_brokers": 2, "throttle_mb_per_s": "5",
                                                            "topics": ["orders"]})
    assert p.dry_run is True and p.approval == "manual"
    assert p.throttle_bytes_per_s == 5_000_000 and p.topics == ("orders",)


@pytest.mark.parametrize("kind, params, message", [
    ("scale_out", {"add_brokers": 1, "throttle_mb_per_s": 0}, "throttle_mb_per_s is 0.0"),
    ("scale_out", {"add_brokers": 0}, "needs add_brokers > 0 or new_broker_ids"),
    ("scale_out", {"new_broker_ids": [4, 4]}, r"new_broker_ids \[4, 4\] repeat an id"),
    ("drain", {}, "a drain needs drain_brokers"),
    ("rebalance", {"approval": "maybe"}, "approval 'maybe' is unknown"),
    ("rebalance", {"max_moves_total": 0}, "give 1 or more"),
    ("rebalance", {"throttle_mb_per_s": "fast"}, "refusing the rebalance run.*param throttle_mb_per_s is 'fast'"),
    ("drain", {"drain_brokers": ["[4]]"]}, r"param drain_brokers holds '\[4\]\]', not a whole number"),
    ("scale_out", {"new_broker_ids": ["4", "five"]}, "param new_broker_ids holds 'five'"),
])
def test_bad_params_are_refused_before_anything_changes(kind: str, params: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        steps.OperationParams.from_params(kind, params)


def test_params_as_the_trigger_form_sends_them(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The form sends null (or "") for a field left empty and one text line per id: each reads as
    its default, the ids as ints; an empty inventory is the local cluster's spec when there is one."""
    monkeypatch.setattr(provision, "LOCAL_SPEC", tmp_path / "local-cluster.json")
    form = {"topics": None, "max_bytes_to_move": None, "exclude_brokers": None, "inventory": None,
            "new_broker_ids": ["4", "", " 5, 6 "], "new_broker_racks": ["rack-a", "", "b", "c"], "add_brokers": 1,
            "throttle_mb_per_s": 10.0, "approval": "manual", "dry_run": False, "stall_timeout_s": None}
    p = steps.OperationParams.from_params("scale_out", form)
    assert (p.topics, p.max_bytes_to_move, p.exclude_brokers, p.inventory) == ((), None, (), "")
    assert (p.new_broker_ids, p.new_broker_racks, p.stall_timeout_s, p.dry_run) == ((4, 5, 6), ("rack-a", "b", "c"),
                                                                                      120.0, False)
    provision.local_spec().save(provision.LOCAL_SPEC)
    assert steps.OperationParams.from_params("scale_out", {**form, "inventory": ""}).inventory == str(
        tmp_path / "local-cluster.json")
    assert steps.OperationParams.from_params("scale_out", {**form, "inventory": "/etc/kafka/inv.yml"}).inventory == (
        "/etc/kafka/inv.yml")
    api = steps.OperationParams.from_params("drain", {"drain_brokers": [4, 5], "exclude_brokers": [1]})
    assert (api.drain_brokers, api.exclude_brokers) == ((4, 5), (1,))


def plan_data() -> tuple[dict, Cluster]:
    """The plan task's value of a scale-out onto broker 4, and the cluster it was planned on."""
    cluster = three_brokers_one_topic()
    plan = plan_scale_out(cluster, [Broker(4, rack="a")])
    return records.PlannedReassignment(plan, plan.summary(), 12.0, "", (records.NewBroker(4, "a"),)).to_dict(), cluster


def test_wait_spec_keeps_only_the_partitions_waited_for() -> None:
    data, cluster = plan_data()
    keys = [list(k) for k in steps.desired_of(data)][:1]
    spec = steps.wait_spec(data, keys, cluster.to_dict())
    assert list(spec.targets) == [tuple(keys[0])] and spec.targets[tuple(keys[0])] == steps.desired_of(data)[
        tuple(keys[0])]
    assert [p.topic_partition for p in spec.before.partitions] == [tuple(keys[0])] and len(spec.before.brokers) == 3
    stored = json.loads(json.dumps(spec.to_dict()))  # a trigger's kwargs: the shape stored before these types
    assert [(e["topic"], e["partition"]) for e in stored["partitions"]] == [tuple(keys[0])]
    assert records.WaitSpec.from_dict(stored) == spec


# -- the execution steps on an in-memory cluster ----------------------------------------------------------

@pytest.fixture
def kafka(monkeypatch: pytest.MonkeyPatch, local_store) -> FakeKafka:
    local_store.start_operation("kafka_reassign", "test", kind="rebalance", triggered_by="t", params={})
    local_store.acquire("fake-cluster", "kafka_reassign", "test")  # what begin does: the steps are fenced by it
    return FakeKafka(replicas={("orders", p): (1, 2) for p in range(3)}, online={1, 2, 3},
                     sizes={("orders", p): 100 * (p + 1) for p in range(3)}).install(monkeypatch)


def context(**params: object) -> lifecycle.OperationContext:
    return lifecycle.OperationContext(dag_id="kafka_reassign", run_id="test", conn_config={},
                                      params=steps.OperationParams(kind="rebalance", **params))


def kafka_plan(kafka: FakeKafka, desired: dict) -> dict:
    """The plan task's value of a rebalance that makes exactly the moves ``desired`` on the fake's cluster."""
    plan = hand_plan(kafka.snapshot(None), desired)
    return records.PlannedReassignment(plan, plan.summary(), 0.0, "").to_dict()


def test_next_batch_submits_one_batch_at_a_time_and_waits_for_moves_in_flight(kafka: FakeKafka) -> None:
    ctx = context(max_moves_per_broker=1)
    data = kafka_plan(kafka, {("orders", p): (1, 3) for p in range(3)})
    first = steps.next_batch(ctx, data)
    assert first == records.BatchStep(wait_for=(("orders", 2),), submitted=(("orders", 2),), remaining_batches=2)
    waiting = steps.next_batch(ctx, data)  # still copying: waited for, not resubmitted
    assert waiting == records.BatchStep(wait_for=(("orders", 2),), remaining_batches=None)
    assert len(kafka.submitted) == 1
    second = steps.next_batch(ctx, data)
    assert second.submitted == (("orders", 1),) and second.remaining_batches == 1
    assert [(b.submitted.index, b.submitted.remaining) for b in records.fold(ctx.audit.events()).batches] == [
        (1, 2), (2, 1)]


def test_throttles_are_set_from_the_ledger_and_removed_into_it(kafka: FakeKafka) -> None:
    ctx = context()
    kafka.configs = {("broker", "3"): {engine.LEADER_RATE: "50"}}
    store.current().save_throttle_ledger("fake-cluster", {"3": [engine.LEADER_RATE]})
    data = kafka_plan(kafka, {("orders", 0): (1, 3)})
    record = steps.set_throttles(ctx, data).to_dict()
    assert [3, engine.LEADER_RATE, None] in record["rates"]  # the earlier run's 50 is not restored
    kafka.online.discard(2)
    with pytest.raises(engine.ThrottlesLeft, match=r"broker\(s\) \[2\]"):
        steps.remove_throttles(ctx, record, data)
    removed = records.fold(ctx.audit.events()).to_dict()["throttles_removed"][0]
    assert removed["left"] == {"2": [engine.FOLLOWER_RATE, engine.LEADER_RATE]} and removed["topics"] == ["orders"]
    assert store.current().throttle_ledger("fake-cluster") == removed["left"]
    assert ("broker", "3") not in kafka.throttles() and ("topic", "orders") not in kafka.throttles()


def test_without_a_record_the_teardown_clears_the_plan_brokers_and_topics(kafka: FakeKafka) -> None:
    data, _ = plan_data()  # a scale-out onto broker 4
    kafka.online.add(4)
    kafka.configs = {("broker", "1"): {engine.LEADER_RATE: "9"}, ("topic", "orders"): {engine.LEADER_REPLICAS: "*"}}
    removed = steps.remove_throttles(context(), None, data)
    assert (removed.brokers, removed.topics, dict(removed.left)) == ((1, 2, 3, 4), ("orders",), {})
    assert kafka.throttles() == {}


def test_stopping_drained_brokers_records_the_cluster_after_the_stop(kafka: FakeKafka, monkeypatch) -> None:
    from kafkaops.platform import provision

    ctx = lifecycle.OperationContext(dag_id="kafka_reassign", run_id="test", conn_config={},
                                     params=steps.OperationParams(kind="drain", drain_brokers=(3,), stop_drained=True,
                                                                  inventory="hosts.yml"))
    ctx.audit.append("snapshot", stage="after", cluster=kafka.snapshot(None).to_dict())  # the post-move gate's
    played = []
    monkeypatch.setattr(provision, "run_playbook",
                        lambda name, inventory, limit, ssh: played.append((name, limit, ssh)) or kafka.online.discard(3))
    login = provision.SshLogin(user="kafka", port=22, key_file="/keys/id", name="kafka_hosts")
    assert steps.stop_drained(ctx, login) == records.BrokersStopped((3,))
    assert played == [("cluster_down.yml", "kafka-3", login)]  # the run's SSH connection reaches the host
    assert [b["id"] for b in ctx.audit.summary()["after"]["brokers"]] == [1, 2]  # taken after the stop


def test_a_cluster_unreadable_after_the_stop_keeps_the_earlier_after_and_says_so(kafka: FakeKafka,
                                                                                 monkeypatch) -> None:
    from kafkaops.platform import provision

    ctx = lifecycle.OperationContext(dag_id="kafka_reassign", run_id="test", conn_config={},
                                     params=steps.OperationParams(kind="drain", drain_brokers=(3,), stop_drained=True,
                                                                  inventory="hosts.yml"))
    ctx.audit.append("snapshot", stage="after", cluster=kafka.snapshot(None).to_dict())
    monkeypatch.setattr(provision, "run_playbook", lambda *a, **k: setattr(kafka, "unreachable", True))
    monkeypatch.setattr(steps.metadata, "snapshot", lambda *a, **k: kafka.describe_cluster(None))
    assert steps.stop_drained(ctx) == records.BrokersStopped((3,))
    record = ctx.audit.summary()
    assert [b["id"] for b in record["after"]["brokers"]] == [1, 2, 3]
    assert "could not be read" in record["notes"][-1]["text"] and "no answer from Kafka" in record["notes"][-1]["text"]


def test_a_retried_gate_that_passed_is_recorded_once_and_a_failure_always(local_store) -> None:
    from kafkaops.platform import gates

    data, _ = plan_data()
    local_store.start_operation("kafka_reassign", "test", kind="scale_out", triggered_by="t", params={})

    def try_(number: int, **params: object) -> lifecycle.OperationContext:
        return lifecycle.OperationContext(dag_id="kafka_reassign", run_id="test", conn_config={}, task_id="plan_gate",
                                          try_number=number,
                                          params=steps.OperationParams(kind="scale_out", add_brokers=1, **params))

    assert steps.plan_gate(try_(1), data)["ok"] and steps.plan_gate(try_(2), data)["ok"]
    assert [(g["gate"], g["ok"]) for g in try_(2).audit.summary()["gates"]] == [("plan", True)]
    with pytest.raises(gates.GateFailed):
        steps.plan_gate(try_(3, max_bytes_to_move=1), data)
    assert [(g["gate"], g["ok"]) for g in try_(3).audit.summary()["gates"]] == [("plan", True), ("plan", False)]


def _provisioning_run(local_store, tmp_path) -> tuple[Path, lifecycle.OperationContext]:
    """A started scale-out run of a three-broker spec, holding its lock, at its provision task."""
    spec_path = provision.local_cluster_spec(tmp_path / "cluster", brokers=3).save(tmp_path / "spec.json")
    local_store.start_operation("kafka_scale_out", "test", kind="scale_out", triggered_by="t", params={})
    local_store.acquire("c1", "kafka_scale_out", "test")
    ctx = lifecycle.OperationContext(dag_id="kafka_scale_out", run_id="test", conn_config={}, task_id="provision",
                                     params=steps.OperationParams(kind="scale_out", add_brokers=1,
                                                                  inventory=str(spec_path)))
    ctx.audit.append("started", operation="scale_out")
    return spec_path, ctx


def test_a_retried_provision_converges_the_brokers_it_chose_and_adds_no_more(
        local_store, tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first try chose and started broker 4 and saved the spec, then Airflow lost its state: the
    retry starts broker 4 again (the role converges it) instead of adding broker 5."""
    started = []
    monkeypatch.setattr(provision, "cluster_up", lambda spec, *, limit=None, client_config=None: started.append(list(limit)))
    spec_path, ctx = _provisioning_run(local_store, tmp_path)
    first = steps.provision_brokers(ctx)
    retry = steps.provision_brokers(ctx)
    assert first.ids == retry.ids == [4] and first.new_brokers[0].host == "127.0.0.1"
    assert started == [["kafka-4"], ["kafka-4"]]
    assert [n.node_id for n in provision.ClusterSpec.load(spec_path).nodes] == [1, 2, 3, 4]
    ctx.audit.append("started", operation="scale_out")  # a new attempt (the run cleared from begin) adds one more
    assert steps.provision_brokers(ctx).ids == [5]


def test_a_failed_provision_stops_what_it_started_and_its_retry_takes_the_same_ids(
        local_store, tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Broker 4 started but failed its health check: it is stopped and removed (no spec lists it, so
    nothing else would), the spec stays at three brokers, and the retry provisions broker 4 again."""
    from kafkaops.errors import ProvisionError

    calls = []

    def failing_up(spec, *, limit=None, client_config=None):
        calls.append(("up", list(limit)))
        if len(calls) == 1:
            raise ProvisionError("playbook cluster_up.yml failed: task 'Check broker 4 answers' failed")

    monkeypatch.setattr(provision, "cluster_up", failing_up)
    monkeypatch.setattr(provision, "cluster_down",
                        lambda spec, *, purge=False, limit=None: calls.append(("down", list(limit), purge)))
    spec_path, ctx = _provisioning_run(local_store, tmp_path)
    with pytest.raises(ProvisionError):
        steps.provision_brokers(ctx)
    assert calls == [("up", ["kafka-4"]), ("down", ["kafka-4"], True)]
    assert [n.node_id for n in provision.ClusterSpec.load(spec_path).nodes] == [1, 2, 3]
    assert "stopped and removed" in ctx.audit.summary()["notes"][-1]["text"]
    assert steps.provision_brokers(ctx).ids == [4]
    assert calls[-1] == ("up", ["kafka-4"])


def test_only_a_drain_stops_brokers_whatever_else_the_form_holds(kafka: FakeKafka, monkeypatch) -> None:
    from kafkaops.platform import provision

    ctx = lifecycle.OperationContext(dag_id="kafka_reassign", run_id="test", conn_config={},
                                     params=steps.OperationParams(kind="rebalance", drain_brokers=(3,),
                                                                  stop_drained=True, inventory="hosts.yml"))
    played = []
    monkeypatch.setattr(provision, "run_playbook", lambda *a, **k: played.append(a))
    assert steps.stop_drained(ctx) == records.BrokersStopped()
    assert played == [] and 3 in kafka.online


def _failed_after_provision(local_store, tmp_path, monkeypatch: pytest.MonkeyPatch, holding: bool, **params: object
                            ) -> tuple[Path, lifecycle.OperationContext, list[tuple[object, ...]]]:
    """A scale-out that provisioned broker 4 (holding a replica of orders-0 when ``holding``), then failed in
    execute_batches; the removal's calls (stop through the role, unregister) are recorded, not made."""
    from kafkaops.platform.kafka import registrations

    calls: list[tuple[object, ...]] = []
    monkeypatch.setattr(provision, "cluster_up", lambda spec, *, limit=None, client_config=None: None)
    monkeypatch.setattr(provision, "cluster_down", lambda spec, *, limit=None, purge=False: calls.append(
        ("down", list(limit or ()), purge)))
    monkeypatch.setattr(registrations, "unregister_brokers", lambda config, ids: calls.append(("unregister", ids)))
    FakeKafka(replicas={("orders", 0): (1, 4) if holding else (1, 2), ("orders", 1): (2, 3)}, online={1, 2, 3, 4},
              cluster_id="c1").install(monkeypatch)
    spec_path, ctx = _provisioning_run(local_store, tmp_path)
    if params:
        ctx = lifecycle.OperationContext(dag_id=ctx.dag_id, run_id=ctx.run_id, conn_config={}, task_id="finish",
                                         params=steps.OperationParams(kind="scale_out", inventory=str(spec_path),
                                                                      **params))  # type: ignore[arg-type]
    assert steps.provision_brokers(ctx, planned=(records.NewBroker(4, "rack-b"),)).ids == [4]
    ctx.step("execute_batches", "failed", error="ReassignmentError: reassignment stalled")
    return spec_path, ctx, calls


def test_a_scale_out_that_fails_after_its_provision_removes_and_unregisters_the_empty_new_brokers(
        local_store, tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec_path, ctx, calls = _failed_after_provision(local_store, tmp_path, monkeypatch, holding=False)
    done = steps.finish(ctx, "c1")
    assert done["outcome"] == "failed" and done["reason"].startswith("failed steps: execute_batches: Reassignment")
    assert ("Broker(s) 4, provisioned by this run and holding no replica, were stopped, removed and unregistered"
            in done["reason"]) and "keep running" not in done["reason"], done["reason"]
    assert calls == [("down", ["kafka-4"], True), ("unregister", (4,))]
    assert [n.node_id for n in provision.ClusterSpec.load(spec_path).nodes] == [1, 2, 3]  # out of the spec too
    assert steps.provisioned_brokers(ctx) == ()  # removed: a later finish of this attempt leaves it alone
    assert local_store.lease("c1").free  # concluded: the lock is released


def test_a_failed_scale_outs_new_broker_holding_a_replica_keeps_running_and_is_named(
        local_store, tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec_path, ctx, calls = _failed_after_provision(local_store, tmp_path, monkeypatch, holding=True)
    done = steps.finish(ctx, "c1")
    assert calls == [] and [n.node_id for n in provision.ClusterSpec.load(spec_path).nodes] == [1, 2, 3, 4]
    assert ("Broker(s) 4, provisioned by this run, keep running (they hold replicas or could not be removed): "
            "trigger the scale-out again to finish it, or remove them with kafka_reassign (operation=drain, "
            "drain_brokers=[4], stop_drained=true)") in done["reason"], done["reason"]


def test_keep_new_brokers_keeps_a_failed_scale_outs_brokers_running(
        local_store, tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, ctx, calls = _failed_after_provision(local_store, tmp_path, monkeypatch, holding=False, add_brokers=1,
                                            keep_new_brokers=True)
    done = steps.finish(ctx, "c1")
    assert calls == [] and "Broker(s) 4, provisioned by this run, keep running (keep_new_brokers is on)" in \
        done["reason"], done["reason"]


def test_the_plans_new_broker_is_started_with_its_planned_id_and_rack_and_a_taken_id_is_refused(
        local_store, tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    started = []
    monkeypatch.setattr(provision, "cluster_up", lambda spec, *, limit=None, client_config=None: started.append(spec))
    spec_path, ctx = _provisioning_run(local_store, tmp_path)
    with pytest.raises(ConfigError, match=r"the plan adds broker\(s\) \[3\], but .* already has node\(s\)"):
        steps.provision_brokers(ctx, planned=(records.NewBroker(3, "rack-a"),))
    assert started == [] and len(provision.ClusterSpec.load(spec_path).nodes) == 3
    done = steps.provision_brokers(ctx, planned=(records.NewBroker(7, "rack-c"),))
    assert done.ids == [7] and done.new_brokers[0].rack == "rack-c"
    assert provision.ClusterSpec.load(spec_path).node(7).rack == "rack-c"


def test_a_scale_outs_new_ids_follow_the_spec_s_stopped_nodes_too() -> None:
    """A drained and stopped broker 5 is in the spec but not in the cluster's metadata: the next id is 6."""
    cluster = three_brokers_one_topic()
    p = steps.OperationParams(kind="scale_out", add_brokers=2, inventory="spec.json")
    assert [b.id for b in steps.planned_brokers(cluster, p)] == [4, 5]
    assert [b.id for b in steps.planned_brokers(cluster, p, taken=(1, 2, 3, 5))] == [6, 7]
    named = steps.OperationParams(kind="scale_out", new_broker_ids=(9,), inventory="spec.json")
    assert [b.id for b in steps.planned_brokers(cluster, named, taken=(1, 2, 3, 5))] == [9]  # named ids stand


def test_the_plan_of_a_scale_out_onto_a_spec_skips_the_ids_of_its_stopped_nodes(kafka: FakeKafka, tmp_path) -> None:
    spec = provision.local_cluster_spec(tmp_path / "cluster", brokers=3)
    spec, _ = spec.with_new_brokers(node_ids=[4], racks=["rack-a"])  # in the spec, stopped: not online
    spec_path = spec.save(tmp_path / "spec.json")
    ctx = lifecycle.OperationContext(dag_id="kafka_reassign", run_id="test", conn_config={},
                                     params=steps.OperationParams(kind="scale_out", add_brokers=1,
                                                                  inventory=str(spec_path)))
    from kafkaops.platform.kafka import metadata

    data = steps.make_plan(ctx, metadata.snapshot(None).to_dict())  # the fake's cluster: brokers 1-3 online
    assert [b["id"] for b in data["new_brokers"]] == [5], data["new_brokers"]
    assert "A real run would be refused" not in data["summary"], data["summary"]
    # the value reads back as the plan step's type, which writes it again; the audit's plan event is the same dict
    stored = json.loads(json.dumps(data))
    planned = records.PlannedReassignment.from_dict(stored)
    assert json.loads(json.dumps(planned.to_dict())) == stored and planned.provisioned.ids == [5]
    assert planned.plan.kind == "scale-out" and planned.moves.desired == steps.desired_of(data) and planned.moves.desired
    assert [e.data for e in ctx.audit.events() if e.kind == "plan"] == [stored]


def drain_context(**params: object) -> lifecycle.OperationContext:
    return lifecycle.OperationContext(dag_id="kafka_reassign", run_id="test", conn_config={"bootstrap.servers": "k:1"},
                                      params=steps.OperationParams(kind="drain", drain_brokers=(3,), dry_run=False,
                                                                   **params))


def test_a_drain_cordons_its_brokers_and_a_lift_that_fails_names_the_command(
        kafka: FakeKafka, monkeypatch: pytest.MonkeyPatch) -> None:
    from kafkaops.platform.kafka import metadata
    from kafkaops.reassign import cordons

    monkeypatch.setattr(metadata, "metadata_version", lambda conn: 30)
    ctx = drain_context()
    assert steps.set_cordons(lifecycle.OperationContext(
        dag_id="kafka_reassign", run_id="test", conn_config={},
        params=steps.OperationParams(kind="drain", drain_brokers=(3,)))) is None  # a dry run cordons nothing
    assert steps.set_cordons(context()) is None and kafka.config_calls == []  # a rebalance neither
    cordoned = steps.set_cordons(ctx)
    assert cordoned is not None and cordoned.brokers == (3,)
    assert kafka.configs[("broker", "3")] == {cordons.CORDON_KEY: "*"}
    in_place = steps.cordons_in_place(ctx)
    assert in_place is not None and in_place.record == cordoned.record
    steps.set_cordons(ctx)  # a retry: set again, still to be deleted at the end (not "restored" to "*")
    assert kafka.configs[("broker", "3")] == {cordons.CORDON_KEY: "*"}
    kafka.online.discard(3)
    with pytest.raises(cordons.CordonsLeft, match=r"--entity-name 3 --delete-config cordoned.log.dirs"):
        steps.lift_cordons(ctx, cordoned)
    lifted = records.fold(ctx.audit.events()).cordons_lifted[-1]
    assert lifted.left == (3,) and "kafka-configs.sh --bootstrap-server fake:9092" in lifted.commands[0]
    kafka.online.add(3)
    assert steps.lift_cordons(ctx, cordoned).brokers == (3,) and kafka.configs[("broker", "3")] == {}


def test_brokers_before_kafka_4_3_are_not_cordoned_and_the_record_says_why(
        kafka: FakeKafka, monkeypatch: pytest.MonkeyPatch) -> None:
    from kafkaops.platform.kafka import metadata

    monkeypatch.setattr(metadata, "metadata_version", lambda conn: 21)
    ctx = drain_context()
    skipped = steps.set_cordons(ctx)
    assert skipped is not None and skipped.brokers == () and "level 21, below 30" in (skipped.skipped or "")
    assert kafka.config_calls == [] and steps.cordons_in_place(ctx) is None
    assert any("below 30" in (e.data.get("text") or "") for e in ctx.audit.events() if e.kind == "note")


def test_a_drained_broker_that_is_down_is_not_cordoned_and_the_run_goes_on(
        kafka: FakeKafka, monkeypatch: pytest.MonkeyPatch) -> None:
    from kafkaops.platform.kafka import metadata

    monkeypatch.setattr(metadata, "metadata_version", lambda conn: 30)
    kafka.online.discard(3)
    ctx = drain_context()
    event = steps.set_cordons(ctx)
    assert event is not None and event.brokers == () and event.record["down"] == [3]
    assert kafka.config_calls == [] and steps.cordons_in_place(ctx) is None
    assert any("not registered (down)" in (e.data.get("text") or "") for e in ctx.audit.events() if e.kind == "note")


def test_the_moves_count_as_finished_once_this_attempt_elected_the_leaders(local_store) -> None:
    """What a resumed or retried execute_batches returns instead of repeating the work (the deferred-task race)."""
    local_store.start_operation("kafka_reassign", "test", kind="rebalance", triggered_by="t", params={})
    ctx = context()
    ctx.audit.append("started", operation="rebalance", dag_id="kafka_reassign", run_id="test", params={})
    assert steps.moves_finished(ctx) is None
    ctx.step("elect_leaders", "started")
    ctx.audit.append("note", text="preferred leader election", leaders_asked=3, leaders_changed=1)
    assert steps.moves_finished(ctx) is None  # started, not ended: a retry elects again
    ctx.step("elect_leaders", "success")
    assert steps.moves_finished(ctx) == records.LeadersElected(3, 1)
    ctx.audit.append("started", operation="rebalance", dag_id="kafka_reassign", run_id="test", params={})
    assert steps.moves_finished(ctx) is None  # a new attempt of the run moves again
