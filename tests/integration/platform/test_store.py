"""The kafkaops store on both backends, a SQLite file and a real PostgreSQL (``store_url``):
operations and events, the throttle ledger, capacity history, artifacts, the cluster lock (also
raced by separate processes and taken over from a ``kill -9``-ed holder), and the databases it
refuses to use."""
from __future__ import annotations

import logging
import multiprocessing
import os
import re
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from kafkaops.errors import KafkaOpsError
from kafkaops.platform import migrations, provision
from kafkaops.platform import store as store_
from kafkaops.platform.store import ClusterBusy, LockLost, Store, StoreError, StoreSchemaError, StoreUnavailable

pytestmark = pytest.mark.integration

DAG = "kafkaops_scale_out"
CLUSTER = "c1"
CONTENDERS = 8


def holder(run_id: str) -> str:
    return store_.holder_of(DAG, run_id)


def notes(store: Store, run_id: str, dag_id: str = DAG) -> list[dict[str, Any]]:
    return [dict(e.data) for e in store.events(dag_id, run_id) if e.kind == "note"]


def begin(store: Store, run_id: str, **acquire_args: Any) -> store_.Lease:
    """What a DAG's begin task does: record the run, then take the cluster."""
    store.start_operation(DAG, run_id, kind="scale_out", triggered_by="alice", params={})
    return store.acquire(CLUSTER, DAG, run_id, **acquire_args)


def blob_count(store: Store) -> int:
    with store.engine.connect() as conn:
        return conn.execute(sa.select(sa.func.count()).select_from(store_.blobs)).scalar_one()


def migrated_to(url: str, revision: str) -> None:
    with Store(url).engine.begin() as conn:
        migrations.upgrade(conn, revision)


def execute(url: str, *statements: str) -> None:
    with Store(url).engine.begin() as conn:
        for statement in statements:
            conn.execute(sa.text(statement))


# -- operations and events --------------------------------------------------------------------------------

def test_operation_and_events_round_trip(store: Store) -> None:
    store.start_operation(DAG, "r1", kind="scale_out", triggered_by="alice", params={"brokers": 2, "topics": ["a"]},
                          at=100.0)
    store.update_operation(DAG, "r1", cluster_id=CLUSTER, state="finished", outcome="success", reason="done",
                           ended_at=200.0)
    op = store.operation(DAG, "r1")
    assert op is not None
    assert {k: op[k] for k in ("kind", "cluster_id", "triggered_by", "params", "state", "outcome", "reason",
                               "started_at", "ended_at")} == {
        "kind": "scale_out", "cluster_id": CLUSTER, "triggered_by": "alice", "params": {"brokers": 2, "topics": ["a"]},
        "state": "finished", "outcome": "success", "reason": "done", "started_at": 100.0, "ended_at": 200.0}
    assert store.operation(DAG, "no-such-run") is None
    with pytest.raises(StoreError, match=r"\['params'\] cannot be set"):
        store.update_operation(DAG, "r1", params={})

    # appended out of timestamp order, interleaved with another run's, over two tries of a task
    written = [("step", "plan", 1, 30.0), ("note", "move", 1, 10.0), ("step", "move", 2, 20.0)]
    for i, (kind, task_id, try_number, ts) in enumerate(written):
        store.append_event(DAG, "r1", kind, {"i": i, "path": Path("/x")}, task_id=task_id, try_number=try_number,
                           ts=ts)
        store.append_event(DAG, "r2", "step", {"i": i})
    got = store.events(DAG, "r1")
    assert [(e.kind, e.task_id, e.try_number, e.ts, e.data["i"]) for e in got] == [
        (kind, task_id, try_number, ts, i) for i, (kind, task_id, try_number, ts) in enumerate(written)]
    assert got[0].data["path"] == "/x"  # stored as JSON: what JSON cannot hold becomes its string
    assert [e.data["i"] for e in store.events(DAG, "r2")] == [0, 1, 2]
    assert store.events(DAG, "no-such-run") == []


