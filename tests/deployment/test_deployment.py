"""Airflow as operators deploy it (issue 14): the scenarios, through Airflow's public REST API.

One deployment for the module (kafkaops/testing/deployment.py): PostgreSQL (Airflow's metadata and the kafkaops store),
Redis, the api-server, scheduler, dag-processor, triggerer and a Celery worker as separate processes
running the installed wheel, and a real 3-broker cluster. Every call is made with a token from the
auth manager, as the user an operator would be: ``operator`` triggers, ``approver`` approves.
"""
from __future__ import annotations

import json
import time
from collections import Counter
from typing import Any
from urllib.parse import quote

import httpx
import pytest
import sqlalchemy as sa

from kafkaops.platform import provision, state, store
from kafkaops.platform.kafka import metadata, records, topics
from kafkaops.rekey.backfill import LINEAGE_HEADER, parse_lineage
from kafkaops.rekey.records import TailNote
from kafkaops.testing import deployment as harness, postgres
from kafkaops.testing.rehearsal import StandInOperator
from kafkaops.testing.traffic import MigrationTraffic
from tests.deployment.conftest import TOPIC, SpecCluster
from tests.deployment.runs import run_path, task_states, wait_for_run, wait_for_task
from tests.conftest import wait_for
from tests.integration.conftest import throttles_left, wait_for_no_throttles

pytestmark = [pytest.mark.deployment, pytest.mark.slow, pytest.mark.integration, pytest.mark.timeout(2400)]



# -- fixtures ------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def kafkaops_store(deployed: harness.Deployment) -> store.Store:
    return store.open_store(deployed.databases["kafkaops"])


# -- runs ----------------------------------------------------------------------------------------------------

def trigger(d: harness.Deployment, dag_id: str, conf: dict[str, Any], *, user: str = "operator") -> str:
    return d.trigger(dag_id, conf, user=user)


def approve(d: harness.Deployment, dag_id: str, run_id: str, *, user: str = "approver",
            task_id: str = "approval") -> dict[str, Any]:
    """Answer the run's approval (or another question, ``task_id``) through the human-in-the-loop API, as ``user``."""
    return d.approve(dag_id, run_id, task_id=task_id, user=user)


def record(d: harness.Deployment, dag_id: str, run_id: str, *, user: str = "operator") -> dict[str, Any]:
    """The operation record from the api-server's plugin route, as an authenticated user."""
    answer = d.call("GET", f"/kafkaops/records/{dag_id}/{quote(run_id, safe='')}.json", user=user)
    assert answer.status_code == 200, f"the record of {run_id} answered {answer.status_code}: {answer.text[:500]}"
    return answer.json()


def brokers(cluster: SpecCluster) -> list[int]:
    with cluster.connect() as conn:
        return sorted(b.id for b in metadata.describe_cluster(conn)[2])


def assert_no_throttle(cluster: SpecCluster) -> None:
    with cluster.connect() as conn:
        wait_for_no_throttles(conn)
        assert not throttles_left(conn)


def submitted_twice(events: list[store.StoredEvent]) -> dict[str, int]:
    """Partitions submitted in more than one batch event of the run (across every try)."""
    counts = Counter(f"{k[0]}-{k[1]}" for e in events if e.kind == "batch" and e.data.get("status") == "submitted"
                     for k in e.data.get("keys") or [])
    return {k: n for k, n in counts.items() if n > 1}


# -- scenarios -----------------------------------------------------------------------------------------------

