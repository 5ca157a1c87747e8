"""Options several commands share: where Kafka is and how long to wait for it; which kafkaops store."""
from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kafkaops.errors import NotFound

if TYPE_CHECKING:
    from kafkaops.platform.store import Store

LOCAL_BOOTSTRAP = "127.0.0.1:19092,127.0.0.1:19094,127.0.0.1:19096"  # playbooks/inventory/local.yml


def add_timeout(parser: Any) -> None:
    """``--timeout`` on a parser or an argument group."""
    parser.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS",
                        help="seconds to wait for Kafka to answer (default 10)")


def add_local_connection(parser: argparse.ArgumentParser) -> None:
    """``--bootstrap-server`` defaulting to the local cluster of ``cluster up``, and ``--timeout``."""
    parser.add_argument("--bootstrap-server", default=LOCAL_BOOTSTRAP, metavar="HOST:PORT[,...]",
                        help="the cluster's bootstrap servers (default: the local cluster of 'cluster up')")
    add_timeout(parser)


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
