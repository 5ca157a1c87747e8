"""A live migration under traffic (issue 18): kafka_partition_increase with ``quiesce=manual``, 3 -> 12
partitions, while keyed acks=all producers write ``--rate`` records/s and a consumer group reads
through the switch; run for the record key (the direct copy) and a value field spanning source
partitions (``field:customer``: the merged copy).

    .venv/bin/python -m benchmarks.bench_live_migration [--rate 2000[,20000]] [--warmup-s 20] [--brokers 1|3]
        [--quiesce manual|acl] [--source-records N[,M]] [--rules record_key,field:customer] [--deployment]
        [--no-results]

Starts a cluster (``--brokers 3``: replication factor 3, ``min.insync.replicas`` 2; ``--quiesce acl``: with an
authorizer, the application's producers a principal of their own that the quiesce denies), an Airflow
metadata DB (SQLite, ``dag.test()``; the Spark jobs run as spark-submit subprocesses on local[*]) or, with
``--deployment``, the deployment operators run (kafkaops.testing.deployment: PostgreSQL, Redis, each Airflow
component a process of its own, a Celery worker; Spark standalone from kafkaops.testing.spark; the DAG triggered
as ``operator`` through the REST API, its approval and switch answered as ``approver``), then per source size,
rate and rule: ``--source-records`` records already in the source (JSON of 256 bytes with a customer, written
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
import logging
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.results import publish
from kafkaops.platform import provision, state
from kafkaops.platform import waits
from kafkaops.platform.kafka import connection, topics
from kafkaops.rekey.records import CatchUpNote, LiveRecord, PassRow, TailNote
from kafkaops.testing import clusters, dag_runs, fence, jvm
from kafkaops.testing.clusters import TEST_BROKER_CONFIG, temporary_cluster
from kafkaops.testing.rehearsal import StandInOperator
from kafkaops.testing.traffic import MigrationTraffic

ROOT = Path(__file__).resolve().parents[1]
log = logging.getLogger("bench_live_migration")

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
    quiesce, and the logins (kafkaops', the application's)."""

    brokers: int
    quiesce: str
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


class DagTest:
    """Runs the DAG in this process with ``dag.test()`` (SQLite metadata, the store on local disk, Spark jobs
    as spark-submit subprocesses on local[*])."""

    label = "dag.test() with Spark local[*] subprocesses"

    def __init__(self) -> None:
        self.bag = dag_bag()

    def run(self, conf: dict[str, Any], operator: StandInOperator) -> str:
        return str(dag_runs.run_dag(self.bag, DAG, **conf).run_id)


class Deployed:
    """Triggers the DAG through the deployment's REST API (kafkaops.testing.deployment: PostgreSQL, Redis, each
    Airflow component a process of its own, CeleryExecutor) and waits for the run's end."""

    label = ("the deployment (CeleryExecutor, PostgreSQL, Redis, each Airflow component a process of its own) "
             "with Spark standalone (a Master and 2 Workers of 1 core and 1 GiB)")

    def __init__(self, deployed: Any) -> None:
        self.deployed = deployed

    def run(self, conf: dict[str, Any], operator: StandInOperator) -> str:
        """Trigger as ``operator``; as ``approver`` (four eyes is on, as deployed) answer the approval, and the
        switch once ``operator`` has switched the applications; wait for the run's end."""
        d = self.deployed
        run_id = d.trigger(DAG, {**conf, "approval": "manual"})
        path = d.run_path(DAG, run_id)
        deadline, answered = waits.Deadline(RUN_TIMEOUT_S), set()
        while d.api("GET", path)["state"] not in ("success", "failed"):
            if deadline.expired():
                raise TimeoutError(f"{DAG} run {run_id} still running after {RUN_TIMEOUT_S:.0f} s")
            tis = d.api("GET", f"{path}/taskInstances", params={"limit": 100})["task_instances"]
            for task in ("approval", "switch"):
                asked = any(t["task_id"] == task and t["state"] in ("awaiting_input", "deferred") for t in tis)
                if asked and task not in answered and (task == "approval" or operator.switched):
                    d.approve(DAG, run_id, task_id=task)
                    answered.add(task)
            time.sleep(0.5)
        return str(run_id)


RUN_TIMEOUT_S = 3600.0


