"""An inventory kept in an Airflow connection (the ``inventory`` param ``conn:<conn_id>``): its extra read and
checked (pure), and the private file Ansible reads it from for one step."""
from __future__ import annotations

import json
import stat
from dataclasses import replace
from pathlib import Path

import pytest

from kafkaops.errors import ConfigError
from kafkaops.platform import provision
from kafkaops.reassign import steps
from kafkaops.reassign.records import NewBroker

SECRET = "hunter2-s3cret"
ANSIBLE = f"""all:
  vars:
    ansible_user: kafka
    ansible_password: {SECRET}
    ansible_become_pass: {SECRET}-become
    kafka_broker_scram_users:
      - name: admin
        password: {SECRET}-scram
  children:
    kafka_cluster:
      hosts:
        kafka-1: {{ansible_host: 10.0.0.1, kafka_broker_rack: rack-a}}
        kafka-4: {{ansible_host: 10.0.0.4, kafka_broker_rack: rack-b}}
"""


def spec_dict(tmp_path: Path) -> dict:
    spec = provision.local_cluster_spec(tmp_path / "cluster", brokers=3, inventory_vars={"ansible_password": SECRET})
    return spec.to_dict()


def test_an_ansible_inventory_as_yaml_text_is_read_with_its_hosts() -> None:
    inventory = provision.inventory_from_extra("kafka_inv", {"inventory": ANSIBLE})
    assert not inventory.is_spec and inventory.hosts == ("kafka-1", "kafka-4")
    assert inventory.param == "conn:kafka_inv"
    assert SECRET not in repr(inventory)
    assert inventory.secret_values() == [f"{SECRET}-become", f"{SECRET}-scram", SECRET]


def test_a_cluster_spec_as_a_json_object_or_json_text_is_read_as_a_spec(tmp_path: Path) -> None:
    data = spec_dict(tmp_path)
    for given in (data, json.dumps(data)):
        inventory = provision.inventory_from_extra("local", {"inventory": given})
        assert inventory.is_spec and inventory.hosts == ("kafka-1", "kafka-2", "kafka-3")
        assert provision.ClusterSpec.from_dict(json.loads(inventory.text)).to_dict() == data


def test_a_vault_tag_does_not_stop_the_check() -> None:
    text = ANSIBLE.replace(f"ansible_password: {SECRET}", "ansible_password: !vault |\n      $ANSIBLE_VAULT;1.1;AES256")
    assert provision.inventory_from_extra("v", {"inventory": text}).hosts == ("kafka-1", "kafka-4")


@pytest.mark.parametrize("extra, said", [
    (None, "has no inventory in its extra (its keys: none)"),
    ({"ansible_password": SECRET}, "has no inventory in its extra (its keys: ansible_password)"),
    ({"inventory": ""}, "has no inventory in its extra"),
    ({"inventory": 42}, "holds a int under \"inventory\""),
    ({"inventory": f"all:\n  vars: {{ansible_password: {SECRET}\n  hosts: ["}, "does not parse as YAML or JSON at line"),
    ({"inventory": f"[{SECRET}]"}, "its inventory is a list"),
    ({"inventory": {"all": {"vars": {"ansible_password": SECRET}}}}, "names no host"),
    ({"inventory": {"cluster_id": "x", "nodes": [{"node_id": "one", "port": SECRET}]}},
     "looks like a kafkaops cluster spec but cannot be read (missing field 'base_dir')"),
    ({"inventory": {"cluster_id": "x", "base_dir": "/b", "nodes": [{"node_id": 1, "port": SECRET,
                                                                    "controller_port": 2}]}},
     "a field of the wrong type (ValueError)"),
    ({"inventory": {"cluster_id": "x", "base_dir": "/b", "nodes": []}}, "its cluster spec names no node"),
])
def test_a_connection_without_a_usable_inventory_is_refused_naming_the_param_and_connection_not_the_secret(
        extra: dict | None, said: str) -> None:
    with pytest.raises(ConfigError) as refused:
        provision.inventory_from_extra("kafka_inv", extra)
    message = str(refused.value)
    assert said in message, message
    assert message.startswith("param inventory conn:kafka_inv: Airflow connection 'kafka_inv'"), message
    assert "nothing was changed" in message
    assert SECRET not in message
    # no chained error either: a YAML error's own text quotes the lines around its mark, a traceback would show it
    assert refused.value.__cause__ is None and (refused.value.__context__ is None or refused.value.__suppress_context__)


