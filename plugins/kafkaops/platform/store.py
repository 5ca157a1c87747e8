"""The kafkaops store: the run state every Airflow component shares, in one SQL database.

    operations      one row per run: kind, cluster, who triggered it, params, state, outcome, times
    events          the audit trail, ordered per run, with the task and try that wrote it; append-only (a
                    trigger refuses UPDATE and DELETE) and chained by hash per run (:meth:`Store.verify_events`)
    locks           one row per cluster: holder run, fencing token, lease
    lock_history    every acquire, release, takeover and break, with who and why
    throttle_ledger broker throttle rates kafkaops set and could not remove yet
    capacity_history capacity review points, per cluster
    artifacts/blobs Data Docs pages, capacity reports, Spark logs (content-addressed bodies)

SQLAlchemy Core over SQLite (the embedded default: ``$AIRFLOW_HOME/kafkaops.db``, WAL mode, busy
timeout) or Postgres (production, through the ``kafkaops_store`` Airflow connection). The schema is
versioned by Alembic (``kafkaops/platform/migrations``, version table ``kafkaops_alembic_version``);
:meth:`Store.open` upgrades an older schema with a log line, or refuses with the upgrade command.

The lock: acquiring is one atomic statement (an UPDATE of a free or expired row, else an INSERT
that does nothing on conflict). Each acquire bumps the cluster's fencing token; every change to a
cluster first runs :meth:`Store.check_fence`, one UPDATE that matches only the current holder and
token and renews the lease. A holder whose run has ended, or whose lease ran out, is taken over
with a compare-and-swap on the old token, so two contenders cannot both win.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import socket
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa
import tenacity
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.pool import NullPool

from kafkaops.errors import KafkaOpsError

log = logging.getLogger(__name__)

VERSION_TABLE = "kafkaops_alembic_version"
DEFAULT_LEASE_S = 72 * 3600.0  # outlasts the 24 h approval timeout; every fenced change renews it
UPGRADE_COMMAND = "python -m kafkaops store upgrade"

metadata = sa.MetaData()
_ID = sa.String(250)

operations = sa.Table(
    "kafkaops_operations", metadata,
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
events = sa.Table(
    "kafkaops_events", metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("dag_id", _ID, nullable=False),
    sa.Column("run_id", _ID, nullable=False),
    sa.Column("ts", sa.Float, nullable=False),
    sa.Column("kind", sa.String(32), nullable=False),
    sa.Column("task_id", _ID),
    sa.Column("try_number", sa.Integer),
    sa.Column("data", sa.JSON, nullable=False),
    sa.Column("prev_hash", sa.String(64)),
    sa.Column("hash", sa.String(64)),
    sa.Index("ix_kafkaops_events_run", "dag_id", "run_id", "id"),
)
locks = sa.Table(
    "kafkaops_locks", metadata,
    sa.Column("cluster_id", sa.String(128), primary_key=True),
    sa.Column("holder", _ID),
    sa.Column("dag_id", _ID),
    sa.Column("run_id", _ID),
    sa.Column("token", sa.Integer, nullable=False),
    sa.Column("acquired_at", sa.Float),
    sa.Column("renewed_at", sa.Float),
    sa.Column("lease_until", sa.Float),
)
lock_history = sa.Table(
    "kafkaops_lock_history", metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("cluster_id", sa.String(128), nullable=False),
    sa.Column("ts", sa.Float, nullable=False),
    sa.Column("action", sa.String(32), nullable=False),
    sa.Column("holder", _ID),
    sa.Column("previous_holder", _ID),
    sa.Column("token", sa.Integer),
    sa.Column("by", _ID),
    sa.Column("reason", sa.Text),
)
throttle_ledger = sa.Table(
    "kafkaops_throttle_ledger", metadata,
    sa.Column("cluster_id", sa.String(128), primary_key=True),
    sa.Column("ledger", sa.JSON, nullable=False),
    sa.Column("updated_at", sa.Float, nullable=False),
)
capacity_history = sa.Table(
    "kafkaops_capacity_history", metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("cluster_id", sa.String(128), nullable=False),
    sa.Column("taken_at", sa.Float, nullable=False),
    sa.Column("run_id", _ID),
    sa.Column("point", sa.JSON, nullable=False),
    sa.Index("ix_kafkaops_capacity_history_cluster", "cluster_id", "taken_at"),
)
artifacts = sa.Table(
    "kafkaops_artifacts", metadata,
    sa.Column("path", sa.String(1024), primary_key=True),
    sa.Column("sha256", sa.String(64), nullable=False),
    sa.Column("content_type", sa.String(128), nullable=False),
    sa.Column("size", sa.Integer, nullable=False),
    sa.Column("created_at", sa.Float, nullable=False),
)
blobs = sa.Table(
    "kafkaops_blobs", metadata,
    sa.Column("sha256", sa.String(64), primary_key=True),
    sa.Column("body", sa.LargeBinary, nullable=False),
)


# -- errors -----------------------------------------------------------------------------------------------

class StoreError(KafkaOpsError):
    """The kafkaops store cannot be reached, read or written."""


class StoreUnavailable(StoreError):
    """The store's database does not answer (wrong URL, host down, bad credentials)."""

    retriable = True


