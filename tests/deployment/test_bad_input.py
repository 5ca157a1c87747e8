"""Bad input through the Trigger form's API (issue 36, item 6): payloads a person or a script could send to
``POST /api/v2/dags/{dag_id}/dagRuns`` (wrong types, unknown brokers and topics, empty and duplicate lists,
contradictory modes, oversized and non-UTF-8 text, topic names with path or HTML characters, a partition count
below the current one, a key rule that does not parse, absurd counts, an inventory that is not one), each refused
before any change to the cluster with a message naming the param: Airflow's answer to the trigger (its form's
JSON schema), else the run's record (the begin's refusal) or its failed begin task's log (the params check).

On the package's deployment (tests/deployment/conftest.py: ``deployed``, no Airflow of its own). Every payload
fails in its run's first task, so the runs are triggered at once: the four DAGs' runs go side by side, one DAG's
queue behind each other (max_active_runs=1). Before and after: the cluster's topics, partitions, replica
assignments and dynamic configs, and its lock, which is free at the end. The counts go to benchmarks/RESULTS.md
("Bad input through the form's API") by hand from this test's summary line.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import pytest

from kafkaops.platform import store
from kafkaops.platform.kafka import configs, metadata
from kafkaops.testing import deployment as harness
from tests.deployment.conftest import TOPIC, SpecCluster
from tests.deployment.runs import run_path, task_log_tail, task_states

pytestmark = [pytest.mark.deployment, pytest.mark.slow, pytest.mark.integration, pytest.mark.timeout(1200)]

SCALE_OUT, REASSIGN, INCREASE, REVIEW = ("kafka_scale_out", "kafka_reassign", "kafka_partition_increase",
                                         "kafka_capacity_review")
#: Every payload's run ends within this (its begin fails in seconds; a DAG's runs queue one behind another).
ALL_RUNS_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class Payload:
    """One bad Trigger-form payload: the DAG, its conf, and the param its refusal must name."""

    dag_id: str
    conf: dict[str, Any]
    param: str
    why: str
    also: tuple[str, ...] = field(default=())
    """More words the refusal must hold (the bound, the fix)."""
    by_database: bool = False
    """Airflow's database refuses the conf itself (PostgreSQL takes no lone surrogate in JSON): the trigger is
    answered 422 "Value rejected by database" and no run exists; Airflow's answer names no param."""


