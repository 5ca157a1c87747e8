"""Options several commands share: where Kafka is, with which client settings, and how long to
wait for it; which kafkaops store.

A secured cluster's settings (SASL, SSL) never go on the command line: ``--kafka-config FILE`` reads
them from a JSON file of librdkafka settings (an Airflow ``kafka`` connection's extras, e.g.
``{"bootstrap.servers": "kafka-1:9093", "security.protocol": "SASL_SSL", "sasl.mechanism":
"SCRAM-SHA-512", "sasl.username": "ops", "sasl.password": "...", "ssl.ca.location": "/etc/kafka/ca.pem"}``),
``--kafka-conn ID`` from an Airflow connection (``AIRFLOW_CONN_<ID>`` or Airflow's database). An mTLS
client names PEM files: ``{"security.protocol": "SSL", "ssl.ca.location": "/etc/kafka/ca.pem",
"ssl.certificate.location": "/etc/kafka/client.pem", "ssl.key.location": "/etc/kafka/client.key",
"ssl.key.password": "..."}`` (kafka-python, for log dirs and reassignments, reads no key store).
``--bootstrap-server`` then only says where, overriding the file's ``bootstrap.servers``.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kafkaops.errors import ConfigError, NotFound

if TYPE_CHECKING:
    from kafkaops.platform.kafka.connection import ClientConfig
    from kafkaops.platform.store import Store

LOCAL_BOOTSTRAP = "127.0.0.1:19092,127.0.0.1:19094,127.0.0.1:19096"  # playbooks/inventory/local.yml


def add_timeout(parser: Any) -> None:
    """``--timeout`` on a parser or an argument group, and the client settings (module docstring)."""
    parser.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS",
                        help="seconds to wait for Kafka to answer (default 10)")
    settings = parser.add_mutually_exclusive_group()
    settings.add_argument("--kafka-config", metavar="FILE",
                          help="JSON file of librdkafka client settings (security.protocol, sasl.*, ssl.*, ...), as "
                               "in an Airflow kafka connection's extras; secrets belong here, not on the command line")
    settings.add_argument("--kafka-conn", metavar="CONN_ID",
                          help="take the client settings from this Airflow connection (type kafka)")


def add_local_connection(parser: argparse.ArgumentParser) -> None:
    """``--bootstrap-server`` defaulting to the local cluster of ``cluster up``, and ``--timeout``."""
    parser.add_argument("--bootstrap-server", metavar="HOST:PORT[,...]",
                        help="the cluster's bootstrap servers (default: those of --kafka-config or --kafka-conn, "
                             "else the local cluster of 'cluster up')")
    add_timeout(parser)


def kafka_config(args: argparse.Namespace, *, default: str | None = LOCAL_BOOTSTRAP) -> ClientConfig:
    """The client config the command connects with: ``--kafka-conn``'s or ``--kafka-config``'s settings,
    ``--bootstrap-server`` overriding their servers (``default`` when nothing names any)."""
    from kafkaops.platform.kafka import connection

    bootstrap = getattr(args, "bootstrap_server", None)
    if getattr(args, "kafka_conn", None):
        settings: dict[str, Any] = dict(airflow_connection_config(args.kafka_conn))
        name = f"Airflow connection '{args.kafka_conn}'"
    elif getattr(args, "kafka_config", None):
        path = Path(args.kafka_config)
        try:
            settings = json.loads(path.read_text())
        except OSError as err:
            raise ConfigError(f"cannot read --kafka-config {path}: {err.strerror}") from err
        except json.JSONDecodeError as err:  # the message quotes no value: the file may hold a password
            raise ConfigError(f"--kafka-config {path} is not JSON (line {err.lineno}, column {err.colno}); write "
                              'one object of librdkafka settings, e.g. {"bootstrap.servers": "host:9092"}') from None
        if not isinstance(settings, dict):
            raise ConfigError(f"--kafka-config {path} holds a JSON {type(settings).__name__}, not an object of "
                              "librdkafka settings")
        name = f"--kafka-config {path}"
    else:
        settings, name = {}, None
    if bootstrap:
        settings["bootstrap.servers"] = bootstrap
    elif not settings.get("bootstrap.servers") and default:
        settings["bootstrap.servers"] = default
    return connection.connection_config(settings, name=name)


def airflow_connection_config(conn_id: str) -> ClientConfig:
    """The client config of the Airflow connection ``conn_id``, the command's logging kept as it was:
    importing Airflow points the root logger at stdout (INFO), where its lines (e.g. the secrets
    masker's) would mix with the command's output (``snapshot --json``). Logs stay on stderr."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level

    def restore() -> None:
        root.handlers[:] = handlers
        root.setLevel(level)

    try:
        from kafkaops.airflow.hooks import KafkaOpsHook

        restore()  # before reading the connection: the masker's warnings go to stderr too
        return KafkaOpsHook(conn_id).get_config()
    finally:
        restore()


def positive(text: str) -> int:
    """An argparse type: a count of 1 or more."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a count; give 1 or more")
    return value


def _database_url(text: str) -> str:
    import sqlalchemy as sa

    try:
        url = sa.make_url(text)
    except sa.exc.ArgumentError:
        raise argparse.ArgumentTypeError("is not a database URL; use e.g. postgresql://ops@db:5432/kafkaops or "
                                         "sqlite:////path/kafkaops.db") from None
    try:
        url.get_dialect()
    except sa.exc.NoSuchModuleError:
        raise argparse.ArgumentTypeError(f"names the database driver {url.drivername!r}, which SQLAlchemy does not "
                                         "have here; use postgresql://... (the postgres provider) or "
                                         "sqlite:///...") from None
    return text


def add_store(parser: argparse.ArgumentParser) -> None:
    """``--store URL``: the kafkaops store to read and change."""
    parser.add_argument("--store", type=_database_url, metavar="URL",
                        help="the kafkaops store's database (default: $KAFKAOPS_STORE_URL, else "
                             "$AIRFLOW_HOME/kafkaops.db), e.g. postgresql://ops@db:5432/kafkaops; a password in "
                             "it is never printed")


def store_target(args: argparse.Namespace) -> tuple[str, str]:
    """The store URL the command uses and where it came from (``from --store``, for messages)."""
    from kafkaops.platform import store

    if args.store:
        return args.store, "from --store"
    return store.default_url(), "from " + ("$KAFKAOPS_STORE_URL" if os.environ.get("KAFKAOPS_STORE_URL")
                                           else "$AIRFLOW_HOME")


def missing_file(url: str) -> Path | None:
    """The SQLite file of ``url`` when it does not exist (opening it would create an empty one)."""
    import sqlalchemy as sa

    parsed = sa.make_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    path = Path(parsed.database)
    return None if path.exists() else path


def open_store(args: argparse.Namespace) -> Store:
    """The store of ``--store`` opened for use; a missing SQLite file or an older schema is refused
    with what to do (a command that reads or breaks a lock creates no store and changes no schema)."""
    from kafkaops.platform import store

    url, source = store_target(args)
    missing = missing_file(url)
    if missing is not None:
        raise NotFound(f"there is no kafkaops store at {missing} ({source}): the file does not exist. Name the "
                       "store with --store URL or $KAFKAOPS_STORE_URL, or create it: python -m kafkaops store upgrade")
    return store.open_store(url, source=source, upgrade=False)
