"""Orchestration overhead of a scale-out on Airflow as operators deploy it (issue 14).

    .venv/bin/python -m benchmarks.bench_orchestration [--mb 40] [--throttle-mb 20] [--no-results]

Starts the deployment of kafkaops.testing.deployment (PostgreSQL, Redis, api-server, scheduler,
dag-processor, triggerer, one Celery worker, the installed wheel) and a 3-broker cluster with one
topic of ``--mb`` MB (6 partitions, RF 3), triggers ``kafka_scale_out`` through the REST API
(not a dry run, one broker added; the approval answered at once by the
approver through the human-in-the-loop API, as four eyes wants) and reads the run back: its wall time from Airflow,
the time data was moving from the operation record (each batch from its submit to the moment the
next step saw it done), and each task's time. Overhead = wall time - data moving; target <= 30 s.
The breakdown says where the rest goes: provisioning the broker, the three GX gates, the other
steps, and the gaps between tasks (scheduling, queueing through Celery, deferral round trips).
"""
from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.results import publish
from kafkaops.cli import datagen
from kafkaops.platform import state, store
from kafkaops.platform.kafka import connection, topics
from kafkaops.platform.paths import JARS
from kafkaops.reassign import records as reassign_records
from kafkaops.testing import deployment, jvm
from kafkaops.testing.clusters import TEST_BROKER_CONFIG, temporary_cluster

ROOT = Path(__file__).resolve().parents[1]
DAG = "kafka_scale_out"


def seconds(iso: str | None) -> float | None:
    return dt.datetime.fromisoformat(iso).timestamp() if iso else None


def breakdown(d: deployment.Deployment, st: store.Store, run_id: str) -> dict[str, Any]:
    """Wall time, data moving, and where the rest went, for one finished run."""
    path = f"/dags/{DAG}/dagRuns/{run_id}"
    run = d.api("GET", path)
    tis = d.api("GET", f"{path}/taskInstances", params={"limit": 100})["task_instances"]
    wall = seconds(run["end_date"]) - seconds(run["start_date"])
    record = reassign_records.summarize(state.AuditLog(DAG, run_id, store=st).events())
    moving = sum((b.get("ended_at") or b["ts"]) - b["ts"] for b in record["batches"])
    spans = {t["task_id"]: (seconds(t["start_date"]), seconds(t["end_date"])) for t in tis
             if t["start_date"] and t["end_date"]}
    took = {task: end - start for task, (start, end) in spans.items()}
    # From Celery's queue to the task's process reporting it started (its last try or resumption).
    queued = {t["task_id"]: seconds(t["start_date"]) - seconds(t["queued_when"]) for t in tis
              if t.get("queued_when") and t["start_date"] and seconds(t["start_date"]) >= seconds(t["queued_when"])}
    # The gates' steps from the record: the plan gate runs inside the plan task
    gates = sum(st.get("seconds") or 0.0 for st in record["steps"] if st["name"].endswith("_gate"))
    busy = []  # the union of the tasks' spans: whatever is outside it is a gap between tasks
    for start, end in sorted(spans.values()):
        if busy and start <= busy[-1][1]:
            busy[-1][1] = max(busy[-1][1], end)
        else:
            busy.append([start, end])
    in_tasks = sum(end - start for start, end in busy)
    return {"wall": wall, "moving": moving, "overhead": wall - moving, "provision": took.get("provision", 0.0),
            "gates": gates, "execute_batches": took.get("execute_batches", 0.0), "gaps": wall - in_tasks,
            "batches": len(record["batches"]), "outcome": record["outcome"], "tasks": took, "queued": queued,
            "steps": {st["name"]: st["seconds"] for st in record["steps"] if st.get("seconds")}}


