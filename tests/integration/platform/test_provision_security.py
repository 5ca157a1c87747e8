"""The role's secured listeners, from inventory variables: a SASL_SSL listener (SCRAM-SHA-512, the user
created when the storage is formatted, also the brokers' own inter-broker login) and an mTLS listener,
with a self-signed certificate made by the JDK's keytool. The role's registration check passes only
with the full client config; a wrong password and a client without a certificate are turned away."""
from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from kafkaops.errors import ProvisionError
from kafkaops.platform import provision
from kafkaops.platform.paths import jar_dir

pytestmark = pytest.mark.integration

PASSWORD = "Sc3ret-0f-the-t3st"


def keystores(folder: Path) -> dict[str, Path]:
    """A self-signed key pair for 127.0.0.1 (PKCS12), a trust store with its certificate, and the
    certificate as PEM for librdkafka."""
    keytool = shutil.which("keytool")
    if not keytool:
        pytest.skip("keytool not found: install a JDK (e.g. apt-get install openjdk-17-jdk-headless)")
    stores = {"keystore": folder / "broker.p12", "truststore": folder / "trust.p12", "ca": folder / "ca.pem"}
    for argv in (
            ["-genkeypair", "-alias", "broker", "-keyalg", "RSA", "-keysize", "2048", "-validity", "2",
             "-dname", "CN=127.0.0.1", "-ext", "SAN=ip:127.0.0.1,dns:localhost", "-storetype", "PKCS12",
             "-keystore", str(stores["keystore"]), "-storepass", PASSWORD, "-keypass", PASSWORD],
            ["-exportcert", "-rfc", "-alias", "broker", "-keystore", str(stores["keystore"]), "-storepass", PASSWORD,
             "-file", str(stores["ca"])],
            ["-importcert", "-noprompt", "-alias", "broker", "-file", str(stores["ca"]), "-storetype", "PKCS12",
             "-keystore", str(stores["truststore"]), "-storepass", PASSWORD]):
        subprocess.run([keytool, *argv], check=True, capture_output=True)
    return stores


class SecuredNode:
    def __init__(self, base: Path) -> None:
        self.base = base
        self.stores = keystores(base)
        self.sasl_port, self.mtls_port, self.controller_port = provision.free_ports(3)
        self.sasl_client = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                            "sasl.username": "admin", "sasl.password": PASSWORD,
                            "ssl.ca.location": str(self.stores["ca"])}
        self.mtls_client = {"security.protocol": "SSL", "ssl.ca.location": str(self.stores["ca"]),
                            "ssl.keystore.location": str(self.stores["keystore"]), "ssl.keystore.password": PASSWORD}
        self.inventory = base / "inventory.yml"
        self.inventory.write_text(yaml.safe_dump({"all": {
            "vars": {"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}",
                     "kafka_broker_classpath_dir": str(jar_dir("broker")), "kafka_broker_host": "127.0.0.1",
                     "kafka_broker_cluster_id": provision.new_cluster_id(), "kafka_broker_base_dir": str(base / "nodes"),
                     "kafka_broker_heap": "256m", "kafka_broker_default_replication_factor": 1,
                     "kafka_broker_health_retries": 150,  # TLS start-up on a loaded CI machine
                     "kafka_broker_offsets_topic_partitions": 1, "kafka_broker_controller_port": self.controller_port,
                     "kafka_broker_listeners": [
                         {"name": "INTERNAL", "port": self.sasl_port, "protocol": "SASL_SSL"},
                         {"name": "MTLS", "port": self.mtls_port, "protocol": "SSL", "client_auth": "required"}],
                     "kafka_broker_scram_users": [{"name": "admin", "password": PASSWORD}],
                     "kafka_broker_ssl_keystore_path": str(self.stores["keystore"]),
                     "kafka_broker_ssl_keystore_password": PASSWORD,
                     "kafka_broker_ssl_truststore_path": str(self.stores["truststore"]),
                     "kafka_broker_ssl_truststore_password": PASSWORD,
                     "kafka_broker_check_client_config": self.sasl_client},
            "children": {"kafka_cluster": {"children": {"kafka_controllers": {"hosts": {"kafka-1": {
                "kafka_broker_node_id": 1}}}}}}}}))

    def brokers(self, port: int, config: dict[str, str], timeout: float = 10) -> list[int]:
        admin = AdminClient({**config, "bootstrap.servers": f"127.0.0.1:{port}", "log_level": 0})
        cluster = admin.describe_cluster(request_timeout=timeout).result(timeout=timeout + 2)
        return sorted(n.id for n in cluster.nodes)


@pytest.fixture(scope="module")
def secured() -> Iterator[SecuredNode]:
    base = Path(tempfile.mkdtemp(prefix="kafkaops-secured-"))
    node = SecuredNode(base)
    try:
        yield node
    finally:
        try:
            provision.run_playbook("cluster_down.yml", node.inventory, extravars={"kafka_broker_down_state": "absent"})
        finally:
            provision.kill_strays(base)
            shutil.rmtree(base, ignore_errors=True)


def test_a_sasl_ssl_and_an_mtls_listener_from_the_inventory(secured: SecuredNode) -> None:
    result = provision.run_playbook("cluster_up.yml", secured.inventory)  # its registration check: SASL_SSL
    assert result.ok
    properties = (secured.base / "nodes" / "node-1" / "config" / "server.properties").read_text()
    assert "listener.security.protocol.map=CONTROLLER:PLAINTEXT,INTERNAL:SASL_SSL,MTLS:SSL" in properties
    assert "listener.name.mtls.ssl.client.auth=required" in properties
    assert "sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512" in properties
    assert secured.brokers(secured.sasl_port, secured.sasl_client) == [1]
    assert secured.brokers(secured.mtls_port, secured.mtls_client) == [1]
    # turned away: the admin client keeps retrying the failed authentication or handshake until it times out
    with pytest.raises(KafkaException):
        secured.brokers(secured.sasl_port, {**secured.sasl_client, "sasl.password": "wrong"}, timeout=5)
    without_certificate = {k: v for k, v in secured.mtls_client.items() if not k.startswith("ssl.keystore")}
    with pytest.raises(KafkaException):
        secured.brokers(secured.mtls_port, without_certificate, timeout=5)
    assert dict(provision.run_playbook("cluster_up.yml", secured.inventory).changed) == {}


def test_the_registration_check_without_the_client_config_fails_naming_the_check(secured: SecuredNode) -> None:
    with pytest.raises(ProvisionError, match="check 'registered with the controller' failed on kafka-1"):
        provision.run_playbook("cluster_up.yml", secured.inventory,
                               extravars={"kafka_broker_check_client_config": {}, "kafka_broker_health_retries": 3})