class StoreSchemaError(StoreError):
    """The store's schema is older (and auto-upgrade is off) or newer than this kafkaops."""


class ClusterBusy(KafkaOpsError):
    """Another live operation holds the cluster."""

    final = True


class LockLost(KafkaOpsError):
    """This run does not hold the cluster's lock (any more): it must not change the cluster."""

    final = True


# -- values -----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Lease:
    """Who holds a cluster: ``holder`` is ``dag_id/run_id``; ``token`` the fencing token."""

    cluster_id: str
    holder: str | None
    dag_id: str | None
    run_id: str | None
    token: int
    acquired_at: float | None
    lease_until: float | None

    @property
    def free(self) -> bool:
        return self.holder is None

    def to_dict(self) -> dict[str, Any]:
        return {"cluster_id": self.cluster_id, "holder": self.holder, "dag_id": self.dag_id, "run_id": self.run_id,
                "token": self.token, "acquired_at": self.acquired_at, "lease_until": self.lease_until}


@dataclass(frozen=True)
class StoredEvent:
    ts: float
    kind: str
    data: Mapping[str, Any]
    task_id: str | None = None
    try_number: int | None = None


@dataclass(frozen=True)
class Artifact:
    path: str
    content_type: str
    body: bytes
    created_at: float


RunEnded = Callable[[str, str], "bool | None"]
"""``(dag_id, run_id) -> True`` when that run has ended, False when alive, None when unknown."""


def holder_of(dag_id: str, run_id: str) -> str:
    return f"{dag_id}/{run_id}"


def _hide(url: sa.URL) -> str:
    return url.render_as_string(hide_password=True)


def _where(url: sa.URL, source: str) -> str:
    backend = url.get_backend_name()
    port = url.port or (5432 if backend == "postgresql" else "")
    place = url.database if backend == "sqlite" else f"{url.host or 'localhost'}:{port}"
    return f"{source} ({backend} at {place})"


# -- the store --------------------------------------------------------------------------------------------

