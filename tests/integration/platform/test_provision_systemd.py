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


@pytest.mark.parametrize("version, present, absent", [
    ("4.4.0", ["share.coordinator.state.topic.replication.factor=1", "-Dlog4j2.configurationFile="],
     ["-Dlog4j.configuration="]),
    ("3.9.1", ["-Dlog4j.configuration=file:"], ["share.coordinator", "log4j2"]),
])
def test_configs_are_rendered_for_kafka_4_and_3_9(tmp_path: Path, version: str, present: list[str],
                                                   absent: list[str]) -> None:
    """The role's own templates, rendered with the facts its validation sets, for each Kafka line."""
    role = playbooks() / "roles" / "kafka_broker"
    play = tmp_path / "render.yml"
    play.write_text(yaml.safe_dump([{"hosts": "kafka_cluster", "gather_facts": False, "tasks": [
        {"ansible.builtin.include_role": {"name": "kafka_broker", "tasks_from": "validate.yml", "public": True}},
        {"ansible.builtin.set_fact": {"kafka_broker_version": version,
                                      "kafka_broker_version_major": version.split(".")[0], "kafka_broker_classpath": "/x"}},
        {"ansible.builtin.template": {"src": str(role / "templates" / "server.properties.j2"),
                                      "dest": str(tmp_path / "server.properties")}},
        {"ansible.builtin.template": {"src": str(role / "templates" / "kafka-broker.service.j2"),
                                      "dest": str(tmp_path / "unit.service")}}]}]))
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {
        "vars": {"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}",
                 "kafka_broker_cluster_id": provision.new_cluster_id(), "kafka_broker_host": "127.0.0.1",
                 "kafka_broker_user": "kafka", "kafka_broker_default_replication_factor": 1},
        "children": {"kafka_cluster": {"children": {"kafka_controllers": {"hosts": {"kafka-1": {
            "kafka_broker_node_id": 1}}}}}}}}))
    project = playbooks()
    done = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory), str(play)],
                          capture_output=True, text=True, check=False,
                          env={**os.environ, "ANSIBLE_ROLES_PATH": str(project / "roles")})
    assert done.returncode == 0, done.stdout[-3000:]
    rendered = (tmp_path / "server.properties").read_text() + (tmp_path / "unit.service").read_text()
    for text in present:
        assert text in rendered, f"{text!r} missing for Kafka {version}"
    for text in absent:
        assert text not in rendered, f"{text!r} rendered for Kafka {version}"
