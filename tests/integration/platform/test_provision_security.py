"""The role's secured listeners, from inventory variables (the nodes of ``secured_node.py``, shared
with test_mtls.py and tests/dags/test_mtls_dags.py through the session's ``tls_nodes`` fixture): a
SASL_SSL listener (SCRAM-SHA-512, the user created when the storage is formatted, also the brokers'
own inter-broker login) and an mTLS listener, with self-signed certificates made by the JDK's
keytool. The role's registration check passes only with the full client config; a wrong password
and a client without a certificate are turned away."""
from __future__ import annotations

import pytest
from confluent_kafka import KafkaException

from kafkaops.errors import ProvisionError
from kafkaops.platform import provision
from tests.integration.platform.secured_node import SecuredNodes

pytestmark = pytest.mark.integration


def test_a_sasl_ssl_and_an_mtls_listener_from_the_inventory(tls_nodes: SecuredNodes) -> None:
    assert tls_nodes.first_run is not None and tls_nodes.first_run.ok  # its registration check: SASL_SSL
    properties = (tls_nodes.base / "nodes" / "node-1" / "config" / "server.properties").read_text()
    assert "listener.security.protocol.map=CONTROLLER:PLAINTEXT,INTERNAL:SASL_SSL,MTLS:SSL" in properties
    assert "listener.name.mtls.ssl.client.auth=required" in properties
    assert "sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512" in properties
    assert tls_nodes.brokers(tls_nodes.sasl_port, tls_nodes.sasl_client) == [1, 2]
    assert tls_nodes.brokers(tls_nodes.mtls_port, tls_nodes.mtls_client) == [1, 2]
    # turned away: the admin client keeps retrying the failed authentication or handshake until it times out
    with pytest.raises(KafkaException):
        tls_nodes.brokers(tls_nodes.sasl_port, {**tls_nodes.sasl_client, "sasl.password": "wrong"}, timeout=5)
    without_certificate = {k: v for k, v in tls_nodes.mtls_client.items()
                           if not k.startswith(("ssl.certificate", "ssl.key"))}
    with pytest.raises(KafkaException):
        tls_nodes.brokers(tls_nodes.mtls_port, without_certificate, timeout=5)
    assert dict(provision.run_playbook("cluster_up.yml", tls_nodes.inventory).changed) == {}


def test_the_registration_check_without_the_client_config_fails_naming_the_check(tls_nodes: SecuredNodes) -> None:
    with pytest.raises(ProvisionError, match="check 'registered with the controller' failed on kafka-1"):
        provision.run_playbook("cluster_up.yml", tls_nodes.inventory, limit="kafka-1",
                               extravars={"kafka_broker_check_client_config": {}, "kafka_broker_health_retries": 3})