class Store:
    """One kafkaops store. Open it with :func:`open_store` (checks reachability and schema)."""

    def __init__(self, url: str | sa.URL, *, source: str = "kafkaops store") -> None:
        self.url = sa.make_url(url)
        self.source = source
        self.where = _where(self.url, source)
        try:
            self.engine = _engine(self.url)
        except OSError as err:  # the folder of a SQLite file
            raise StoreUnavailable(f"the kafkaops store {self.where} cannot be created: {err.strerror}: "
                                   f"{err.filename}; point the store URL at a file in a writable folder") from err

    def __repr__(self) -> str:
        return f"Store({_hide(self.url)!r})"

    @property
    def backend(self) -> str:
        return self.url.get_backend_name()

    @contextmanager
    def _tx(self) -> Iterator[Connection]:
        try:
            with self.engine.begin() as conn:
                yield conn
        except sa.exc.OperationalError as err:
            raise StoreUnavailable(f"the kafkaops store {self.where} did not answer: "
                                   f"{str(err.orig).strip().splitlines()[0] if err.orig else err}; check the "
                                   f"connection's host, port, database and credentials") from err

    # -- schema ------------------------------------------------------------------------------------------

    def revision(self) -> str | None:
        """The schema revision the database is at (None: no kafkaops schema yet)."""
        with self._tx() as conn:
            return _revision(conn)

    def prepare(self, *, upgrade: bool = True) -> Store:
        """Reach the database and bring its schema to this kafkaops' head (``upgrade``) or refuse."""
        from kafkaops.platform import migrations

        with self._tx() as conn:
            names = set(sa.inspect(conn).get_table_names())
        if {"dag_run", "task_instance"} <= names:
            raise StoreError(f"{self.where} is Airflow's own metadata database; the kafkaops store needs a database "
                             "of its own (create one and point the kafkaops_store connection at it)")
        current, head = self.revision(), migrations.head()
        if current == head:
            return self
        self._refuse_unknown(current, head, migrations.known())
        if not upgrade:
            raise StoreSchemaError(f"the kafkaops store {self.where} is at schema revision {current or 'none'}, "
                                   f"this kafkaops needs {head}: run '{UPGRADE_COMMAND}' (it changes only kafkaops' "
                                   "own tables)")
        with self._tx() as conn:
            _lock_schema(conn)  # processes starting together upgrade one after the other
            current = _revision(conn)
            if current != head:  # else another process upgraded it while this one waited
                self._refuse_unknown(current, head, migrations.known())
                log.info("%s: upgrading its schema from %s to %s", self.where, current or "empty", head)
                migrations.upgrade(conn, "head")
        return self

    def _refuse_unknown(self, current: str | None, head: str, known: set[str]) -> None:
        if current is not None and current not in known:
            raise StoreSchemaError(f"the kafkaops store {self.where} is at schema revision {current}, which this "
                                   f"kafkaops does not know (its newest is {head}): upgrade kafkaops on this host")

    # -- operations and events ---------------------------------------------------------------------------

    def start_operation(self, dag_id: str, run_id: str, *, kind: str, triggered_by: str,
                        params: Mapping[str, Any], at: float | None = None) -> None:
        """Insert the run's row, or mark a re-run of it as running again (its outcome cleared)."""
        now = at or time.time()
        values = {"kind": kind, "triggered_by": triggered_by, "params": dict(params), "state": "running",
                  "outcome": None, "reason": None, "started_at": now, "ended_at": None}
        with self._tx() as conn:
            updated = conn.execute(operations.update().where(operations.c.dag_id == dag_id,
                                                             operations.c.run_id == run_id).values(**values))
            if updated.rowcount == 0:
                conn.execute(operations.insert().values(dag_id=dag_id, run_id=run_id, **values))

    def update_operation(self, dag_id: str, run_id: str, **values: Any) -> None:
        allowed = {"cluster_id", "state", "outcome", "reason", "ended_at", "lock_token", "kind"}
        unknown = set(values) - allowed
        if unknown:
            raise StoreError(f"operation columns {sorted(unknown)} cannot be set; settable: {sorted(allowed)}")
        with self._tx() as conn:
            conn.execute(operations.update().where(operations.c.dag_id == dag_id,
                                                   operations.c.run_id == run_id).values(**values))

    def operation(self, dag_id: str, run_id: str) -> dict[str, Any] | None:
        with self._tx() as conn:
            row = conn.execute(operations.select().where(operations.c.dag_id == dag_id,
                                                         operations.c.run_id == run_id)).mappings().first()
        return dict(row) if row else None

    def dags_of_run(self, run_id: str) -> list[str]:
        """The DAGs with a run of id ``run_id`` (Airflow's run ids are unique per DAG only)."""
        with self._tx() as conn:
            return sorted(conn.execute(sa.select(operations.c.dag_id).where(operations.c.run_id == run_id)).scalars())

    def list_operations(self, dag_id: str | None = None, *, limit: int = 200,
                        dag_ids: Iterable[str] | None = None, kind: str | None = None) -> list[dict[str, Any]]:
        """Runs, newest first (only ``dag_ids`` when given: what the reader may see; only ``kind`` when given)."""
        query = operations.select().order_by(operations.c.started_at.desc()).limit(limit)
        if dag_id:
            query = query.where(operations.c.dag_id == dag_id)
        if kind:
            query = query.where(operations.c.kind == kind)
        if dag_ids is not None:
            query = query.where(operations.c.dag_id.in_(list(dag_ids)))
        with self._tx() as conn:
            return [dict(r) for r in conn.execute(query).mappings()]

    def append_event(self, dag_id: str, run_id: str, kind: str, data: Mapping[str, Any], *,
                     task_id: str | None = None, try_number: int | None = None, ts: float | None = None
                     ) -> StoredEvent:
        """Append one event to the run's trail, chained to the run's last event by hash (:func:`event_hash`).
        The run's appends are serialized (a transaction-scoped advisory lock on PostgreSQL, the write lock on
        SQLite), so two tasks writing at once cannot both chain to the same event."""
        event = StoredEvent(ts or time.time(), kind, _jsonable(data), task_id, try_number)
        with self._tx() as conn:
            _lock_run(conn, dag_id, run_id)
            prev = conn.execute(sa.select(events.c.hash).where(events.c.dag_id == dag_id, events.c.run_id == run_id)
                                .order_by(events.c.id.desc()).limit(1)).scalar() or ""
            conn.execute(events.insert().values(dag_id=dag_id, run_id=run_id, ts=event.ts, kind=kind,
                                                task_id=task_id, try_number=try_number, data=event.data,
                                                prev_hash=prev, hash=event_hash(prev, dag_id, run_id, event)))
        return event

    def events(self, dag_id: str, run_id: str) -> list[StoredEvent]:
        with self._tx() as conn:
            rows = conn.execute(events.select().where(events.c.dag_id == dag_id, events.c.run_id == run_id)
                                .order_by(events.c.id)).mappings().all()
        return [StoredEvent(r["ts"], r["kind"], r["data"], r["task_id"], r["try_number"]) for r in rows]

    def verify_events(self, dag_id: str, run_id: str) -> TrailCheck:
        """Whether the run's trail is whole: every chained event's hash matches its content and the event
        before it, in the order they were written. Events from before the chain (schema 0003) are counted,
        not checked."""
        with self._tx() as conn:
            rows = conn.execute(events.select().where(events.c.dag_id == dag_id, events.c.run_id == run_id)
                                .order_by(events.c.id)).mappings().all()
        return check_trail(dag_id, run_id, rows)

    # -- the cluster lock --------------------------------------------------------------------------------

    def lease(self, cluster_id: str) -> Lease | None:
        with self._tx() as conn:
            row = conn.execute(locks.select().where(locks.c.cluster_id == cluster_id)).mappings().first()
        return None if row is None else _lease(row)

    def acquire(self, cluster_id: str, dag_id: str, run_id: str, *, run_ended: RunEnded | None = None,
                lease_s: float = DEFAULT_LEASE_S, now: float | None = None) -> Lease:
        """Take ``cluster_id`` for the run, or raise :class:`ClusterBusy` naming the live holder.

        Idempotent for the holder itself (a retried ``begin`` keeps its token). A holder whose run
        ``run_ended`` says has ended, or whose lease ran out, is taken over; the takeover is in both
        runs' records and in the lock history."""
        holder, now = holder_of(dag_id, run_id), now or time.time()
        fresh = {"holder": holder, "dag_id": dag_id, "run_id": run_id, "acquired_at": now, "renewed_at": now,
                 "lease_until": now + lease_s}
        with self._tx() as conn:
            won = conn.execute(locks.update().where(locks.c.cluster_id == cluster_id, locks.c.holder.is_(None))
                               .values(token=locks.c.token + 1, **fresh)).rowcount
            if not won:
                won = conn.execute(_insert_ignore(self, locks, {"cluster_id": cluster_id, "token": 1, **fresh},
                                                  "cluster_id")).rowcount
        current = self.lease(cluster_id)
        assert current is not None
        if won:
            self._log_lock(cluster_id, "acquired", holder, token=current.token)
            self._bind_token(dag_id, run_id, cluster_id, current.token)
            return current
        if current.holder == holder:
            op = self.operation(dag_id, run_id)
            if op is not None and (op["cluster_id"], op["lock_token"]) != (cluster_id, current.token):
                self._bind_token(dag_id, run_id, cluster_id, current.token)  # the first try died before it
            return current
        ended = _ended(run_ended, current)
        expired = current.lease_until is not None and current.lease_until < now
        if not ended and not expired:
            raise ClusterBusy(_busy_message(cluster_id, current, ended))
        why = "its run has ended" if ended else f"its lease ran out at {_utc(current.lease_until)}"
        with self._tx() as conn:  # compare-and-swap on the old token: one contender wins
            won = conn.execute(locks.update().where(locks.c.cluster_id == cluster_id,
                                                    locks.c.token == current.token)
                               .values(token=current.token + 1, **fresh)).rowcount
        if not won:
            latest = self.lease(cluster_id)
            raise ClusterBusy(f"cluster {cluster_id} was just taken by {latest.holder if latest else '?'} while this "
                              f"run took over from {current.holder}; wait for that run to finish")
        text = f"lock on cluster {cluster_id} taken over from {current.holder} by {holder}: {why}"
        log.warning("%s", text)
        self._log_lock(cluster_id, "taken_over", holder, previous=current.holder, token=current.token + 1,
                       reason=why)
        if current.dag_id and current.run_id:
            self.append_event(current.dag_id, current.run_id, "note", {"text": text, "lock": "lost"})
        self.append_event(dag_id, run_id, "note", {"text": text, "lock": "taken_over"})
        self._bind_token(dag_id, run_id, cluster_id, current.token + 1)
        return self.lease(cluster_id) or current

    def check_fence(self, cluster_id: str, dag_id: str, run_id: str, token: int | None = None, *,
                    action: str = "change the cluster", lease_s: float = DEFAULT_LEASE_S) -> int:
        """Raise :class:`LockLost` unless the run holds ``cluster_id`` with ``token`` (default: the
        token its ``begin`` got); renews the lease. One statement: check and renew cannot interleave."""
        if token is None:
            op = self.operation(dag_id, run_id)
            token = op.get("lock_token") if op else None
            if token is None:
                raise LockLost(f"run {holder_of(dag_id, run_id)} never took the lock of cluster {cluster_id}, so it "
                               f"may not {action}; run the DAG from its begin task")
        now = time.time()
        with self._tx() as conn:
            ok = conn.execute(locks.update().where(locks.c.cluster_id == cluster_id,
                                                   locks.c.holder == holder_of(dag_id, run_id),
                                                   locks.c.token == token)
                              .values(renewed_at=now, lease_until=now + lease_s)).rowcount
        if not ok:
            current = self.lease(cluster_id)
            who = f"{current.holder} (token {current.token})" if current and current.holder else "nobody"
            raise LockLost(f"run {holder_of(dag_id, run_id)} (token {token}) no longer holds cluster {cluster_id}: "
                           f"{who} holds it now, so this run may not {action}; nothing was changed. Start a new "
                           f"run when '{'kafkaops lock show ' + cluster_id}' shows the cluster free")
        return token

    def release(self, cluster_id: str, dag_id: str, run_id: str) -> bool:
        """Free the cluster if the run holds it; False when it held nothing."""
        holder = holder_of(dag_id, run_id)
        with self._tx() as conn:
            freed = conn.execute(locks.update().where(locks.c.cluster_id == cluster_id, locks.c.holder == holder)
                                 .values(holder=None, dag_id=None, run_id=None, lease_until=None)).rowcount
        if freed:
            self._log_lock(cluster_id, "released", None, previous=holder)
        return bool(freed)

    def break_lock(self, cluster_id: str, *, by: str, reason: str) -> Lease | None:
        """Free the cluster whoever holds it, bumping the token so the old holder is fenced off.
        Recorded with who and why in the lock history and in the holder run's record."""
        if not reason or not reason.strip():
            raise KafkaOpsError(f"a lock break needs a reason: kafkaops lock break {cluster_id} --reason "
                                "'why the holder is gone'")
        current = self.lease(cluster_id)
        if current is None or current.free:
            return None
        with self._tx() as conn:
            broken = conn.execute(locks.update().where(locks.c.cluster_id == cluster_id,
                                                       locks.c.token == current.token)
                                  .values(holder=None, dag_id=None, run_id=None, lease_until=None,
                                          token=current.token + 1)).rowcount
        if not broken:  # taken by another run since it was read: that run is not the one meant
            latest = self.lease(cluster_id)
            raise KafkaOpsError(f"the lock of cluster {cluster_id} changed while breaking it: {current.holder} "
                                f"(token {current.token}) no longer holds it, "
                                f"{latest.holder if latest and latest.holder else 'nobody'} does; nothing was "
                                f"broken. Check 'kafkaops lock show {cluster_id}' before breaking it again")
        self._log_lock(cluster_id, "broken", None, previous=current.holder, token=current.token + 1, by=by,
                       reason=reason)
        if current.dag_id and current.run_id:
            self.append_event(current.dag_id, current.run_id, "note",
                              {"text": f"lock on cluster {cluster_id} broken by {by}: {reason}", "lock": "broken"})
        return current

    def lock_history(self, cluster_id: str, *, limit: int = 20) -> list[dict[str, Any]]:
        with self._tx() as conn:
            rows = conn.execute(lock_history.select().where(lock_history.c.cluster_id == cluster_id)
                                .order_by(lock_history.c.id.desc()).limit(limit)).mappings().all()
        return [dict(r) for r in rows]

    def _log_lock(self, cluster_id: str, action: str, holder: str | None, *, previous: str | None = None,
                  token: int | None = None, by: str | None = None, reason: str | None = None) -> None:
        with self._tx() as conn:
            conn.execute(lock_history.insert().values(cluster_id=cluster_id, ts=time.time(), action=action,
                                                      holder=holder, previous_holder=previous, token=token,
                                                      by=by or holder, reason=reason))

    def _bind_token(self, dag_id: str, run_id: str, cluster_id: str, token: int) -> None:
        self.update_operation(dag_id, run_id, cluster_id=cluster_id, lock_token=token)

    # -- throttle ledger ---------------------------------------------------------------------------------

    def throttle_ledger(self, cluster_id: str) -> dict[str, list[str]]:
        with self._tx() as conn:
            ledger = conn.execute(sa.select(throttle_ledger.c.ledger)
                                  .where(throttle_ledger.c.cluster_id == cluster_id)).scalar()
        return dict(ledger or {})

    def save_throttle_ledger(self, cluster_id: str, ledger: Mapping[str, list[str]]) -> None:
        value = {str(b): list(keys) for b, keys in ledger.items() if keys}
        with self._tx() as conn:
            if not conn.execute(throttle_ledger.update().where(throttle_ledger.c.cluster_id == cluster_id)
                                .values(ledger=value, updated_at=time.time())).rowcount:
                conn.execute(_insert_ignore(self, throttle_ledger, {"cluster_id": cluster_id, "ledger": value,
                                                                    "updated_at": time.time()}, "cluster_id"))

    # -- capacity history --------------------------------------------------------------------------------

    def append_capacity_point(self, cluster_id: str, taken_at: float, point: Mapping[str, Any],
                              run_id: str | None = None) -> None:
        with self._tx() as conn:
            conn.execute(capacity_history.insert().values(cluster_id=cluster_id, taken_at=taken_at, run_id=run_id,
                                                          point=_jsonable(point)))

    def capacity_points(self, cluster_id: str) -> list[dict[str, Any]]:
        with self._tx() as conn:
            rows = conn.execute(sa.select(capacity_history.c.point).where(capacity_history.c.cluster_id == cluster_id)
                                .order_by(capacity_history.c.taken_at, capacity_history.c.id)).scalars().all()
        return [dict(r) for r in rows]

    # -- artifacts ---------------------------------------------------------------------------------------

    def put_artifact(self, path: str, body: bytes, content_type: str | None = None) -> str:
        path = _artifact_path(path)
        digest = hashlib.sha256(body).hexdigest()
        with self._tx() as conn:
            conn.execute(_insert_ignore(self, blobs, {"sha256": digest, "body": body}, "sha256"))
            values = {"sha256": digest, "content_type": content_type or _content_type(path), "size": len(body),
                      "created_at": time.time()}
            if not conn.execute(artifacts.update().where(artifacts.c.path == path).values(**values)).rowcount:
                conn.execute(_insert_ignore(self, artifacts, {"path": path, **values}, "path"))
        return path

    def put_tree(self, prefix: str, folder: str | Path) -> list[str]:
        """Every file under ``folder`` as ``prefix/<relative path>``; returns the artifact paths."""
        root = Path(folder)
        return [self.put_artifact(f"{prefix.rstrip('/')}/{p.relative_to(root).as_posix()}", p.read_bytes())
                for p in sorted(root.rglob("*")) if p.is_file()]

    def artifact(self, path: str) -> Artifact | None:
        with self._tx() as conn:
            row = conn.execute(sa.select(artifacts.c.path, artifacts.c.content_type, artifacts.c.created_at,
                                         blobs.c.body).join(blobs, blobs.c.sha256 == artifacts.c.sha256)
                               .where(artifacts.c.path == _artifact_path(path))).mappings().first()
        return None if row is None else Artifact(row["path"], row["content_type"], bytes(row["body"]),
                                                 row["created_at"])

    def artifact_paths(self, prefix: str = "") -> list[str]:
        with self._tx() as conn:
            # autoescape: a '_' or '%' in the prefix is itself, not a LIKE wildcard
            return list(conn.execute(sa.select(artifacts.c.path)
                                     .where(artifacts.c.path.startswith(prefix, autoescape=True))
                                     .order_by(artifacts.c.path)).scalars())