def payloads(brokers: list[int]) -> list[Payload]:
    """The payloads: ``brokers`` the cluster's broker ids (for those naming every one, or one it has)."""
    every, first = list(brokers), brokers[0]
    return [
        # kafka_scale_out
        Payload(SCALE_OUT, {"add_brokers": 100_000}, "add_brokers", "absurd count (accepted before issue 36)",
                ("max_add_brokers",)),
        Payload(SCALE_OUT, {"add_brokers": "many"}, "add_brokers", "wrong type"),
        Payload(SCALE_OUT, {"add_brokers": 2, "new_broker_racks": ["a", "b", "c"]}, "new_broker_racks",
                "racks not matching the brokers (accepted before)"),
        Payload(SCALE_OUT, {"inventory": "/etc/passwd"}, "inventory", "not an inventory (accepted before)"),
        Payload(SCALE_OUT, {"inventory": "../../../x.json"}, "inventory", "path traversal (accepted before)"),
        Payload(SCALE_OUT, {"new_broker_ids": [first]}, "new_broker_ids", "a broker the cluster has"),
        Payload(SCALE_OUT, {"new_broker_ids": [40, 40]}, "new_broker_ids", "duplicate list"),
        Payload(SCALE_OUT, {"exclude_brokers": every}, "exclude_brokers", "every broker excluded (accepted before)"),
        Payload(SCALE_OUT, {"topics": ["../../etc/passwd"]}, "topics", "topic name with path characters"),
        Payload(SCALE_OUT, {"throttle_mb_per_s": "fast"}, "throttle_mb_per_s", "wrong type"),
        Payload(SCALE_OUT, {"dry_run": "maybe"}, "dry_run", "wrong type"),
        # kafka_reassign
        Payload(REASSIGN, {"operation": "explode"}, "operation", "unknown mode"),
        Payload(REASSIGN, {"operation": "drain", "drain_brokers": []}, "drain_brokers", "empty list"),
        Payload(REASSIGN, {"operation": "drain", "drain_brokers": [99]}, "drain_brokers", "unknown broker"),
        Payload(REASSIGN, {"operation": "drain", "drain_brokers": [first], "exclude_brokers": [first]},
                "exclude_brokers", "contradictory lists"),
        Payload(REASSIGN, {"operation": "rebalance", "drain_brokers": [first]}, "drain_brokers",
                "contradictory mode"),
        Payload(REASSIGN, {"exclude_brokers": every}, "exclude_brokers", "every broker excluded (accepted before)"),
        Payload(REASSIGN, {"topics": [TOPIC, TOPIC]}, "topics", "duplicate list"),
        Payload(REASSIGN, {"topics": ["no-such-topic"]}, "topics", "unknown topic"),
        Payload(REASSIGN, {"topics": ["<script>alert(1)</script>"]}, "topics", "topic name with HTML characters"),
        Payload(REASSIGN, {"max_moves_total": 0}, "max_moves_total", "below the minimum"),
        Payload(REASSIGN, {"plan_timeout_s": 1_000_000}, "plan_timeout_s", "planning budget beyond the task's"),
        Payload(REASSIGN, {"kafka_conn_id": "k" * 5000}, "kafka_conn_id", "oversized string"),
        Payload(REASSIGN, {"kafka_conn_id": "kafka\udc80default"}, "kafka_conn_id", "non-UTF-8 string",
                by_database=True),
        # kafka_partition_increase
        Payload(INCREASE, {"topic": TOPIC, "new_partition_count": 100_000_000}, "new_partition_count",
                "absurd count (accepted before)", ("max_partition_count",)),
        Payload(INCREASE, {"topic": TOPIC, "new_partition_count": 3}, "new_partition_count",
                "below the current count"),
        Payload(INCREASE, {"topic": "../../etc/passwd"}, "topic", "topic name with path characters"),
        Payload(INCREASE, {"topic": "<img src=x onerror=alert(1)>"}, "topic", "topic name with HTML characters"),
        Payload(INCREASE, {"topic": "no-such-topic"}, "topic", "unknown topic"),
        Payload(INCREASE, {"topic": "t" * 300}, "topic", "oversized topic name"),
        Payload(INCREASE, {"topic": TOPIC, "key_rule": "jsonpath:$$..["}, "key_rule", "key rule that does not parse"),
        Payload(INCREASE, {"topic": TOPIC, "mode": "in_place", "quiesce": "acl"}, "quiesce", "contradictory modes"),
        Payload(INCREASE, {"topic": TOPIC, "target_topic": TOPIC}, "target_topic", "target is the source"),
        Payload(INCREASE, {"topic": TOPIC, "new_partition_count": "twelve"}, "new_partition_count", "wrong type"),
        # kafka_capacity_review
        Payload(REVIEW, {"max_cpu_percent": 150}, "max_cpu_percent", "out of range"),
        Payload(REVIEW, {"target_records_per_s": 1000}, "per_consumer_records_per_s", "half of a pair"),
        Payload(REVIEW, {"prometheus_url": "ftp://prometheus:9090"}, "prometheus_url", "not an http(s) URL"),
        Payload(REVIEW, {"key_skew": True}, "skew_topic", "contradictory: key skew without its topic"),
        Payload(REVIEW, {"skew_topic": "x" * 5000, "key_skew": True}, "skew_topic", "oversized string"),
        Payload(REVIEW, {"topics": "not a list"}, "topics", "wrong type"),
    ]


@dataclass
class Sent:
    payload: Payload
    status: int
    answer: str
    run_id: str | None = None
    refusal: str = ""
    where: str = ""


def cluster_state(cluster: SpecCluster) -> dict[str, Any]:
    """What a change would touch: brokers, topics, each partition's replicas, dynamic topic and broker configs."""
    with cluster.connect() as conn:
        snap = metadata.snapshot(conn, include_internal=True, offsets=False, sizes=False, groups=False)
        topic_names = sorted({p.topic for p in snap.partitions})
        return {"brokers": sorted(b.id for b in snap.brokers),
                "partitions": {f"{p.topic}-{p.partition}": list(p.replicas) for p in snap.partitions},
                "topic_configs": configs.describe_configs(conn, "topic", topic_names),
                "broker_configs": configs.describe_configs(conn, "broker", [b.id for b in snap.brokers]),
                "cluster_id": snap.cluster_id}


def quiet(d: harness.Deployment, dag_ids: set[str], timeout: float = 300.0) -> None:
    """Wait until none of ``dag_ids`` has a queued or running run (another test's)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        active = [r for dag_id in dag_ids for r in d.api("GET", f"/dags/{dag_id}/dagRuns",
                                                         params={"state": ["queued", "running"]})["dag_runs"]]
        if not active:
            return
        time.sleep(2)
    pytest.fail(f"runs still active after {timeout:.0f} s: {active}")


def trigger(d: harness.Deployment, payload: Payload) -> Sent:
    """Trigger ``payload`` as the operator. The body is JSON with every non-ASCII character escaped, as a script
    would send it: a lone surrogate (text that is no UTF-8) travels as ``\\udc80``."""
    answer = d.http.request("POST", f"{d.url}/api/v2/dags/{payload.dag_id}/dagRuns", timeout=60,
                            content=json.dumps({"logical_date": None, "conf": payload.conf}).encode("ascii"),
                            headers={"Authorization": f"Bearer {d.token('operator')}",
                                     "Content-Type": "application/json"})
    run_id = str(answer.json()["dag_run_id"]) if answer.status_code == 200 else None
    return Sent(payload, answer.status_code, answer.text[:3000], run_id)


def refusal_of(d: harness.Deployment, kafkaops_store: store.Store, sent: Sent) -> tuple[str, str]:
    """Where the run's refusal is said, and what it says: the record's reason (the begin refused it), else the
    failed begin task's log (the params check refused it before the record began)."""
    dag_id, run_id = sent.payload.dag_id, str(sent.run_id)
    op = kafkaops_store.operation(dag_id, run_id)
    if op and op.get("reason"):
        return f"record: {op['outcome']}", str(op["reason"])
    states = task_states(d, dag_id, run_id)
    _, tries = states.get("begin", (None, 1))
    return "begin log", task_log_tail(d, dag_id, run_id, "begin", tries)