def test_list_operations_newest_first_and_filtered(store: Store) -> None:
    for run_id, dag_id, at in (("a", DAG, 10.0), ("b", "other_dag", 30.0), ("c", DAG, 20.0)):
        store.start_operation(dag_id, run_id, kind="k", triggered_by="t", params={}, at=at)
    assert [op["run_id"] for op in store.list_operations()] == ["b", "c", "a"]
    assert [op["run_id"] for op in store.list_operations(DAG)] == ["c", "a"]
    assert [op["run_id"] for op in store.list_operations(dag_ids=["other_dag"])] == ["b"]
    assert store.list_operations(dag_ids=[]) == []
    assert [op["run_id"] for op in store.list_operations(limit=1)] == ["b"]


def test_starting_a_run_again_clears_its_outcome(store: Store) -> None:
    store.start_operation(DAG, "r1", kind="scale_out", triggered_by="alice", params={"n": 1}, at=100.0)
    store.append_event(DAG, "r1", "step", {"try": 1})
    store.update_operation(DAG, "r1", state="finished", outcome="failed", reason="broker 3 down", ended_at=150.0)
    store.start_operation(DAG, "r1", kind="scale_out", triggered_by="bob", params={"n": 2}, at=300.0)
    op = store.operation(DAG, "r1")
    assert op is not None
    assert (op["state"], op["outcome"], op["reason"], op["ended_at"]) == ("running", None, None, None)
    assert (op["started_at"], op["triggered_by"], op["params"]) == (300.0, "bob", {"n": 2})
    assert len(store.list_operations(DAG)) == 1
    assert [e.data for e in store.events(DAG, "r1")] == [{"try": 1}]  # the trail is append-only


# -- throttle ledger, capacity history ----------------------------------------------------------------------

def test_throttle_ledger_save_read_overwrite_empty(store: Store) -> None:
    assert store.throttle_ledger(CLUSTER) == {}
    store.save_throttle_ledger(CLUSTER, {1: ["leader.replication.throttled.rate"], "2": []})
    store.save_throttle_ledger("c2", {"5": ["follower.replication.throttled.rate"]})
    assert store.throttle_ledger(CLUSTER) == {"1": ["leader.replication.throttled.rate"]}
    store.save_throttle_ledger(CLUSTER, {"3": ["a", "b"]})
    assert store.throttle_ledger(CLUSTER) == {"3": ["a", "b"]}
    store.save_throttle_ledger(CLUSTER, {})
    assert store.throttle_ledger(CLUSTER) == {}
    assert store.throttle_ledger("c2") == {"5": ["follower.replication.throttled.rate"]}


def test_capacity_points_in_time_order(store: Store) -> None:
    for taken_at, n in ((30.0, 3), (10.0, 1), (20.0, 2), (20.0, 22)):
        store.append_capacity_point(CLUSTER, taken_at, {"n": n, "taken_at": taken_at}, run_id=f"r{n}")
    store.append_capacity_point("c2", 15.0, {"n": 99})
    assert [p["n"] for p in store.capacity_points(CLUSTER)] == [1, 2, 22, 3]  # equal times: as appended
    assert store.capacity_points("c2") == [{"n": 99}]
    assert store.capacity_points("c3") == []


# -- artifacts ----------------------------------------------------------------------------------------------