# -- opening ----------------------------------------------------------------------------------------------

_engines: dict[str, Engine] = {}
_engines_lock = threading.Lock()


def _engine(url: sa.URL) -> Engine:
    key = url.render_as_string(hide_password=False)
    with _engines_lock:
        engine = _engines.get(key)
        if engine is None:
            if url.get_backend_name() == "sqlite":
                if url.database and url.database != ":memory:":
                    Path(url.database).parent.mkdir(parents=True, exist_ok=True)
                engine = sa.create_engine(url, poolclass=NullPool, connect_args={"timeout": 30})
                sa.event.listen(engine, "connect", _sqlite_pragmas)
            else:
                # NullPool: task processes are short-lived and forked; no connection outlives its use
                engine = sa.create_engine(url, poolclass=NullPool, connect_args=_connect_args(url))
            _engines[key] = engine
    return engine


def _connect_args(url: sa.URL) -> dict[str, Any]:
    return {"connect_timeout": 10} if url.get_backend_name() == "postgresql" else {}


def _sqlite_busy(err: BaseException) -> bool:
    return isinstance(err, sqlite3.OperationalError) and (getattr(err, "sqlite_errorcode", 0) & 0xFF) == sqlite3.SQLITE_BUSY


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    """WAL, a 30 s busy timeout, NORMAL sync. Switching a new file to WAL takes its write lock from
    inside a read, where SQLite returns SQLITE_BUSY at once instead of calling the busy handler (two
    processes opening one new store together hit it), so that one statement is retried here."""
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA busy_timeout=30000")
    for attempt in tenacity.Retrying(retry=tenacity.retry_if_exception(_sqlite_busy),
                                     wait=tenacity.wait_random_exponential(multiplier=0.02, max=0.5),
                                     stop=tenacity.stop_after_delay(30), reraise=True):
        with attempt:
            cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.close()