def test_the_happy_path_survives_restarts_of_triggerer_scheduler_and_api_server(
        deployed: harness.Deployment, deployment_cluster: SpecCluster, kafkaops_store: store.Store) -> None:
    before = brokers(deployment_cluster)
    run = trigger(deployed, "kafka_scale_out", {"dry_run": False, "topics": [TOPIC], "approval": "manual"})

    # The approval waits in the triggerer (deferred): restart it, then the scheduler and the api-server.
    wait_for_task(deployed, "kafka_scale_out", run, "approval", {"awaiting_input", "deferred"})
    events_before = len(kafkaops_store.events("kafka_scale_out", run))
    for name in ("triggerer", "scheduler", "api-server"):
        deployed.restart(name)
    deployed.wait_until_healthy()
    wait_for_task(deployed, "kafka_scale_out", run, "approval", {"awaiting_input", "deferred"}, timeout=120)

    unauthenticated = httpx.get(f"{deployed.url}/kafkaops/records/kafka_scale_out/{quote(run, safe='')}.json",
                                timeout=30)
    assert unauthenticated.status_code in (401, 403), \
        f"the record is readable without a token: {unauthenticated.status_code}"

    # four eyes (on in this deployment): the question says who may approve; the operator who triggered the run
    # approves it and is refused, recorded, and the question asked again; then the approver's answer stands
    path = f"{run_path('kafka_scale_out', run)}/taskInstances/approval/-1/hitlDetails"
    assert "only another user may approve it" in deployed.api("GET", path)["body"]
    own = approve(deployed, "kafka_scale_out", run, user="operator")
    assert own["responded_by"]["name"] == "operator", own
    refusal = wait_for(lambda: [e for e in kafkaops_store.events("kafka_scale_out", run)
                                if e.kind == "note" and "four eyes" in str(e.data.get("text"))],
                       timeout=120, what="the refusal of the operator's own approval in the record")
    assert "operator triggered this run and approved it" in refusal[0].data["text"], refusal[0].data
    wait_for(lambda: not deployed.api("GET", path)["response_received"], timeout=120,
             what="the approval asked again after the refused self-approval")
    wait_for_task(deployed, "kafka_scale_out", run, "approval", {"awaiting_input", "deferred"}, timeout=120)
    answered = approve(deployed, "kafka_scale_out", run)
    assert answered["responded_by"]["name"] == "approver", answered
    wait_for_run(deployed, "kafka_scale_out", run)

    after = brokers(deployment_cluster)
    assert len(set(after) - set(before)) == 1, f"one broker should have been added: {before} -> {after}"
    rec = record(deployed, "kafka_scale_out", run)
    assert rec["outcome"] == "success", rec["outcome"]
    assert rec["triggered_by"] == "operator", rec["triggered_by"]
    assert rec["approval"] and "approver" in str(rec["approval"]), f"the record does not name the approver: " \
                                                                   f"{rec['approval']}"
    assert rec["plan"] and rec["plan"].get("moves"), f"the record has no plan: {rec['plan']}"
    assert rec["batches"] and rec["throttles_set"] and rec["throttles_removed"], \
        (rec["batches"], rec["throttles_set"], rec["throttles_removed"])
    gates = {g["gate"]: g for g in rec["gates"]}
    assert {"preflight", "plan", "post_move"} <= set(gates), f"gates recorded: {sorted(gates)}"
    for gate in gates.values():
        docs = deployed.call("GET", f"/kafkaops/artifacts/{gate['docs_path']}")
        assert docs.status_code == 200 and docs.text.lstrip().lower().startswith("<!doctype html"), \
            f"the Data Docs of gate {gate['gate']} ({gate['docs_path']}) answered {docs.status_code}"
    steps = [s["name"] for s in rec["steps"]]
    assert {"provision", "execute_batches", "verify", "remove_throttles", "elect_leaders"} <= set(steps), steps
    assert len(kafkaops_store.events("kafka_scale_out", run)) > events_before, "nothing recorded after the restarts"
    assert_no_throttle(deployment_cluster)
    assert all(c.alive() for c in deployed.components.values() if c.name != "migrate")


def test_a_worker_killed_during_execute_batches_is_replaced_and_the_run_resumes(
        deployed: harness.Deployment, deployment_cluster: SpecCluster, kafkaops_store: store.Store) -> None:
    run = trigger(deployed, "kafka_scale_out", {"dry_run": False, "topics": [TOPIC], "approval": "manual",
                                                "throttle_mb_per_s": 1.0})
    wait_for_task(deployed, "kafka_scale_out", run, "approval", {"awaiting_input", "deferred"})
    approve(deployed, "kafka_scale_out", run)  # four eyes: not the operator who triggered it
    wait_for_task(deployed, "kafka_scale_out", run, "execute_batches", {"running"}, poll_s=0.2)
    deployed.kill("worker")
    killed_at = time.monotonic()
    time.sleep(5)
    deployed.start("worker")
    deployed.wait_for_worker()
    wait_for_run(deployed, "kafka_scale_out", run)

    states = task_states(deployed, "kafka_scale_out", run)
    assert states["execute_batches"][1] >= 2, f"execute_batches was not retried after the kill: {states}"
    events = kafkaops_store.events("kafka_scale_out", run)
    assert not submitted_twice(events), f"moves resubmitted after the kill: {submitted_twice(events)}"
    rec = record(deployed, "kafka_scale_out", run)
    assert rec["outcome"] == "success" and rec["batches"], rec["outcome"]
    assert_no_throttle(deployment_cluster)
    print(f"\nthe run ended {time.monotonic() - killed_at:.0f} s after the worker was killed")


