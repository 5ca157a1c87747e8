"""Two KRaft nodes brought up through the role with secured listeners from inventory variables: a
SASL_SSL listener (SCRAM-SHA-512, the user created when the storage is formatted, also the brokers'
own inter-broker login) and an mTLS listener (SSL, client certificate required). Node 1 is broker and
controller, node 2 a broker only, so a plan has somewhere to move a replica.

Every certificate is self-signed with the JDK's keytool (SAN 127.0.0.1): the brokers' key pair, a
client's (trusted: its certificate is in the brokers' trust store) and a stranger's (not trusted).
A client's key goes to librdkafka as an encrypted PEM file (``ssl.key.location`` and
``ssl.key.password``, which kafka-python reads too), written from keytool's PKCS#12 store by
``cryptography``. :func:`secured_nodes` is the body of the session fixture ``tls_nodes``
(``tests/conftest.py``): the test modules of tests/integration and tests/dags share the nodes.
"""
from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml
from confluent_kafka.admin import AdminClient

from kafkaops.platform import provision
from kafkaops.testing import clusters, jvm, watchdog
from kafkaops.platform.paths import jar_dir

#: The brokers' key and trust stores, and the SCRAM user's password.
PASSWORD = "Sc3ret-0f-the-t3st"
#: The mTLS client's private key password: recognisable in any artifact a leak would leave.
KEY_PASSWORD = "mTLS-Key-Canary-5d1e8b"


def _keytool(*args: str) -> None:
    keytool = shutil.which("keytool")
    if not keytool:
        pytest.skip("keytool not found: install a JDK (e.g. apt-get install openjdk-17-jdk-headless)")
    subprocess.run([keytool, *args], check=True, capture_output=True, timeout=120)


def key_pair(folder: Path, name: str, store_password: str) -> tuple[Path, Path]:
    """A new self-signed key pair for 127.0.0.1 in a PKCS#12 store, and its certificate as PEM."""
    store, pem = folder / f"{name}.p12", folder / f"{name}.pem"
    _keytool("-genkeypair", "-alias", name, "-keyalg", "EC", "-groupname", "secp256r1", "-validity", "2",
             "-dname", f"CN={name}", "-ext", "SAN=ip:127.0.0.1,dns:localhost", "-storetype", "PKCS12",
             "-keystore", str(store), "-storepass", store_password, "-keypass", store_password)
    _keytool("-exportcert", "-rfc", "-alias", name, "-keystore", str(store), "-storepass", store_password,
             "-file", str(pem))
    return store, pem