def default_url() -> str:
    """``$KAFKAOPS_STORE_URL``, else the embedded SQLite file ``$AIRFLOW_HOME/kafkaops.db``
    (``~/airflow`` when AIRFLOW_HOME is unset, as Airflow itself does)."""
    if os.environ.get("KAFKAOPS_STORE_URL"):
        return os.environ["KAFKAOPS_STORE_URL"]
    home = Path(os.environ.get("AIRFLOW_HOME") or Path.home() / "airflow")
    return f"sqlite:///{home / 'kafkaops.db'}"


_prepared: dict[str, Store] = {}
_current: Store | None = None


def open_store(url: str | sa.URL | None = None, *, source: str | None = None, upgrade: bool = True) -> Store:
    """The store at ``url`` (default :func:`default_url`), reachable and at this kafkaops' schema.
    Raises :class:`StoreUnavailable` (naming ``source`` and the host) or :class:`StoreSchemaError`."""
    try:
        target = sa.make_url(url or default_url())
    except sa.exc.ArgumentError as err:
        raise StoreError(f"{source or 'the kafkaops store'}: the store URL is not a database URL ({err}); "
                         "use e.g. postgresql://user@host:5432/kafkaops or sqlite:////path/kafkaops.db") from err
    key = target.render_as_string(hide_password=False)
    store = _prepared.get(key)
    if store is None:
        try:
            store = Store(target, source=source or "kafkaops store").prepare(upgrade=upgrade)
        except sa.exc.NoSuchModuleError as err:
            raise StoreError(f"{_where(target, source or 'kafkaops store')}: no SQLAlchemy driver for "
                             f"{target.drivername} ({err}); install it (Postgres: the postgres provider)") from err
        _prepared[key] = store
    return store


