"""Alembic migrations of the kafkaops store (version table ``kafkaops_alembic_version``).

Run programmatically over a connection the store opened: :func:`upgrade`, :func:`head`.
New revision: add ``versions/NNNN_what.py`` with ``revision``/``down_revision`` and keep
:data:`kafkaops.platform.store.metadata` equal to the head.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection

HERE = Path(__file__).resolve().parent


def _config(connection: Connection | None = None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(HERE))
    cfg.set_main_option("path_separator", "os")
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


@lru_cache(maxsize=1)
def _script() -> ScriptDirectory:
    return ScriptDirectory.from_config(_config())


def head() -> str:
    heads = _script().get_heads()
    assert len(heads) == 1, f"kafkaops store migrations have {len(heads)} heads: {heads}"
    return heads[0]


def known() -> set[str]:
    return {rev.revision for rev in _script().walk_revisions()}


def upgrade(connection: Connection, revision: str = "head") -> None:
    command.upgrade(_config(connection), revision)
