"""One KRaft broker whose client listener is SASL_SSL with SCRAM-SHA-512, for the tests that prove
every client path carries the security settings and leaks none of them.

The certificate is self-signed with the JDK's ``keytool`` (SAN 127.0.0.1, so hostname checks
pass); the SCRAM credentials are written at storage format time (``StorageTool format
--add-scram``); the broker talks to itself over the same SASL_SSL listener. It runs from the jars
of ``$KAFKAOPS_JARS/broker`` as a subprocess in its own process group, and is stopped with it.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from kafkaops.platform.paths import jar_dir
from kafkaops.platform.provision import free_ports

#: Recognisable in any artifact a leak would leave: the tests search for it.
PASSWORD = "Leak-Canary-7f3a9c2e"
USER = "kafkaops-client"


@dataclass(frozen=True)
class SecuredBroker:
    bootstrap: str
    ca_file: Path
    folder: Path

    def config(self, *, password: str = PASSWORD, ca_file: Path | None = None) -> dict[str, str]:
        """The librdkafka config of a client of this broker (as in an Airflow ``kafka`` connection's extras)."""
        return {"bootstrap.servers": self.bootstrap, "security.protocol": "SASL_SSL",
                "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": USER, "sasl.password": password,
                "ssl.ca.location": str(ca_file or self.ca_file)}


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


def _properties(values: dict[str, object]) -> str:
    return "".join(f"{k}={v}\n" for k, v in values.items())


@contextmanager
def secured_broker(folder: Path, *, start_timeout_s: float = 60.0) -> Iterator[SecuredBroker]:
    """Start the broker in ``folder`` and yield it once its SASL_SSL port accepts connections."""
    folder.mkdir(parents=True, exist_ok=True)
    store_password = uuid.uuid4().hex
    keystore, cert = self_signed(folder, "broker", store_password)
    port, controller_port = free_ports(2)
    jaas = (f'org.apache.kafka.common.security.scram.ScramLoginModule required username="{USER}" '
            f'password="{PASSWORD}";')
    config = folder / "server.properties"
    config.write_text(_properties({
        "process.roles": "broker,controller", "node.id": 1,
        "controller.quorum.voters": f"1@127.0.0.1:{controller_port}", "controller.listener.names": "CONTROLLER",
        "listeners": f"SASL_SSL://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"SASL_SSL://127.0.0.1:{port}",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL",
        "inter.broker.listener.name": "SASL_SSL",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512", "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": jaas,
        "ssl.keystore.location": keystore, "ssl.keystore.type": "PKCS12",
        "ssl.keystore.password": store_password, "ssl.key.password": store_password,
        "ssl.truststore.location": cert, "ssl.truststore.type": "PEM",
        "log.dirs": folder / "data", "num.partitions": 1, "default.replication.factor": 1,
        "offsets.topic.replication.factor": 1, "transaction.state.log.replication.factor": 1,
        "transaction.state.log.min.isr": 1, "share.coordinator.state.topic.replication.factor": 1,
        "share.coordinator.state.topic.min.isr": 1, "group.initial.rebalance.delay.ms": 0,
        "auto.create.topics.enable": "false", "broker.rack": "a",
    }))
    classpath = f"{jar_dir('broker')}/*"
    java = ["java", "-Xmx384m", "-XX:TieredStopAtLevel=1", "-cp", classpath]
    subprocess.run([*java, "kafka.tools.StorageTool", "format", "--cluster-id", "kafkaops-secured-test0",
                    "--config", str(config), "--add-scram", f"SCRAM-SHA-512=[name={USER},password={PASSWORD}]"],
                   check=True, capture_output=True, timeout=120)
    log = (folder / "broker.log").open("w")
    process = subprocess.Popen([*java, "kafka.Kafka", str(config)], stdout=log, stderr=subprocess.STDOUT,
                               start_new_session=True)
    try:
        deadline = time.monotonic() + start_timeout_s
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"the SASL_SSL broker exited with {process.returncode}; see {folder / 'broker.log'}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the SASL_SSL broker did not listen on {port} within {start_timeout_s:.0f} s")
                time.sleep(0.3)
        yield SecuredBroker(f"127.0.0.1:{port}", cert, folder)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)
        log.close()