def test_artifacts_put_get_content_type_and_one_blob_per_body(store: Store) -> None:
    page = b"<html>report</html>"
    assert store.put_artifact("runs/r1/report.html", page) == "runs/r1/report.html"
    got = store.artifact("runs/r1/report.html")
    assert got is not None
    assert (got.path, got.body, got.content_type) == ("runs/r1/report.html", page, "text/html; charset=utf-8")
    assert store.artifact("runs/r1/missing.html") is None

    store.put_artifact("runs/r2/report.html", page)  # the same body again: one blob
    store.put_artifact("runs/r1/data.bin", bytes(range(256)) * 4096)
    store.put_artifact("runs/r1/spark.out", b"log", content_type="text/plain; charset=utf-8")
    assert blob_count(store) == 3
    assert store.artifact("runs/r2/report.html").body == page  # type: ignore[union-attr]
    assert store.artifact("runs/r1/data.bin").body == bytes(range(256)) * 4096  # type: ignore[union-attr]
    assert store.artifact("runs/r1/data.bin").content_type == "application/octet-stream"  # type: ignore[union-attr]
    assert store.artifact("runs/r1/spark.out").content_type == "text/plain; charset=utf-8"  # type: ignore[union-attr]

    store.put_artifact("runs/r1/report.html", b"<html>v2</html>")  # overwrite
    assert store.artifact("runs/r1/report.html").body == b"<html>v2</html>"  # type: ignore[union-attr]
    assert store.artifact("runs/r2/report.html").body == page  # type: ignore[union-attr]


def test_artifact_tree_and_prefixes(store: Store, tmp_path: Path) -> None:
    site = tmp_path / "site"
    (site / "static" / "css").mkdir(parents=True)
    (site / "index.html").write_text("<html/>")
    (site / "static" / "css" / "style.css").write_text("body{}")
    (site / "static" / "app.js").write_text("1;")
    paths = store.put_tree("docs/run_1/", site)
    assert paths == ["docs/run_1/index.html", "docs/run_1/static/app.js", "docs/run_1/static/css/style.css"]
    assert store.artifact("docs/run_1/static/css/style.css").content_type == "text/css"  # type: ignore[union-attr]
    store.put_artifact("docs/runX1/index.html", b"other run")
    store.put_artifact("docs/run%1/index.html", b"another run")
    assert store.artifact_paths("docs/run_1/") == paths  # '_' and '%' are no wildcards
    assert store.artifact_paths("docs/run%") == ["docs/run%1/index.html"]
    assert len(store.artifact_paths()) == 5


def test_artifact_paths_cannot_climb_out(store: Store) -> None:
    assert store.put_artifact("../../etc/passwd", b"x") == "etc/passwd"
    assert store.put_artifact("/a/./b//../c.txt", b"y") == "a/b/c.txt"
    assert store.artifact("../etc/passwd").body == b"x"  # type: ignore[union-attr]
    assert store.artifact_paths() == ["a/b/c.txt", "etc/passwd"]
    with pytest.raises(StoreError, match=r"artifact path '\.\./' is empty"):
        store.put_artifact("../", b"z")


# -- the cluster lock ---------------------------------------------------------------------------------------

def test_acquire_is_idempotent_for_its_holder(store: Store) -> None:
    lease = begin(store, "A")
    assert (lease.holder, lease.dag_id, lease.run_id, lease.token, lease.free) == (holder("A"), DAG, "A", 1, False)
    assert store.acquire(CLUSTER, DAG, "A") == lease  # a retried begin keeps its token
    op = store.operation(DAG, "A")
    assert (op["cluster_id"], op["lock_token"]) == (CLUSTER, 1)  # type: ignore[index]
    assert [h["action"] for h in store.lock_history(CLUSTER)] == ["acquired"]
    assert store.check_fence(CLUSTER, DAG, "A") == 1  # the token begin bound to the run
    store.update_operation(DAG, "A", cluster_id=None, lock_token=None)  # as if a try died before binding it
    assert store.acquire(CLUSTER, DAG, "A").token == 1
    assert store.check_fence(CLUSTER, DAG, "A") == 1  # the retry bound it
    assert store.acquire("c2", DAG, "B").token == 1  # another cluster, another lock