def tail_notes(kafkaops_store: store.Store, dag_id: str, run_id: str) -> list[TailNote]:
    """The tail copy's progress notes of the run, oldest first."""
    return state.read_notes([e.data for e in kafkaops_store.events(dag_id, run_id)], TailNote)


def test_a_worker_killed_while_the_tail_copies_is_replaced_and_the_copy_resumes_exactly_once(
        deployed: harness.Deployment, deployment_cluster: SpecCluster, kafkaops_store: store.Store) -> None:
    """A live migration (quiesce=manual) under traffic: the Celery worker is killed while the catch-up task's
    tail copy follows the source (it has reported its lag), a new worker runs the task again, and the copy goes
    on from its committed position: every source record once in the target, in key order, and the consumer
    group reads through the switch with nothing lost, duplicated or out of order. The lag threshold is 0, so
    the tail follows for as long as producers write; they stop once the second try reports, and the tail then
    catches up."""
    dag_id, topic = "kafka_partition_increase", "live.orders"
    with deployment_cluster.connect() as conn:
        topics.create_topic(conn, topic, 3, 3, {"min.insync.replicas": "2"})
    conf = {"dry_run": False, "topic": topic, "mode": "migrate", "new_partition_count": 6, "key_rule": "record_key",
            "quiesce": "manual", "quiet_s": 2, "approval": "manual", "catch_up_lag_records": 0,
            "catch_up_budget_s": 600}
    with MigrationTraffic(deployment_cluster.config, topic, group=f"{topic}.readers", rate_per_s=300) as traffic:
        time.sleep(3)
        with StandInOperator(traffic, dag_id, store=kafkaops_store) as operator:
            run = trigger(deployed, dag_id, conf)
            try:
                wait_for_task(deployed, dag_id, run, "approval", {"awaiting_input", "deferred"})
                approve(deployed, dag_id, run)
                wait_for_task(deployed, dag_id, run, "catch_up", {"running"})
                wait_for(lambda: tail_notes(kafkaops_store, dag_id, run), timeout=180, what="the tail's first report")
                deployed.kill("worker")
                killed = len(tail_notes(kafkaops_store, dag_id, run))
                time.sleep(5)
                deployed.start("worker")
                deployed.wait_for_worker()
                # the scheduler finds the dead task after its heartbeat timeout, then retries it: a later try
                wait_for(lambda: task_states(deployed, dag_id, run)["catch_up"][1] >= 2, timeout=300,
                         what="catch_up's second try")
                wait_for(lambda: len(tail_notes(kafkaops_store, dag_id, run)) > killed, timeout=180,
                         what="the second try's tail reporting")
                traffic.stop_producing()  # the tail can now reach a lag of 0
                wait_for_task(deployed, dag_id, run, "switch", {"awaiting_input", "deferred"})
                wait_for(lambda: operator.switched, timeout=60, what="the stand-in operator's switch")
                approve(deployed, dag_id, run, task_id="switch")
                wait_for_run(deployed, dag_id, run)
            except BaseException:
                # a run left going would hold the cluster's lock for the package's later tests: end it
                deployed.api("PATCH", run_path(dag_id, run), json={"state": "failed"})
                raise
        assert operator.error is None, operator.error
        time.sleep(1)
        report = traffic.finish()
    assert (report.lost, report.duplicated, report.out_of_order) == (0, 0, 0), str(report)
    assert task_states(deployed, dag_id, run)["catch_up"][1] >= 2
    rec = record(deployed, dag_id, run)
    assert rec["outcome"] == "success" and [(g["gate"], g["ok"]) for g in rec["gates"]] == \
        [("preflight", True), ("backfill", True)], rec["outcome"]
    # the copy: each source record once (its lineage), and each key's records in the source's offset order;
    # the target's other records are the producers' own, written after the switch
    source = records.read_topic(deployment_cluster.config, topic)
    copied = [r for r in records.read_topic(deployment_cluster.config, f"{topic}.v2") if r.header(LINEAGE_HEADER)]
    lineages = [parse_lineage(r.header(LINEAGE_HEADER) or b"") for r in copied]
    assert len(lineages) == len(set(lineages)) == len(source) > 0, (len(lineages), len(set(lineages)), len(source))
    by_key: dict[bytes | None, list[tuple[str, int, int]]] = {}
    for r, lineage in zip(copied, lineages):
        by_key.setdefault(r.key, []).append(lineage)
    assert all(seen == sorted(seen) for seen in by_key.values())