@pytest.mark.parametrize("given", ["conn:", "conn:a b", "conn:../x", "conn:" + "x" * 251])
def test_a_param_naming_no_connection_id_is_refused(given: str) -> None:
    with pytest.raises(ConfigError, match="names no Airflow connection id"):
        steps.OperationParams.from_params("scale_out", {"inventory": given})


def test_the_param_keeps_the_connection_and_no_file_until_a_step_reads_it() -> None:
    p = steps.OperationParams.from_params("scale_out", {"inventory": "conn:kafka_inv", "new_broker_ids": [4]})
    assert p.inventory == "conn:kafka_inv" and p.inventory_conn_id == "kafka_inv" and not p.inventory_file
    with pytest.raises(ConfigError, match="inventory of Airflow connection 'kafka_inv' was not read for this step"):
        p.inventory_at()


def test_the_file_is_private_and_removed_when_the_step_ends_also_on_failure() -> None:
    inventory = provision.inventory_from_extra("kafka_inv", {"inventory": ANSIBLE})
    with pytest.raises(RuntimeError, match="the step failed"):
        with provision.materialized_inventory(inventory) as path:
            assert path.name == "conn-kafka_inv.yml" and path.read_text() == ANSIBLE
            assert stat.S_IMODE(path.stat().st_mode) == 0o600
            assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
            assert path.parent.name.startswith(provision.MATERIALIZED_PREFIX)
            assert provision.inventory_hosts(path) == ("kafka-1", "kafka-4")  # Ansible's own parser reads it
            raise RuntimeError("the step failed")
    assert not path.exists() and not path.parent.exists()


def test_the_steps_read_the_copy_and_name_the_connection(tmp_path: Path) -> None:
    """Hosts, racks and the new host's check read the copy as they read a file; messages name conn:<id>."""
    inventory = provision.inventory_from_extra("kafka_inv", {"inventory": ANSIBLE})
    with provision.materialized_inventory(inventory) as path:
        p = steps.OperationParams.from_params("scale_out", {"inventory": "conn:kafka_inv", "new_broker_ids": [4]})
        ready = replace(p, inventory_file=str(path))
        steps.check_inventory_file(ready)
        steps.check_inventory(ready, [NewBroker(4, None)])
        assert steps._inventory_racks(ready) == {1: "rack-a", 4: "rack-b"}
        with pytest.raises(ConfigError, match=r"inventory conn:kafka_inv has no host kafka-5"):
            steps.check_inventory(ready, [NewBroker(5, None)])


def test_a_scale_out_through_a_cluster_spec_in_a_connection_is_refused_before_the_approval(tmp_path: Path) -> None:
    """A scale-out writes its new brokers into its cluster spec; a connection cannot take that."""
    inventory = provision.inventory_from_extra("local", {"inventory": spec_dict(tmp_path)})
    with provision.materialized_inventory(inventory) as path:
        p = replace(steps.OperationParams.from_params("scale_out", {"inventory": "conn:local"}), inventory_file=str(path))
        steps.check_inventory_file(p)  # readable: a dry run plans on it
        assert steps._spec_node_ids(p) == (1, 2, 3)
        with pytest.raises(ConfigError, match="param inventory conn:local holds a kafkaops cluster spec") as refused:
            steps.check_inventory(p, [NewBroker(4, None)])
        assert SECRET not in str(refused.value)
        drain = replace(steps.OperationParams.from_params(
            "drain", {"inventory": "conn:local", "drain_brokers": [3], "stop_drained": True}), inventory_file=str(path))
        steps.check_inventory(drain, ())  # a drain only reads the spec: stopping its brokers works


def test_an_unset_inventory_dirs_setting_still_refuses_what_is_no_inventory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(provision.INVENTORY_DIRS_SETTING, raising=False)
    for name in ("/etc/passwd", "/etc/shadow", "/etc/../etc/hosts.yml"):
        with pytest.raises(ConfigError, match="param inventory"):
            provision.inventory_path(name)
