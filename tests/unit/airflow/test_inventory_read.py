"""A step reads an inventory kept in an Airflow connection (kafkaops.airflow.operation_dag.inventory_read): the
connection given by the environment, as a worker finds it; the copy exists for the step only, private."""
from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from kafkaops.airflow.operation_dag import begin_checks, inventory_read
from kafkaops.errors import ConfigError
from kafkaops.platform import lifecycle, provision
from kafkaops.reassign.steps import OperationParams

SECRET = "hunter2-s3cret"
INVENTORY = {"all": {"vars": {"ansible_password": SECRET},
                     "children": {"kafka_cluster": {"hosts": {"kafka-1": None, "kafka-4": {"kafka_broker_rack": "r"}}}}}}


def ctx(**params: object) -> lifecycle.OperationContext:
    return lifecycle.OperationContext(dag_id="kafka_scale_out", run_id="r1", conn_config={},
                                      params=OperationParams.from_params("scale_out", {"new_broker_ids": [4], **params}))


def test_the_step_reads_a_private_copy_removed_when_it_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_INV", json.dumps({"conn_type": "generic", "extra": {"inventory": INVENTORY}}))
    run = ctx(inventory="conn:kafka_inv")
    with pytest.raises(RuntimeError):
        with inventory_read(run) as ready:
            path = ready.params.inventory_at()
            assert ready.params.inventory == "conn:kafka_inv" and path.name == "conn-kafka_inv.yml"
            assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
            assert provision.inventory_hosts(path) == ("kafka-1", "kafka-4")
            begin_checks({"params": {}}, ready)
            raise RuntimeError("the step failed")
    assert not path.parent.exists()
    with inventory_read(run, needed=False) as untouched:  # a step that does not read the inventory
        assert untouched is run


def test_a_file_inventory_is_left_as_it_is(tmp_path: Path) -> None:
    run = ctx(inventory=str(tmp_path / "hosts.yml"))
    with inventory_read(run) as ready:
        assert ready is run


@pytest.mark.parametrize("env, said", [
    (None, "param inventory conn:kafka_inv names Airflow connection 'kafka_inv', which Airflow does not have"),
    ({"conn_type": "generic", "password": SECRET, "extra": {"hosts": SECRET}},
     "param inventory conn:kafka_inv: Airflow connection 'kafka_inv' has no inventory in its extra (its keys: hosts)"),
    ({"conn_type": "generic", "extra": {"inventory": f"all: {{vars: {{ansible_password: {SECRET}"}},
     "its inventory does not parse as YAML or JSON at line 1"),
])
def test_a_bad_connection_refuses_the_begin_naming_it_not_its_secret(monkeypatch: pytest.MonkeyPatch,
                                                                     env: dict | None, said: str) -> None:
    monkeypatch.delenv("AIRFLOW_CONN_KAFKA_INV", raising=False)
    if env is not None:
        monkeypatch.setenv("AIRFLOW_CONN_KAFKA_INV", json.dumps(env))
    with pytest.raises(ConfigError) as refused:
        begin_checks({"params": {}}, ctx(inventory="conn:kafka_inv", dry_run=True))
    assert said in str(refused.value) and SECRET not in str(refused.value), str(refused.value)