def test_busy_for_another_run_names_holder_and_break_command(store: Store) -> None:
    begin(store, "A")
    for run_ended in (None, lambda dag_id, run_id: False):
        with pytest.raises(ClusterBusy) as busy:
            begin(store, "B", run_ended=run_ended)
        assert holder("A") in str(busy.value)
        assert f"kafkaops lock break {CLUSTER}" in str(busy.value)
    assert store.lease(CLUSTER).holder == holder("A")  # type: ignore[union-attr]
    assert [h["action"] for h in store.lock_history(CLUSTER)] == ["acquired"]


def test_release_only_by_the_holder(store: Store) -> None:
    first = begin(store, "A")
    assert store.release(CLUSTER, DAG, "B") is False
    assert store.release("c2", DAG, "A") is False
    assert store.lease(CLUSTER).holder == holder("A")  # type: ignore[union-attr]
    assert store.release(CLUSTER, DAG, "A") is True
    assert store.release(CLUSTER, DAG, "A") is False
    assert store.lease(CLUSTER).free  # type: ignore[union-attr]
    with pytest.raises(LockLost, match="nobody holds it now"):
        store.check_fence(CLUSTER, DAG, "A", first.token)
    second = begin(store, "B")
    assert second.token == first.token + 1
    history = store.lock_history(CLUSTER)
    assert [(h["action"], h["holder"], h["previous_holder"]) for h in history] == [
        ("acquired", holder("B"), None), ("released", None, holder("A")), ("acquired", holder("A"), None)]


def test_takeover_when_the_holder_run_has_ended(store: Store) -> None:
    old = begin(store, "A")
    asked: list[tuple[str, str]] = []

    def run_ended(dag_id: str, run_id: str) -> bool:
        asked.append((dag_id, run_id))
        return True

    new = begin(store, "B", run_ended=run_ended)
    assert asked == [(DAG, "A")]
    assert (new.holder, new.token) == (holder("B"), old.token + 1)
    assert store.operation(DAG, "B")["lock_token"] == new.token  # type: ignore[index]
    lost, taken = notes(store, "A"), notes(store, "B")
    assert [n["lock"] for n in lost] == ["lost"] and [n["lock"] for n in taken] == ["taken_over"]
    assert holder("A") in lost[0]["text"] and holder("B") in lost[0]["text"]
    last = store.lock_history(CLUSTER)[0]
    assert (last["action"], last["holder"], last["previous_holder"], last["token"], last["reason"]) == (
        "taken_over", holder("B"), holder("A"), new.token, "its run has ended")
    with pytest.raises(LockLost) as lost_err:
        store.check_fence(CLUSTER, DAG, "A", old.token)
    assert f"{holder('B')} (token {new.token}) holds it now" in str(lost_err.value)
    assert store.check_fence(CLUSTER, DAG, "B", new.token) == new.token


@pytest.mark.parametrize("answer", ["alive", "unknown", "raises"])
def test_no_takeover_unless_the_holder_run_has_surely_ended(store: Store, answer: str) -> None:
    def run_ended(dag_id: str, run_id: str) -> bool | None:
        if answer == "raises":
            raise ConnectionError("Airflow's API did not answer")
        return False if answer == "alive" else None

    old = begin(store, "A")
    with pytest.raises(ClusterBusy, match=re.escape(holder("A"))):
        begin(store, "B", run_ended=run_ended)
    assert store.lease(CLUSTER) == old
    assert notes(store, "A") == [] and notes(store, "B") == []


def test_takeover_when_the_lease_ran_out(store: Store) -> None:
    begin(store, "A", now=1000.0, lease_s=10.0)
    with pytest.raises(ClusterBusy):
        begin(store, "B", now=1009.0)
    new = begin(store, "B", now=1011.0, lease_s=60.0)
    assert (new.holder, new.token, new.acquired_at, new.lease_until) == (holder("B"), 2, 1011.0, 1071.0)
    last = store.lock_history(CLUSTER)[0]
    assert last["action"] == "taken_over" and last["reason"].startswith("its lease ran out at 1970-01-01 00:16:50")
    with pytest.raises(LockLost, match=re.escape(holder("B"))):
        store.check_fence(CLUSTER, DAG, "A")


