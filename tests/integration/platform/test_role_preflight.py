"""The kafka_broker role's look at a host before it changes it (tasks/preflight.yml), run on its own on this
machine (no broker starts): the Java it asks for follows the Kafka version the node will run, which it knows
before the Java check from the inventory, the host's classpath folder, the archive's name or the controller's
Maven jars (``kafka_broker_jars_source``). A host whose ``java`` answers 11 runs Kafka 3.9 and is refused
for Kafka 4, naming the check and the version it needs."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kafkaops.platform import provision
from kafkaops.platform.paths import jar_dir
from kafkaops.resources import playbooks

pytestmark = pytest.mark.integration


def java_11(folder: Path) -> Path:
    """A ``java`` that answers ``-version`` as OpenJDK 11 does (on stderr)."""
    path = folder / "java"
    path.write_text('#!/bin/sh\necho \'openjdk version "11.0.24" 2024-07-16\' >&2\n')
    path.chmod(0o755)
    return path


def preflight(tmp_path: Path, **node_vars: object) -> subprocess.CompletedProcess[str]:
    """validate.yml and preflight.yml of the role for one local node with ``node_vars``; the version it
    worked out printed last."""
    play = tmp_path / "preflight.yml"
    play.write_text(yaml.safe_dump([{"hosts": "kafka_cluster", "gather_facts": False, "tasks": [
        {"ansible.builtin.include_role": {"name": "kafka_broker", "tasks_from": "validate.yml", "public": True}},
        {"ansible.builtin.include_role": {"name": "kafka_broker", "tasks_from": "preflight.yml", "public": True}},
        {"ansible.builtin.debug": {"msg": "version={{ kafka_broker_version }} java>={{ kafka_broker_java_min_version }}"}},
    ]}]))
    port, controller_port = provision.free_ports(2)
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {
        "vars": {"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}",
                 "kafka_broker_cluster_id": provision.new_cluster_id(), "kafka_broker_host": "127.0.0.1",
                 "kafka_broker_base_dir": str(tmp_path / "kafka"), "kafka_broker_default_replication_factor": 1},
        "children": {"kafka_cluster": {"children": {"kafka_controllers": {"hosts": {"kafka-1": {
            "kafka_broker_node_id": 1, "kafka_broker_port": port, "kafka_broker_controller_port": controller_port,
            "kafka_broker_java": str(java_11(tmp_path)), **node_vars}}}}}}}}))
    project = playbooks()
    return subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory), str(play)],
                          capture_output=True, text=True, check=False, timeout=300,
                          env={**os.environ, "ANSIBLE_ROLES_PATH": str(project / "roles")})


def release(line: str) -> str:
    """The release of a jar set of the cache, e.g. "3.9.2" for ``broker-3.9``."""
    jar = next(jar_dir(line).glob("kafka-clients-*.jar"))
    return jar.name.removeprefix("kafka-clients-").removesuffix(".jar")


def test_java_11_is_enough_when_the_maven_jars_are_kafka_3_9(tmp_path: Path) -> None:
    done = preflight(tmp_path, kafka_broker_jars_source=str(jar_dir("broker-3.9")))
    assert done.returncode == 0, done.stdout[-3000:]
    assert f"version={release('broker-3.9')} java>=11" in done.stdout, done.stdout[-3000:]
    assert not (tmp_path / "kafka").exists(), "the look at the host changed it"


@pytest.mark.parametrize("where", ["jars", "archive"])
def test_java_11_is_refused_for_kafka_4(tmp_path: Path, where: str) -> None:
    source = ({"kafka_broker_jars_source": str(jar_dir("broker"))} if where == "jars"
              else {"kafka_broker_archive": str(tmp_path / "kafka_2.13-4.4.0.tgz")})
    done = preflight(tmp_path, **source)
    assert done.returncode != 0
    assert "check 'java' failed on kafka-1: node 1 needs Java 17+" in done.stdout, done.stdout[-3000:]
    assert "has version 11" in done.stdout
    assert not (tmp_path / "kafka").exists(), "a refused host was changed"
