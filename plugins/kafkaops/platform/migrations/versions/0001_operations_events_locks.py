"""Operations, their audit events, cluster locks and the lock history."""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None

_ID = sa.String(250)
_SERIAL = sa.BigInteger().with_variant(sa.Integer, "sqlite")


def upgrade() -> None:
    op.create_table(
        "kafkaops_operations",
        sa.Column("dag_id", _ID, primary_key=True),
        sa.Column("run_id", _ID, primary_key=True),
        sa.Column("kind", sa.String(64), nullable=False),
        sa.Column("cluster_id", sa.String(128)),
        sa.Column("triggered_by", _ID),
        sa.Column("params", sa.JSON),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("outcome", sa.String(32)),
        sa.Column("reason", sa.Text),
        sa.Column("started_at", sa.Float, nullable=False),
        sa.Column("ended_at", sa.Float),
        sa.Column("lock_token", sa.Integer),
    )
    op.create_table(
        "kafkaops_events",
        sa.Column("id", _SERIAL, primary_key=True, autoincrement=True),
        sa.Column("dag_id", _ID, nullable=False),
        sa.Column("run_id", _ID, nullable=False),
        sa.Column("ts", sa.Float, nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("task_id", _ID),
        sa.Column("try_number", sa.Integer),
        sa.Column("data", sa.JSON, nullable=False),
    )
    op.create_index("ix_kafkaops_events_run", "kafkaops_events", ["dag_id", "run_id", "id"])
    op.create_table(
        "kafkaops_locks",
        sa.Column("cluster_id", sa.String(128), primary_key=True),
        sa.Column("holder", _ID),
        sa.Column("dag_id", _ID),
        sa.Column("run_id", _ID),
        sa.Column("token", sa.Integer, nullable=False),
        sa.Column("acquired_at", sa.Float),
        sa.Column("renewed_at", sa.Float),
        sa.Column("lease_until", sa.Float),
    )
    op.create_table(
        "kafkaops_lock_history",
        sa.Column("id", _SERIAL, primary_key=True, autoincrement=True),
        sa.Column("cluster_id", sa.String(128), nullable=False),
        sa.Column("ts", sa.Float, nullable=False),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("holder", _ID),
        sa.Column("previous_holder", _ID),
        sa.Column("token", sa.Integer),
        sa.Column("by", _ID),
        sa.Column("reason", sa.Text),
    )


def downgrade() -> None:
    for table in ("kafkaops_lock_history", "kafkaops_locks", "kafkaops_events", "kafkaops_operations"):
        op.drop_table(table)