def test_check_fence_renews_the_lease_and_refuses_strangers(store: Store) -> None:
    lease = begin(store, "A", lease_s=1.0)
    before = time.time()
    assert store.check_fence(CLUSTER, DAG, "A", lease.token, lease_s=600.0) == lease.token
    assert store.lease(CLUSTER).lease_until >= before + 600.0  # type: ignore[union-attr, operator]
    with pytest.raises(LockLost, match="token 7"):
        store.check_fence(CLUSTER, DAG, "A", 7)
    with pytest.raises(LockLost, match=f"run {re.escape(holder('B'))} never took the lock of cluster {CLUSTER}"):
        store.check_fence(CLUSTER, DAG, "B", action="move partitions")


def test_break_lock_needs_a_reason_and_fences_the_holder(store: Store) -> None:
    old = begin(store, "A")
    for reason in ("", "  "):
        with pytest.raises(KafkaOpsError, match=f"kafkaops lock break {CLUSTER} --reason"):
            store.break_lock(CLUSTER, by="bob", reason=reason)
    assert store.lease(CLUSTER) == old
    assert store.break_lock(CLUSTER, by="bob", reason="worker host lost") == old
    lease = store.lease(CLUSTER)
    assert lease is not None and lease.free and lease.token == old.token + 1
    with pytest.raises(LockLost, match="nobody holds it now"):
        store.check_fence(CLUSTER, DAG, "A", old.token)
    last = store.lock_history(CLUSTER)[0]
    assert (last["action"], last["previous_holder"], last["by"], last["reason"], last["token"]) == (
        "broken", holder("A"), "bob", "worker host lost", old.token + 1)
    assert notes(store, "A") == [{"text": f"lock on cluster {CLUSTER} broken by bob: worker host lost",
                                  "lock": "broken"}]
    assert store.break_lock(CLUSTER, by="bob", reason="again") is None  # free: nothing to break
    assert begin(store, "B").token == old.token + 2


# -- contention between processes ---------------------------------------------------------------------------

def _contend(url: str, run_id: str, barrier: Any, results: Any) -> None:
    """One contender process: open the store, wait for all the others, then acquire."""
    try:
        store = store_.open_store(url)
        barrier.wait(180)
        results.put((run_id, "won", store.acquire(CLUSTER, DAG, run_id).token))
    except ClusterBusy as err:
        results.put((run_id, "busy", str(err)))
    except BaseException as err:  # noqa: BLE001 - reported to the test, which fails naming it
        results.put((run_id, "error", repr(err)))


def _open(url: str, run_id: str, barrier: Any, results: Any) -> None:
    """One process of a fleet starting on a new store at once: open it, write to it."""
    try:
        barrier.wait(180)
        store = store_.open_store(url)
        store.append_event(DAG, "r", "step", {"by": run_id})
        results.put((run_id, "opened", store.revision()))
    except BaseException as err:  # noqa: BLE001
        results.put((run_id, "error", repr(err)))


def run_at_once(target: Callable[..., None], url: str, n: int = CONTENDERS) -> dict[str, tuple[str, Any]]:
    """``target(url, run_id, barrier, results)`` in ``n`` separate (spawned) processes released
    together by a barrier; what each reported, by run id."""
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(n), ctx.Queue()
    procs = [ctx.Process(target=target, args=(url, f"R{i}", barrier, results), daemon=True) for i in range(n)]
    try:
        for proc in procs:
            proc.start()
        reports = [results.get(timeout=300) for _ in procs]
        for proc in procs:
            proc.join(30)
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.kill()
                proc.join(10)
    return {run_id: (outcome, detail) for run_id, outcome, detail in reports}