def migrate(runner: DagTest | Deployed, shape: Shape, rule: str, rate: float, warmup_s: float,
            source_records: int, budget_s: int = 600) -> dict[str, Any]:
    topic = f"live.bench.{rule.replace(':', '.')}.{source_records}.{rate:.0f}"
    with connection.connect(shape.admin) as conn:
        topics.create_topic(conn, topic, 3, shape.replication, shape.topic_config)
    began_fill = time.monotonic()
    prefill(shape.app, topic, source_records)
    log.info("%s: %d records in the source in %.0f s", topic, source_records, time.monotonic() - began_fill)
    quiesce = {"quiesce": "acl", "quiesce_principals": f"User:{APP}"} if shape.quiesce == "acl" else \
        {"quiesce": "manual"}
    conf = {"topic": topic, "key_rule": rule, "mode": "migrate", "new_partition_count": 12, "dry_run": False,
            "approval": "auto_approve", "catch_up_lag_records": int(rate * 2), "catch_up_budget_s": budget_s,
            "quiet_s": 3, "quiesce_timeout_s": 300, "switch_timeout_s": 300, **quiesce}
    with MigrationTraffic(shape.app, topic, group=f"{topic}.readers", rate_per_s=rate) as traffic:
        time.sleep(warmup_s)
        began = time.monotonic()
        with StandInOperator(traffic, DAG, stop_producers=shape.quiesce != "acl") as operator:
            run_id = runner.run(conf, operator)
        total = time.monotonic() - began
        time.sleep(2)  # traffic on the target after the switch
        report = traffic.finish()
    if operator.error:
        raise operator.error
    record = state.AuditLog.for_run(DAG, run_id).summary()
    if record["outcome"] != "success":
        log.error("%s run %s: %s; steps %s; notes %s", DAG, run_id, record["outcome"],
                  [(s["name"], s.get("status"), s.get("error")) for s in record["steps"]],
                  [n.get("text") for n in record["notes"]][-10:])
    tails = [t.value for t in state.read_notes(record["notes"], TailNote)]
    live = LiveRecord.of(record["notes"])
    observed = live.observed.value if live and live.observed else None
    catch_up = next((p.value for p in live.passes if isinstance(p, CatchUpNote)), PassRow(0)) if live else PassRow(0)
    return {"rule": rule, "records": source_records, "rate": rate, "outcome": record["outcome"], "report": report,
            "total_s": total, "load": os.getloadavg()[1],
            "recorded_window_s": observed.write_window_s if observed else None, "copied": catch_up.written,
            "lag_before": catch_up.lag_before or 0, "catch_up_s": catch_up.seconds,
            "lags": [t.lag for t in tails], "phases": phases(record),
            "rates": (tails[-1].written_rate, tails[-1].copied_rate) if tails else None,
            "window_phases": live.window_phases() if live else ()}


def bare_switch(shape: Shape, rate: float) -> float:
    """The reference: stop, drain and switch at once to an empty 12-partition topic (no copy, no gate)."""
    bare = f"live.bare.{rate:.0f}"
    with connection.connect(shape.admin) as conn:
        topics.create_topic(conn, bare, 3, shape.replication, shape.topic_config)
        topics.create_topic(conn, f"{bare}.v2", 12, shape.replication, shape.topic_config)
    with MigrationTraffic(shape.app, bare, group=f"{bare}.readers", rate_per_s=rate) as traffic:
        time.sleep(5)
        traffic.stop_producing()
        traffic.drain_and_stop_consumer()
        traffic.switch_producers(f"{bare}.v2")
        traffic.switch_consumer(f"{bare}.v2")
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


