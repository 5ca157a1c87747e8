from __future__ import annotations

import asyncio
import importlib
import json
from pathlib import Path
from typing import Any

import pytest
from airflow.providers.apache.kafka.hooks.base import KafkaBaseHook
from airflow.sdk import Connection
from confluent_kafka.admin import AdminClient

from kafkaops.airflow.hooks import (KafkaOpsHook, aget_config, config_from_connection, kafkaops_store,
                                   store_url_from_connection)
from kafkaops.airflow.triggers import ReassignmentProgressTrigger
from kafkaops.errors import ConfigError
from kafkaops.platform.store import StoreError

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


def test_the_kafka_connection_type_is_the_providers_and_the_hook_builds_on_it() -> None:
    """The Connections form offers type 'kafka' (the apache-kafka provider's, testable), and the
    kafkaops hook is that provider's base hook: same connection id attribute and default."""
    from airflow.api_fastapi.core_api.services.ui.connections import HookMetaService

    kafka = [m for m in HookMetaService.hook_meta_data() if m.connection_type == "kafka"]
    assert [m.hook_class_name for m in kafka] == ["airflow.providers.apache.kafka.hooks.base.KafkaBaseHook"]
    assert issubclass(KafkaOpsHook, KafkaBaseHook)
    hook = KafkaOpsHook()
    assert (hook.kafka_config_id, hook.conn_type) == ("kafka_default", "kafka")


def test_the_providers_client_is_built_from_the_kafkaops_config(monkeypatch: pytest.MonkeyPatch) -> None:
    """The provider's get_conn and its "Test" button use config_from_connection's config: the host
    stands in for bootstrap.servers, and a connection naming no broker fails with kafkaops' message."""
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEV", json.dumps({"conn_type": "kafka", "host": "localhost",
                                                             "port": 19092}))
    hook = KafkaOpsHook("kafka_dev")
    assert hook._build_config() == hook.get_config() == {"bootstrap.servers": "localhost:19092"}
    assert isinstance(hook.get_conn, AdminClient)
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_EMPTY", json.dumps({"conn_type": "kafka"}))
    ok, message = KafkaOpsHook("kafka_empty").test_connection()
    assert not ok and "connection 'kafka_empty' names no broker" in message


# -- the kafkaops store from the kafkaops_store connection ------------------------------------------------

@pytest.mark.parametrize("conn, url", [
    (Connection(conn_id="kafkaops_store", conn_type="postgres", host="db.internal", port=5433, login="ops",
                password="s3cret", schema="kafkaops"), "postgresql+psycopg2://ops:s3cret@db.internal:5433/kafkaops"),
    (Connection(conn_id="kafkaops_store", conn_type="postgres", host="db", schema="k",
                extra=json.dumps({"sqlalchemy_scheme": "postgresql+psycopg"})), "postgresql+psycopg://db/k"),
    (Connection(conn_id="kafkaops_store", conn_type="sqlite", host="/var/lib/airflow/kafkaops.db"),
     "sqlite:////var/lib/airflow/kafkaops.db"),
    (Connection.from_uri("sqlite:////var/lib/airflow/kafkaops.db", conn_id="kafkaops_store"),
     "sqlite:////var/lib/airflow/kafkaops.db"),
    (Connection(conn_id="kafkaops_store", conn_type="mysql", host="db", login="ops", schema="k"), "mysql://ops@db/k"),
])
def test_a_store_connection_becomes_its_sqlalchemy_url(conn: Connection, url: str) -> None:
    assert store_url_from_connection(conn).render_as_string(hide_password=False) == url


@pytest.mark.parametrize("conn, message", [
    (Connection(conn_id="kafkaops_store", conn_type="sqlite"), "'kafkaops_store' \\(sqlite\\) names no database file"),
    (Connection(conn_id="kafkaops_store"), "'kafkaops_store' has no type"),
])
def test_a_store_connection_that_names_no_database_is_refused(conn: Connection, message: str) -> None:
    with pytest.raises(StoreError, match=message):
        store_url_from_connection(conn)


def test_the_store_connection_is_looked_up_and_opened(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_KAFKAOPS_STORE", json.dumps({"conn_type": "sqlite",
                                                                  "host": str(tmp_path / "k.db")}))
    opened = kafkaops_store()
    assert opened.url.database == str(tmp_path / "k.db") and opened.source == "Airflow connection 'kafkaops_store'"
    assert opened.revision() is not None  # reachable, schema at head