def pem_key(store: Path, store_password: str, key_password: str) -> Path:
    """The private key of the PKCS#12 ``store`` as a PEM file encrypted with ``key_password`` (0600)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12

    key, _, _ = pkcs12.load_key_and_certificates(store.read_bytes(), store_password.encode())
    assert key is not None, f"{store} holds no private key"
    path = store.with_suffix(".key.pem")
    path.touch(mode=0o600)
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.BestAvailableEncryption(key_password.encode())))
    return path


class SecuredNodes:
    """The inventory of the two nodes and the client configs of their listeners."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.keystore, self.ca = key_pair(base, "broker", PASSWORD)
        client_store, self.client_cert = key_pair(base, "client", PASSWORD)
        self.client_key = pem_key(client_store, PASSWORD, KEY_PASSWORD)
        stranger_store, self.stranger_cert = key_pair(base, "stranger", PASSWORD)
        self.stranger_key = pem_key(stranger_store, PASSWORD, KEY_PASSWORD)
        self.truststore = base / "trust.p12"
        for alias, pem in (("broker", self.ca), ("client", self.client_cert)):
            _keytool("-importcert", "-noprompt", "-alias", alias, "-file", str(pem), "-storetype", "PKCS12",
                     "-keystore", str(self.truststore), "-storepass", PASSWORD)
        ports = provision.free_ports(6)
        self.sasl_ports, self.mtls_ports, self.controller_ports = ports[0:2], ports[2:4], ports[4:6]
        self.controller_port = self.controller_ports[0]
        self.sasl_port, self.mtls_port = self.sasl_ports[0], self.mtls_ports[0]
        self.sasl_client = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                            "sasl.username": "admin", "sasl.password": PASSWORD, "ssl.ca.location": str(self.ca)}
        self.mtls_client = self.mtls_config(self.client_cert, self.client_key)
        self.inventory = base / "inventory.yml"
        self.inventory.write_text(yaml.safe_dump({"all": {
            "vars": {"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}",
                     "kafka_broker_classpath_dir": str(jar_dir("broker")), "kafka_broker_host": "127.0.0.1",
                     "kafka_broker_cluster_id": provision.new_cluster_id(),
                     "kafka_broker_base_dir": str(base / "nodes"),
                     "kafka_broker_heap": "256m", "kafka_broker_default_replication_factor": 1,
                     "kafka_broker_health_retries": 150,  # TLS start-up on a loaded CI machine
                     "kafka_broker_offsets_topic_partitions": 1,
                     "kafka_broker_scram_users": [{"name": "admin", "password": PASSWORD}],
                     "kafka_broker_ssl_keystore_path": str(self.keystore),
                     "kafka_broker_ssl_keystore_password": PASSWORD,
                     "kafka_broker_ssl_truststore_path": str(self.truststore),
                     "kafka_broker_ssl_truststore_password": PASSWORD,
                     "kafka_broker_check_client_config": self.sasl_client,
                     "kafka_broker_extra_config": dict(jvm.BROKER_CONFIG), **jvm.broker_vars()},
            "children": {"kafka_cluster": {
                "hosts": {"kafka-2": self._host_vars(2, ["broker"])},
                "children": {"kafka_controllers": {"hosts": {
                    "kafka-1": self._host_vars(1, ["broker", "controller"])}}}}},
        }}))
        self.first_run: provision.ProvisionResult | None = None

    def _host_vars(self, node_id: int, roles: list[str]) -> dict[str, object]:
        i = node_id - 1
        return {"kafka_broker_node_id": node_id, "kafka_broker_process_roles": roles,
                "kafka_broker_controller_port": self.controller_ports[i],
                "kafka_broker_listeners": [
                    {"name": "INTERNAL", "port": self.sasl_ports[i], "protocol": "SASL_SSL"},
                    {"name": "MTLS", "port": self.mtls_ports[i], "protocol": "SSL", "client_auth": "required"}]}

    @property
    def mtls_bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.mtls_ports)

    def mtls_config(self, cert: Path, key: Path, *, ca: Path | None = None,
                    key_password: str = KEY_PASSWORD) -> dict[str, str]:
        """The librdkafka config of an mTLS client (an Airflow ``kafka`` connection's extras)."""
        return {"bootstrap.servers": self.mtls_bootstrap, "security.protocol": "SSL",
                "ssl.ca.location": str(ca or self.ca), "ssl.certificate.location": str(cert),
                "ssl.key.location": str(key), "ssl.key.password": key_password}

    def brokers(self, port: int, config: dict[str, str], timeout: float = 10) -> list[int]:
        admin = AdminClient({**config, "bootstrap.servers": f"127.0.0.1:{port}", "log_level": 0})
        cluster = admin.describe_cluster(request_timeout=timeout).result(timeout=timeout + 2)
        return sorted(n.id for n in cluster.nodes)


@contextmanager
def secured_nodes() -> Iterator[SecuredNodes]:
    """The two nodes, up (the role's first run kept in ``first_run``); removed with everything of theirs."""
    base = Path(tempfile.mkdtemp(prefix="kafkaops-secured-"))
    with watchdog.kafka_folder(base):  # should this process die first
        try:
            nodes = SecuredNodes(base)
            nodes.first_run = provision.run_playbook("cluster_up.yml", nodes.inventory)  # checks: SASL_SSL
            yield nodes
        finally:
            try:
                if (base / "inventory.yml").exists():
                    provision.run_playbook("cluster_down.yml", base / "inventory.yml",
                                           extravars={"kafka_broker_down_state": "absent"})
            finally:
                clusters.kill_strays(base)
                shutil.rmtree(base, ignore_errors=True)
