"""Airflow Connections -> what kafkaops connects to: a Kafka cluster and the kafkaops store (and inventories).

Kafka is the apache-kafka provider's connection type ``kafka`` (its form in Airflow's Connections
page, its "Test" button): the extras hold the librdkafka config (``bootstrap.servers``,
``security.protocol``, ``sasl.*``, ``ssl.*`` ...). SASL and SSL keys pass through unchanged. When
the extras lack ``bootstrap.servers``, the connection's host (and port) stand in for it; when they
lack ``sasl.username`` / ``sasl.password``, the connection's login and password (the form's masked
field) do. :class:`KafkaOpsHook` is the provider's :class:`KafkaBaseHook` reading the connection
that way. The config's secret values (:mod:`kafkaops.platform.redaction`) are registered with
Airflow's secrets masker wherever a connection is read, so no task or trigger log shows them, and a
trigger carries only the connection's id: the triggerer reads the config itself (:func:`aget_config`).

An operation's inventory may be kept in a connection too (the ``inventory`` param ``conn:<conn_id>``; any
type, the inventory under ``inventory`` in its extra): :func:`inventory_from_connection` reads and checks it,
its secret values registered with the masker, for the step that writes it to a private file.

The store (:mod:`kafkaops.platform.store`) is the ``kafkaops_store`` connection: type ``postgres``
(the postgres provider builds the URL; psycopg2 unless its extra ``sqlalchemy_scheme`` says
otherwise), ``sqlite`` (the host, or the path of a ``sqlite:////abs/path`` URI, is the file), or any
other type whose URI SQLAlchemy reads. Without that connection, the default store
(``$KAFKAOPS_STORE_URL``, else ``$AIRFLOW_HOME/kafkaops.db``). Never Airflow's own database.
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from airflow.configuration import conf
from airflow.providers.apache.kafka.hooks.base import KafkaBaseHook
from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowNotFoundException

from kafkaops.errors import ConfigError
from kafkaops.platform import provision, redaction, store
from kafkaops.platform.kafka import connection

STORE_CONN_ID = "kafkaops_store"
_DEFAULT_PORTS = {"postgresql": 5432, "mysql": 3306}


def config_from_connection(conn: Any) -> connection.ClientConfig:
    """The librdkafka config of an Airflow Connection object (pure: no lookups). Its ``repr`` and
    every error about it show no secret; its ``source`` names the connection."""
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
    if conn.login and not config.get("sasl.username"):
        config["sasl.username"] = conn.login
    if conn.password and not config.get("sasl.password"):
        config["sasl.password"] = conn.password
    return connection.connection_config(config, name=f"Airflow connection '{conn.conn_id}'")


def mask_config(config: Mapping[str, Any]) -> None:
    """Register the secret values of ``config`` with Airflow's secrets masker (task and supervisor
    logs show ``***`` instead). Airflow masks a connection's password and extras named like
    ``password`` itself; this adds the rest (``ssl.key.pem``, ``sasl.jaas.config`` ...)."""
    from airflow.sdk.log import mask_secret

    for value in redaction.secret_values(config):
        mask_secret(value)


async def aget_config(conn_id: str) -> connection.ClientConfig:
    """:func:`config_from_connection` of the connection ``conn_id``, read without blocking the
    triggerer's event loop, its secrets registered with the masker."""
    from airflow.sdk.log import amask_secret

    try:
        conn = await BaseHook.aget_connection(conn_id)
    except AirflowNotFoundException as err:
        raise ConfigError(f"there is no Airflow connection '{conn_id}' where the triggerer runs; create it "
                          "(type kafka) for every Airflow component, as for the workers") from err
    config = config_from_connection(conn)
    for value in redaction.secret_values(config):
        await amask_secret(value)
    return config


class KafkaOpsHook(KafkaBaseHook):
    """The provider's Kafka hook (connection type ``kafka``, id ``kafka_default``) whose config is
    :func:`config_from_connection`'s: the provider's ``get_conn`` and ``test_connection`` build
    their AdminClient from the same config kafkaops connects with."""

    hook_name = "Apache Kafka (kafkaops)"

    def __init__(self, kafka_config_id: str = KafkaBaseHook.default_conn_name) -> None:
        super().__init__(kafka_config_id)

    def get_config(self) -> connection.ClientConfig:
        config = config_from_connection(self.get_connection(self.kafka_config_id))
        mask_config(config)
        return config

    def _build_config(self) -> dict[str, Any]:
        return dict(self.get_config())

    def connect(self, timeout_s: float = connection.DEFAULT_TIMEOUT_S) -> connection.KafkaConnection:
        return connection.connect(self.get_config(), timeout_s=timeout_s)