def use(store: Store | None) -> Store | None:
    """Make ``store`` this process' store (what :func:`current` returns); None resets to the default."""
    global _current
    _current = store
    return store


def current() -> Store:
    """The store this process uses: the one :func:`use` set (the Airflow layer sets it from the
    ``kafkaops_store`` connection at task start), else the default one."""
    return _current if _current is not None else open_store()


# -- helpers ----------------------------------------------------------------------------------------------

def _insert_ignore(store: Store, table: sa.Table, values: Mapping[str, Any], key: str) -> Any:
    if store.backend == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert
        return pg_insert(table).values(**values).on_conflict_do_nothing(index_elements=[key])
    from sqlalchemy.dialects.sqlite import insert as sqlite_insert
    return sqlite_insert(table).values(**values).on_conflict_do_nothing(index_elements=[key])


def _revision(conn: Connection) -> str | None:
    if not sa.inspect(conn).has_table(VERSION_TABLE):
        return None
    return conn.execute(sa.text(f"SELECT version_num FROM {VERSION_TABLE}")).scalar()


_SCHEMA_LOCK = 0x6B61666B  # Postgres advisory lock key ("kafk") held while the schema is upgraded


def _lock_run(conn: Connection, dag_id: str, run_id: str) -> None:
    """Serialize appends to one run's trail until ``conn``'s transaction ends."""
    if conn.dialect.name == "postgresql":
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(hashtextextended(:key, 0))"),
                     {"key": f"kafkaops_events/{dag_id}/{run_id}"})
    elif conn.dialect.name == "sqlite":
        conn.exec_driver_sql("BEGIN IMMEDIATE")


