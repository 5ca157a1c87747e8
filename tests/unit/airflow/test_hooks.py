from __future__ import annotations

import json

import pytest
from airflow.sdk import Connection

from kafkaops.airflow.hooks import KafkaOpsHook, config_from_connection
from kafkaops.errors import ConfigError

SASL = {"bootstrap.servers": "k1:9093,k2:9093", "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "ops", "sasl.password": "s3cret", "ssl.ca.location": "/etc/ca.pem"}


def test_extras_pass_through_unchanged() -> None:
    conn = Connection(conn_id="prod", conn_type="kafka", extra=json.dumps(SASL))
    assert config_from_connection(conn) == SASL


def test_host_stands_in_for_missing_bootstrap() -> None:
    conn = Connection(conn_id="dev", conn_type="kafka", host="localhost", port=19092)
    assert config_from_connection(conn) == {"bootstrap.servers": "localhost:19092"}


@pytest.mark.parametrize("conn, message", [
    (Connection(conn_id="pg", conn_type="postgres", host="db"), "has type 'postgres'"),
    (Connection(conn_id="empty", conn_type="kafka"), "names no broker"),
])
def test_unusable_connections_are_refused(conn: Connection, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        config_from_connection(conn)


def test_hook_resolves_a_connection_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_PROD", json.dumps({"conn_type": "kafka", "extra": SASL}))
    assert KafkaOpsHook("kafka_prod").get_config() == SASL
