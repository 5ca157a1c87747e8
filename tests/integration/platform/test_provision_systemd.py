"""The systemd provisioner, as far as a machine without systemd can check it: the playbooks pass
``ansible-playbook --syntax-check``, and ``--check`` runs every step up to the unit's start (service user
and group, folders, distribution, configuration, unit file) without changing anything, then stops where only
a running systemd could answer."""
from __future__ import annotations

import os
import pwd
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kafkaops.errors import ProvisionError
from kafkaops.platform import provision
from kafkaops.resources import playbooks

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("playbook", ["cluster_up.yml", "cluster_down.yml"])
def test_the_playbooks_pass_the_syntax_check(playbook: str) -> None:
    project = playbooks()
    done = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "--syntax-check",
                           "-i", str(project / "inventory" / "local.yml"), str(project / playbook)],
                          capture_output=True, text=True, env={**os.environ, "ANSIBLE_ROLES_PATH": str(project / "roles")},
                          check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_check_mode_of_the_systemd_provisioner_changes_nothing(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("the systemd provisioner becomes root: run as root")
    user = "kafkaops-sd-check"
    inventory = tmp_path / "systemd.yml"
    inventory.write_text(yaml.safe_dump({"all": {
        "vars": {"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}",
                 "ansible_become_method": "su", "kafka_broker_provisioner": "systemd", "kafka_broker_user": user,
                 "kafka_broker_cluster_id": provision.new_cluster_id(), "kafka_broker_host": "127.0.0.1",
                 "kafka_broker_base_dir": str(tmp_path / "kafka"), "kafka_broker_systemd_dir": str(tmp_path / "units")},
        "children": {"kafka_cluster": {"children": {"kafka_controllers": {"hosts": {"kafka-1": {
            "kafka_broker_node_id": 1}}}}}}}}))
    if Path("/run/systemd/system").is_dir():
        pytest.skip("this machine runs systemd: --check would not stop at the unit's start")
    with pytest.raises(ProvisionError, match=r"task 'Enable and start the broker unit' failed on kafka-1: "
                                             r"System has not been booted with systemd"):
        provision.run_playbook("cluster_up.yml", inventory, check=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["systemd.yml"]
    with pytest.raises(KeyError):
        pwd.getpwnam(user)
