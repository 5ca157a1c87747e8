"""Alembic environment of the kafkaops store: runs on the connection the caller passes."""
from __future__ import annotations

from alembic import context

connection = context.config.attributes["connection"]
context.configure(connection=connection, version_table="kafkaops_alembic_version", transaction_per_migration=False)
with context.begin_transaction():
    context.run_migrations()