def inventory_from_connection(conn_id: str, *, param: str = "inventory") -> provision.ConnInventory:
    """The inventory the Airflow connection ``conn_id`` holds in its extra (an ``inventory`` param of
    ``conn:<conn_id>``; :func:`kafkaops.platform.provision.inventory_from_extra`), its secret values registered
    with Airflow's secrets masker. A ConfigError naming the param and the connection, never the inventory's
    text, when the connection does not exist or holds no readable inventory."""
    try:
        conn = BaseHook.get_connection(conn_id)
    except AirflowNotFoundException as err:
        raise ConfigError(f"param {param} {provision.INVENTORY_CONN_PREFIX}{conn_id} names Airflow connection "
                          f"'{conn_id}', which Airflow does not have where this task runs; create it (any type, e.g. "
                          f"generic, with the inventory under \"{provision.INVENTORY_EXTRA_KEY}\" in its extra) for "
                          "every Airflow worker, or name an inventory file; nothing was changed") from err
    inventory = provision.inventory_from_extra(conn_id, conn.extra_dejson, param=param)
    from airflow.sdk.log import mask_secret

    for value in inventory.secret_values():
        mask_secret(value)
    return inventory


def store_url_from_connection(conn: Any) -> sa.URL:
    """The SQLAlchemy URL of the store an Airflow Connection object names (pure: no lookups)."""
    if conn.conn_type == "postgres":
        from airflow.providers.postgres.hooks.postgres import PostgresHook

        scheme = None if (conn.extra_dejson or {}).get("sqlalchemy_scheme") else "postgresql+psycopg2"
        return PostgresHook(postgres_conn_id=conn.conn_id, connection=conn, sqlalchemy_scheme=scheme).sqlalchemy_url
    if conn.conn_type == "sqlite":
        path = conn.host or conn.schema
        if not path:
            raise store.StoreError(f"connection {conn.conn_id!r} (sqlite) names no database file: set its host to "
                                   "the file's path, e.g. /var/lib/airflow/kafkaops.db")
        return sa.URL.create("sqlite", database=path)
    if not conn.conn_type:
        raise store.StoreError(f"connection {conn.conn_id!r} has no type; give it type 'postgres' (production) or "
                               "'sqlite' (one machine)")
    try:
        return sa.make_url(conn.get_uri())
    except sa.exc.ArgumentError as err:
        raise store.StoreError(f"connection {conn.conn_id!r} (type {conn.conn_type!r}) is not a database SQLAlchemy "
                               f"reads ({err}); give it type 'postgres' or 'sqlite'") from err


def kafkaops_store(conn_id: str = STORE_CONN_ID) -> store.Store:
    """The store the Airflow connection ``conn_id`` names, opened (reachable, schema at head); the
    default store when no such connection exists. Refuses Airflow's own metadata database."""
    url, source = store_target(conn_id)
    return store.open_store(url, source=source)


def store_target(conn_id: str = STORE_CONN_ID) -> tuple[sa.URL, str]:
    """The URL of the store :func:`kafkaops_store` opens and where it came from (for messages),
    without opening it. Refuses Airflow's own metadata database."""
    try:
        conn = BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        url = sa.make_url(store.default_url())
        source = f"the default kafkaops store (no Airflow connection '{conn_id}')"
    else:
        url, source = store_url_from_connection(conn), f"Airflow connection '{conn_id}'"
    if _same_database(url, conf.get("database", "sql_alchemy_conn", fallback="")):
        raise store.StoreError(f"{source} points at Airflow's own metadata database ({url.render_as_string()}); "
                               f"the kafkaops store needs a database of its own: create one and point the "
                               f"'{conn_id}' connection at it")
    return url, source


def _same_database(url: sa.URL, other: str) -> bool:
    try:
        theirs = sa.make_url(other)
    except sa.exc.ArgumentError:  # none, or a task process's placeholder ("airflow-db-not-allowed:///")
        return False
    if url.get_backend_name() != theirs.get_backend_name():
        return False
    if url.get_backend_name() == "sqlite":
        mine, their_file = url.database, theirs.database
        if not mine or not their_file:
            return False
        return Path(mine).resolve() == Path(their_file).resolve()

    def where(u: sa.URL) -> tuple[object, ...]:
        return (u.host or "localhost", u.port or _DEFAULT_PORTS.get(u.get_backend_name()), u.database)

    return where(url) == where(theirs)


def prometheus_url(conn_id: str) -> str | None:
    """The base URL of the Prometheus server of the Airflow connection ``conn_id`` (type http: host, port, schema
    ``http`` or ``https``, an optional path in the host's place, login and password as basic auth in the URL's
    user part, the password registered with the secrets masker); None when there is no such connection."""
    from urllib.parse import quote

    from airflow.sdk.log import mask_secret

    try:
        conn = BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        return None
    host = (conn.host or "").strip()
    if "://" in host:  # a whole URL put in the host field
        scheme, _, host = host.partition("://")
    else:
        scheme = (conn.schema or "").strip() or ("https" if (conn.conn_type or "") == "https" else "http")
    if not host:
        raise ConfigError(f"the Airflow connection '{conn_id}' names no host; give the Prometheus server's host (and "
                          "port, schema http or https) or set the review's prometheus_url")
    user = ""
    if conn.login:
        if conn.password:
            mask_secret(conn.password)
        user = quote(conn.login, safe="") + (f":{quote(conn.password, safe='')}" if conn.password else "") + "@"
    base, _, path = host.partition("/")
    port = f":{conn.port}" if conn.port else ""
    return f"{scheme}://{user}{base}{port}" + (f"/{path}" if path else "")
