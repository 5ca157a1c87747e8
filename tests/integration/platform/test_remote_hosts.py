"""The kafka_broker role on "remote" hosts over real SSH (tests/sshd.py): each host a Unix user that cannot
read the checkout or the controller's caches, each broker on its own loopback address. The role installs the
distribution it builds from the controller's jars, runs the broker as that user from that host's folders,
converges with no change, refuses bad hosts before changing them, and a scale-out adds a remote broker and
moves replicas onto it."""
from __future__ import annotations

import json
import subprocess
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import yaml

from kafkaops.errors import ProvisionError
from kafkaops.platform import admin, paths, provision
from tests import sshd as sshd_
from tests.conftest import TEST_BROKER_CONFIG

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]
ADDRESSES = ("127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5", "127.0.0.6")
NO_JAVA, SPARE = "127.0.0.5", "127.0.0.6"


@pytest.fixture(scope="module")
def sshd() -> Iterator[sshd_.Sshd]:
    reason = sshd_.missing()
    if reason:
        pytest.skip(reason)
    hidden = (REPO, paths.CACHE, paths.jar_dir("broker").parent)
    with sshd_.temporary_sshd(ADDRESSES, hidden=hidden, no_java=(NO_JAVA,)) as server:
        yield server


class RemoteCluster:
    """An Ansible inventory of remote hosts (a YAML file, as operators write it): kafka-1 the controller
    and a broker on 127.0.0.2, kafka-2 a broker on 127.0.0.3, kafka-3 (127.0.0.4) for the scale-out."""

    def __init__(self, server: sshd_.Sshd, folder: Path) -> None:
        self.server = server
        self.port, self.controller_port = provision.free_ports(2)
        self.hosts = {f"kafka-{i + 1}": host for i, host in enumerate(server.hosts)}
        self.cluster_id = provision.new_cluster_id()
        self.path = folder / "inventory.yml"
        self.write()

    def host_vars(self, name: str, **more: object) -> dict[str, object]:
        host = self.hosts[name]
        return {**self.server.connection_vars(host), "kafka_broker_node_id": int(name.split("-")[1]),
                "kafka_broker_rack": f"rack-{name[-1]}", "kafka_broker_base_dir": str(host.home / "kafka"), **more}

    def scale_out_vars(self) -> dict[str, object]:
        """kafka-3 names only its address: the login comes from an Airflow SSH connection (:attr:`login`)."""
        login_vars = ("ansible_user", "ansible_port", "ansible_ssh_private_key_file")
        return {k: v for k, v in self.host_vars("kafka-3", kafka_broker_process_roles=["broker"]).items()
                if k not in login_vars}

    @property
    def login(self) -> provision.SshLogin:
        from airflow.sdk import Connection

        conn = Connection(conn_id="kafka_hosts", conn_type="ssh", login=self.hosts["kafka-3"].user,
                          port=self.server.port, extra=json.dumps({"key_file": str(self.server.client_key)}))
        return provision.SshLogin.from_connection(conn)

    def write(self, **extra_hosts: dict[str, object]) -> None:
        inventory = {"all": {
            "vars": {"kafka_broker_cluster_id": self.cluster_id, "kafka_broker_heap": "256m",
                     "kafka_broker_port": self.port, "kafka_broker_controller_port": self.controller_port,
                     "kafka_broker_default_replication_factor": 2, "kafka_broker_offsets_topic_partitions": 3,
                     "kafka_broker_extra_config": TEST_BROKER_CONFIG},
            "children": {"kafka_cluster": {"children": {
                "kafka_controllers": {"hosts": {"kafka-1": self.host_vars("kafka-1")}},
                "kafka_brokers": {"hosts": {"kafka-2": self.host_vars("kafka-2", kafka_broker_process_roles=["broker"]),
                                            "kafka-3": self.scale_out_vars(),
                                            **extra_hosts}}}}}}}
        self.path.write_text(yaml.safe_dump(inventory))

    @property
    def bootstrap(self) -> str:
        return f"{self.hosts['kafka-1'].address}:{self.port},{self.hosts['kafka-2'].address}:{self.port}"

    def pid(self, name: str) -> int | None:
        node = name.split("-")[1]
        try:
            return int((self.hosts[name].home / "kafka" / f"node-{node}" / "kafka.pid").read_text())
        except (OSError, ValueError):
            return None


