"""``python -m kafkaops records | lock | store`` as an operator runs them: a subprocess against a
SQLite store in a temp dir, seeded through the store's API; their output and exit codes."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from kafkaops.cli import exits
from kafkaops.platform import store as store_
from kafkaops.platform.state import AuditLog

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[3]
DAG, RUN = "kafka_scale_out", "manual__2026-11-22T10:00:00+00:00"
T0 = 1_795_426_812.0  # 2026-11-23 09:40:12 UTC


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str


def kafkaops(*argv: str, store_url: str | None = None) -> Result:
    """``python -m kafkaops ARGV`` from this checkout, the store in $KAFKAOPS_STORE_URL when given."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "plugins"), os.environ.get("PYTHONPATH", "")])}
    env.pop("KAFKAOPS_STORE_URL", None)
    if store_url:
        env["KAFKAOPS_STORE_URL"] = store_url
    done = subprocess.run([sys.executable, "-m", "kafkaops", *argv], capture_output=True, text=True, env=env,
                          timeout=120)
    return Result(done.returncode, done.stdout, done.stderr)


@pytest.fixture
def seeded(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'kafkaops.db'}"
    store = store_.open_store(url)
    store.start_operation(DAG, RUN, kind="scale_out", triggered_by="alice", params={"add_brokers": 1}, at=T0)
    store.acquire("c1", DAG, RUN, now=T0)
    log = AuditLog(DAG, RUN, store=store, task_id="begin", try_number=1)
    for kind, data in [
        ("started", {"operation": "scale_out", "dag_id": DAG, "run_id": RUN, "triggered_by": "alice",
                     "params": {"add_brokers": 1, "topics": ["orders"]}}),
        ("step", {"name": "preflight", "status": "started"}),
        ("step", {"name": "preflight", "status": "success"}),
        ("gate", {"gate": "preflight", "ok": True, "failures": [],
                  "docs_path": "docs/kafka_scale_out/manual__2026-11-22T10_00_00_00_00/preflight/index.html"}),
        ("plan", {"summary": "scale-out: 3 partitions change", "moves": 3, "bytes_to_move": 3 * 2**30}),
        ("approval", {"approved": True, "by": "bob", "mode": "manual"}),
        ("throttle_set", {"brokers": [1, 4], "topics": ["orders"], "rate": 10_000_000}),
        ("batch", {"index": 1, "partitions": 3, "bytes": 5 * 2**20, "status": "submitted", "remaining": 0}),
        ("step", {"name": "execute", "status": "started"}),
        ("step", {"name": "execute", "status": "failed", "error": "broker 4 went offline"}),
        ("outcome", {"outcome": "failed", "reason": "failed steps: execute"}),
    ]:
        log.append(kind, **data)
    store.update_operation(DAG, RUN, state="finished", outcome="failed", ended_at=T0 + 250)
    store.start_operation("kafka_reassign", "manual__2", kind="drain", triggered_by="carol", params={}, at=T0 + 500)
    return url


def test_records_list_is_a_table_of_the_runs_newest_first(seeded: str) -> None:
    result = kafkaops("records", "list", store_url=seeded)
    assert result.code == exits.EXIT_OK and result.err == ""
    header, rule, newest, older = result.out.splitlines()
    assert header.split() == ["DAG", "run", "kind", "cluster", "triggered", "by", "state", "outcome", "started",
                              "ended", "took"]
    assert newest.split()[:7] == ["kafka_reassign", "manual__2", "drain", "-", "carol", "running", "-"]
    assert older.split() == [DAG, RUN, "scale_out", "c1", "alice", "finished", "failed", "2026-11-23", "09:40:12",
                             "UTC", "2026-11-23", "09:44:22", "UTC", "4", "min", "10", "s"]
    only = kafkaops("records", "list", "--dag", DAG, "--limit", "5", "--store", seeded)
    assert only.code == 0 and "kafka_reassign" not in only.out and RUN in only.out


def test_records_show_prints_the_record_as_text_or_json(seeded: str) -> None:
    result = kafkaops("records", "show", DAG, RUN, store_url=seeded)
    assert result.code == exits.EXIT_OK, result.err
    text = result.out
    for expected in ("scale_out on cluster c1: failed (failed steps: execute)",
                     f"DAG {DAG}, run {RUN}, triggered by alice", "add_brokers", "orders",
                     "approval: approved by bob (manual)", "preflight  success", "execute    failed",
                     "broker 4 went offline", "docs/kafka_scale_out/manual__2026-11-22T10_00_00_00_00/preflight/",
                     "plan: scale-out: 3 partitions change", "bytes to copy: 3.0 GiB", "5.0 MiB  unfinished",
                     "10.0 MB/s", "throttles removed: none", "notes: none"):
        assert expected in text, expected
    as_json = json.loads(kafkaops("records", "show", DAG, RUN, "--json", "--store", seeded).out)
    assert as_json["outcome"] == "failed" and as_json["cluster_id"] == "c1"
    assert [s["name"] for s in as_json["steps"]] == ["preflight", "execute"]


