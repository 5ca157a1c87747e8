"""Faults of the servers every component shares (issue 36), on the deployment (kafkaops/testing/deployment.py):
PostgreSQL, which holds Airflow's metadata and the kafkaops store, restarted while a run waits for its approval
and again (killed) while a trigger polls a batch; Redis, Celery's broker, killed and started again while a task
waits in its queue for a worker.

Each run is a rebalance of a small topic of its own whose replicas all sit on two brokers, so it has moves to
make, slowly (a low throttle) where a trigger must be polling when the fault comes. Each ends the way a run
without the fault does: the run succeeds, its record says so, its trail is whole and has every step's events,
the topic holds the same records as before, no throttle is left and the cluster's lock is free.
"""
from __future__ import annotations

import hashlib
import time
from collections import Counter
from collections.abc import Iterator, Sequence

import pytest

from kafkaops.cli import datagen
from kafkaops.platform import store
from kafkaops.platform.kafka import connection, metadata, records, topics
from kafkaops.testing import deployment as harness
from tests.conftest import wait_for
from tests.deployment.conftest import SpecCluster
from tests.deployment.runs import run_path, task_states, wait_for_run, wait_for_task
from tests.deployment.test_deployment import approve, assert_no_throttle, brokers, record, submitted_twice, trigger

pytestmark = [pytest.mark.deployment, pytest.mark.slow, pytest.mark.integration, pytest.mark.timeout(1200)]

DAG = "kafka_reassign"
WAITING = {"awaiting_input", "deferred"}
#: The steps a rebalance records, each started and ended with success, in a run without a fault.
REBALANCE_STEPS = {"preflight_gate", "plan", "plan_gate", "approval", "set_throttles", "execute_batches", "verify",
                   "remove_throttles", "elect_leaders", "post_move_gate", "stop_drained"}


@pytest.fixture(scope="module")
def kafkaops_store(deployed: harness.Deployment) -> store.Store:
    return store.open_store(deployed.databases["kafkaops"])


@pytest.fixture
def own_topic(request: pytest.FixtureRequest, deployment_cluster: SpecCluster) -> Iterator[str]:
    """The name of this test's topic (``faults.<test>``), deleted afterwards: the package's later tests plan over
    the cluster's topics and should not move it."""
    topic = f"faults.{request.node.name.removeprefix('test_')[:40]}"
    yield topic
    with deployment_cluster.connect() as conn:
        if topic in metadata.topic_names(conn):
            topics.delete_topics(conn, [topic])


def lopsided_topic(cluster: SpecCluster, topic: str, records_n: int, record_bytes: int) -> str:
    """``topic``: 6 partitions whose two replicas sit on the cluster's two lowest brokers, filled with ``records_n``
    records; the digest of its records."""
    from confluent_kafka.admin import NewTopic

    first, second = brokers(cluster)[:2]
    assignment = [[first, second] if p % 2 else [second, first] for p in range(6)]
    with cluster.connect() as conn:
        future = conn.admin.create_topics([NewTopic(topic, len(assignment), replica_assignment=assignment)],
                                          request_timeout=conn.timeout_s)[topic]
        connection.wait_for(future, conn, f"the creation of {topic}")
        wait_for(lambda: topic in metadata.topic_names(conn), timeout=30, what=f"{topic} in the metadata")
    datagen.produce(cluster.config, topic, datagen.DatagenSpec(records=records_n, keys=100, skew="uniform",
                                                               record_bytes=record_bytes, seed=36))
    return digest(cluster, topic)


def digest(cluster: SpecCluster, topic: str) -> str:
    """How many records ``topic`` holds and a hash of every one (partition, offset, key, value)."""
    read = records.read_topic(cluster.config, topic)
    h = hashlib.sha256()
    for r in sorted(read, key=lambda r: (r.partition, r.offset)):
        h.update(f"{r.partition}/{r.offset}/".encode() + (r.key or b"") + b"/" + (r.value or b"") + b"\n")
    return f"{len(read)} records, sha256 {h.hexdigest()[:16]}"


