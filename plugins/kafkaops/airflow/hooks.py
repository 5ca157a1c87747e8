"""Airflow Connection -> kafkaops connection config.

Follows the apache-kafka provider's convention: a connection of type ``kafka`` whose extras
hold the librdkafka config (``bootstrap.servers``, ``security.protocol``, ``sasl.*``,
``ssl.*`` ...). SASL and SSL keys pass through unchanged. When the extras lack
``bootstrap.servers``, the connection's host (and port) stand in for it.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow.sdk import BaseHook

from kafkaops.platform import admin
from kafkaops.errors import ConfigError


def config_from_connection(conn: Any) -> dict[str, str]:
    """The librdkafka config of an Airflow Connection object (pure: no lookups)."""
    if conn.conn_type and conn.conn_type != "kafka":
        raise ConfigError(f"connection {conn.conn_id!r} has type {conn.conn_type!r}; kafkaops needs type 'kafka' "
                          "with the librdkafka config in its extras")
    extra: Mapping[str, Any] = conn.extra_dejson or {}
    config = {k: v for k, v in extra.items()}
    if not config.get("bootstrap.servers") and conn.host:
        hosts = conn.host if ":" in conn.host or not conn.port else f"{conn.host}:{conn.port}"
        config["bootstrap.servers"] = hosts
    if not config.get("bootstrap.servers"):
        raise ConfigError(f"connection {conn.conn_id!r} names no broker: put \"bootstrap.servers\" in its extras "
                          "(or set its host), e.g. {\"bootstrap.servers\": \"kafka-1:9092\"}")
    return admin.connection_config(config)


class KafkaOpsHook(BaseHook):
    """Resolves a ``kafka`` connection id; opens kafkaops admin connections from it."""

    conn_name_attr = "kafka_config_id"
    default_conn_name = "kafka_default"
    conn_type = "kafka"
    hook_name = "Apache Kafka (kafkaops)"

    def __init__(self, kafka_config_id: str = default_conn_name) -> None:
        super().__init__()
        self.kafka_config_id = kafka_config_id

    def get_config(self) -> dict[str, str]:
        return config_from_connection(self.get_connection(self.kafka_config_id))

    def connect(self, timeout_s: float = admin.DEFAULT_TIMEOUT_S) -> admin.KafkaConnection:
        return admin.connect(self.get_config(), timeout_s=timeout_s)


def kafkaops_store(conn_id: str = "kafkaops_store") -> Any:
    """The kafkaops store named by the Airflow connection ``conn_id``; the default SQLite store
    when that connection does not exist. (Placeholder: the full version comes with the UI work.)"""
    from airflow.exceptions import AirflowNotFoundException

    from kafkaops.platform import store

    try:
        conn = BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        return store.open_store()
    return store.open_store(conn.get_uri(), source=f"Airflow connection '{conn_id}'")