@pytest.mark.slow
@pytest.mark.parametrize("lock_row", ["none", "released", "expired"])
def test_exactly_one_of_many_processes_wins_the_lock(store_url: str, lock_row: str) -> None:
    store = store_.open_store(store_url)
    if lock_row == "released":
        begin(store, "before")
        store.release(CLUSTER, DAG, "before")
    elif lock_row == "expired":
        begin(store, "before", now=time.time() - 100, lease_s=10.0)
    token_before = store.lease(CLUSTER).token if lock_row != "none" else 0  # type: ignore[union-attr]

    reports = run_at_once(_contend, store_url)
    assert not [r for r in reports.values() if r[0] == "error"], reports
    winners = [run_id for run_id, (outcome, _) in reports.items() if outcome == "won"]
    assert len(winners) == 1, reports
    assert reports[winners[0]][1] == token_before + 1
    assert store.lease(CLUSTER).holder == holder(winners[0])  # type: ignore[union-attr]
    assert len(reports) == CONTENDERS
    actions = [h["action"] for h in store.lock_history(CLUSTER, limit=100)]
    assert actions.count("acquired") + actions.count("taken_over") == 1 + (lock_row != "none")


@pytest.mark.slow
def test_many_processes_open_a_new_store_at_once(store_url: str) -> None:
    reports = run_at_once(_open, store_url)
    assert set(reports.values()) == {("opened", migrations.head())}, reports
    assert len(store_.open_store(store_url).events(DAG, "r")) == CONTENDERS


def _hold_as_cli(url: str, conn: Any) -> None:
    """A `kafkaops execute` process: take the cluster as a CLI holder, report, and stay."""
    store = store_.open_store(url)
    run_id = store_.cli_run_id()
    conn.send((run_id, store.acquire(CLUSTER, store_.CLI_DAG_ID, run_id).token))
    time.sleep(600)


@pytest.mark.slow
def test_a_killed_cli_holder_is_taken_over(store: Store, store_url: str) -> None:
    ctx = multiprocessing.get_context("spawn")
    ours, theirs = ctx.Pipe()
    proc = ctx.Process(target=_hold_as_cli, args=(store_url, theirs), daemon=True)
    proc.start()
    try:
        assert ours.poll(120), "the CLI holder process reported nothing"
        cli_run, cli_token = ours.recv()
        assert f":{proc.pid}:" in cli_run
        cli_holder = store_.holder_of(store_.CLI_DAG_ID, cli_run)
        with pytest.raises(ClusterBusy, match=re.escape(cli_holder)):
            begin(store, "B", run_ended=lambda dag_id, run_id: True)  # asked about Airflow runs only
        os.kill(proc.pid, signal.SIGKILL)
        proc.join(30)
        assert proc.exitcode == -signal.SIGKILL
    finally:
        if proc.is_alive():
            proc.kill()
            proc.join(10)
    new = begin(store, "B")
    assert (new.holder, new.token) == (holder("B"), cli_token + 1)
    last = store.lock_history(CLUSTER)[0]
    assert (last["action"], last["previous_holder"], last["reason"]) == ("taken_over", cli_holder, "its run has ended")
    assert [n["lock"] for n in notes(store, cli_run, store_.CLI_DAG_ID)] == ["lost"]
    with pytest.raises(LockLost, match=re.escape(f"{holder('B')} (token {new.token}) holds it now")):
        store.check_fence(CLUSTER, store_.CLI_DAG_ID, cli_run, cli_token)


# -- the audit trail: append-only, chained by hash -------------------------------------------------------------

def _trail(store: Store, run_id: str = "audited") -> None:
    store.start_operation(DAG, run_id, kind="scale_out", triggered_by="alice", params={})
    for n, kind in enumerate(("started", "step", "plan", "approval", "outcome")):
        store.append_event(DAG, run_id, kind, {"n": n, "who": "alice", "bytes": 2**40 + n, "share": 0.1 * n},
                           task_id=f"t{n}", try_number=1)