def test_without_the_connection_the_default_store_opens(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKAOPS_STORE_URL", f"sqlite:///{tmp_path / 'default.db'}")
    opened = kafkaops_store("no_such_connection")
    assert opened.url.database == str(tmp_path / "default.db") and opened.revision() is not None


def test_airflows_own_database_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", f"sqlite:///{tmp_path / 'airflow.db'}")
    monkeypatch.setenv("AIRFLOW_CONN_KAFKAOPS_STORE", json.dumps({"conn_type": "sqlite",
                                                                  "host": str(tmp_path / "." / "airflow.db")}))
    with pytest.raises(StoreError, match="Airflow connection 'kafkaops_store' points at Airflow's own metadata "
                                         "database .* point the 'kafkaops_store' connection at it"):
        kafkaops_store()
    assert not (tmp_path / "airflow.db").exists()


def test_a_task_process_opens_the_store_although_airflow_hides_its_database(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # Airflow 3's task supervisor replaces its own database URL with this placeholder in every task process.
    monkeypatch.setenv("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "airflow-db-not-allowed:///")
    monkeypatch.setenv("KAFKAOPS_STORE_URL", f"sqlite:///{tmp_path / 'k.db'}")
    assert kafkaops_store("no_such_connection").revision() is not None


def test_airflows_own_postgres_is_refused_by_host_port_and_database(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "postgresql+psycopg2://airflow:pw@pg/airflow")
    monkeypatch.setenv("AIRFLOW_CONN_KAFKAOPS_STORE", json.dumps({"conn_type": "postgres", "host": "pg", "port": 5432,
                                                                  "login": "other", "password": "x",
                                                                  "schema": "airflow"}))
    with pytest.raises(StoreError, match="Airflow's own metadata database \\(postgresql\\+psycopg2://other:\\*\\*\\*@"):
        kafkaops_store()


# -- secrets: the triggers carry the connection id; the triggerer reads the config -----------------------

def test_login_and_password_stand_in_for_missing_sasl_credentials() -> None:
    extra = {k: v for k, v in SASL.items() if not k.startswith("sasl.user") and k != "sasl.password"}
    conn = Connection(conn_id="prod", conn_type="kafka", login="ops", password="s3cret", extra=json.dumps(extra))
    config = config_from_connection(conn)
    assert config == SASL and config.source == "Airflow connection 'prod'" and "s3cret" not in repr(config)


@pytest.mark.parametrize("trigger", [
    lambda: ReassignmentProgressTrigger("kafka_prod", {"partitions": []}, 1.0),
])
def test_a_trigger_stores_the_connection_id_never_the_config(trigger: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Trigger kwargs go to Airflow's database: no password there; the triggerer reads the same
    config back from the connection (here AIRFLOW_CONN_KAFKA_PROD)."""
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_PROD", json.dumps({"conn_type": "kafka", "extra": SASL}))
    path, kwargs = trigger().serialize()
    assert "s3cret" not in json.dumps(kwargs) and kwargs["kafka_conn_id"] == "kafka_prod"
    module, name = path.rsplit(".", 1)
    rebuilt = getattr(importlib.import_module(module), name)(**kwargs)
    assert rebuilt.serialize() == (path, kwargs)
    assert asyncio.run(aget_config(rebuilt.kafka_conn_id)) == SASL


def test_the_triggerer_names_a_connection_it_cannot_find() -> None:
    with pytest.raises(ConfigError, match="there is no Airflow connection 'kafka_nowhere' where the triggerer runs"):
        asyncio.run(aget_config("kafka_nowhere"))


@pytest.mark.parametrize("conn, url", [
    ({"conn_type": "http", "host": "prometheus", "port": 9090}, "http://prometheus:9090"),
    ({"conn_type": "http", "host": "prom.example.com/prometheus", "schema": "https"},
     "https://prom.example.com/prometheus"),
    ({"conn_type": "http", "host": "https://prom.example.com", "port": 443}, "https://prom.example.com:443"),
    ({"conn_type": "http", "host": "prometheus", "port": 9090, "login": "review", "password": "p@ss:w/rd"},
     "http://review:p%40ss%3Aw%2Frd@prometheus:9090"),
])
def test_a_prometheus_connection_becomes_the_servers_url(conn: dict, url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from kafkaops.airflow.hooks import prometheus_url

    monkeypatch.setenv("AIRFLOW_CONN_PROMETHEUS_TEST", json.dumps(conn))
    assert prometheus_url("prometheus_test") == url


def test_without_a_prometheus_connection_there_is_no_url_and_a_connection_without_host_is_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from kafkaops.airflow.hooks import prometheus_url

    assert prometheus_url("no_such_prometheus") is None
    monkeypatch.setenv("AIRFLOW_CONN_PROMETHEUS_EMPTY", json.dumps({"conn_type": "http"}))
    with pytest.raises(ConfigError, match="'prometheus_empty' names no host"):
        prometheus_url("prometheus_empty")