def assert_whole(d: harness.Deployment, cluster: SpecCluster, kafkaops_store: store.Store, run: str, topic: str,
                 before: str) -> None:
    """What every fault scenario ends with: the run's record says success and has every step, each ended in
    success; its trail is whole; the topic holds the records it held; no throttle is left; the lock is free."""
    rec = record(d, DAG, run)
    assert rec["outcome"] == "success", f"the record of {run} says {rec['outcome']}: {rec.get('outcome_reason')}"
    steps = {s["name"]: s["status"] for s in rec["steps"]}
    assert set(steps) == REBALANCE_STEPS and set(steps.values()) == {"success"}, \
        f"the record of {run} does not have every step of a rebalance, each a success: {steps}"
    events = kafkaops_store.events(DAG, run)
    kinds = Counter(e.kind for e in events)
    assert (kinds["started"], kinds["approval"], kinds["outcome"], kinds["plan"]) == (1, 1, 1, 1), \
        f"the trail of {run} should have one start, approval, plan and outcome: {dict(kinds)}"
    assert {g["gate"] for g in rec["gates"]} >= {"preflight", "plan", "post_move"} and \
        all(g["ok"] for g in rec["gates"]), rec["gates"]
    ended = Counter((e.data.get("name"), e.data.get("status")) for e in events if e.kind == "step")
    missing = sorted(name for name in REBALANCE_STEPS if not ended[(name, "started")] or not ended[(name, "success")])
    assert not missing, f"the trail of {run} lacks the start or the success of steps {missing}: {sorted(ended)}"
    trail = kafkaops_store.verify_events(DAG, run)
    assert trail.whole, trail.text
    assert not submitted_twice(events), f"moves resubmitted: {submitted_twice(events)}"
    assert digest(cluster, topic) == before, f"{topic} changed: {before} before the run"
    assert_no_throttle(cluster)
    op = kafkaops_store.operation(DAG, run)
    assert op is not None and op["cluster_id"], op
    lease = kafkaops_store.lease(op["cluster_id"])
    assert lease is not None and lease.free, f"the lock of cluster {op['cluster_id']} is still held: {lease}"


def wait_for_trigger(d: harness.Deployment, run: str, task_id: str, timeout: float = 120) -> None:
    """Until a triggerer runs the trigger ``task_id`` of ``run`` deferred to (it polls the batch's moves)."""
    def polled() -> bool:
        ti = d.api("GET", f"{run_path(DAG, run)}/taskInstances/{task_id}")
        return ti["state"] in WAITING and (ti.get("trigger") or {}).get("triggerer_id") is not None

    wait_for(polled, timeout=timeout, what=f"a triggerer running the trigger of {task_id} in {run}", interval=1.0)


def rebalance(d: harness.Deployment, topic: str, throttle_mb_per_s: float) -> str:
    return trigger(d, DAG, {"operation": "rebalance", "dry_run": False, "topics": [topic], "approval": "manual",
                            "throttle_mb_per_s": throttle_mb_per_s})


def fail_run(d: harness.Deployment, run: str) -> None:
    """End a run a failed scenario left going: it would hold the cluster's lock for the package's later tests."""
    if d.api("GET", run_path(DAG, run))["state"] not in ("success", "failed"):
        d.api("PATCH", run_path(DAG, run), json={"state": "failed"})


def restarted(restarts: Sequence[harness.Restart]) -> str:
    return ", ".join(f"{r.component} (exit {r.exit_code})" for r in restarts) or "none"


# -- PostgreSQL ----------------------------------------------------------------------------------------------

