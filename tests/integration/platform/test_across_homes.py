"""The lifecycle of a kafka_scale_out with every step in a process of its own, each with its own
AIRFLOW_HOME and working directory, sharing only the Postgres kafkaops store and Kafka: what a
deployment whose workers share no disk does. The record is complete, the lock excludes a second
run, a failing middle step gives ``failed`` with the lock released and no throttle left, and no
step writes a file in its home."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kafkaops.platform import provision, store
from kafkaops.platform.kafka import connection, reassignments, topics
from kafkaops.testing import clusters, jvm
from kafkaops.platform.paths import JARS
from kafkaops.testing.clusters import TEST_BROKER_CONFIG
from tests.conftest import wait_for
from tests.integration.conftest import throttles_left, wait_for_no_throttles

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]
DAG = "kafka_scale_out"


@pytest.fixture(scope="module")
def spec() -> Iterator[provision.ClusterSpec]:
    # the lean JVM in the spec: the scale-out's broker is started by a step in another process
    with clusters.temporary_cluster("kafkaops-homes-", brokers=3, controllers=1,
                                    extra_config=TEST_BROKER_CONFIG, inventory_vars=jvm.broker_vars()) as spec:
        with connection.connect(spec.bootstrap) as conn:
            topics.create_topic(conn, "homes", 6, 2)
        yield spec


class Homes:
    """Runs steps of one run, each in a new process with a new home; keeps the homes to inspect."""

    def __init__(self, root: Path, url: str, spec: provision.ClusterSpec, kind: str, params: dict[str, Any]) -> None:
        self.root, self.url, self.spec, self.kind, self.params = root, url, spec, kind, params
        self.run_id = f"manual__{uuid.uuid4().hex[:8]}"
        self.homes: list[Path] = []

    def step(self, name: str, *, ok: bool = True, **args: Any) -> Any:
        home = self.root / f"{self.run_id}-{name}-{len(self.homes)}"
        home.mkdir(parents=True)
        self.homes.append(home)
        env = {"PATH": os.environ["PATH"], "HOME": str(home), "AIRFLOW_HOME": str(home),
               "KAFKAOPS_STORE_URL": self.url, "GX_ANALYTICS_ENABLED": "false",
               # the jars are this machine's installation (the image's /opt/kafkaops/jars), not run state
               "KAFKAOPS_JARS": str(JARS),
               "PYTHONPATH": os.pathsep.join([str(REPO / "plugins"), str(REPO)])}
        data = {"dag_id": DAG, "run_id": self.run_id, "kind": self.kind, "params": self.params,
                "conn_config": {"bootstrap.servers": self.spec.bootstrap}, "args": args}
        done = subprocess.run([sys.executable, "-m", "tests.integration.platform.home_step", name], cwd=home, env=env,
                              input=json.dumps(data), capture_output=True, text=True, timeout=300)
        if ok:
            assert done.returncode == 0, f"step {name} failed: {done.stderr[-3000:]}"
            return json.loads(done.stdout)
        assert done.returncode != 0, f"step {name} should have failed; it printed {done.stdout[-500:]}"
        return done.stderr


def test_a_scale_out_across_homes_is_recorded_whole_and_excludes_a_second_run(spec, postgres_url, tmp_path) -> None:
    st = store.open_store(postgres_url)
    spec_path = spec.save(spec.base_dir / "spec.json")
    first = Homes(tmp_path, postgres_url, spec, "scale_out",
                  {"add_brokers": 1, "inventory": str(spec_path), "dry_run": False, "approval": "auto_approve",
                   "throttle_mb_per_s": 50.0, "topics": ["homes"]})
    started = first.step("begin")
    cluster_id = started["cluster_id"]
    assert st.lease(cluster_id).holder == f"{DAG}/{first.run_id}"

    second = Homes(tmp_path, postgres_url, spec, "rebalance", {"dry_run": False})  # a dry run takes no lock
    refused = second.step("begin", ok=False)
    assert "ClusterBusy" in refused and f"{DAG}/{first.run_id} holds it" in refused
    assert st.operation(DAG, second.run_id)["outcome"] == "refused"

    before = first.step("preflight_gate")
    plan = first.step("plan", before=before)  # onto the broker the approved plan provisions
    assert plan["moves"] > 0
    first.step("plan_gate", plan=plan)
    provisioned = first.step("provision", plan=plan)
    assert [b["id"] for b in provisioned["new_brokers"]] == [b["id"] for b in plan["new_brokers"]]
    throttles = first.step("set_throttles", plan=plan)
    first.step("execute_batches", plan=plan, before=before)
    first.step("verify", plan=plan, before=before)
    first.step("remove_throttles", record=throttles, plan=plan)
    first.step("elect_leaders", plan=plan)
    first.step("post_move_gate", plan=plan, before=before)
    done = first.step("finish", cluster_id=cluster_id)
    assert done["outcome"] == "success", done

    record = store_record(st, first.run_id)
    assert record["triggered_by"] == "alice" and record["params"]["add_brokers"] == 1
    assert [s["name"] for s in record["steps"]] == ["preflight_gate", "plan", "plan_gate", "provision",
                                                   "set_throttles", "execute_batches", "verify",
                                                   "remove_throttles", "elect_leaders", "post_move_gate"]
    assert all(s["status"] == "success" for s in record["steps"]), record["steps"]
    assert [g["gate"] for g in record["gates"]] == ["preflight", "plan", "post_move"]
    for g in record["gates"]:  # Data Docs written on one host, readable from the store by any other
        assert st.artifact(g["docs_path"]).body.lstrip().lower().startswith(b"<!doctype html")
    assert record["batches"] and record["throttles_set"] and record["throttles_removed"]
    assert record["before"] and record["after"] and record["outcome"] == "success"
    assert st.lease(cluster_id).free
    with connection.connect(spec.bootstrap) as conn:
        wait_for_no_throttles(conn)
    assert not [p for home in first.homes + second.homes for p in home.rglob("*")], "a step wrote to its home"


def test_a_failing_middle_step_gives_failed_releases_the_lock_and_leaves_no_throttle(spec, postgres_url,
                                                                                       tmp_path) -> None:
    st = store.open_store(postgres_url)
    with connection.connect(spec.bootstrap) as conn:
        # every replica on brokers 1 and 2, so a rebalance has moves whichever test of this module ran first
        # (a fresh topic is balanced over the first three brokers, unbalanced only once the scale-out added 4)
        topics.create_topic(conn, "homes-b", 6, 2)
        reassignments.alter_partition_reassignments(conn, {("homes-b", n): (1, 2) if n % 2 else (2, 1)
                                                           for n in range(6)})
        wait_for(lambda: not reassignments.list_partition_reassignments(conn), timeout=120,
                 what="homes-b's partitions to move onto brokers 1 and 2")
    run = Homes(tmp_path, postgres_url, spec, "rebalance",
                {"dry_run": False, "approval": "auto_approve", "topics": ["homes-b"], "throttle_mb_per_s": 1.0})
    cluster_id = run.step("begin")["cluster_id"]
    before = run.step("preflight_gate")
    plan = run.step("plan", before=before)
    throttles = run.step("set_throttles", plan=plan)
    with connection.connect(spec.bootstrap) as conn:
        assert throttles_left(conn), "set_throttles set nothing"
    assert plan["moves"], plan
    error = run.step("verify", ok=False, plan=plan, before=before)  # nothing moved: verification fails
    assert "ReassignmentError" in error
    run.step("remove_throttles", record=throttles, plan=plan)
    # Airflow reports the failed task; a step killed before it could record its failure counts too
    done = run.step("finish", cluster_id=cluster_id, failed_tasks=["verify"])
    assert done["outcome"] == "failed" and "verify" in done["reason"], done
    assert st.operation(DAG, run.run_id)["outcome"] == "failed"
    assert st.lease(cluster_id).free
    with connection.connect(spec.bootstrap) as conn:
        wait_for_no_throttles(conn)


def store_record(st: store.Store, run_id: str) -> dict[str, Any]:
    from kafkaops.platform import state
    from kafkaops.reassign import records

    return records.summarize(state.AuditLog(DAG, run_id, store=st).events())