def approve_when_asked(d: deployment.Deployment, run_id: str) -> bool:
    """Approve the run's plan as ``approver`` through the human-in-the-loop API once the approval waits for an
    answer; whether it did."""
    path = f"/dags/{DAG}/dagRuns/{run_id}/taskInstances/approval"
    if d.api("GET", path).get("state") not in ("awaiting_input", "deferred"):
        return False
    d.api("PATCH", f"{path}/-1/hitlDetails", user="approver", json={"chosen_options": ["Approve"], "params_input": {}})
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=40, help="MB of records in the topic (default 40)")
    parser.add_argument("--throttle-mb", type=float, default=20.0, help="the run's throttle in MB/s (default 20)")
    parser.add_argument("--no-results", action="store_true", help="print only; do not append to RESULTS.md")
    parser.add_argument("--logs", type=Path, help="keep each component's log in this folder")
    args = parser.parse_args()

    jvm.use_lean_jvms()  # the brokers lean, as the tests' (kafkaops.testing.jvm): its figures were measured so
    with temporary_cluster("kafkaops-bench-orch-", brokers=3, extra_config=TEST_BROKER_CONFIG) as spec:
        cache = spec.base_dir / "worker-cache"
        cache.mkdir()
        spec.save(cache / "local-cluster.json")
        with connection.connect(spec.bootstrap) as conn:
            topics.create_topic(conn, "orders", 6, 3)
        datagen.produce({"bootstrap.servers": spec.bootstrap}, "orders",
                        datagen.DatagenSpec(records=args.mb * 1000, keys=2000, skew="zipf", record_bytes=1000, seed=7))
        with deployment.deployment(checkout=ROOT, kafka_bootstrap=spec.bootstrap, worker_cache=cache, jars=JARS,
                                   dag_ids={DAG}, logs=args.logs) as d:
            st = store.open_store(d.databases["kafkaops"])
            d.api("PATCH", f"/dags/{DAG}", json={"is_paused": False})
            began = time.monotonic()
            run_id = d.api("POST", f"/dags/{DAG}/dagRuns", json={"logical_date": None, "conf": {
                "dry_run": False, "topics": ["orders"], "throttle_mb_per_s": args.throttle_mb}})["dag_run_id"]
            answered = False
            while d.api("GET", f"/dags/{DAG}/dagRuns/{run_id}")["state"] not in ("success", "failed"):
                if time.monotonic() - began > 1200:
                    raise SystemExit(f"{DAG} run {run_id} not finished after 20 min")
                if not answered:  # four eyes (on in the deployment): a second user approves, as soon as asked
                    answered = approve_when_asked(d, run_id)
                time.sleep(1)
            b = breakdown(d, st, run_id)
            started_in = d.started_in

    verdict = "met" if b["overhead"] <= 30 and b["outcome"] == "success" else "MISSED"
    other = b["wall"] - b["gaps"] - b["provision"] - b["gates"] - b["execute_batches"]
    lines = [
        f"One kafka_scale_out (+1 broker, {args.mb} MB in 6 partitions x RF 3, throttle {args.throttle_mb:g} MB/s, "
        f"approved at once by a second user: four eyes) on the production-like deployment (Postgres, Redis, CeleryExecutor, api-server, scheduler, "
        f"dag-processor, triggerer, 1 worker; installed wheel; up in {started_in:.0f} s), 2 cores; "
        f"outcome {b['outcome']}.",
        "",
        "| figure | seconds |",
        "|---|---|",
        f"| wall time of the run (Airflow's start to end) | {b['wall']:.1f} |",
        f"| reference: data moving ({b['batches']} batches, submit to seen done) | {b['moving']:.1f} |",
        f"| **orchestration overhead = wall - moving (target <= 30 s)** | **{b['overhead']:.1f} ({verdict})** |",
        f"| of which: provisioning the broker (Ansible, JVM start, registration) | {b['provision']:.1f} |",
        f"| of which: the three GX gates (their steps: snapshot, validation, Data Docs into the store) | {b['gates']:.1f} |",
        f"| of which: gaps between tasks (scheduling, Celery queueing, deferral round trips) | {b['gaps']:.1f} |",
        f"| of which: execute_batches beyond the data moving | {b['execute_batches'] - b['moving']:.1f} |",
        f"| of which: the other steps | {other:.1f} |",
        "",
        "Task times (s): " + ", ".join(f"{k} {v:.1f}" for k, v in sorted(b["tasks"].items(), key=lambda kv: -kv[1])),
        "",
        "Steps of the record (s): " + ", ".join(f"{k} {v:.1f}" for k, v in sorted(b["steps"].items(),
                                                                                key=lambda kv: -kv[1])),
        "",
        "Queued to started (s): " + ", ".join(f"{k} {v:.1f}" for k, v in sorted(b["queued"].items(),
                                                                                key=lambda kv: -kv[1])),
    ]
    publish("Orchestration overhead of a scale-out (deployment)", lines, save=not args.no_results)
    return 0 if b["outcome"] == "success" else 1


if __name__ == "__main__":
    sys.exit(main())
