"""A live migration under traffic (issue 18): kafka_partition_increase with ``quiesce=manual``, 3 -> 12
partitions, while keyed acks=all producers write ``--rate`` records/s and a consumer group reads
through the switch; run for the record key (the direct copy) and a value field spanning source
partitions (``field:customer``: the merged copy).

    .venv/bin/python -m benchmarks.bench_live_migration [--rate 2000] [--warmup-s 20] [--brokers 1|3]
        [--quiesce manual|acl] [--source-records N] [--rules record_key,field:customer] [--no-results]

Starts a cluster (``--brokers 3``: replication factor 3, ``min.insync.replicas`` 2; ``--quiesce acl``: with an
authorizer, the application's producers a principal of their own that the quiesce denies), an Airflow
metadata DB (SQLite, ``dag.test()``; the Spark jobs run as spark-submit subprocesses on local[*]), then per
rule: ``--source-records`` records already in the source (JSON of 256 bytes with a customer, written
before the traffic), then the traffic harness
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
import json
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.results import publish
from kafkaops.platform import provision, state
from kafkaops.platform import waits
from kafkaops.platform.kafka import connection, topics
from kafkaops.rekey.records import LiveRecord
from kafkaops.testing import clusters, dag_runs, fence, jvm
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


@dataclass(frozen=True)
class Shape:
    """The cluster and the cut-over the runs use: brokers (3: replication factor 3, min.insync 2), the
    quiesce, the records already in the source, and the logins (kafkaops', the application's)."""

    brokers: int
    quiesce: str
    source_records: int
    admin: dict[str, str]
    app: dict[str, str]

    @property
    def replication(self) -> int:
        return min(3, self.brokers)

    @property
    def topic_config(self) -> dict[str, str]:
        return {"min.insync.replicas": "2"} if self.replication >= 3 else {}


def prefill(config: dict[str, str], topic: str, records: int) -> None:
    """``records`` JSON values of 256 bytes with a customer (as the traffic's), keyed over 1,000 keys."""
    from confluent_kafka import Producer

    producer = Producer(connection.client_config({**config, "acks": "all", "enable.idempotence": True,
                                                  "linger.ms": 20, "batch.size": 1_000_000}))
    pad = "x" * 180
    for i in range(records):
        while True:
            try:
                producer.produce(topic, f'{{"customer":"cust-{i % 20:03d}","n":{i},"pad":"{pad}"}}'.encode(),
                                 f"pre-{i % 1000}".encode())
                break
            except BufferError:
                producer.poll(0.05)
    assert waits.close_producer(producer, waits.Deadline(300)) == 0, f"prefilling {topic}: records unsent"


def migrate(bag: Any, shape: Shape, rule: str, rate: float, warmup_s: float) -> dict[str, Any]:
    topic = f"live.bench.{rule.replace(':', '.')}"
    with connection.connect(shape.admin) as conn:
        topics.create_topic(conn, topic, 3, shape.replication, shape.topic_config)
    prefill(shape.app, topic, shape.source_records)
    quiesce = {"quiesce": "acl", "quiesce_principals": f"User:{APP}"} if shape.quiesce == "acl" else \
        {"quiesce": "manual"}
    with MigrationTraffic(shape.app, topic, group=f"{topic}.readers", rate_per_s=rate) as traffic:
        time.sleep(warmup_s)
        began = time.monotonic()
        with StandInOperator(traffic, DAG, stop_producers=shape.quiesce != "acl") as operator:
            dag_run = dag_runs.run_dag(bag, DAG, topic=topic, key_rule=rule, mode="migrate", new_partition_count=12,
                                      dry_run=False, approval="auto_approve", catch_up_lag_records=int(rate * 2),
                                      catch_up_budget_s=600, quiet_s=3, quiesce_timeout_s=300, switch_timeout_s=300,
                                      **quiesce)
        total = time.monotonic() - began
        time.sleep(2)  # traffic on the target after the switch
        report = traffic.finish()
    if operator.error:
        raise operator.error
    record = state.AuditLog.for_run(DAG, dag_run.run_id).summary()
    observed = next((n["switch_observed"] for n in record["notes"] if "switch_observed" in n), {})
    tails = [n["tail"] for n in record["notes"] if "tail" in n]
    catch_up = next((n["catch_up"] for n in record["notes"] if "catch_up" in n), {})
    live = LiveRecord.of(record["notes"])
    return {"rule": rule, "outcome": record["outcome"], "report": report, "total_s": total,
            "recorded_window_s": observed.get("write_window_s"), "copied": catch_up.get("written", 0),
            "lag_before": catch_up.get("lag_before", 0), "catch_up_s": catch_up.get("seconds"),
            "lags": [t["lag"] for t in tails], "phases": phases(record),
            "window_phases": live.window_phases() if live else ()}


def bare_switch(shape: Shape, rate: float) -> float:
    """The reference: stop, drain and switch at once to an empty 12-partition topic (no copy, no gate)."""
    with connection.connect(shape.admin) as conn:
        topics.create_topic(conn, "live.bare", 3, shape.replication, shape.topic_config)
        topics.create_topic(conn, "live.bare.v2", 12, shape.replication, shape.topic_config)
    with MigrationTraffic(shape.app, "live.bare", group="live.bare.readers", rate_per_s=rate) as traffic:
        time.sleep(5)
        traffic.stop_producing()
        traffic.drain_and_stop_consumer()
        traffic.switch_producers("live.bare.v2")
        time.sleep(2)
        traffic.finish()
    return traffic.write_window_s or 0.0


ADMIN, APP = "kafkaops-admin", "orders-app"


@contextmanager
def cluster(brokers: int, quiesce: str) -> Iterator[tuple[provision.ClusterSpec, dict[str, str], dict[str, str]]]:
    """The bench's cluster and the logins of kafkaops and the application (the same without an authorizer)."""
    from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

    shape = {"brokers": brokers, "controllers": 1, "extra_config": TEST_BROKER_CONFIG if brokers == 1 else {}}
    if quiesce != "acl":
        with temporary_cluster("kafkaops-bench-live-", **shape) as spec:
            config = {"bootstrap.servers": spec.bootstrap}
            yield spec, config, config
        return
    with clusters.authorizer_cluster("kafkaops-bench-live-", admin=ADMIN, users=[APP], **shape) as (spec, logins):
        with connection.connect(logins[ADMIN]) as conn:
            grants = [AclBinding(kind, "live.", ResourcePatternType.PREFIXED, f"User:{APP}", "*", AclOperation.ALL,
                                 AclPermissionType.ALLOW) for kind in (ResourceType.TOPIC, ResourceType.GROUP)]
            for future in conn.admin.create_acls(grants).values():
                future.result(30)
            topics.create_topic(conn, "live.probe", 1, 1)
        deadline = time.monotonic() + 60
        while not fence.can_write(logins[APP], "live.probe") and time.monotonic() < deadline:
            time.sleep(0.5)
        yield spec, logins[ADMIN], logins[APP]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=2000.0, help="records/s of the producers")
    parser.add_argument("--warmup-s", type=float, default=20.0, help="traffic before the migration starts")
    parser.add_argument("--brokers", type=int, default=1, choices=(1, 3))
    parser.add_argument("--quiesce", default="manual", choices=("manual", "acl"))
    parser.add_argument("--source-records", type=int, default=0, help="records in the source before the traffic")
    parser.add_argument("--rules", default=",".join(RULES))
    parser.add_argument("--no-results", action="store_true")
    args = parser.parse_args(argv)
    bag = dag_bag()
    runs = []
    with cluster(args.brokers, args.quiesce) as (spec, admin, app):
        shape = Shape(args.brokers, args.quiesce, args.source_records, admin, app)
        extra = {k: v for k, v in admin.items() if k != "bootstrap.servers"}
        os.environ["AIRFLOW_CONN_KAFKA_DEFAULT"] = json.dumps({"conn_type": "kafka", "extra": {
            "bootstrap.servers": spec.bootstrap, **extra}})
        reference = bare_switch(shape, args.rate)
        for rule in args.rules.split(","):
            runs.append(migrate(bag, shape, rule, args.rate, args.warmup_s))
            print({k: v for k, v in runs[-1].items() if k != "lags"}, flush=True)
    lines = [
        f"kafka_partition_increase quiesce={args.quiesce}, 3 -> 12 partitions, {args.brokers} broker(s) (replication "
        f"factor {shape.replication}{', min.insync.replicas 2' if shape.topic_config else ''}), dag.test() with Spark "
        f"local[*] subprocesses; {args.source_records:,} records in the source before the traffic; traffic: 200 keys "
        f"at {args.rate:,.0f} records/s (acks=all, idempotent), {args.warmup_s:.0f} s before the trigger, one consumer "
        "group reading through the switch; the operator's part played by kafkaops.testing.rehearsal.StandInOperator; "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores.",
        "Write window: the producers' last ack on the source to their first on the target (harness), and as kafkaops "
        "recorded it from the records' timestamps. Reference (same run): the harness stopping, draining and "
        f"switching at once to an empty topic, no copy and no gate: {reference:.2f} s. The catch-up is the tail "
        "copy (one process, each part checked before its commit); its lag as it reported it every 10 s.",
        "",
        "| rekey | outcome | sent | lost | duplicated | out of order | tail catch-up: lag before, copied, took | "
        "tail lag every 10 s | write window (harness / recorded) | vs bare switch | total migration | the recorded "
        "window by phase (s: seen still, final part, gate and offsets, switch answer, first write) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        rep = r["report"]
        lines.append(
            f"| {r['rule']} | {r['outcome']} | {rep.sent:,} | {rep.lost} | {rep.duplicated} | {rep.out_of_order} | "
            f"{r['lag_before']:,}, {r['copied']:,}, {r['catch_up_s']} s | {', '.join(f'{x:,}' for x in r['lags']) or '-'} | "
            f"{rep.write_window_s or 0:.2f} s / {r['recorded_window_s'] or 0:.2f} s | "
            f"{(rep.write_window_s or 0) / max(reference, 1e-3):.0f}x | {r['total_s']:.0f} s | "
            f"{', '.join(f'{seconds:.2f}' for _, seconds in r['window_phases']) or '-'} |")
    publish("Live migration under traffic", lines, save=not args.no_results)
    # under the acl fence the producers' refused sends are unacknowledged (never lost): not a failure
    return 0 if all((r["report"].lost, r["report"].duplicated, r["report"].out_of_order) == (0, 0, 0)
                    and r["outcome"] == "success" for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
