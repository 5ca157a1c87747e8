"""``kafkaops check``: what an Airflow component of a deployment needs before it starts, checked in
order, one line each on stdout (``NAME: ok: ...``); the first that fails is one line on stderr
(``NAME: FAILED: why; what to do``) and ends the check with a non-zero exit code (1, or 2 for a
setting that cannot work):

    Airflow metadata database   Airflow's own setting ([database] sql_alchemy_conn) answers SELECT 1
    kafkaops store              found as the tasks find it (connection kafkaops_store, else
                                $KAFKAOPS_STORE_URL, else $AIRFLOW_HOME/kafkaops.db), reachable, not
                                Airflow's database, its schema at this kafkaops' revision (--upgrade
                                brings an older one there: the one-shot init step)
    Kafka connection            (--kafka CONN_ID) answers: its cluster id and brokers

    python -m kafkaops check && exec airflow scheduler

URLs are shown with the password hidden, and a password is cut from any driver message.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from kafkaops.cli import exits
from kafkaops.cli.options import missing_file
from kafkaops.errors import ConfigError, KafkaOpsError

METADATA_SETTING = "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"


class CheckFailed(KafkaOpsError):
    """What a component needs does not answer, or is not usable as it is."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--upgrade", action="store_true",
                        help="bring an older kafkaops store schema to this kafkaops' revision instead of refusing "
                             "it (the one-shot init step of a deployment, beside 'airflow db migrate')")
    parser.add_argument("--kafka", metavar="CONN_ID",
                        help="also check that the Airflow connection CONN_ID (type kafka) answers: its cluster id "
                             "and brokers")
    parser.add_argument("--timeout", type=float, default=5.0, metavar="SECONDS",
                        help="seconds to wait for the metadata database and for Kafka to answer (default 5; the "
                             "kafkaops store waits up to 10)")


def run(args: argparse.Namespace) -> int:
    checks: list[tuple[str, Callable[[argparse.Namespace], str]]] = [
        ("Airflow metadata database", _metadata_database), ("kafkaops store", _store)]
    if args.kafka:
        checks.append((f"Kafka connection '{args.kafka}'", _kafka))
    for name, check in checks:
        if not getattr(args, "verbose", False):  # importing Airflow sets its own log level (INFO)
            logging.getLogger().setLevel(logging.WARNING)
        try:
            said = check(args)
        except KafkaOpsError as error:
            sys.stdout.flush()
            print(f"{name}: FAILED: {exits.one_line(error)}", file=sys.stderr, flush=True)
            return exits.exit_code(error)
        print(f"{name}: ok: {said}", flush=True)
    return exits.EXIT_OK


# -- the checks: each returns what it found, or raises a KafkaOpsError saying why and what to do ---------

def _metadata_database(args: argparse.Namespace) -> str:
    import sqlalchemy as sa
    from sqlalchemy.pool import NullPool

    fix = f"set {METADATA_SETTING} (Airflow's [database] sql_alchemy_conn) to a database this host can reach"
    raw = os.environ.get(METADATA_SETTING, "")
    try:
        from airflow.configuration import conf  # Airflow reads the setting on import: a bad one fails here
    except Exception as err:
        raise CheckFailed(f"Airflow cannot start with its database setting: "
                          f"{_scrub(f'{type(err).__name__}: {err}', raw, _password(raw))}; {fix}") from err
    text = conf.get("database", "sql_alchemy_conn", fallback="")
    try:
        url = sa.make_url(text)
    except sa.exc.ArgumentError as err:
        raise ConfigError(f"Airflow's database setting is not a database URL; {fix}") from err
    shown = url.render_as_string(hide_password=True)
    started = time.monotonic()
    engine = None
    try:
        engine = sa.create_engine(url, poolclass=NullPool, connect_args=_connect_timeout(url, args.timeout))
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
    except (sa.exc.SQLAlchemyError, ImportError) as err:
        cause = err.orig if isinstance(err, sa.exc.DBAPIError) and err.orig is not None else err
        said = (str(cause).strip().splitlines() or [""])[0]
        raise CheckFailed(_scrub(f"{shown} did not answer (after {time.monotonic() - started:.1f} s): "
                                 f"{type(cause).__name__}: {said}; {fix}", url.password)) from err
    finally:
        if engine is not None:
            engine.dispose()
    return f"{shown} answers"