@contextmanager
def deployed_airflow(bootstrap: str, login: dict[str, str]) -> Iterator[Any]:
    """A Spark standalone cluster and the deployment on it, kafka_default logged in as kafkaops; this process
    reads the runs' records from the deployment's store."""
    from kafkaops.platform import store as store_
    from kafkaops.platform.paths import JARS
    from kafkaops.testing import deployment as harness
    from kafkaops.testing.spark import standalone_cluster

    jvm.use_lean_jvms()
    with ExitStack() as stack:
        spark = stack.enter_context(standalone_cluster(ROOT))
        cache = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="kafkaops-bench-worker-")))
        deployed = stack.enter_context(harness.deployment(
            checkout=ROOT, kafka_bootstrap=bootstrap, worker_cache=cache, jars=JARS, dag_ids={DAG},
            kafka_login=login, spark_master=spark.master_url, spark_secret_file=spark.secret_file,
            worker_env={"SPARK_CONF_DIR": str(spark.conf_dir)}))
        log.info("deployment up in %.0f s at %s", deployed.started_in, deployed.url)
        kafkaops_store = store_.open_store(deployed.databases["kafkaops"])
        stack.callback(kafkaops_store.engine.dispose)
        store_.use(kafkaops_store)
        stack.callback(store_.use, None)
        yield deployed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", default="2000", help="records/s of the producers (a comma list: each in turn)")
    parser.add_argument("--warmup-s", type=float, default=20.0, help="traffic before the migration starts")
    parser.add_argument("--brokers", type=int, default=1, choices=(1, 3))
    parser.add_argument("--quiesce", default="manual", choices=("manual", "acl"))
    parser.add_argument("--source-records", default="0",
                        help="records in the source before the traffic (a comma list: each in turn)")
    parser.add_argument("--rules", default=",".join(RULES))
    parser.add_argument("--catch-up-budget-s", type=int, default=600,
                        help="the runs' catch_up_budget_s: abandoned when the tail is not within 2 s of writes by then")
    parser.add_argument("--deployment", action="store_true",
                        help="run the DAG through the deployment (Celery worker, Spark standalone), not dag.test()")
    parser.add_argument("--no-results", action="store_true")
    args = parser.parse_args(argv)
    rates = [float(r) for r in args.rate.split(",")]
    sizes = [int(n) for n in args.source_records.split(",")]
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    runs, references = [], {}
    with ExitStack() as stack:
        spec, admin, app = stack.enter_context(cluster(args.brokers, args.quiesce))
        shape = Shape(args.brokers, args.quiesce, admin, app)
        login = {k: v for k, v in admin.items() if k != "bootstrap.servers"}
        if args.deployment:
            runner: DagTest | Deployed = Deployed(stack.enter_context(deployed_airflow(spec.bootstrap, login)))
        else:
            os.environ["AIRFLOW_CONN_KAFKA_DEFAULT"] = json.dumps({"conn_type": "kafka", "extra": {
                "bootstrap.servers": spec.bootstrap, **login}})
            runner = DagTest()
        for size in sizes:
            for rate in rates:
                references.setdefault(rate, bare_switch(shape, rate))
                for rule in args.rules.split(","):
                    runs.append(migrate(runner, shape, rule, rate, args.warmup_s, size, args.catch_up_budget_s))
                    print({k: v for k, v in runs[-1].items() if k != "lags"}, flush=True)
    lines = [
        f"kafka_partition_increase quiesce={args.quiesce}, 3 -> 12 partitions, {args.brokers} broker(s) (replication "
        f"factor {shape.replication}{', min.insync.replicas 2' if shape.topic_config else ''}), {runner.label}; "
        "records in the source before the traffic: JSON of 256 bytes over 1,000 keys; traffic: 200 keys (acks=all, "
        f"idempotent), {args.warmup_s:.0f} s before the trigger, one consumer group reading through the switch; "
        f"catch_up_lag_records 2 s of writes, catch_up_budget_s {args.catch_up_budget_s}; the "
        "operator's part played by kafkaops.testing.rehearsal.StandInOperator"
        f"{' (and the approver answering the approval and the switch through the REST API)' if args.deployment else ''}; "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores.",
        "Write window: the producers' last ack on the source to their first on the target (harness), and as kafkaops "
        "recorded it from the records' timestamps. Reference (same run, per rate): the harness stopping, draining and "
        "switching at once to an empty topic, no copy and no gate: "
        + ", ".join(f"{ref:.2f} s at {rate:,.0f} records/s" for rate, ref in references.items())
        + ". The catch-up is the tail copy (one process, each part checked before its commit); its lag as it "
        "reported it every 10 s. Backfill: the execute step (the Spark copy of the source and its check).",
        "",
        "| rekey | source records | records/s | outcome | sent | lost | duplicated | out of order | backfill | "
        "tail catch-up: lag before, copied, took | tail lag every 10 s | written / copied records/s (last report) | "
        "write window (harness / recorded) | "
        "vs bare switch | total migration | the recorded window by phase (s: seen still, final part, gate and "
        "offsets, switch asked, applications' switch) | load (5 min) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        rep = r["report"]
        lines.append(
            f"| {r['rule']} | {r['records']:,} | {r['rate']:,.0f} | {r['outcome']} | {rep.sent:,} | {rep.lost} | "
            f"{rep.duplicated} | {rep.out_of_order} | {r['phases'].get('execute', 0):.0f} s | "
            f"{r['lag_before']:,}, {r['copied']:,}, {r['catch_up_s']} s | {', '.join(f'{x:,}' for x in r['lags']) or '-'} | "
            f"{' / '.join(f'{x:,.0f}' for x in r['rates']) if r['rates'] else '-'} | {rep.write_window_s or 0:.2f} s / {r['recorded_window_s'] or 0:.2f} s | "
            f"{(rep.write_window_s or 0) / max(references[r['rate']], 1e-3):.0f}x | {r['total_s']:.0f} s | "
            f"{', '.join(f'{seconds:.2f}' for _, seconds in r['window_phases']) or '-'} | {r['load']:.1f} |")
    publish("Live migration under traffic", lines, save=not args.no_results)
    # under the acl fence the producers' refused sends are unacknowledged (never lost): not a failure
    return 0 if all((r["report"].lost, r["report"].duplicated, r["report"].out_of_order) == (0, 0, 0)
                    and r["outcome"] == "success" for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
