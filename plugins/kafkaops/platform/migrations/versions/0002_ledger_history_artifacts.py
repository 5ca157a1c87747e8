"""The throttle ledger, capacity review history and artifacts (content-addressed blobs)."""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"

_ID = sa.String(250)
_SERIAL = sa.BigInteger().with_variant(sa.Integer, "sqlite")


def upgrade() -> None:
    op.create_table(
        "kafkaops_throttle_ledger",
        sa.Column("cluster_id", sa.String(128), primary_key=True),
        sa.Column("ledger", sa.JSON, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
    )
    op.create_table(
        "kafkaops_capacity_history",
        sa.Column("id", _SERIAL, primary_key=True, autoincrement=True),
        sa.Column("cluster_id", sa.String(128), nullable=False),
        sa.Column("taken_at", sa.Float, nullable=False),
        sa.Column("run_id", _ID),
        sa.Column("point", sa.JSON, nullable=False),
    )
    op.create_index("ix_kafkaops_capacity_history_cluster", "kafkaops_capacity_history", ["cluster_id", "taken_at"])
    op.create_table(
        "kafkaops_artifacts",
        sa.Column("path", sa.String(1024), primary_key=True),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("content_type", sa.String(128), nullable=False),
        sa.Column("size", sa.Integer, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_table(
        "kafkaops_blobs",
        sa.Column("sha256", sa.String(64), primary_key=True),
        sa.Column("body", sa.LargeBinary, nullable=False),
    )


def downgrade() -> None:
    for table in ("kafkaops_blobs", "kafkaops_artifacts", "kafkaops_capacity_history", "kafkaops_throttle_ledger"):
        op.drop_table(table)
