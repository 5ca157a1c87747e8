"""The audit trail guarded by the database: events chained by hash, and no UPDATE or DELETE of an event.

Each event gets ``prev_hash`` (the hash of the run's event before it, empty for the first) and ``hash``
(:func:`kafkaops.platform.store.event_hash`); events written before this revision keep both empty and are
reported as unchained by ``kafkaops records verify``. A trigger refuses every UPDATE and DELETE of
``kafkaops_events`` for every role the components use: PostgreSQL by a PL/pgSQL function, SQLite by
``RAISE(ABORT)``. Only the database's owner can take the triggers off, and an event edited then no longer
matches its hash.
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"

MESSAGE = ("kafkaops_events is append-only: the audit trail of kafkaops runs is never updated or deleted "
           "(docs/security.md)")


def upgrade() -> None:
    with op.batch_alter_table("kafkaops_events") as batch:
        batch.add_column(sa.Column("prev_hash", sa.String(64)))
        batch.add_column(sa.Column("hash", sa.String(64)))
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"""
            CREATE OR REPLACE FUNCTION kafkaops_events_append_only() RETURNS trigger AS $$
            BEGIN
                RAISE EXCEPTION '{MESSAGE}' USING ERRCODE = 'insufficient_privilege';
            END;
            $$ LANGUAGE plpgsql""")
        op.execute("CREATE TRIGGER kafkaops_events_append_only BEFORE UPDATE OR DELETE ON kafkaops_events "
                   "FOR EACH ROW EXECUTE FUNCTION kafkaops_events_append_only()")
        op.execute("CREATE TRIGGER kafkaops_events_no_truncate BEFORE TRUNCATE ON kafkaops_events "
                   "FOR EACH STATEMENT EXECUTE FUNCTION kafkaops_events_append_only()")
    else:
        for action in ("UPDATE", "DELETE"):
            op.execute(f"CREATE TRIGGER kafkaops_events_no_{action.lower()} BEFORE {action} ON kafkaops_events "
                       f"BEGIN SELECT RAISE(ABORT, '{MESSAGE}'); END")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER IF EXISTS kafkaops_events_no_truncate ON kafkaops_events")
        op.execute("DROP TRIGGER IF EXISTS kafkaops_events_append_only ON kafkaops_events")
        op.execute("DROP FUNCTION IF EXISTS kafkaops_events_append_only()")
    else:
        for action in ("update", "delete"):
            op.execute(f"DROP TRIGGER IF EXISTS kafkaops_events_no_{action}")
    with op.batch_alter_table("kafkaops_events") as batch:
        batch.drop_column("hash")
        batch.drop_column("prev_hash")
