"""A KRaft cluster whose client listener is SASL_SSL with SCRAM-SHA-512, brought up by the project's
own role from inventory variables, for the tests that prove every client path carries the security
settings and leaks none of them (one session fixture, ``secured_cluster`` in ``tests/conftest.py``,
shared by tests/integration and tests/dags).

The certificate is self-signed with the JDK's ``keytool`` (SAN 127.0.0.1, so hostname checks
pass); the role formats the storage with the SCRAM user (``--add-scram``), and the brokers talk to
each other over the same SASL_SSL listener with that login. The cluster's spec (its listeners,
stores and SCRAM users as :attr:`ClusterSpec.inventory_vars`) is the DAGs' inventory: a scale-out
gives the new broker the same settings. The spec holds no client config: the role's registration
check connects with the one it is handed (:func:`kafkaops.platform.provision.check_client_vars`).
"""
from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kafkaops.platform import provision
from kafkaops.testing import clusters

#: Recognisable in any artifact a leak would leave: the tests search for it.
PASSWORD = "Leak-Canary-7f3a9c2e"
USER = "kafkaops-client"
LISTENER = "CLIENT"


@dataclass(frozen=True)
class SecuredCluster:
    spec_path: Path
    ca_file: Path
    #: The brokers' key and trust store password: only Ansible ever sees it (searched for too).
    store_password: str

    @property
    def spec(self) -> provision.ClusterSpec:
        """The cluster as it is now (a scale-out grows the spec file)."""
        return provision.ClusterSpec.load(self.spec_path)

    @property
    def bootstrap(self) -> str:
        return self.spec.bootstrap

    def config(self, *, password: str = PASSWORD, ca_file: Path | None = None) -> dict[str, str]:
        """The librdkafka config of a client of this cluster (as in an Airflow ``kafka`` connection's extras)."""
        return {"bootstrap.servers": self.bootstrap, **client_settings(ca_file or self.ca_file, password)}


def client_settings(ca_file: Path, password: str = PASSWORD) -> dict[str, str]:
    return {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": USER,
            "sasl.password": password, "ssl.ca.location": str(ca_file)}


def _keytool(*args: str, cwd: Path) -> None:
    subprocess.run(["keytool", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def self_signed(folder: Path, name: str, store_password: str) -> tuple[Path, Path]:
    """A PKCS#12 key store holding a new key pair for 127.0.0.1, and its certificate as PEM."""
    store, pem = folder / f"{name}.p12", folder / f"{name}.pem"
    _keytool("-genkeypair", "-alias", name, "-keyalg", "EC", "-groupname", "secp256r1", "-validity", "2",
             "-dname", f"CN={name}", "-ext", "SAN=ip:127.0.0.1,dns:localhost", "-keystore", str(store),
             "-storetype", "PKCS12", "-storepass", store_password, "-keypass", store_password, cwd=folder)
    _keytool("-exportcert", "-rfc", "-alias", name, "-keystore", str(store), "-storepass", store_password,
             "-file", str(pem), cwd=folder)
    return store, pem


def secured_vars(folder: Path, store_password: str) -> tuple[dict[str, Any], Path]:
    """The role's inventory variables of a SASL_SSL cluster (its key and trust stores made in
    ``folder``), and the certificate clients trust."""
    folder.mkdir(parents=True, exist_ok=True)
    keystore, cert = self_signed(folder, "broker", store_password)
    truststore = folder / "trust.p12"
    _keytool("-importcert", "-noprompt", "-alias", "broker", "-file", str(cert), "-storetype", "PKCS12",
             "-keystore", str(truststore), "-storepass", store_password, cwd=folder)
    return {
        # each node's SASL_SSL listener on its own port of the spec
        "kafka_broker_listeners": [{"name": LISTENER, "port": "{{ kafka_broker_port }}", "protocol": "SASL_SSL"}],
        "kafka_broker_scram_users": [{"name": USER, "password": PASSWORD}],
        "kafka_broker_ssl_keystore_path": str(keystore), "kafka_broker_ssl_keystore_password": store_password,
        "kafka_broker_ssl_truststore_path": str(truststore), "kafka_broker_ssl_truststore_password": store_password,
        "kafka_broker_health_retries": 150,  # TLS start-up on a loaded CI machine
    }, cert


@contextmanager
def secured_cluster(folder: Path, **spec_args: Any) -> Iterator[SecuredCluster]:
    """Three SASL_SSL nodes (one of them the controller) through the role, up for the ``with`` block;
    the TLS files in ``folder``. ``spec_args``: :func:`provision.local_cluster_spec`'s."""
    store_password = uuid.uuid4().hex
    inventory_vars, cert = secured_vars(folder, store_password)
    spec_args = {"brokers": 3, "controllers": 1, "heap": "384m", **spec_args}
    with clusters.temporary_cluster("kafkaops-secured-", inventory_vars=inventory_vars,
                                    client_config=client_settings(cert), **spec_args) as spec:
        yield SecuredCluster(spec.save(spec.base_dir / "spec.json"), cert, store_password)