def test_the_trail_refuses_update_and_delete_and_verifies_whole(store: Store, store_url: str) -> None:
    _trail(store)
    check = store.verify_events(DAG, "audited")
    assert check.whole and (check.events, check.unchained) == (5, 0), check.text
    assert "5 event(s): the trail is whole" in check.text
    for statement in ("UPDATE kafkaops_events SET data = '{\"approved\": true}' WHERE kind = 'approval'",
                      "DELETE FROM kafkaops_events WHERE kind = 'step'"):
        with pytest.raises(sa.exc.DatabaseError, match="kafkaops_events is append-only"):
            execute(store_url, statement)
    assert store.verify_events(DAG, "audited").whole and len(store.events(DAG, "audited")) == 5


def test_tasks_appending_to_one_run_at_once_keep_one_chain(store_url: str) -> None:
    import threading

    Store(store_url).prepare().start_operation(DAG, "busy", kind="scale_out", triggered_by="alice", params={})

    def write(n: int) -> None:
        mine = Store(store_url)  # each task process has a store of its own
        for k in range(8):
            mine.append_event(DAG, "busy", "note", {"writer": n, "k": k}, task_id=f"t{n}")

    writers = [threading.Thread(target=write, args=(n,)) for n in range(4)]
    for t in writers:
        t.start()
    for t in writers:
        t.join(timeout=60)
    check = Store(store_url).verify_events(DAG, "busy")
    assert check.whole and check.events == 32, check.text


def _as_owner(store_url: str, *statements: str) -> None:
    """What only the database's owner can do: take the guard off, change the trail, put the guard back."""
    if store_url.startswith("postgresql"):
        execute(store_url, "ALTER TABLE kafkaops_events DISABLE TRIGGER USER", *statements,
                "ALTER TABLE kafkaops_events ENABLE TRIGGER USER")
    else:
        execute(store_url, "DROP TRIGGER kafkaops_events_no_update", "DROP TRIGGER kafkaops_events_no_delete",
                *statements)


