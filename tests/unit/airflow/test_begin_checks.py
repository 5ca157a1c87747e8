"""What ``begin`` checks of the SSH login a later step of a run needs (kafkaops.airflow.operation_dag.ssh_checks):
only a run that names an SSH connection or stops drained brokers through an Ansible inventory, and a drain
whose host does not take the login is refused naming the host, the task and that nothing moved. (A real
Ansible run against a closed port; the DAG-level proof over real SSH is tests/dags/test_remote_scale_out.py.)"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from kafkaops.airflow.operation_dag import ssh_checks
from kafkaops.errors import HostUnreachable
from kafkaops.platform import provision
from kafkaops.reassign.steps import OperationParams, login_hosts


def drain(inventory: Path, **more: Any) -> OperationParams:
    return OperationParams.from_params("drain", {"drain_brokers": [2], "stop_drained": True, "dry_run": False,
                                                 "inventory": str(inventory), **more})


def context(ssh_conn_id: str | None = None) -> dict[str, Any]:
    return {"params": {"ssh_conn_id": ssh_conn_id}}


def test_only_a_run_that_logs_in_later_is_checked(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts.yml"
    assert ssh_checks(context(), OperationParams.from_params("rebalance", {"inventory": str(hosts)})) == []
    assert ssh_checks(context(), drain(tmp_path / "spec.json")) == []  # a local cluster: no SSH
    assert ssh_checks(context(), drain(hosts, dry_run=True)) == []  # a dry run stops nothing
    assert ssh_checks(context(), drain(hosts, stop_drained=False)) == []
    assert len(ssh_checks(context(), drain(hosts))) == 1
    assert login_hosts(drain(hosts)) == ("kafka-2",) and login_hosts(drain(hosts, dry_run=True)) == ()
    assert len(ssh_checks(context("kafka_hosts"), OperationParams.from_params("rebalance", {}))) == 1


def test_a_drain_whose_host_refuses_the_login_is_refused_before_any_move(tmp_path: Path) -> None:
    closed = provision.free_ports(1)[0]
    hosts = tmp_path / "hosts.yml"
    hosts.write_text(yaml.safe_dump({"all": {"children": {"kafka_cluster": {"hosts": {"kafka-2": {
        "ansible_host": "127.0.0.1", "ansible_port": closed, "ansible_user": "nobody",
        "ansible_connection": "ssh"}}}}}}))
    [check] = ssh_checks(context(), drain(hosts))
    with pytest.raises(HostUnreachable) as refused:
        check()
    message = str(refused.value)
    assert message.startswith(f"the drain stops broker(s) 2 on kafka-2 through {hosts} at its end, and their login "
                              "failed at its start: playbook hosts_login.yml failed: host kafka-2 is unreachable at "
                              "task 'Log in to the host'"), message
    assert "Connection refused" in message and message.endswith("nothing was changed (no replica moved)"), message