def _store(args: argparse.Namespace) -> str:
    from kafkaops.airflow import hooks
    from kafkaops.platform import migrations, store

    # Connections kept in the metadata database count too, as for `airflow connections get`
    os.environ.setdefault("_AIRFLOW_PROCESS_CONTEXT", "server")
    url, source = hooks.store_target()  # refuses Airflow's own database
    shown = url.render_as_string(hide_password=True)
    missing = missing_file(url.render_as_string(hide_password=False))
    if missing is not None and not args.upgrade:
        raise store.StoreSchemaError(f"{shown} ({source}): the file {missing} does not exist yet; create it: "
                                     "python -m kafkaops check --upgrade, or " + _upgrade_command(source))
    try:
        try:
            opened = store.open_store(url, source=source, upgrade=False)
            return f"{shown} at schema {opened.revision()}; {source}"
        except store.StoreSchemaError as err:
            before = store.Store(url, source=source).revision()
            if before is not None and before not in migrations.known():
                raise  # newer than this kafkaops: the message says to upgrade kafkaops on this host
            if not args.upgrade:
                raise store.StoreSchemaError(f"{err}; or here: python -m kafkaops check --upgrade") from err
        after = store.open_store(url, source=source, upgrade=True).revision()
        return f"{shown} upgraded from schema {before or 'none'} to {after}; {source}"
    except store.StoreSchemaError as err:
        raise store.StoreSchemaError(_scrub(f"{shown}: {err}", url.password)) from err
    except store.StoreError as err:
        raise CheckFailed(_scrub(f"{shown}: {err}; {_store_setting(source)}", url.password)) from err


def _kafka(args: argparse.Namespace) -> str:
    from airflow.sdk.exceptions import AirflowNotFoundException

    from kafkaops.airflow.hooks import KafkaOpsHook
    from kafkaops.platform.kafka import metadata

    try:
        connection = KafkaOpsHook(args.kafka).connect(timeout_s=args.timeout)
    except AirflowNotFoundException as err:
        raise ConfigError(f"there is no Airflow connection '{args.kafka}': create it (type kafka, extras "
                          "{\"bootstrap.servers\": \"host:9092\"}) or name another with --kafka") from err
    with connection as conn:
        cluster_id, controller, brokers = metadata.describe_cluster(conn)
    return (f"cluster {cluster_id} at {conn.bootstrap}: {len(brokers)} broker(s) "
            f"({', '.join(str(b.id) for b in sorted(brokers, key=lambda b: b.id))}), controller {controller}")


# -- helpers ------------------------------------------------------------------------------------------------

def _connect_timeout(url: Any, seconds: float) -> dict[str, Any]:
    """The driver's own connect timeout, so an unreachable host fails in ``seconds``, not minutes."""
    backend = url.get_backend_name()
    if backend in ("postgresql", "mysql"):
        return {"connect_timeout": max(1, round(seconds))}
    return {"timeout": seconds} if backend == "sqlite" else {}


def _store_setting(source: str) -> str:
    if source.startswith("Airflow connection"):
        return (f"fix the {source} (AIRFLOW_CONN_KAFKAOPS_STORE, a secrets backend, or 'airflow connections'): "
                "its host, port, database and credentials")
    if os.environ.get("KAFKAOPS_STORE_URL"):
        return "fix $KAFKAOPS_STORE_URL, or point the Airflow connection 'kafkaops_store' at the store"
    return ("it is the default SQLite file under $AIRFLOW_HOME: set the Airflow connection 'kafkaops_store' or "
            "$KAFKAOPS_STORE_URL")


def _upgrade_command(source: str) -> str:
    from kafkaops.platform.store import UPGRADE_COMMAND

    return f"{UPGRADE_COMMAND} --store URL" if source.startswith("Airflow connection") else UPGRADE_COMMAND


def _password(text: str) -> str | None:
    import sqlalchemy as sa

    try:
        return sa.make_url(text).password if text else None
    except sa.exc.ArgumentError:
        return None


def _scrub(text: str, *secrets: str | None) -> str:
    """``text`` with every secret cut out (a driver may quote what it was given)."""
    for secret in secrets:
        if secret:
            text = text.replace(str(secret), "***")
    return text