@pytest.fixture(scope="module")
def remote(sshd: sshd_.Sshd, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RemoteCluster]:
    cluster = RemoteCluster(sshd, tmp_path_factory.mktemp("remote"))
    yield cluster
    try:
        provision.run_playbook("cluster_down.yml", cluster.path, limit="kafka-1,kafka-2,kafka-3", ssh=cluster.login)
    except ProvisionError:
        pass  # the sshd fixture kills whatever the users still run


def listening_addresses(pid: int) -> set[tuple[str, int]]:
    """Where ``pid`` listens (Java binds IPv4-mapped IPv6 sockets: ::ffff:127.0.0.2 is 127.0.0.2)."""
    return {(c.laddr.ip.removeprefix("::ffff:"), c.laddr.port) for c in psutil.Process(pid).net_connections(kind="tcp")
            if c.status == psutil.CONN_LISTEN}


def test_brokers_run_as_their_host_users_from_their_hosts_folders(remote: RemoteCluster) -> None:
    result = provision.run_playbook("cluster_up.yml", remote.path, limit="kafka-1,kafka-2")
    assert result.ok
    for name in ("kafka-1", "kafka-2"):
        host = remote.hosts[name]
        # the user cannot read the checkout: nothing of the controller's could have served it
        denied = remote.server.ssh(host, f"ls {REPO}")
        assert denied.returncode != 0 and "Permission denied" in denied.stderr, denied
        pid = remote.pid(name)
        assert pid is not None, f"{name} wrote no pid file in {host.home}"
        process = psutil.Process(pid)
        assert process.uids().real == host.uid, f"{name}'s broker runs as uid {process.uids().real}"
        classpath = process.cmdline()[process.cmdline().index("-cp") + 1]
        assert classpath.startswith(str(host.home / "kafka" / "dist" / "kafka-")), classpath
        expected = {(host.address, remote.port)} | ({(host.address, remote.controller_port)} if name == "kafka-1" else set())
        assert listening_addresses(pid) == expected
    with admin.connect({"bootstrap.servers": remote.bootstrap}, timeout_s=15) as conn:
        assert sorted(b.id for b in admin.describe_cluster(conn)[2]) == [1, 2]


def test_a_second_run_changes_nothing(remote: RemoteCluster) -> None:
    pids = {name: remote.pid(name) for name in ("kafka-1", "kafka-2")}
    result = provision.run_playbook("cluster_up.yml", remote.path, limit="kafka-1,kafka-2")
    assert dict(result.changed) == {}
    assert {name: remote.pid(name) for name in pids} == pids


def test_a_scale_out_adds_a_remote_broker_and_moves_replicas_onto_it(remote: RemoteCluster) -> None:
    from kafkaops.cli.main import main as cli
    from tests.integration.cli.test_reassign import create

    topic = f"remote-{uuid.uuid4().hex[:6]}"
    with admin.connect({"bootstrap.servers": remote.bootstrap}, timeout_s=15) as conn:
        create(conn, topic, [[1, 2], [2, 1], [1, 2], [2, 1]], records=400)
    provision.run_playbook("cluster_up.yml", remote.path, limit="kafka-3", ssh=remote.login)
    pid = remote.pid("kafka-3")
    assert pid is not None and psutil.Process(pid).uids().real == remote.hosts["kafka-3"].uid
    plan = remote.path.parent / "plan.json"
    assert cli(["plan", "--bootstrap-server", remote.bootstrap, "--brokers", "1,2,3", "--topic", topic,
                "--output", str(plan)]) == 0
    assert cli(["execute", "--bootstrap-server", remote.bootstrap, "--plan", str(plan), "--throttle-mb", "50",
                "--execute"]) == 0
    with admin.connect({"bootstrap.servers": remote.bootstrap}, timeout_s=15) as conn:
        cluster = admin.snapshot(conn, topics=[topic], groups=False)
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
        with pytest.raises(ProvisionError, match=r"host kafka-7 is unreachable at task 'Look at the host"):
            provision.run_playbook("cluster_up.yml", remote.path, limit="kafka-7")
        wrong_key = tmp_path / "wrong_key"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(wrong_key)], check=True)
        remote.write(**{"kafka-7": {**spare_vars, "ansible_ssh_private_key_file": str(wrong_key)}})
        with pytest.raises(ProvisionError, match=r"(?s)host kafka-7 is unreachable at task 'Look at the host.*Permission denied"):
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
