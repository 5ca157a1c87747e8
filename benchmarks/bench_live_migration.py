"""A live migration under traffic (issue 18): kafka_partition_increase with ``quiesce=manual``, 3 -> 12
partitions, while keyed acks=all producers write ``--rate`` records/s and a consumer group reads
through the switch; run for the record key (the direct copy) and a value field spanning source
partitions (``field:customer``: the merged copy).

    .venv/bin/python -m benchmarks.bench_live_migration [--rate 2000] [--warmup-s 20] [--no-results]

Starts a one-broker cluster, an Airflow metadata DB (SQLite, ``dag.test()``; the Spark jobs run as
spark-submit subprocesses on local[*]), then per rule: the traffic harness
(kafkaops.testing.traffic.MigrationTraffic) runs ``--warmup-s`` seconds, the DAG is triggered, and
kafkaops.testing.rehearsal.StandInOperator does what the run's record asks (stop the producers and drain the
consumer at the quiesce, switch both at the switch). Reported per rule, from the consumer's own log:
records sent, lost, duplicated, out of per-key order; the write-unavailable window (the producers' last
ack on the source to their first on the target) beside the window kafkaops recorded from the records'
timestamps; the total migration time and its phases from the operation record. The reference measured
in the same run: the same harness switching with no copy at all (stop, drain, switch to an empty
topic at once), the least window any cut-over has on this machine.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.results import publish
from kafkaops.platform import provision, state
from kafkaops.platform.kafka import connection, topics
from kafkaops.rekey.records import LiveRecord
from kafkaops.testing import dag_runs, jvm
from kafkaops.testing.clusters import TEST_BROKER_CONFIG, temporary_cluster
from kafkaops.testing.rehearsal import StandInOperator
from kafkaops.testing.traffic import MigrationTraffic

ROOT = Path(__file__).resolve().parents[1]

DAG = "kafka_partition_increase"
RULES = ("record_key", "field:customer")


def dag_bag() -> Any:
    """A throw-away AIRFLOW_HOME, its metadata DB migrated, and the checkout's DAGs; the brokers' and the
    Spark jobs' JVMs lean, as the tests' (kafkaops.testing.jvm), as this benchmark has always run them."""
    dag_runs.use_throwaway_home(ROOT)
    jvm.use_lean_jvms()
    dag_runs.migrate_db()
    return dag_runs.load_dagbag(ROOT / "dags")


def phases(record: dict[str, Any]) -> dict[str, float]:
    """Seconds per step of the run, from its record."""
    return {s["name"]: round(s.get("seconds") or 0.0, 1) for s in record["steps"] if s.get("seconds") is not None}


def migrate(bag: Any, spec: provision.ClusterSpec, rule: str, rate: float, warmup_s: float) -> dict[str, Any]:
    topic = f"bench.live.{rule.replace(':', '.')}"
    config = {"bootstrap.servers": spec.bootstrap}
    with connection.connect(config) as conn:
        topics.create_topic(conn, topic, 3, 1)
    with MigrationTraffic(config, topic, group=f"{topic}.readers", rate_per_s=rate) as traffic:
        time.sleep(warmup_s)
        began = time.monotonic()
        with StandInOperator(traffic, DAG) as operator:
            dag_run = dag_runs.run_dag(bag, DAG, topic=topic, key_rule=rule, mode="migrate", new_partition_count=12,
                                      dry_run=False, approval="auto_approve", quiesce="manual",
                                      catch_up_lag_records=int(rate * 5), catch_up_budget_s=120, quiet_s=3,
                                      quiesce_timeout_s=300, switch_timeout_s=300)
        total = time.monotonic() - began
        time.sleep(2)  # traffic on the target after the switch
        report = traffic.finish()
    if operator.error:
        raise operator.error
    record = state.AuditLog.for_run(DAG, dag_run.run_id).summary()
    observed = next((n["switch_observed"] for n in record["notes"] if "switch_observed" in n), {})
    passes = [n["catch_up"] for n in record["notes"] if "catch_up" in n]
    live = LiveRecord.of(record["notes"])
    return {"rule": rule, "outcome": record["outcome"], "report": report, "total_s": total,
            "recorded_window_s": observed.get("write_window_s"), "passes": len(passes),
            "copied": sum(p["written"] for p in passes), "phases": phases(record),
            "window_phases": live.window_phases() if live else ()}


def bare_switch(spec: provision.ClusterSpec, rate: float) -> float:
    """The reference: stop, drain and switch at once to an empty 12-partition topic (no copy, no gate)."""
    config = {"bootstrap.servers": spec.bootstrap}
    with connection.connect(config) as conn:
        topics.create_topic(conn, "bench.bare", 3, 1)
        topics.create_topic(conn, "bench.bare.v2", 12, 1)
    with MigrationTraffic(config, "bench.bare", group="bench.bare.readers", rate_per_s=rate) as traffic:
        time.sleep(5)
        traffic.stop_producing()
        traffic.drain_and_stop_consumer()
        traffic.switch_producers("bench.bare.v2")
        time.sleep(2)
        traffic.finish()
    return traffic.write_window_s or 0.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=2000.0, help="records/s of the producers")
    parser.add_argument("--warmup-s", type=float, default=20.0, help="traffic before the migration starts")
    parser.add_argument("--no-results", action="store_true")
    args = parser.parse_args(argv)
    bag = dag_bag()
    runs = []
    with temporary_cluster("kafkaops-bench-live-", brokers=1, controllers=1,
                           extra_config=TEST_BROKER_CONFIG) as spec:
        os.environ["AIRFLOW_CONN_KAFKA_DEFAULT"] = f'{{"conn_type": "kafka", "extra": {{"bootstrap.servers": ' \
                                                   f'"{spec.bootstrap}"}}}}'
        reference = bare_switch(spec, args.rate)
        for rule in RULES:
            runs.append(migrate(bag, spec, rule, args.rate, args.warmup_s))
            print(runs[-1], flush=True)
    lines = [
        f"kafka_partition_increase quiesce=manual, 3 -> 12 partitions, 1 broker, dag.test() with Spark local[*] "
        f"subprocesses; traffic: 200 keys at {args.rate:,.0f} records/s (acks=all, idempotent), {args.warmup_s:.0f} s "
        "before the trigger, one consumer group reading through the switch; the operator's part played by "
        f"kafkaops.testing.rehearsal.StandInOperator; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores.",
        "Write window: the producers' last ack on the source to their first on the target (harness), and as kafkaops "
        "recorded it from the records' timestamps. Reference (same run): the harness stopping, draining and "
        f"switching at once to an empty topic, no copy and no gate: {reference:.2f} s.",
        "",
        "| rekey | outcome | sent | lost | duplicated | out of order | catch-up passes (records) | write window "
        "(harness / recorded) | vs bare switch | total migration | final pass, gate, cut-over (s) | the recorded window "
        "by phase (s: seen still, final pass, gate and offsets, switch answer, first write) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        rep, ph = r["report"], r["phases"]
        lines.append(
            f"| {r['rule']} | {r['outcome']} | {rep.sent:,} | {rep.lost} | {rep.duplicated} | {rep.out_of_order} | "
            f"{r['passes']} ({r['copied']:,}) | {rep.write_window_s or 0:.1f} s / {r['recorded_window_s'] or 0:.1f} s | "
            f"{(rep.write_window_s or 0) / max(reference, 1e-3):.0f}x | {r['total_s']:.0f} s | "
            f"{ph.get('final_pass', 0)}, {ph.get('verify', 0)}, {ph.get('cutover', 0)} | "
            f"{', '.join(f'{seconds:.1f}' for _, seconds in r['window_phases']) or '-'} |")
    publish("Live migration under traffic", lines, save=not args.no_results)
    return 0 if all(r["report"].ok and r["outcome"] == "success" for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
