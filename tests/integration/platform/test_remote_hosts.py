"""The kafka_broker role on "remote" hosts over real SSH (tests/sshd.py): each host a Unix user that cannot
read the checkout or the controller's caches, each broker on its own loopback address. The role installs the
distribution it builds from the controller's jars, runs the broker as that user from that host's folders,
converges with no change, refuses bad hosts before changing them, and a scale-out adds a remote broker and
moves replicas onto it."""
from __future__ import annotations

import subprocess
import socket
import uuid
from pathlib import Path

import pytest

from kafkaops.errors import HostUnreachable, ProvisionError
from kafkaops.platform import provision
from kafkaops.platform.kafka import connection, metadata
from tests.sshd import ADDRESSES, NO_JAVA, REPO, SPARE, RemoteCluster

pytestmark = pytest.mark.integration


@pytest.fixture
def remote(remote_cluster: RemoteCluster) -> RemoteCluster:
    """The session's remote cluster (tests/sshd.py; shared with tests/dags/test_remote_scale_out.py)."""
    return remote_cluster


def test_brokers_run_as_their_host_users_from_their_hosts_folders(remote: RemoteCluster) -> None:
    result = provision.run_playbook("cluster_up.yml", remote.path, limit="kafka-1,kafka-2")
    assert result.ok
    for name in ("kafka-1", "kafka-2"):
        host = remote.hosts[name]
        # the user cannot read the checkout: nothing of the controller's could have served it
        denied = remote.server.ssh(host, f"ls {REPO}")
        assert denied.returncode != 0 and "Permission denied" in denied.stderr, denied
        remote.assert_runs_there(name)
    with connection.connect({"bootstrap.servers": remote.bootstrap}, timeout_s=15) as conn:
        # and registered (the session's DAG test may have added broker 6 already)
        assert {1, 2} <= {b.id for b in metadata.describe_cluster(conn)[2]}


def test_a_second_run_changes_nothing(remote: RemoteCluster) -> None:
    remote.up()  # the first run, unless another test of the session made it already (any order holds)
    pids = {name: remote.pid(name) for name in ("kafka-1", "kafka-2")}
    assert None not in pids.values(), pids
    result = provision.run_playbook("cluster_up.yml", remote.path, limit="kafka-1,kafka-2")
    assert dict(result.changed) == {}
    assert {name: remote.pid(name) for name in pids} == pids


def test_a_scale_out_adds_a_remote_broker_and_moves_replicas_onto_it(remote: RemoteCluster) -> None:
    from kafkaops.cli.main import main as cli
    from tests.integration.cli.test_reassign import create

    remote.up()  # the session's fixture starts nothing: in a shuffled order this test may come first
    topic = f"remote-{uuid.uuid4().hex[:6]}"
    with connection.connect({"bootstrap.servers": remote.bootstrap}, timeout_s=15) as conn:
        create(conn, topic, [[1, 2], [2, 1], [1, 2], [2, 1]], records=400)
    provision.run_playbook("cluster_up.yml", remote.path, limit="kafka-3", ssh=remote.login())
    remote.assert_runs_there("kafka-3")
    plan = remote.path.parent / "plan.json"
    assert cli(["plan", "--bootstrap-server", remote.bootstrap, "--brokers", "1,2,3", "--topic", topic,
                "--output", str(plan)]) == 0
    assert cli(["execute", "--bootstrap-server", remote.bootstrap, "--plan", str(plan), "--throttle-mb", "50",
                "--execute"]) == 0
    with connection.connect({"bootstrap.servers": remote.bootstrap}, timeout_s=15) as conn:
        cluster = metadata.snapshot(conn, topics=[topic], groups=False)
    on_new = [p for p in cluster.partitions if 3 in p.replicas]
    assert on_new, f"no replica of {topic} moved onto the remote broker 3: {cluster.partitions}"
    assert sum(p.end_offset for p in cluster.partitions) == 400


def test_an_unreachable_host_fails_before_any_change_naming_it(remote: RemoteCluster, tmp_path: Path) -> None:
    spare = remote.server.hosts[ADDRESSES.index(SPARE)]
    closed = provision.free_ports(1)[0]
    spare_vars = {**remote.server.connection_vars(spare), "kafka_broker_node_id": 7,
                  "kafka_broker_process_roles": ["broker"], "kafka_broker_base_dir": str(spare.home / "kafka")}
    remote.write(**{"kafka-7": {**spare_vars, "ansible_port": closed}})
    try:
        with pytest.raises(HostUnreachable, match=r"host kafka-7 is unreachable at task 'Look at the host"):
            provision.run_playbook("cluster_up.yml", remote.path, limit="kafka-7")
        wrong_key = tmp_path / "wrong_key"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(wrong_key)], check=True)
        remote.write(**{"kafka-7": {**spare_vars, "ansible_ssh_private_key_file": str(wrong_key)}})
        with pytest.raises(HostUnreachable, match=r"(?s)host kafka-7 is unreachable at task 'Look at the host.*Permission denied"):
            provision.run_playbook("cluster_up.yml", remote.path, limit="kafka-7")
    finally:
        remote.write()
    assert not (spare.home / "kafka").exists()


def test_a_host_without_java_or_with_its_port_taken_is_refused_untouched(remote: RemoteCluster) -> None:
    no_java = remote.server.hosts[ADDRESSES.index(NO_JAVA)]
    remote.write(**{"kafka-8": {**remote.server.connection_vars(no_java), "kafka_broker_node_id": 8,
                                "kafka_broker_process_roles": ["broker"], "kafka_broker_base_dir": str(no_java.home / "kafka")}})
    try:
        with pytest.raises(ProvisionError, match=r"check 'java' failed on kafka-8: node 8 needs Java 17\+"):
            provision.run_playbook("cluster_up.yml", remote.path, limit="kafka-8")
        assert not (no_java.home / "kafka").exists()
        busy = remote.server.hosts[ADDRESSES.index(SPARE)]
        remote.write(**{"kafka-8": {**remote.server.connection_vars(busy), "kafka_broker_node_id": 8,
                                    "kafka_broker_process_roles": ["broker"],
                                    "kafka_broker_base_dir": str(busy.home / "kafka")}})
        holder = socket.socket()
        holder.bind((busy.address, remote.port))
        holder.listen(1)
        try:
            with pytest.raises(ProvisionError, match=rf"check 'ports free' failed on kafka-8: port {remote.port} on "
                                                     rf"{busy.address} is already in use"):
                provision.run_playbook("cluster_up.yml", remote.path, limit="kafka-8")
        finally:
            holder.close()
        assert not (busy.home / "kafka").exists()
    finally:
        remote.write()