def test_bad_trigger_payloads_are_refused_before_any_change_naming_the_param(
        deployed: harness.Deployment, deployment_cluster: SpecCluster) -> None:
    dag_ids = {SCALE_OUT, REASSIGN, INCREASE, REVIEW}
    quiet(deployed, dag_ids)
    for dag_id in dag_ids:
        deployed.api("PATCH", f"/dags/{dag_id}", json={"is_paused": False})
    before = cluster_state(deployment_cluster)
    kafkaops_store = store.open_store(deployed.databases["kafkaops"])
    began = time.monotonic()
    sent = [trigger(deployed, p) for p in payloads(before["brokers"])]
    assert len(sent) >= 30
    # every run ends failed, in its first task
    deadline = time.monotonic() + ALL_RUNS_TIMEOUT_S
    pending = [s for s in sent if s.run_id]
    while pending and time.monotonic() < deadline:
        for s in list(pending):
            run = deployed.api("GET", run_path(s.payload.dag_id, str(s.run_id)))
            if run["state"] in ("success", "failed"):
                assert run["state"] == "failed", f"{s.payload} was accepted: its run ended {run['state']}"
                pending.remove(s)
        time.sleep(2)
    assert not pending, f"runs not ended after {ALL_RUNS_TIMEOUT_S:.0f} s: {[s.payload for s in pending]}"
    took = time.monotonic() - began
    problems: dict[int, list[str]] = {}
    for k, s in enumerate(sent):
        found = problems.setdefault(k, [])
        if s.run_id is None:  # Airflow refused the trigger: the form's JSON schema names the param
            s.where, s.refusal = f"API {s.status}", s.answer
            if s.status not in (400, 422):
                found.append(f"the trigger answered {s.status}: {s.answer[:300]}")
            if s.payload.by_database:
                if "Value rejected by database" not in s.answer:
                    found.append(f"expected Airflow's database to refuse it: {s.answer[:300]}")
                continue
        else:
            s.where, s.refusal = refusal_of(deployed, kafkaops_store, s)
            states = task_states(deployed, s.payload.dag_id, s.run_id)
            ran = sorted(t for t, (state, _) in states.items() if state == "success")
            if ran:  # refused in its first task: nothing after it ran
                found.append(f"tasks {ran} succeeded; the run was not refused at its begin")
            if s.payload.dag_id == REVIEW and not s.where.startswith("record"):  # as the operations' refusals
                found.append("the capacity review's refusal is not in its run's record")
        for word in (s.payload.param, *s.payload.also):
            if word not in s.refusal:
                found.append(f"({s.where}) the refusal does not name {word!r}: {s.refusal[-1500:]}")
    after = cluster_state(deployment_cluster)
    assert after == before, "a refused payload changed the cluster"
    lease = kafkaops_store.lease(before["cluster_id"])
    assert lease is None or lease.free, f"the cluster's lock is held after the refusals: {lease}"
    by_dag = {dag_id: sum(1 for s in sent if s.payload.dag_id == dag_id) for dag_id in sorted(dag_ids)}
    refused = sum(1 for found in problems.values() if not found)
    unnamed = sum(1 for k, s in enumerate(sent) if s.payload.by_database and not problems[k])
    at_api = sum(1 for s in sent if s.run_id is None)
    print(f"\n{len(sent)} payloads, {refused} refused before any change ({refused - unnamed} naming the param, "
          f"{unnamed} by Airflow's database without naming it), by DAG {by_dag}; {at_api} at the API, "
          f"{len(sent) - at_api} in the run's begin; all runs ended {took:.0f} s after the first trigger")
    for s in sent:
        text = s.refusal.strip()
        said = text[text.index("refusing"):] if "refusing" in text else text
        print(f"  {s.payload.dag_id:25} {s.payload.why:48} {s.where:16} {said[:220]!r}")
    failed = [f"{sent[k].payload}: {'; '.join(found)}" for k, found in problems.items() if found]
    assert not failed, "\n".join(failed)