def test_a_busy_cluster_refuses_the_second_operation_and_a_failing_gate_fails_cleanly(
        deployed: harness.Deployment, deployment_cluster: SpecCluster, kafkaops_store: store.Store) -> None:
    first = trigger(deployed, "kafka_scale_out", {"dry_run": False, "topics": [TOPIC], "approval": "auto_approve",
                                                  "max_bytes_to_move": 1})
    wait_for_task(deployed, "kafka_scale_out", first, "begin", {"success"})
    second = trigger(deployed, "kafka_partition_increase", {"dry_run": False, "topic": TOPIC,
                                                           "new_partition_count": 12, "mode": "migrate"})
    wait_for_run(deployed, "kafka_partition_increase", second, expect="failed")
    refused = kafkaops_store.operation("kafka_partition_increase", second)
    assert refused and refused["outcome"] == "refused", refused
    refused_record = record(deployed, "kafka_partition_increase", second)
    assert first in str(refused_record), f"the refusal does not name the scale-out {first}: {refused_record}"

    wait_for_run(deployed, "kafka_scale_out", first, expect="failed")
    rec = record(deployed, "kafka_scale_out", first)
    assert rec["outcome"] == "refused", rec["outcome"]  # the plan gate refused it: nothing changed
    plan_gate = [g for g in rec["gates"] if g["gate"] == "plan"]
    assert plan_gate and plan_gate[0]["ok"] is False, \
        f"the plan gate should have failed on max_bytes_to_move=1: {plan_gate}"
    cluster_id = kafkaops_store.operation("kafka_scale_out", first)["cluster_id"]
    assert kafkaops_store.lease(cluster_id).free, kafkaops_store.lease(cluster_id)
    assert_no_throttle(deployment_cluster)
    summary = state.AuditLog("kafka_scale_out", first, store=kafkaops_store).summary()
    assert summary["outcome"] == "refused"


def test_a_component_that_cannot_reach_a_database_or_runs_an_older_kafkaops_does_not_start(
        deployed: harness.Deployment) -> None:
    """What each component runs before it starts (``kafkaops check``) refuses, naming the part at fault."""
    worker = deployed.components["worker"]
    closed = provision.free_ports(1)[0]  # nothing listens there
    metadata = sa.make_url(deployed.databases["airflow"])
    cases = {
        "Airflow metadata database": {"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": metadata.set(
            port=closed, password="s3cret-metadata").render_as_string(hide_password=False)},
        "kafkaops store": {"AIRFLOW_CONN_KAFKAOPS_STORE": json.dumps({
            "conn_type": "postgres", "host": "127.0.0.1", "port": closed, "login": "kafkaops",
            "password": "s3cret-store", "schema": "kafkaops"})},
    }
    for part, env in cases.items():
        done = deployed.run_check(worker, env)
        said = done.stdout + done.stderr
        assert done.returncode != 0 and f"{part}: FAILED" in said, f"{part} unreachable: {said}"
        assert "s3cret" not in said and "Traceback" not in said, said

    # A store whose schema a newer kafkaops wrote: this (older) worker is told to upgrade kafkaops.
    admin_url = sa.make_url(deployed.databases["kafkaops"]).set(database="postgres")
    postgres.execute(admin_url.render_as_string(hide_password=False), 'CREATE DATABASE "kafkaops_newer"')
    newer = sa.make_url(deployed.databases["kafkaops"]).set(database="kafkaops_newer")
    st = store.Store(newer.render_as_string(hide_password=False)).prepare()
    with st.engine.begin() as conn:
        conn.execute(sa.text(f"UPDATE {store.VERSION_TABLE} SET version_num = 'ffff_from_a_newer_kafkaops'"))
    done = deployed.run_check(worker, {"AIRFLOW_CONN_KAFKAOPS_STORE": json.dumps({
        "conn_type": "postgres", "host": newer.host, "port": newer.port, "login": newer.username,
        "schema": "kafkaops_newer"})})
    said = done.stdout + done.stderr
    assert done.returncode != 0 and "kafkaops store: FAILED" in said, said
    assert "ffff_from_a_newer_kafkaops" in said and "upgrade kafkaops on this host" in said, said
    assert deployed.run_check(worker).returncode == 0, "the worker's own settings should pass the check"