def event_hash(prev_hash: str, dag_id: str, run_id: str, event: StoredEvent) -> str:
    """SHA-256 over the previous event's hash and this event's content (its run, time, kind, task, try and data
    as canonical JSON): change any of them, or the order, and the hashes after it no longer match."""
    body = json.dumps({"dag_id": dag_id, "run_id": run_id, "ts": event.ts, "kind": event.kind,
                       "task_id": event.task_id, "try_number": event.try_number, "data": event.data},
                      sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=True)
    return hashlib.sha256(f"{prev_hash}\n{body}".encode()).hexdigest()


@dataclass(frozen=True)
class TrailCheck:
    """What :meth:`Store.verify_events` found of a run's trail: ``events`` in all, ``unchained`` of them from
    before the chain, and the first event that does not match (its position from 1, its id, what is wrong)."""

    dag_id: str
    run_id: str
    events: int
    unchained: int
    broken_at: int | None = None
    broken_id: int | None = None
    problem: str | None = None

    @property
    def whole(self) -> bool:
        return self.broken_at is None

    @property
    def text(self) -> str:
        head = f"run {self.run_id} of DAG {self.dag_id}: {self.events} event(s)"
        old = f", {self.unchained} from before the chain (not checked)" if self.unchained else ""
        if self.whole:
            return f"{head}{old}: the trail is whole"
        return (f"{head}{old}: the trail is NOT whole from event {self.broken_at} (id {self.broken_id}): "
                f"{self.problem}; it was changed outside kafkaops: compare with the database's backups and logs")


