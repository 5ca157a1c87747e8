"""The inventory a scale-out provisions through (or a drain stops its brokers through) is checked with the
plan, before the approval (kafkaops.reassign.steps.check_inventory): real files, Ansible's own parser."""
from __future__ import annotations

from pathlib import Path

import pytest

from kafkaops.errors import ConfigError
from kafkaops.platform import provision
from kafkaops.reassign import steps
from kafkaops.reassign.records import NewBroker

INVENTORY = """all:
  children:
    kafka:
      hosts:
        kafka-1: {ansible_host: 10.0.0.1}
        kafka-4: {ansible_host: 10.0.0.4}
"""


def params(kind: str, inventory: str, **more: object) -> steps.OperationParams:
    return steps.OperationParams.from_params(kind, {"inventory": inventory, "add_brokers": 1, **more})


def test_an_ansible_inventory_with_a_host_for_each_new_broker_passes(tmp_path: Path) -> None:
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(INVENTORY)
    steps.check_inventory(params("scale_out", str(inventory)), [NewBroker(4, None)])
    assert provision.inventory_hosts(inventory) == ("kafka-1", "kafka-4")


def test_a_broker_without_a_host_is_refused_naming_the_host_and_the_hosts_there_are(tmp_path: Path) -> None:
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(INVENTORY)
    with pytest.raises(ConfigError, match=r"has no host kafka-5 for broker\(s\) 5 \(its hosts: kafka-1, kafka-4\)"):
        steps.check_inventory(params("scale_out", str(inventory)), [NewBroker(5, None)])
    with pytest.raises(ConfigError, match=r"no host kafka-2 for broker\(s\) 2"):  # a drain that stops broker 2
        steps.check_inventory(params("drain", str(inventory), drain_brokers=[2], stop_drained=True), ())
    steps.check_inventory(params("drain", str(inventory), drain_brokers=[2]), ())  # nothing to stop: no check


@pytest.mark.parametrize("content, said", [(None, "is not a readable file"),
                                           ("{{ not: an inventory", "names no host that Ansible can read")])
def test_a_missing_or_unreadable_inventory_is_refused_before_anything_changes(tmp_path: Path, content: str | None,
                                                                             said: str) -> None:
    inventory = tmp_path / "hosts.yml"
    if content is not None:
        inventory.write_text(content)
    with pytest.raises(ConfigError, match=said) as refused:
        steps.check_inventory(params("scale_out", str(inventory)), [NewBroker(4, None)])
    assert str(inventory) in str(refused.value) and "Nothing was changed" in str(refused.value)


def test_a_cluster_spec_that_has_the_planned_id_already_is_refused(tmp_path: Path) -> None:
    spec = provision.local_cluster_spec(tmp_path / "cluster", brokers=3)
    path = spec.save(tmp_path / "spec.json")
    with pytest.raises(ConfigError, match=r"adds broker\(s\) \[3\], but .* already has node\(s\) with those ids"):
        steps.check_inventory(params("scale_out", str(path)), [NewBroker(3, None)])
    steps.check_inventory(params("scale_out", str(path)), [NewBroker(4, None)])


def test_a_dry_run_plans_on_and_says_what_a_real_run_would_be_refused_for(local_store, monkeypatch) -> None:
    """A dry run never provisions or stops a broker: a wrong inventory is said in its plan and record, and
    the real run is refused at its plan."""
    from kafkaops.platform import lifecycle
    from tests.unit.clusters import three_brokers_one_topic
    from tests.unit.reassign.fake_kafka import FakeKafka

    # the plan reads the moved topics' storage configs (tiered or not) from the cluster
    FakeKafka(replicas={("orders", p): (1, 2, 3) for p in range(3)}, online={1, 2, 3}).install(monkeypatch)

    local_store.start_operation("kafka_scale_out", "dry", kind="scale_out", triggered_by="t", params={})
    before = three_brokers_one_topic().to_dict()

    def ctx(dry_run: bool) -> lifecycle.OperationContext:
        return lifecycle.OperationContext(dag_id="kafka_scale_out", run_id="dry", conn_config={}, params=params(
            "scale_out", "/nowhere/hosts.yml", dry_run=dry_run, new_broker_racks=["rack-a"]))

    data = steps.make_plan(ctx(True), before)
    assert "A real run would be refused here: inventory /nowhere/hosts.yml is not a readable file" in data["summary"]
    assert "**A real run would be refused here: inventory /nowhere/hosts.yml" in data["approval"]
    notes = ctx(True).audit.summary()["notes"]
    assert any(n["text"].startswith("dry run: a real run would be refused at its plan: inventory") for n in notes)
    with pytest.raises(ConfigError, match="inventory /nowhere/hosts.yml is not a readable file"):
        steps.make_plan(ctx(False), before)


def test_a_new_brokers_rack_is_the_one_its_ansible_host_is_given(tmp_path: Path) -> None:
    """The provision starts host kafka-<id> with the inventory's kafka_broker_rack (a host's own over its
    group's, host_vars beside the file included), so the plan places replicas on that rack; a host the
    inventory lacks (refused before a real run) is planned on the cluster's racks in turn, as a preview."""
    from tests.unit.clusters import three_brokers_one_topic

    inventory = tmp_path / "hosts.yml"
    inventory.write_text("""all:
  children:
    kafka:
      vars: {kafka_broker_rack: rack-a}
      hosts:
        kafka-4: {ansible_host: 10.0.0.4, kafka_broker_rack: rack-c}
        kafka-5: {ansible_host: 10.0.0.5}
        kafka-6: {ansible_host: 10.0.0.6}
        zookeeper-1: {ansible_host: 10.0.0.9}
""")
    (tmp_path / "host_vars").mkdir()
    (tmp_path / "host_vars" / "kafka-6.yml").write_text("kafka_broker_rack: rack-b\n")
    assert provision.inventory_racks(inventory) == {"kafka-4": "rack-c", "kafka-5": "rack-a", "kafka-6": "rack-b",
                                                    "zookeeper-1": "rack-a"}
    cluster = three_brokers_one_topic()
    given = steps._inventory_racks(params("scale_out", str(inventory)))
    assert given == {4: "rack-c", 5: "rack-a", 6: "rack-b"}
    planned = steps.planned_brokers(cluster, params("scale_out", str(inventory), add_brokers=4),
                                    inventory_racks=given)
    cycled = cluster.racks or ("",)
    assert [(b.id, b.rack) for b in planned] == [(4, "rack-c"), (5, "rack-a"), (6, "rack-b"),
                                                 (7, cycled[3 % len(cycled)] or None)]
    named = params("scale_out", str(inventory), new_broker_racks=["rack-z"])  # the param wins
    assert [b.rack for b in steps.planned_brokers(cluster, named, inventory_racks=given)] == ["rack-z"]
    assert steps._inventory_racks(params("scale_out", str(tmp_path / "nowhere.yml"))) == {}
