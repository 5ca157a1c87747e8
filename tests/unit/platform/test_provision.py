from __future__ import annotations

import base64
import uuid
from pathlib import Path

import pytest

from kafkaops.platform import provision
from kafkaops.errors import ProvisionError


def test_local_cluster_spec_uses_distinct_free_ports_and_racks(tmp_path: Path) -> None:
    spec = provision.local_cluster_spec(tmp_path, brokers=4, controllers=3)
    ports = [p for n in spec.nodes for p in (n.port, n.controller_port)]
    assert len(set(ports)) == 8
    assert [n.rack for n in spec.nodes] == ["rack-a", "rack-b", "rack-c", "rack-a"]
    assert [n.is_controller for n in spec.nodes] == [True, True, True, False]
    assert len(spec.cluster_id) == 22


def test_inventory_puts_controllers_in_their_group(tmp_path: Path) -> None:
    spec = provision.local_cluster_spec(tmp_path, brokers=2, controllers=1)
    cluster = spec.inventory()["all"]["children"]["kafka_cluster"]
    assert list(cluster["children"]["kafka_controllers"]["hosts"]) == ["kafka-1"]
    assert list(cluster["hosts"]) == ["kafka-2"]
    assert cluster["hosts"]["kafka-2"]["kafka_broker_process_roles"] == ["broker"]
    assert spec.inventory()["all"]["vars"]["kafka_broker_default_replication_factor"] == 2