def check_trail(dag_id: str, run_id: str, rows: Sequence[Mapping[Any, Any]]) -> TrailCheck:
    """The :class:`TrailCheck` of a run's event rows in id order (pure)."""
    prev, unchained = "", 0
    for n, row in enumerate(rows, start=1):
        if row["hash"] is None and row["prev_hash"] is None:
            if prev:  # an unchained event after chained ones: inserted by hand
                return TrailCheck(dag_id, run_id, len(rows), unchained, n, row["id"],
                                  "an event without a hash follows chained ones")
            unchained += 1
            continue
        event = StoredEvent(row["ts"], row["kind"], row["data"], row["task_id"], row["try_number"])
        if row["prev_hash"] != prev:
            return TrailCheck(dag_id, run_id, len(rows), unchained, n, row["id"],
                              "it does not follow the event before it (one was deleted, inserted or reordered)")
        if event_hash(prev, dag_id, run_id, event) != row["hash"]:
            return TrailCheck(dag_id, run_id, len(rows), unchained, n, row["id"],
                              "its content does not match its hash (it was edited)")
        prev = row["hash"]
    return TrailCheck(dag_id, run_id, len(rows), unchained)


def _lock_schema(conn: Connection) -> None:
    """Take the schema upgrade lock until ``conn``'s transaction ends; a concurrent upgrader waits."""
    if conn.dialect.name == "postgresql":
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": _SCHEMA_LOCK})
    elif conn.dialect.name == "sqlite":
        # the write lock now (pysqlite would begin only at the first INSERT); the DDL that follows is
        # then in this transaction too, so a failed upgrade leaves no half-made schema behind
        conn.exec_driver_sql("BEGIN IMMEDIATE")


def _lease(row: Mapping[Any, Any]) -> Lease:
    return Lease(row["cluster_id"], row["holder"], row["dag_id"], row["run_id"], row["token"], row["acquired_at"],
                 row["lease_until"])


def _ended(run_ended: RunEnded | None, lease: Lease) -> bool:
    if lease.dag_id is None or lease.run_id is None:
        return False
    if lease.dag_id == CLI_DAG_ID:
        return cli_run_ended(lease.run_id)
    if run_ended is None:
        return False
    try:
        return bool(run_ended(lease.dag_id, lease.run_id))
    except Exception as err:  # unknown is not ended: a live holder is never taken over on a guess
        log.warning("cannot tell whether %s has ended (%s); treating it as alive", lease.holder, err)
        return False


def _busy_message(cluster_id: str, lease: Lease, ended: bool) -> str:
    return (f"cluster {cluster_id} is busy: run {lease.holder} holds it since {_utc(lease.acquired_at)} (token "
            f"{lease.token}, lease until {_utc(lease.lease_until)}); wait for that run to finish (its teardown "
            f"releases the lock), or if it is dead: kafkaops lock break {cluster_id} --reason '...'")


def _utc(ts: float | None) -> str:
    return "?" if ts is None else time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ts))


def _jsonable(data: Mapping[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(dict(data), default=str))


def _artifact_path(path: str) -> str:
    clean = "/".join(part for part in str(path).split("/") if part not in ("", ".", ".."))
    if not clean:
        raise StoreError(f"artifact path {path!r} is empty")
    return clean


_TYPES = {".html": "text/html; charset=utf-8", ".json": "application/json", ".css": "text/css",
          ".js": "text/javascript", ".png": "image/png", ".svg": "image/svg+xml", ".log": "text/plain; charset=utf-8",
          ".txt": "text/plain; charset=utf-8", ".woff": "font/woff", ".woff2": "font/woff2", ".ico": "image/x-icon"}


def _content_type(path: str) -> str:
    return _TYPES.get(Path(path).suffix.lower(), "application/octet-stream")


# -- CLI holders ------------------------------------------------------------------------------------------
# `kafkaops execute` holds the lock as dag "cli" and run "<user>@<host>:<pid>:<start>"; such a run has
# ended when its process is gone from this host (another host's CLI run ends by its lease or a break).

CLI_DAG_ID = "cli"


def cli_run_id() -> str:
    user = os.environ.get("USER") or str(os.getuid())
    return f"{user}@{socket.gethostname()}:{os.getpid()}:{int(time.time())}"


def cli_run_ended(run_id: str) -> bool:
    try:
        host_part, pid, _ = run_id.rsplit(":", 2)
        host = host_part.split("@", 1)[1]
    except (ValueError, IndexError):
        return False
    if host != socket.gethostname():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except (PermissionError, ValueError):
        return False
    return False