def test_records_show_of_an_unknown_run_says_how_to_find_one(seeded: str) -> None:
    result = kafkaops("records", "show", DAG, "manual__nope", store_url=seeded)
    assert result.code == exits.EXIT_BAD_INPUT and result.out == ""
    assert result.err.startswith("kafkaops records: error: no kafkaops record for run manual__nope of DAG "
                                 "kafka_scale_out in the store from $KAFKAOPS_STORE_URL")
    assert result.err.rstrip().endswith(f"python -m kafkaops records list --dag {DAG}")


def test_lock_show_then_break_with_a_reason(seeded: str) -> None:
    shown = kafkaops("lock", "show", "c1", store_url=seeded)
    assert shown.code == 0
    assert shown.out.startswith(f"cluster c1: held by {DAG}/{RUN}, token 1, since 2026-11-23 09:40:12 UTC, lease "
                                "until 2026-11-26 09:40:12 UTC")
    assert "recent lock history, newest first:" in shown.out and "acquired" in shown.out

    broken = kafkaops("lock", "break", "c1", "--reason", "worker lost, run marked failed", store_url=seeded)
    assert broken.code == 0, broken.err
    assert broken.out.startswith(f"broke the lock on cluster c1: {DAG}/{RUN} held it since 2026-11-23 09:40:12 UTC "
                                 "with token 1")
    assert "token 2 fences that run off" in broken.out and "worker lost, run marked failed" in broken.out

    after = kafkaops("lock", "show", "c1", store_url=seeded)
    assert after.out.startswith("cluster c1: free (last token 2)")
    newest = after.out.split("newest first:\n", 1)[1].splitlines()[2]
    assert "broken" in newest and f"{DAG}/{RUN}" in newest and "worker lost, run marked failed" in newest
    by = newest.split()[7]  # at (3 words), action, holder, previous holder, token, by
    assert "@" in by  # user@host of whoever broke it
    note = store_.open_store(seeded).events(DAG, RUN)[-1]
    assert note.kind == "note" and "broken by" in note.data["text"]
    again = kafkaops("lock", "break", "c1", "--reason", "again", store_url=seeded)
    assert again.code == 0 and again.out.startswith("cluster c1 is not locked in the store")


@pytest.mark.parametrize("reason", [None, "", "   "])
def test_lock_break_without_a_reason_is_refused(seeded: str, reason: str | None) -> None:
    argv = ["lock", "break", "c1"] + ([] if reason is None else ["--reason", reason])
    result = kafkaops(*argv, store_url=seeded)
    assert result.code == exits.EXIT_BAD_INPUT and result.out == ""
    assert "--reason" in result.err.splitlines()[-1]
    assert store_.open_store(seeded).lease("c1").holder == f"{DAG}/{RUN}"  # still held


def test_store_show_and_upgrade(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'new' / 'kafkaops.db'}"
    before = kafkaops("store", "show", "--store", url)
    assert before.code == 0 and "does not exist yet" in before.out and not (tmp_path / "new").exists()
    refused = kafkaops("records", "list", "--store", url)
    assert refused.code == exits.EXIT_BAD_INPUT and "python -m kafkaops store upgrade" in refused.err

    upgraded = kafkaops("store", "upgrade", "--store", url)
    head = store_.open_store(url).revision()
    assert upgraded.code == 0 and upgraded.out.strip() == f"store {url}: schema upgraded from none to {head}"
    assert kafkaops("store", "upgrade", "--store", url).out.strip() == f"store {url}: schema already at {head}"
    shown = kafkaops("store", "show", store_url=url)
    assert shown.out.splitlines() == [f"store:    {url} (from $KAFKAOPS_STORE_URL)", "backend:  sqlite",
                                      f"revision: {head}; this kafkaops needs {head}: up to date"]


def test_a_password_in_the_store_url_is_never_printed() -> None:
    url = "postgresql://ops:s3cret-pw@127.0.0.1:1/kafkaops"
    for argv in (["store", "show"], ["records", "list"], ["lock", "show", "c1"]):
        result = kafkaops(*argv, "--store", url)
        assert result.code == exits.EXIT_FAILED, argv
        assert "s3cret" not in result.out + result.err and "127.0.0.1:1" in result.err, argv
        assert "did not answer" in result.err, argv


def test_options_that_cannot_work_are_bad_input() -> None:
    result = kafkaops("records", "list", "--store", "nope://x")
    assert result.code == exits.EXIT_BAD_INPUT and "argument --store: names the database driver 'nope'" in result.err
    result = kafkaops("records", "list", "--limit", "0")
    assert result.code == exits.EXIT_BAD_INPUT and "argument --limit: '0' is not a count" in result.err