def test_the_defaults_server_settings_are_under_the_specs_key_by_key(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(provision, "INVENTORY_DEFAULTS", {
        "kafka_broker_heap": "128m", "kafka_broker_extra_config": {"num.io.threads": 2, "num.network.threads": 2}})
    spec = provision.local_cluster_spec(tmp_path, brokers=1, controllers=1, extra_config={"num.io.threads": 4})
    inventory_vars = spec.inventory()["all"]["vars"]
    assert inventory_vars["kafka_broker_extra_config"] == {"num.io.threads": 4, "num.network.threads": 2}
    assert inventory_vars["kafka_broker_heap"] == spec.heap  # the spec's own value wins
    assert provision.INVENTORY_DEFAULTS["kafka_broker_extra_config"] == {"num.io.threads": 2, "num.network.threads": 2}


def test_adding_a_node_with_a_taken_id_is_refused(tmp_path: Path) -> None:
    spec = provision.local_cluster_spec(tmp_path, brokers=3)
    with pytest.raises(ProvisionError, match=r"node 2 .* the id is taken"):
        spec.with_node(provision.NodeSpec(node_id=2, port=1, controller_port=2))
    bigger = spec.with_node(provision.NodeSpec(node_id=4, port=1, controller_port=2, roles=("broker",)))
    assert [n.node_id for n in bigger.nodes] == [1, 2, 3, 4] and len(spec.nodes) == 3


@pytest.mark.parametrize("brokers, controllers", [(3, 2), (2, 3)])
def test_quorum_must_be_one_or_three(tmp_path: Path, brokers: int, controllers: int) -> None:
    with pytest.raises(ProvisionError, match="use 1 or 3"):
        provision.local_cluster_spec(tmp_path, brokers=brokers, controllers=controllers)


def test_spec_round_trips_and_grows_by_new_brokers(tmp_path: Path) -> None:
    spec = provision.local_cluster_spec(tmp_path, brokers=3)
    again = provision.ClusterSpec.load(spec.save(tmp_path / "spec.json"))
    assert again == spec
    bigger, added = spec.with_new_brokers(2)
    assert [n.node_id for n in added] == [4, 5]
    assert [n.rack for n in added] == ["rack-a", "rack-b"]
    assert all(n.roles == ("broker",) for n in added)
    assert bigger.nodes[:3] == spec.nodes
    with pytest.raises(ProvisionError, match="no broker to add"):
        spec.with_new_brokers(0)


def test_a_secured_spec_keeps_its_role_variables_for_new_brokers_in_a_file_for_its_owner(tmp_path: Path) -> None:
    listeners = [{"name": "CLIENT", "port": "{{ kafka_broker_port }}", "protocol": "SASL_SSL"}]
    spec = provision.local_cluster_spec(tmp_path, brokers=3, controllers=1, heap="256m", inventory_vars={
        "kafka_broker_listeners": listeners, "kafka_broker_scram_users": [{"name": "u", "password": "pw-1"}]})
    path = spec.save(tmp_path / "spec.json")
    assert path.stat().st_mode & 0o777 == 0o600
    grown, _ = provision.ClusterSpec.load(path).with_new_brokers(1)
    variables = grown.inventory()["all"]["vars"]
    assert variables["kafka_broker_listeners"] == listeners and variables["kafka_broker_heap"] == "256m"
    assert variables["kafka_broker_scram_users"] == [{"name": "u", "password": "pw-1"}]
    assert "pw-1" not in repr(grown)


def test_the_registration_check_gets_the_connection_config_without_its_bootstrap() -> None:
    config = {"bootstrap.servers": "h:1", "security.protocol": "SASL_SSL", "sasl.password": "pw"}
    assert provision.check_client_vars(config) == {
        "kafka_broker_check_client_config": {"security.protocol": "SASL_SSL", "sasl.password": "pw"}}
    assert provision.check_client_vars({"bootstrap.servers": "h:1"}) == provision.check_client_vars(None) == {}


def test_a_failed_command_names_its_exit_code_and_what_it_printed() -> None:
    from kafkaops.platform.provision import _failure_message

    result = {"msg": "non-zero return code", "rc": 1, "stdout": "", "stderr": "Exception: disk full\n"}
    assert _failure_message(result) == "non-zero return code (rc 1): Exception: disk full"
    assert _failure_message({"msg": "port 9092 is taken"}) == "port 9092 is taken"
    looped = {"results": [{"failed": True, "msg": "non-zero return code", "rc": 2, "stdout": "out"}, {"failed": False}]}
    assert _failure_message(looped) == "non-zero return code (rc 2): out"


def test_a_cluster_id_never_starts_with_a_dash(monkeypatch: pytest.MonkeyPatch) -> None:
    # kafka-storage format --cluster-id would read "-..." as an option; draw again, as Kafka does.
    draws = iter([uuid.UUID(bytes=b"\xf8" + bytes(15)), uuid.UUID(bytes=b"\x01" + bytes(15))])
    monkeypatch.setattr(provision.uuid, "uuid4", lambda: next(draws))
    assert provision.new_cluster_id() == base64.urlsafe_b64encode(b"\x01" + bytes(15)).decode().rstrip("=")


# -- the local cluster's spec (make cluster-up), the DAGs' default inventory --------------------------------

@pytest.fixture
def local_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The local cluster's folder and spec in a temp dir instead of the repository's .cache."""
    monkeypatch.setattr(provision, "LOCAL_BASE_DIR", tmp_path / "cluster")
    monkeypatch.setattr(provision, "LOCAL_SPEC", tmp_path / "local-cluster.json")
    return tmp_path


def running(spec: provision.ClusterSpec, node_id: int, pid: int) -> None:
    """Record ``pid`` as the node's process, where the role writes it."""
    pid_file = spec.base_dir / f"node-{node_id}" / "kafka.pid"
    pid_file.parent.mkdir(parents=True, exist_ok=True)
    pid_file.write_text(str(pid))


def test_without_a_spec_there_is_no_default_inventory(local_cache: Path) -> None:
    assert provision.default_inventory() is None
    provision.save_local_spec()
    assert provision.default_inventory() == local_cache / "local-cluster.json"
    assert provision.ClusterSpec.load(provision.LOCAL_SPEC) == provision.local_spec()


def test_the_saved_spec_keeps_added_brokers_that_run_and_drops_stopped_ones(local_cache: Path) -> None:
    import os

    grown, added = provision.local_spec().with_new_brokers(2)  # what kafka_scale_out saves: brokers 4 and 5
    grown.save(provision.LOCAL_SPEC)
    running(grown, 4, os.getpid())  # 4 runs; 5 was stopped (no live process)
    provision.save_local_spec()
    saved = provision.ClusterSpec.load(provision.LOCAL_SPEC)
    assert [n.node_id for n in saved.nodes] == [1, 2, 3, 4] and saved.node(4) == added[0]


def test_a_spec_of_another_cluster_is_replaced(local_cache: Path) -> None:
    other = provision.local_cluster_spec(local_cache / "elsewhere", brokers=4)
    other.save(provision.LOCAL_SPEC)
    provision.save_local_spec()
    assert provision.ClusterSpec.load(provision.LOCAL_SPEC) == provision.local_spec()


def test_cluster_down_also_stops_the_added_brokers_and_a_purge_removes_the_spec(
        local_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runs = []
    monkeypatch.setattr(provision, "run_playbook", lambda playbook, inventory, *, extravars=None, limit=None:
                        runs.append((playbook, inventory if isinstance(inventory, Path) else "spec", limit)))
    grown, _ = provision.local_spec().with_new_brokers(1)
    grown.save(provision.LOCAL_SPEC)
    provision.cluster_down(purge=True)
    assert runs == [("cluster_down.yml", "spec", "kafka-4"), ("cluster_down.yml", provision.LOCAL_INVENTORY, None)]
    assert provision.default_inventory() is None


# -- SSH logins from an Airflow SSH connection ----------------------------------------------------------------

def test_an_ssh_connection_becomes_ansible_settings_with_its_key_in_a_private_file(tmp_path: Path) -> None:
    from airflow.sdk import Connection

    conn = Connection(conn_id="broker_hosts", conn_type="ssh", login="deploy", port=2222,
                      extra='{"private_key": "-----BEGIN OPENSSH PRIVATE KEY-----\\nabc\\n-----END OPENSSH PRIVATE KEY-----"}')
    login = provision.SshLogin.from_connection(conn)
    assert "BEGIN" not in repr(login)
    # what an error says about the login: where it came from, never the key itself
    assert login.describe() == (" (login from SSH connection 'broker_hosts': user deploy, port 2222, key the "
                                "connection's private_key)")
    env = login.ansible_env(tmp_path)
    key = Path(env.pop("ANSIBLE_PRIVATE_KEY_FILE"))
    assert env == {"ANSIBLE_REMOTE_USER": "deploy", "ANSIBLE_REMOTE_PORT": "2222"}
    assert key.parent == tmp_path and key.stat().st_mode & 0o777 == 0o600
    assert key.read_text().startswith("-----BEGIN OPENSSH PRIVATE KEY-----\nabc")


def test_an_ssh_connection_with_only_a_password_is_refused() -> None:
    from airflow.sdk import Connection

    conn = Connection(conn_id="broker_hosts", conn_type="ssh", login="deploy", password="pw")
    with pytest.raises(ProvisionError, match="'broker_hosts' logs in with a password.*key_file or private_key"):
        provision.SshLogin.from_connection(conn)
    with_key = Connection(conn_id="k", conn_type="ssh", login="deploy", password="pw", extra='{"key_file": "/k"}')
    assert provision.SshLogin.from_connection(with_key).ansible_env(Path("/nonexistent")) == {
        "ANSIBLE_REMOTE_USER": "deploy", "ANSIBLE_PRIVATE_KEY_FILE": "/k"}


def test_a_kafka_3_9_spec_runs_its_own_jar_set_and_keeps_its_line_when_grown(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    jars = tmp_path / "jars"
    (jars / "broker-3.9").mkdir(parents=True)
    (jars / "broker-3.9" / "kafka-clients-3.9.2.jar").touch()
    monkeypatch.setattr("kafkaops.platform.paths.JARS", jars)
    spec = provision.local_cluster_spec(tmp_path, brokers=3, kafka_version="3.9")
    assert spec.inventory()["all"]["vars"]["kafka_broker_classpath_dir"] == str(jars / "broker-3.9")
    grown, _ = spec.with_new_brokers(1)
    again = provision.ClusterSpec.load(grown.save(tmp_path / "spec.json"))
    assert again.kafka_version == "3.9" and again == grown
    default = provision.local_cluster_spec(tmp_path, brokers=1, controllers=1)
    assert "kafka_version" not in default.to_dict()
    assert default.inventory()["all"]["vars"]["kafka_broker_classpath_dir"] == "{{ kafkaops_broker_jars }}"
    with pytest.raises(ProvisionError, match=r"no jar set for Kafka '3.7'"):
        provision.local_cluster_spec(tmp_path, brokers=1, controllers=1, kafka_version="3.7").inventory()


def test_free_ports_are_distinct_bindable_and_below_the_ephemeral_range() -> None:
    """A port from the ephemeral range could become an outgoing connection's source port before its server
    binds it; free ports come from below it."""
    import socket

    ports = provision.free_ports(12)
    assert len(set(ports)) == 12
    assert all(provision.LOWEST_FREE_PORT <= p < provision._ephemeral_start() for p in ports), ports
    for port in ports:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", port))


def test_a_spec_with_metrics_gives_each_node_an_exporter_port_also_when_grown(tmp_path: Path) -> None:
    spec = provision.local_cluster_spec(tmp_path, brokers=3, metrics=True)
    ports = [p for n in spec.nodes for p in (n.port, n.controller_port, n.metrics_port)]
    assert None not in ports and len(set(ports)) == 9, ports
    assert spec.metrics_targets == tuple(f"127.0.0.1:{n.metrics_port}" for n in spec.nodes)
    hosts = spec.inventory()["all"]["children"]["kafka_cluster"]["children"]["kafka_controllers"]["hosts"]
    assert {h["kafka_broker_jmx_exporter_port"] for h in hosts.values()} == {n.metrics_port for n in spec.nodes}
    assert all(h["kafka_broker_jmx_exporter"] is True for h in hosts.values())
    grown, (added,) = spec.with_new_brokers(1)
    assert added.metrics_port is not None and added.metrics_port not in ports
    assert provision.ClusterSpec.load(grown.save(tmp_path / "spec.json")) == grown
    plain = provision.local_cluster_spec(tmp_path, brokers=1, controllers=1)
    assert plain.metrics_targets == () and "metrics_port" not in plain.to_dict()["nodes"][0]
    (host,) = plain.inventory()["all"]["children"]["kafka_cluster"]["children"]["kafka_controllers"]["hosts"].values()
    assert "kafka_broker_jmx_exporter" not in host
    assert plain.with_new_brokers(1)[1][0].metrics_port is None


def test_the_local_cluster_exports_its_metrics_on_the_inventorys_ports() -> None:
    assert provision.local_spec().metrics_targets == ("127.0.0.1:19404", "127.0.0.1:19405", "127.0.0.1:19406")
