"""``make demo``: the main job, broker addition, on the local cluster, through the real DAGs.

The local cluster (playbooks/inventory/local.yml: three KRaft nodes on 19092/94/96) comes up with
the kafka_broker role and gets a skewed ``orders`` topic. Then Airflow runs ``kafka_scale_out``
with ``dag.test()``: preflight gate, broker 4 provisioned by the same role, registered, the plan,
approval (``auto_approve``: nobody is there to click), throttled batches, verification, throttles
removed, preferred leaders, the post-move gate. ``kafka_reassign`` then drains broker 4 and stops
it, so the next demo starts from the same three brokers. Both runs' operation records stay in
``.cache/airflow`` (the home ``make airflow`` serves), on the run's "Operation record" tab.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from kafkaops.platform import admin
from kafkaops.cli import datagen
from kafkaops.platform import provision
from kafkaops.errors import KafkaOpsError
from kafkaops.platform.partitioner import partition_for
from kafkaops.platform.paths import CACHE, REPO_ROOT
from kafkaops.platform.render import render_snapshot

log = logging.getLogger(__name__)

TOPIC = "orders"
AIRFLOW_HOME = CACHE / "airflow"


local_spec = provision.local_spec  # the local cluster as a spec (also make cluster-up's, in provision.LOCAL_SPEC)


def _airflow_env(bootstrap: str) -> None:
    """Point Airflow (imported after this) at the repository's home, DAGs and plugins, and its
    ``kafka_default`` connection at the local cluster, as ``make airflow`` does."""
    os.environ.setdefault("AIRFLOW_HOME", str(AIRFLOW_HOME))
    os.environ.update({
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO_ROOT / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO_ROOT / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW_CONN_KAFKA_DEFAULT": json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": bootstrap}}),
    })
    Path(os.environ["AIRFLOW_HOME"]).mkdir(parents=True, exist_ok=True)
    result = subprocess.run([str(Path(sys.executable).parent / "airflow"), "db", "migrate"], capture_output=True,
                            text=True, env=os.environ.copy(), timeout=600)
    if result.returncode != 0:
        raise KafkaOpsError(f"airflow db migrate in {os.environ['AIRFLOW_HOME']} failed: "
                            f"{result.stderr.strip()[-1500:]}")


def _run_dag(dag_id: str, **conf: Any) -> dict[str, Any]:
    from airflow.dag_processing.dagbag import DagBag

    from kafkaops.platform import state

    dag = DagBag(dag_folder=str(REPO_ROOT / "dags")).dags[dag_id]
    dag_run = dag.test(run_conf=conf)
    record = state.AuditLog.for_run(dag_id, dag_run.run_id).summary()
    record["state"] = str(dag_run.state)
    return record


def _print_record(title: str, record: dict[str, Any]) -> None:
    print(f"\n== {title}: {record['state']} (outcome {record['outcome']}, run {record.get('run_id')})")
    plan = record.get("plan") or {}
    if plan:
        print(f"plan: {plan.get('summary')}")
        for line in plan.get("diff", [])[:12]:
            print(f"  {line}")
    for gate in record["gates"]:
        print(f"gate {gate['gate']}: {'passed' if gate['ok'] else 'FAILED'}")
    print(f"throttles set {len(record['throttles_set'])}, removed {len(record['throttles_removed'])}")
    for note in record["notes"][-4:]:
        print(f"note: {note.get('text') if isinstance(note, dict) else note}")


def run_demo(records: int = 100_000, keep_running: bool = False) -> int:
    print("bringing up the local 3-broker KRaft cluster with the kafka_broker Ansible role ...", flush=True)
    provision.cluster_up()
    spec = local_spec()
    bootstrap = spec.bootstrap
    spec_path = spec.save(CACHE / "demo" / "local-cluster.json")  # three nodes: the DAG grows this copy
    ok = False
    try:
        with admin.connect(bootstrap) as conn:
            if admin.create_topic(conn, TOPIC, 3, 3):
                result = datagen.produce(conn.config, TOPIC, datagen.DatagenSpec(
                    records=records, keys=500, skew="hot", hot_share=0.4, record_bytes=300, seed=7))
                hot_key, hot_count = result.per_key_top[0]
                print(f"topic {TOPIC}: {result.records} records, {result.records_per_second:,.0f} records/s; hot key "
                      f"{hot_key} takes {hot_count / result.records:.0%} and lands in {TOPIC}-"
                      f"{partition_for(hot_key.encode(), 3)} (murmur2, as Kafka's Java client places it)")
            print("\nbefore:\n" + render_snapshot(admin.snapshot(conn)), flush=True)

        print(f"\npreparing Airflow in {os.environ.get('AIRFLOW_HOME', AIRFLOW_HOME)} (airflow db migrate) ...",
              flush=True)
        _airflow_env(bootstrap)
        print("running kafka_scale_out with dag.test(): add one broker, rebalance onto it ...", flush=True)
        added = _run_dag("kafka_scale_out", dry_run=False, approval="auto_approve", inventory=str(spec_path),
                         add_brokers=1, topics=[TOPIC], throttle_mb_per_s=50)
        _print_record("kafka_scale_out", added)
        grown = provision.ClusterSpec.load(spec_path)
        with admin.connect(grown.bootstrap) as conn:
            print("\nafter the scale-out:\n" + render_snapshot(admin.snapshot(conn)), flush=True)
        if added["state"] != "success":
            return 1
        new = [n.node_id for n in grown.nodes if n not in spec.nodes]
        print(f"\nrunning kafka_reassign: drain broker(s) {new} and stop them, back to three brokers ...", flush=True)
        drained = _run_dag("kafka_reassign", operation="drain", drain_brokers=new, stop_drained=True, dry_run=False,
                           approval="auto_approve", inventory=str(spec_path), throttle_mb_per_s=50)
        _print_record("kafka_reassign (drain)", drained)
        provision.cluster_down(grown, limit=[grown.node(b).hostname for b in new], purge=True)
        ok = drained["state"] == "success"
        print(f"\nboth runs' operation records: `make airflow`, then the DAG run's \"Operation record\" tab "
              f"(AIRFLOW_HOME {os.environ['AIRFLOW_HOME']})")
        return 0 if ok else 1
    finally:
        if not keep_running:
            print("\nstopping the cluster (make cluster-up keeps one running) ...", flush=True)
            provision.cluster_down()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``kafkaops demo``."""
    parser.add_argument("--records", type=int, default=100_000, metavar="N",
                        help="records of the skewed 'orders' topic (default 100000)")
    parser.add_argument("--keep-running", action="store_true", help="leave the local cluster up afterwards")


def run(args: argparse.Namespace) -> int:
    return run_demo(records=args.records, keep_running=args.keep_running)