def test_postgres_restarted_while_the_approval_waits_and_while_a_trigger_polls_the_batch(
        deployed: harness.Deployment, deployment_cluster: SpecCluster, kafkaops_store: store.Store,
        own_topic: str) -> None:
    """A clean restart (``pg_ctl stop -m fast``) while the approval waits for its answer (Airflow 3.3's
    human-in-the-loop: the task is ``awaiting_input`` in the metadata database, no trigger), then the postmaster
    killed (SIGKILL; crash recovery at the start) while the batch's trigger polls the moves in the triggerer; each
    time the server stays down 5 s. Airflow's scheduler, triggerer and dag-processor exit on the lost database
    (Airflow 3.3.2): they are started again as compose's restart policy does (reported); the run goes on where it
    was, the approval asked once, the batch waited for by the trigger a new triggerer runs."""
    topic = own_topic
    before = lopsided_topic(deployment_cluster, topic, records_n=6000, record_bytes=512)
    run = rebalance(deployed, topic, throttle_mb_per_s=0.05)
    began = time.monotonic()
    try:
        with deployed.supervised() as restarts:
            asked = wait_for_task(deployed, DAG, run, "approval", WAITING)
            down_fast = deployed.restart_postgres("fast", down_s=5)
            deployed.wait_until_healthy(restarting=True)
            assert task_states(deployed, DAG, run)["approval"] == asked, "the approval's question changed"
            approve(deployed, DAG, run)
            wait_for_task(deployed, DAG, run, "execute_batches", {"deferred"}, poll_s=0.5)
            wait_for_trigger(deployed, run, "execute_batches")
            down_kill = deployed.restart_postgres("kill", down_s=5)
            deployed.wait_until_healthy(restarting=True)
            wait_for_run(deployed, DAG, run)
    except BaseException:
        fail_run(deployed, run)
        raise
    states = task_states(deployed, DAG, run)
    print(f"\nPostgreSQL down {down_fast:.1f} s (fast) and {down_kill:.1f} s (killed); components started again: "
          f"{restarted(restarts)}; the run took {time.monotonic() - began:.0f} s; tries: "
          f"{ {task: tries for task, (_, tries) in states.items()} }")
    assert states["approval"][1] == 1, f"the approval was asked again: {states}"
    assert_whole(deployed, deployment_cluster, kafkaops_store, run, topic, before)
    assert all(c.alive() for c in deployed.components.values() if c.name != "migrate")


# -- Redis ---------------------------------------------------------------------------------------------------

def test_redis_killed_with_a_task_queued_runs_the_task_once(
        deployed: harness.Deployment, deployment_cluster: SpecCluster, kafkaops_store: store.Store,
        own_topic: str) -> None:
    """The worker is stopped while the approval waits; the approval's answer queues its task (the message in
    Redis), then Redis is killed and started again on its append-only file, then the worker starts: the task runs
    once (one try, one answer recorded) and the run goes on."""
    topic, broker = own_topic, deployed.redis
    assert broker is not None, "the deployment has no Redis of its own to restart"
    before = lopsided_topic(deployment_cluster, topic, records_n=2000, record_bytes=256)
    run = rebalance(deployed, topic, throttle_mb_per_s=10.0)
    try:
        wait_for_task(deployed, DAG, run, "approval", WAITING)
        deployed.stop("worker")
        approve(deployed, DAG, run)
        wait_for_task(deployed, DAG, run, "approval", {"queued"}, timeout=120)
        queued = wait_for(broker.queued, timeout=60, what="the approval's message in Celery's queue")
        down = deployed.restart_redis("kill", down_s=3)
        assert broker.queued() == queued, f"Redis lost queued messages in its restart: {broker.queued()} of {queued} left"
        deployed.start("worker")
        deployed.wait_for_worker()
        wait_for_run(deployed, DAG, run)
    except BaseException:
        if not deployed.components["worker"].alive():
            deployed.start("worker")
        fail_run(deployed, run)
        raise
    print(f"\nRedis down {down:.1f} s with {queued} message(s) queued")
    states = task_states(deployed, DAG, run)
    assert states["approval"] == ("success", 1), f"the approval ran more than once: {states}"
    answers = [e for e in kafkaops_store.events(DAG, run) if e.task_id == "approval" and e.kind == "approval"]
    assert len(answers) == 1, f"the approval's answer was recorded {len(answers)} times: {answers}"
    assert answers[0].data.get("by") == "approver", answers[0].data
    assert_whole(deployed, deployment_cluster, kafkaops_store, run, topic, before)