@pytest.mark.parametrize("edit, problem", [
    ("UPDATE kafkaops_events SET data = '{\"n\": 3, \"who\": \"mallory\", \"bytes\": 1099511627779, "
     "\"share\": 0.30000000000000004}' WHERE kind = 'approval'", "its content does not match its hash (it was edited)"),
    ("DELETE FROM kafkaops_events WHERE kind = 'step'", "it does not follow the event before it"),
    ("UPDATE kafkaops_events SET ts = ts + 1 WHERE kind = 'plan'", "its content does not match its hash"),
])
def test_an_edit_made_as_the_owner_is_detected(store: Store, store_url: str, edit: str, problem: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    from kafkaops.cli.main import main

    _trail(store)
    _as_owner(store_url, edit)
    check = store.verify_events(DAG, "audited")
    assert not check.whole and problem in (check.problem or ""), check.text
    assert main(["records", "verify", "audited", "--store", store_url]) == 1
    out = capsys.readouterr().out
    assert "the trail is NOT whole from event" in out and problem in out
    _trail(store, "another")
    assert main(["records", "verify", "another", "--store", store_url]) == 0
    assert "the trail is whole" in capsys.readouterr().out


def test_events_from_before_the_chain_are_counted_not_checked(store_url: str) -> None:
    migrated_to(store_url, "0002")
    old = Store(store_url)
    old.start_operation(DAG, "old", kind="scale_out", triggered_by="alice", params={})
    execute(store_url, "INSERT INTO kafkaops_events (dag_id, run_id, ts, kind, data) "
                       f"VALUES ('{DAG}', 'old', 1.5, 'started', '{{}}')")
    store = store_.open_store(store_url)
    store.append_event(DAG, "old", "outcome", {"outcome": "success"})
    check = store.verify_events(DAG, "old")
    assert check.whole and (check.events, check.unchained) == (2, 1), check.text
    assert "1 from before the chain (not checked)" in check.text


# -- the schema, and databases the store refuses ------------------------------------------------------------

def test_an_older_schema_is_upgraded_on_open_or_refused(store_url: str, caplog: pytest.LogCaptureFixture) -> None:
    migrated_to(store_url, "0001")
    Store(store_url).start_operation(DAG, "r1", kind="scale_out", triggered_by="alice", params={})
    with pytest.raises(StoreSchemaError) as refused:
        Store(store_url).prepare(upgrade=False)
    assert "schema revision 0001" in str(refused.value) and migrations.head() in str(refused.value)
    assert f"run '{store_.UPGRADE_COMMAND}'" in str(refused.value)
    assert store_.UPGRADE_COMMAND == "python -m kafkaops store upgrade"

    caplog.set_level(logging.INFO, logger=store_.__name__)
    store = store_.open_store(store_url)
    upgrades = [r for r in caplog.records if r.name == store_.__name__ and "upgrading" in r.getMessage()]
    assert len(upgrades) == 1 and upgrades[0].levelno == logging.INFO
    assert f"from 0001 to {migrations.head()}" in upgrades[0].getMessage()
    assert migrations.head() == "0003" and store.revision() == "0003"
    assert store.operation(DAG, "r1")["kind"] == "scale_out"  # type: ignore[index]  # data kept
    store.save_throttle_ledger(CLUSTER, {"1": ["k"]})  # a table of 0002
    assert Store(store_url).prepare(upgrade=False).revision() == "0003"


def test_a_newer_schema_is_refused(store_url: str) -> None:
    Store(store_url).prepare()
    execute(store_url, f"UPDATE {store_.VERSION_TABLE} SET version_num = '9999'")
    for opening in (lambda: Store(store_url).prepare(), lambda: store_.open_store(store_url)):
        with pytest.raises(StoreSchemaError, match="schema revision 9999, which this kafkaops does not know"):
            opening()


def test_airflow_metadata_database_is_refused(store_url: str) -> None:
    execute(store_url, "CREATE TABLE dag_run (id INTEGER PRIMARY KEY)",
            "CREATE TABLE task_instance (id INTEGER PRIMARY KEY)")
    with pytest.raises(StoreError, match="is Airflow's own metadata database"):
        store_.open_store(store_url)
    assert Store(store_url).revision() is None  # nothing created in it


def test_unreachable_store_is_named_quickly_without_its_password(store_url: str, tmp_path: Path) -> None:
    if sa.make_url(store_url).get_backend_name() == "postgresql":
        port = provision.free_ports(1)[0]  # nothing listens there
        unreachable = {f"127.0.0.1:{port}": f"postgresql+psycopg2://u:secretpw@127.0.0.1:{port}/x",
                       "localhost:5432": "postgresql+psycopg2://u:secretpw@/x?host=/nonexistent"}
    else:
        (tmp_path / "plain").write_text("a file, not a folder")
        unreachable = {str(tmp_path): f"sqlite:///{tmp_path}",  # a folder, not a database file
                       str(tmp_path / "plain"): f"sqlite:///{tmp_path / 'plain' / 'kafkaops.db'}"}
    for where, url in unreachable.items():
        started = time.monotonic()
        with pytest.raises(StoreUnavailable) as unavailable:
            store_.open_store(url, source="connection kafkaops_store")
        assert time.monotonic() - started < 5
        message = str(unavailable.value)
        assert where in message and "connection kafkaops_store" in message, message
        assert "secretpw" not in message and "secretpw" not in repr(unavailable.value)


def test_not_a_database_url_is_an_error(store_url: str) -> None:
    backend = sa.make_url(store_url).get_backend_name()
    with pytest.raises(StoreError, match="the store URL is not a database URL"):
        store_.open_store("kafkaops at the usual place")
    with pytest.raises(StoreError, match=f"no SQLAlchemy driver for {backend}\\+nosuchdriver"):
        store_.open_store(f"{backend}+nosuchdriver://u:pw@127.0.0.1:1/x")
