"""The kafkaops DAGs end to end with dag.test() on a real cluster of their own."""
from __future__ import annotations

import datetime as dt
import json
import logging
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from kafkaops.platform.kafka import connection, metadata, reassignments, topics
from kafkaops.testing import clusters, disks
from kafkaops.platform import state, store
from kafkaops.cli import datagen
from kafkaops.reassign import engine
from kafkaops.reassign import records as reassign_records
from kafkaops.platform import provision
from kafkaops.testing.clusters import TEST_BROKER_CONFIG
from tests.conftest import wait_for
from kafkaops.testing.dag_runs import run_dag
from tests.dags.conftest import kafka_default_connection
from tests.integration.conftest import Traffic, throttles_left

pytestmark = pytest.mark.integration
log = logging.getLogger(__name__)

TOPIC = "orders"


@pytest.fixture(scope="module")
def small_disks() -> Iterator[ExitStack]:
    """Log dirs on small disks (tmpfs) that a test mounts in the cluster's folder: unmounted once the cluster,
    which asks for this fixture, has stopped."""
    with ExitStack() as stack:
        yield stack


@pytest.fixture(scope="module")
def cluster(airflow_db, small_disks) -> Iterator[tuple[provision.ClusterSpec, Path]]:
    """Three brokers for these DAG runs only (a scale-out grows it); its spec is the DAG's inventory."""
    with clusters.temporary_cluster("kafkaops-dags-", brokers=3, controllers=1,
                                    extra_config=TEST_BROKER_CONFIG) as spec, \
            kafka_default_connection(spec.bootstrap):
        spec_path = spec.save(spec.base_dir / "spec.json")
        with connection.connect(spec.bootstrap) as conn:
            topics.create_topic(conn, TOPIC, 6, 3)
            datagen.produce(conn.config, TOPIC, datagen.DatagenSpec(records=20_000, keys=200, record_bytes=250))
        yield spec, spec_path


def run(dagbag, dag_id: str, **conf):
    dag_run = run_dag(dagbag, dag_id, **conf)
    record = reassign_records.summarize(state.AuditLog.for_run(dag_id, dag_run.run_id).events())
    return dag_run, record


def metadata_of(spec: provision.ClusterSpec, topic: str):
    with connection.connect(spec.bootstrap) as conn:
        return metadata.snapshot(conn, topics=[topic], sizes=False, groups=False)


def assignment(spec: provision.ClusterSpec) -> dict:
    with connection.connect(spec.bootstrap) as conn:
        snap = metadata.snapshot(conn, topics=[TOPIC], sizes=False, groups=False)
    return {p.topic_partition: p.replicas for p in snap.partitions}


def test_a_rejected_approval_leaves_the_cluster_unchanged(dagbag, cluster) -> None:
    spec, spec_path = cluster
    before = assignment(spec)
    dag_run, record = run(dagbag, "kafka_reassign", operation="rebalance", dry_run=False, approval="auto_reject",
                          inventory=str(spec_path), topics=[TOPIC])
    assert record["outcome"] == "rejected", record
    assert str(dag_run.state) == "failed"  # Airflow's run list tells a rejection from an applied run
    assert record["approval"]["approved"] is False
    assert [g["gate"] for g in record["gates"]] == ["preflight", "plan"]
    assert assignment(spec) == before
    with connection.connect(spec.bootstrap) as conn:
        assert throttles_left(conn) == {}
        assert store.current().lease(metadata.describe_cluster(conn)[0]).free


@pytest.mark.parametrize("dag_id, conf", [("kafka_scale_out", {}), ("kafka_reassign", {}),
                                           ("kafka_partition_increase", {"topic": TOPIC})],
                         ids=["scale-out", "reassign", "partition increase"])
def test_each_form_with_its_defaults_and_what_it_requires_makes_a_dry_run(dagbag, cluster, dag_id, conf) -> None:
    """The Trigger form as it opens, plus only what the operator must choose (a partition increase's topic):
    a dry run that plans, gates and records the approval it would ask, on the cluster of kafka_default."""
    dag_run = run_dag(dagbag, dag_id, **conf)
    record = state.AuditLog.for_run(dag_id, dag_run.run_id).summary()
    assert str(dag_run.state) == "success" and record["outcome"] == "dry_run", record
    assert record["plan"].get("approval"), record["plan"]  # what the record page shows as the approval it would ask
    if dag_id == "kafka_partition_increase":  # new_partition_count left empty: twice the 6 partitions, said so
        assert record["plan"]["plan"]["new_partitions"] == 12
        assert any(n["text"].startswith("new_partition_count 12: twice the current 6") for n in record["notes"])


def test_a_dry_run_with_an_unreadable_inventory_is_refused_at_its_begin(dagbag, cluster) -> None:
    """An inventory that cannot be read is refused before the plan, dry runs too (issue 36): the operator learns
    it from the dry run, not from the real run after it; no lock was taken."""
    spec, _ = cluster
    dag_run, record = run(dagbag, "kafka_scale_out", inventory="/nowhere/hosts.yml", add_brokers=1, topics=[TOPIC])
    assert str(dag_run.state) == "failed" and record["outcome"] == "refused", record
    assert "param inventory /nowhere/hosts.yml" in record["outcome_reason"], record
    assert "is not a readable file" in record["outcome_reason"], record["outcome_reason"]
    assert not record["plan"], record["plan"]
    with connection.connect(spec.bootstrap) as conn:
        lease = store.current().lease(metadata.describe_cluster(conn)[0])
    assert lease is None or lease.free, lease


def test_a_dry_run_whose_inventory_lacks_the_new_host_says_what_a_real_run_would_be_refused_for(
        dagbag, cluster, tmp_path) -> None:
    """A dry run provisions nothing, so an inventory without the new broker's host cannot stop it: it plans on,
    and its approval and record say that a real run would be refused at its plan, and why."""
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all:\n  hosts:\n    some-other-host:\n")
    dag_run, record = run(dagbag, "kafka_scale_out", inventory=str(inventory), add_brokers=1, topics=[TOPIC])
    assert str(dag_run.state) == "success" and record["outcome"] == "dry_run", record
    refused = f"A real run would be refused here: inventory {inventory} has no host kafka-"
    assert refused in record["plan"]["approval"], record["plan"]["approval"]
    assert any(n["text"].startswith(f"dry run: a real run would be refused at its plan: inventory {inventory}")
               for n in record["notes"]), record["notes"]


def test_a_dry_run_reads_an_inventory_kept_in_a_connection_as_it_reads_the_file(
        dagbag, cluster, tmp_path, monkeypatch, caplog) -> None:
    """Issue 36: an inventory kept in an Airflow connection (inventory=conn:<conn_id>, the inventory in the
    connection's extra) plans as the same inventory in a file, and none of its secrets reaches the record or the
    log; a connection without an inventory refuses the run at its begin, naming the param and the connection."""
    secret = "hunter2-inventory-s3cret"
    text = ("all:\n  vars: {ansible_user: kafka, ansible_password: " + secret + "}\n  children:\n    kafka_cluster:\n"
            "      hosts:\n        kafka-40: {ansible_host: 10.0.0.40, kafka_broker_rack: rack-b}\n")
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(text)
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_INVENTORY", json.dumps({"conn_type": "generic",
                                                                   "extra": {"inventory": text}}))
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_NO_INVENTORY", json.dumps({"conn_type": "generic",
                                                                      "extra": {"hosts": secret}}))
    caplog.set_level(logging.INFO)
    conf = {"new_broker_ids": [40], "topics": [TOPIC]}
    started = time.monotonic()
    _, from_file = run(dagbag, "kafka_scale_out", inventory=str(inventory), **conf)
    dag_run, from_conn = run(dagbag, "kafka_scale_out", inventory="conn:kafka_inventory", **conf)
    log.info("two dry runs in %.1f s", time.monotonic() - started)
    assert str(dag_run.state) == "success" and from_conn["outcome"] == "dry_run", from_conn
    assert from_conn["plan"]["new_brokers"] == from_file["plan"]["new_brokers"], from_conn["plan"]["new_brokers"]
    assert [b["rack"] for b in from_conn["plan"]["new_brokers"]] == ["rack-b"]  # the inventory's rack, read by Ansible
    assert from_conn["plan"]["kafka_json"] == from_file["plan"]["kafka_json"]
    assert "would be refused" not in from_conn["plan"]["approval"], from_conn["plan"]["approval"]
    assert secret not in json.dumps(from_conn, default=str) and secret not in caplog.text
    assert not list(Path(tempfile.gettempdir()).glob(f"{provision.MATERIALIZED_PREFIX}*/conn-kafka_inventory.yml"))

    refused_run, refused = run(dagbag, "kafka_scale_out", inventory="conn:kafka_no_inventory", **conf)
    assert str(refused_run.state) == "failed" and refused["outcome"] == "refused", refused
    assert refused["outcome_reason"].startswith(
        "param inventory conn:kafka_no_inventory: Airflow connection 'kafka_no_inventory' has no inventory in its "
        "extra (its keys: hosts)"), refused["outcome_reason"]
    assert not refused["plan"] and secret not in json.dumps(refused, default=str)


def test_a_rejected_scale_out_starts_no_broker(dagbag, cluster) -> None:
    """The approval comes before the provision: Reject leaves the cluster and its spec as they were, and the
    approval said so (the plan's new broker is not running yet)."""
    spec, spec_path = cluster
    nodes = [n.node_id for n in provision.ClusterSpec.load(spec_path).nodes]
    with connection.connect(spec.bootstrap) as conn:
        registered = sorted(b.id for b in metadata.describe_cluster(conn)[2])
    dag_run, record = run(dagbag, "kafka_scale_out", dry_run=False, approval="auto_reject",
                          inventory=str(spec_path), add_brokers=1, topics=[TOPIC])
    assert str(dag_run.state) == "failed" and record["outcome"] == "rejected", record
    assert record["outcome_reason"].startswith("rejected by param approval=auto_reject; nothing changed")
    new = max(registered + nodes) + 1  # after the spec's stopped nodes too (a drained broker's id is not reused)
    assert f"Broker {new} is new and not running yet: approving provisions it" in record["plan"]["approval"]
    assert record["plan"]["new_brokers"][0]["id"] == new
    assert "provision" not in {s["name"] for s in record["steps"]}
    assert [n.node_id for n in provision.ClusterSpec.load(spec_path).nodes] == nodes
    with connection.connect(spec.bootstrap) as conn:
        assert sorted(b.id for b in metadata.describe_cluster(conn)[2]) == registered
        assert store.current().lease(metadata.describe_cluster(conn)[0]).free


def test_a_run_is_refused_while_another_holds_the_cluster(dagbag, cluster) -> None:
    spec, spec_path = cluster
    with connection.connect(spec.bootstrap) as conn:
        cluster_id = metadata.describe_cluster(conn)[0]
    store.current().start_operation("kafka_scale_out", "manual__other-run", kind="scale_out", triggered_by="t",
                                    params={})
    store.current().acquire(cluster_id, "kafka_scale_out", "manual__other-run")
    try:
        dag_run, record = run(dagbag, "kafka_reassign", operation="rebalance", dry_run=False,
                              approval="auto_reject", inventory=str(spec_path))
        # a dry run changes nothing and takes no lock: it plans beside the holder, and says who holds the cluster
        dry_run, dry = run(dagbag, "kafka_reassign", operation="rebalance", dry_run=True, inventory=str(spec_path))
    finally:
        store.current().release(cluster_id, "kafka_scale_out", "manual__other-run")
    assert str(dag_run.state) == "failed"
    assert record["outcome"] == "refused"
    assert "run kafka_scale_out/manual__other-run holds it" in record["outcome_reason"]
    assert str(dry_run.state) == "success" and dry["outcome"] == "dry_run", dry
    assert any("no lock taken" in n["text"] and "kafka_scale_out/manual__other-run holds it" in n["text"]
               for n in dry["notes"]), dry["notes"]


def test_the_lock_of_a_run_airflow_says_has_ended_is_taken_over_and_its_token_is_fenced(dagbag, cluster) -> None:
    """A holder that died without releasing (its worker was killed): Airflow, asked through the
    Task SDK, says its run has ended, so the next run takes the cluster over; the old token is refused."""
    spec, spec_path = cluster
    ended, _ = run(dagbag, "kafka_reassign", operation="rebalance", dry_run=True, inventory=str(spec_path))
    assert str(ended.state) == "success"
    st = store.current()
    with connection.connect(spec.bootstrap) as conn:
        cluster_id = metadata.describe_cluster(conn)[0]
    stale = st.acquire(cluster_id, "kafka_reassign", ended.run_id)  # as if its finish never ran
    # a real run takes the lock (a dry run takes none); rejected, it changes nothing
    dag_run, record = run(dagbag, "kafka_reassign", operation="rebalance", dry_run=False, approval="auto_reject",
                          inventory=str(spec_path))
    assert record["outcome"] == "rejected", record
    assert any("taken over from kafka_reassign/" + ended.run_id in n["text"] and "its run has ended" in n["text"]
               for n in record["notes"]), record["notes"]
    old = state.AuditLog("kafka_reassign", ended.run_id).summary()
    assert any(n.get("lock") == "lost" for n in old["notes"])
    with pytest.raises(store.LockLost, match="no longer holds"):
        st.check_fence(cluster_id, "kafka_reassign", ended.run_id, stale.token)
    assert st.lease(cluster_id).free and st.lock_history(cluster_id)[1]["action"] == "taken_over"


def test_a_failing_preflight_gate_stops_the_run_before_anything_is_provisioned(dagbag, cluster) -> None:
    spec, spec_path = cluster
    with connection.connect(spec.bootstrap) as conn:
        # a reassignment in flight (a copy crawling under a 1 kB/s throttle) fails the preflight gate
        topics.create_topic(conn, "crawl", 1, 1)
        datagen.produce(conn.config, "crawl", datagen.DatagenSpec(records=4000, keys=10, record_bytes=500))
        snap = metadata.snapshot(conn, topics=["crawl"], groups=False)
        source = snap.partitions[0].replicas[0]
        moving = {("crawl", 0): (next(b for b in snap.broker_ids if b != source),)}
        throttles = engine.plan_throttles(conn, engine.moves_for(snap, moving))
        engine.set_throttles(conn, throttles, 1000)
        reassignments.alter_partition_reassignments(conn, moving)
        try:
            nodes_before = len(provision.ClusterSpec.load(spec_path).nodes)
            dag_run, record = run(dagbag, "kafka_scale_out", dry_run=False, approval="auto_approve",
                                  inventory=str(spec_path), add_brokers=1)
        finally:
            engine.cancel(conn, list(moving), throttles=throttles)
            topics.delete_topics(conn, ["crawl"])
        wait_for(lambda: not reassignments.list_partition_reassignments(conn), timeout=30, what="the cancel")
    assert str(dag_run.state) == "failed"
    assert record["outcome"] == "refused", record["outcome"]  # nothing changed: refused, not failed
    assert record["outcome_reason"].startswith("refused at preflight_gate, before anything changed: GateFailed")
    assert record["gates"][0]["gate"] == "preflight" and not record["gates"][0]["ok"]
    assert any("reassign" in f for f in record["gates"][0]["failures"])
    steps = {s["name"]: s["status"] for s in record["steps"]}
    assert steps["preflight_gate"] == "failed" and "provision" not in steps
    assert len(provision.ClusterSpec.load(spec_path).nodes) == nodes_before


@pytest.mark.parametrize("worker_died", [False, True], ids=["the task removes them", "finish removes them"])
def test_throttles_are_removed_when_the_batches_fail(dagbag, cluster, monkeypatch, worker_died: bool) -> None:
    """execute_batches sets the throttles, then fails: it removes them itself; when its worker died
    before it could (no except clause runs in a killed process), finish, the teardown, removes them."""
    from kafkaops.airflow.operators import ReassignmentBatchesOperator
    from kafkaops.errors import ConfigError
    from kafkaops.reassign import steps

    spec, spec_path = cluster
    topic = f"lopsided-{int(worker_died)}"
    with connection.connect(spec.bootstrap) as conn:  # every replica on broker 1: the rebalance has moves to throttle
        topics.create_topic(conn, topic, 6, 1)
        reassignments.alter_partition_reassignments(conn, {(topic, n): (1,) for n in range(6)})
        wait_for(lambda: not reassignments.list_partition_reassignments(conn), timeout=30, what=f"{topic} onto broker 1")

    def broken(ctx, plan_data):
        raise ConfigError("no batch today (the test's failure)")

    monkeypatch.setattr(steps, "next_batch", broken)
    if worker_died:
        monkeypatch.setattr(ReassignmentBatchesOperator, "_unthrottle_failing", lambda self, ctx: None)
    try:
        dag_run, record = run(dagbag, "kafka_reassign", operation="rebalance", dry_run=False,
                              approval="auto_approve", inventory=str(spec_path), topics=[topic])
        with connection.connect(spec.bootstrap) as conn:
            left = throttles_left(conn)
    finally:
        with connection.connect(spec.bootstrap) as conn:
            topics.delete_topics(conn, [topic])
    assert str(dag_run.state) == "failed" and record["outcome"] == "failed", record
    steps_by_name = {s["name"]: s for s in record["steps"]}
    assert steps_by_name["execute_batches"]["status"] == "failed"
    assert "no batch today" in steps_by_name["execute_batches"]["error"]
    assert record["throttles_set"] and record["throttles_set"][0]["brokers"], record["throttles_set"]
    assert steps_by_name["remove_throttles"]["status"] == "success" and len(record["throttles_removed"]) == 1
    removed_by = [e.task_id for e in state.AuditLog("kafka_reassign", dag_run.run_id).events()
                  if e.kind == "throttle_removed"]
    assert removed_by == ["finish" if worker_died else "execute_batches"]
    assert left == {}
    with connection.connect(spec.bootstrap) as conn:
        assert store.current().lease(metadata.describe_cluster(conn)[0]).free


def test_a_deferred_batch_whose_trigger_fired_as_airflow_failed_its_try_completes_on_the_retry(
        dagbag, cluster, monkeypatch) -> None:
    """Airflow 3.3's deferred-task race (apache/airflow#71580, #72716; the QUEUED variant fixed by #68741 is not
    in 3.3.2): the batch's trigger fires, then the scheduler, draining the stale success of the defer-exit, fails
    the try being resumed, so the event is lost. Here the first resume is failed the same way, after the real
    trigger fired on the real cluster: the retry starts over in ``execute``, resubmits nothing, waits for nothing
    done, and the run succeeds. The event delivered again afterwards repeats nothing and returns the same result."""
    from types import SimpleNamespace

    from kafkaops.airflow.operators import ReassignmentBatchesOperator

    spec, spec_path = cluster
    topic = "deferred-race"
    with connection.connect(spec.bootstrap) as conn:  # every replica on broker 1, some data: the copy takes a while
        topics.create_topic(conn, topic, 6, 1)
        reassignments.alter_partition_reassignments(conn, {(topic, n): (1,) for n in range(6)})
        wait_for(lambda: not reassignments.list_partition_reassignments(conn), timeout=30, what=f"{topic} onto broker 1")
        datagen.produce(conn.config, topic, datagen.DatagenSpec(records=6_000, keys=100, record_bytes=500, seed=7))
    resumed: list[dict] = []
    real_resume = ReassignmentBatchesOperator.resume

    def racing_resume(self, context, event):
        resumed.append(dict(event))
        if len(resumed) == 1:  # what the scheduler's "state mismatch" does to the try being resumed
            raise RuntimeError("the scheduler failed the resumed try (a stale executor success, apache/airflow#72716)")
        return real_resume(self, context, event)

    monkeypatch.setattr(ReassignmentBatchesOperator, "resume", racing_resume)
    try:
        dag_run, record = run(dagbag, "kafka_reassign", operation="rebalance", dry_run=False, approval="auto_approve",
                              inventory=str(spec_path), topics=[topic], throttle_mb_per_s=0.5)
        with connection.connect(spec.bootstrap) as conn:
            left = throttles_left(conn)
            placed = metadata.snapshot(conn, topics=[topic], sizes=False, groups=False).replicas_per_broker()
        assert resumed and resumed[0]["status"] == "done", f"the trigger never fired: {resumed}"
        assert str(dag_run.state) == "success" and record["outcome"] == "success", record
        [execute] = [s for s in record["steps"] if s["name"] == "execute_batches"]
        assert execute["status"] == "success" and execute["tries"] >= 2, execute
        events = state.AuditLog("kafka_reassign", dag_run.run_id).events()
        submitted = [tuple(k) for e in events if e.kind == "batch" for k in e.data["keys"]]
        assert submitted and len(submitted) == len(set(submitted)), f"a move was submitted twice: {submitted}"
        assert left == {} and len([b for b, n in placed.items() if n]) > 1, placed

        # the event delivered once more (the resume Airflow failed, run again): nothing is repeated
        task = dagbag.dags["kafka_reassign"].get_task("execute_batches")
        context = {"params": record["params"], "dag_run": SimpleNamespace(dag_id="kafka_reassign", run_id=dag_run.run_id,
                                                                          triggering_user_name="dag_test"),
                   "ti": SimpleNamespace(task_id="execute_batches", try_number=execute["try_number"])}
        again = real_resume(task, context, resumed[0])
        [elected] = [n for n in record["notes"] if "leaders_asked" in n]
        assert again == {"done": True, "leaders": {"asked": elected["leaders_asked"],
                                                   "changed": elected["leaders_changed"]}}, again
        assert len(state.AuditLog("kafka_reassign", dag_run.run_id).events()) == len(events)
    finally:
        with connection.connect(spec.bootstrap) as conn:
            topics.delete_topics(conn, [topic])


def test_a_scale_out_failing_after_its_provision_stops_removes_and_unregisters_its_new_broker(
        dagbag, cluster, monkeypatch) -> None:
    """The new broker started and registered, then the batches failed before any replica moved onto it:
    finish stops it through the role, takes it out of the spec and unregisters it from the controller
    (Kafka's kafka-cluster tool), and the record says so."""
    from kafkaops.errors import ConfigError
    from kafkaops.platform.kafka import registrations
    from kafkaops.reassign import steps

    spec, spec_path = cluster
    new = next_node_id(spec_path)
    nodes = [n.node_id for n in provision.ClusterSpec.load(spec_path).nodes]

    def broken(ctx, plan_data):
        raise ConfigError("no batch today (the test's failure)")

    monkeypatch.setattr(steps, "next_batch", broken)
    dag_run, record = run(dagbag, "kafka_scale_out", dry_run=False, approval="auto_approve", inventory=str(spec_path),
                          add_brokers=1, topics=[TOPIC])
    assert str(dag_run.state) == "failed" and record["outcome"] == "failed", record
    assert any(n.get("provisioned") == [new] for n in record["notes"]), record["notes"]  # it did start
    assert (f"Broker(s) {new}, provisioned by this run and holding no replica, were stopped, removed and "
            "unregistered") in record["outcome_reason"], record["outcome_reason"]
    assert [n.node_id for n in provision.ClusterSpec.load(spec_path).nodes] == nodes
    assert not (spec.base_dir / f"node-{new}").exists()  # removed: no pid file, no data left
    config = {"bootstrap.servers": spec.bootstrap}
    registered = registrations.registered_brokers(config)  # fenced ones too
    with connection.connect(spec.bootstrap) as conn:
        running = sorted(b.id for b in metadata.describe_cluster(conn)[2])
    assert new not in registered and running and set(running) <= set(registered), (registered, running)
    with connection.connect(spec.bootstrap) as conn:
        assert store.current().lease(metadata.describe_cluster(conn)[0]).free


@pytest.fixture(scope="module")
def scaled_out(dagbag, cluster):
    """The scale-out of the three brokers to four under traffic, run once, before any other test of this
    module adds a broker (the stall test and the drain's broker ask for this fixture): the run, its record,
    the spec and the topic's replicas as it left them."""
    spec, spec_path = cluster
    with Traffic({"bootstrap.servers": spec.bootstrap}, TOPIC, 6, rate=150) as traffic:
        dag_run, record = run(dagbag, "kafka_scale_out", dry_run=False, approval="auto_approve",
                              inventory=str(spec_path), add_brokers=1, topics=[TOPIC], throttle_mb_per_s=20)
        traffic.check(at_least=200)
    grown = provision.ClusterSpec.load(spec_path)
    with connection.connect(grown.bootstrap) as conn:
        snap = metadata.snapshot(conn, topics=[TOPIC], sizes=False, groups=False)
        left = throttles_left(conn)
    return dag_run, record, grown, snap, left


def test_scale_out_3_to_4_brokers_under_traffic_loses_nothing(scaled_out) -> None:
    dag_run, record, grown, snap, left = scaled_out
    assert str(dag_run.state) == "success", record
    assert record["outcome"] == "success", record
    assert [g["gate"] for g in record["gates"]] == ["preflight", "plan", "post_move"]
    assert all(g["ok"] for g in record["gates"])
    assert record["throttles_set"] and record["throttles_removed"]
    assert [n.node_id for n in grown.nodes] == [1, 2, 3, 4]
    assert left == {}
    # broker 4 joins rack-a (the racks cycle); RF 3 over 3 racks puts one replica of each of the 6
    # partitions in rack-a, so brokers 1 and 4 share those 6 evenly, and only 3 replicas move
    assert snap.replicas_per_broker() == {1: 3, 2: 6, 3: 6, 4: 3}
    assert record["plan"]["replica_moves"] == 3
    # what the approver read: the moves, the new broker, the ETA at the throttle
    assert "3 replica moves (" in record["plan"]["approval"] and "Broker 4 is new" in record["plan"]["approval"]
    assert "**Throttle** 20 MB/s per broker" in record["plan"]["approval"]
    assert all(p.leader == p.replicas[0] and set(p.isr) == set(p.replicas) for p in snap.partitions)
    assert sorted(snap.leaders_per_broker().values()) == [1, 1, 2, 2]


def next_node_id(spec_path: Path) -> int:
    return max(n.node_id for n in provision.ClusterSpec.load(spec_path).nodes) + 1


def test_a_receiving_broker_whose_log_dir_fills_stalls_the_wait_naming_it_and_the_retry_completes_the_run(
        dagbag, cluster, scaled_out, small_disks) -> None:
    """Add a broker (5, unless the drain's broker took that id) whose log dir is a 64 MiB disk (tmpfs): room
    enough for the plan's copies when the provision checks it, then other data (a file) fills it as the copy onto
    it starts, leaving 1 MiB, so the copy fills the disk and the broker stops. The wait's stall names the broker,
    the free bytes it last showed and how to resume; the throttles are removed as the task fails. The file is
    removed and the broker restarted through the role, as an operator would; the task's retry resumes (nothing is
    resubmitted) and the run completes with no throttle left and no record lost."""
    import threading

    spec, spec_path = cluster
    new = next_node_id(spec_path)
    # the cluster's folder could not be removed whole while the disk was mounted in it: once it is unmounted
    small_disks.callback(shutil.rmtree, spec.base_dir, ignore_errors=True)
    data_dir = small_disks.enter_context(disks.tmpfs(spec.base_dir / f"node-{new}" / "data", 64 << 20))
    with connection.connect(spec.bootstrap) as conn:  # more than the disk takes
        datagen.produce(conn.config, TOPIC, datagen.DatagenSpec(records=30_000, keys=200, record_bytes=500, seed=5))
    events: dict[str, object] = {}

    def saboteur() -> None:
        deadline = time.monotonic() + 240
        with connection.connect(spec.bootstrap) as conn:
            while time.monotonic() < deadline and "moving" not in events:
                moving = reassignments.list_partition_reassignments(conn)
                if any(new in r.adding for r in moving.values()):
                    events["moving"] = sorted(f"{t}-{p}" for t, p in moving)
                time.sleep(0.3)
            if "moving" in events:  # the room the plan counted on is taken by other data while the copy runs
                events["filler"] = disks.fill(data_dir, leave_bytes=1 << 20)
            while time.monotonic() < deadline:  # once the wait has reported the stall: free the disk, restart
                record = state.AuditLog.for_run("kafka_scale_out", str(events.get("run_id", ""))).summary() \
                    if "run_id" in events else None
                failed = [s for s in (record or {}).get("steps", []) if s["name"] == "execute_batches"
                          and s.get("status") == "failed"]
                if failed:
                    events["stall_error"] = failed[0].get("error")
                    events["free_at_stall"] = disks.free_bytes(data_dir)
                    # removed as the task fails, right after it recorded the stall (before its retry, 10 s on)
                    until = time.monotonic() + 8
                    while (left := throttles_left(conn, online_only=True)) and time.monotonic() < until:
                        time.sleep(0.3)
                    events["throttles_at_stall"] = left
                    try:
                        grown = provision.ClusterSpec.load(spec_path)
                        pid = provision.node_pid(grown, new)
                        events["stopped_by_itself"] = pid is None
                        if pid is not None:  # up with its log dir offline: what a restart fixes too
                            os.kill(pid, signal.SIGKILL)
                        Path(str(events["filler"])).unlink()  # the other data removed: the disk has room again
                        provision.cluster_up(grown)
                        events["restarted"] = True
                    except Exception as err:  # noqa: BLE001 - reported by the assertions below
                        events["restart_error"] = repr(err)
                    return
                time.sleep(0.5)

    runs = {r["run_id"] for r in state.list_records("kafka_scale_out")}

    def find_run_id() -> None:
        while "restarted" not in events and time.monotonic() < start + 240:
            fresh = sorted({r["run_id"] for r in state.list_records("kafka_scale_out")} - runs)
            if fresh:
                events["run_id"] = fresh[0]
                return
            time.sleep(0.2)

    start = time.monotonic()
    threads = [threading.Thread(target=saboteur, daemon=True), threading.Thread(target=find_run_id, daemon=True)]
    for t in threads:
        t.start()
    with Traffic({"bootstrap.servers": spec.bootstrap}, TOPIC, 6, rate=100) as traffic:
        dag_run, record = run(dagbag, "kafka_scale_out", dry_run=False, approval="auto_approve",
                              inventory=str(spec_path), new_broker_ids=[new], new_broker_racks=["rack-b"],
                              topics=[TOPIC], throttle_mb_per_s=0.3, stall_timeout_s=30)
        traffic.check(at_least=100)
    for t in threads:
        t.join(5)
    assert events.get("moving"), f"no replica was copied onto broker {new}"
    error = str(events.get("stall_error") or "")
    assert error, f"the wait never reported a stall: {record['steps']}"
    assert events.get("restarted"), f"broker {new} did not restart: {events.get('restart_error')}"
    print(f"\nthe stall as the record names it: {error}")  # what docs/operations.md shows
    # the stall names the partitions, the broker with the free bytes it last showed, and what to do
    assert "stalled" in error and any(p in error for p in events["moving"]), error  # type: ignore[attr-defined]
    assert f"broker {new}: " in error and " free of 64.0 MiB" in error and "(not enough room)" in error, error
    assert f"free space on the log dirs of broker(s) [{new}]" in error and "clear this task to resume" in error, error
    assert events["free_at_stall"] < 1 << 20, events  # the disk was full indeed
    # the provision found room for the plan's copies on the new broker before the other data took it
    [room] = [n["text"] for n in record["notes"] if n["text"].startswith("disk room checked on receiving broker")]
    assert f"[{new}]" in room and "keeps at least 10% of its log dirs free" in room, room
    assert events["throttles_at_stall"] == {}, events  # removed as the task failed, the broker down aside
    assert str(dag_run.state) == "success", record
    assert record["outcome"] == "success"
    [execute] = [s for s in record["steps"] if s["name"] == "execute_batches"]  # one row per step, its last try
    assert execute["status"] == "success" and execute["tries"] >= 2 and execute["try_number"] >= 2, execute
    with connection.connect(spec.bootstrap) as conn:
        assert throttles_left(conn) == {}
        snap = metadata.snapshot(conn, topics=[TOPIC], sizes=False, groups=False)
    assert snap.replicas_per_broker()[new] > 0 and not snap.under_replicated


def test_a_rebalance_onto_a_broker_without_room_for_its_copies_is_refused_at_its_plan_and_changes_nothing(
        dagbag, cluster, scaled_out, small_disks) -> None:
    """A broker whose log dir (a 64 MiB tmpfs) other data has filled to 4 MiB free, less than the 6.4 MiB (10 %)
    it must keep: a rebalance that would copy onto it is refused at its plan, naming the broker, its free bytes,
    what it would receive and what to do; nothing changed (no approval asked, the topic's replicas as they were,
    no throttle, the lock free). Excluding that broker, as the error says, plans a run that passes."""
    spec, spec_path = cluster
    node = next_node_id(spec_path)
    small_disks.callback(shutil.rmtree, spec.base_dir, ignore_errors=True)  # once the disk is unmounted
    data_dir = small_disks.enter_context(disks.tmpfs(spec.base_dir / f"node-{node}" / "data", 64 << 20))
    grown, added = provision.ClusterSpec.load(spec_path).with_new_brokers(node_ids=[node], racks=["rack-b"])
    provision.cluster_up(grown, limit=[n.hostname for n in added])
    grown.save(spec_path)
    topic = "roomless"
    with connection.connect(spec.bootstrap) as conn:
        wait_for(lambda: node in [b.id for b in metadata.describe_cluster(conn)[2]], timeout=60,
                 what=f"broker {node} to register")
        others = sorted(b.id for b in metadata.describe_cluster(conn)[2] if b.id not in (1, node))
        topics.create_topic(conn, topic, 6, 1)  # every replica on broker 1: a rebalance onto 1 and node copies
        reassignments.alter_partition_reassignments(conn, {(topic, n): (1,) for n in range(6)})
        wait_for(lambda: not reassignments.list_partition_reassignments(conn), timeout=30, what=f"{topic} onto broker 1")
        datagen.produce(conn.config, topic, datagen.DatagenSpec(records=3_000, keys=60, record_bytes=1000, seed=3))
    filler = disks.fill(data_dir, leave_bytes=4 << 20)
    try:
        before = {p.topic_partition: p.replicas for p in metadata_of(spec, topic).partitions}
        conf = {"operation": "rebalance", "topics": [topic], "exclude_brokers": others, "inventory": str(spec_path)}
        dag_run, record = run(dagbag, "kafka_reassign", dry_run=False, approval="auto_approve", **conf)
        after = {p.topic_partition: p.replicas for p in metadata_of(spec, topic).partitions}
        with connection.connect(spec.bootstrap) as conn:
            left = throttles_left(conn)
            lease = store.current().lease(metadata.describe_cluster(conn)[0])
        _, passes = run(dagbag, "kafka_reassign", dry_run=True, **{**conf, "exclude_brokers": [node]})
    finally:
        filler.unlink()
        with connection.connect(spec.bootstrap) as conn:
            topics.delete_topics(conn, [topic])
    reason = record["outcome_reason"]
    print(f"\nthe refusal as the record gives it: {reason}")  # what docs/operations.md shows
    assert str(dag_run.state) == "failed" and record["outcome"] == "refused", record
    assert reason.startswith(f"refused at plan, before anything changed: NotEnoughRoom: not enough room on the log "
                             f"dirs of broker(s) [{node}] for the rebalance plan; nothing was changed: broker {node}: "
                             ), reason
    assert " free of 64.0 MiB, would receive " in reason and "it must keep 6.4 MiB (10%) free" in reason, reason
    assert f"exclude_brokers=[{node}]" in reason and "add brokers (kafka_scale_out)" in reason, reason
    steps = {s["name"]: s["status"] for s in record["steps"]}
    assert steps["plan"] == "failed" and "approval" not in steps and "execute_batches" not in steps, steps
    assert not record["throttles_set"] and after == before and set(before.values()) == {(1,)}, after
    assert left == {} and (lease is None or lease.free), (left, lease)
    assert passes["outcome"] == "dry_run" and passes["plan"]["replica_moves"] > 0, passes


@pytest.fixture(scope="module")
def fifth_broker(cluster, scaled_out) -> int:
    """A broker beside the scaled-out four, running and holding replicas of TOPIC: the one the stall test
    added when it ran first (restarted if it is down), else one added here on rack-b with two partitions
    moved onto it."""
    spec, spec_path = cluster
    grown = provision.ClusterSpec.load(spec_path)
    extra = [n.node_id for n in grown.nodes if n.node_id > 4]
    if not extra:
        node = next_node_id(spec_path)
        grown, added = grown.with_new_brokers(node_ids=[node], racks=["rack-b"])
        provision.cluster_up(grown, limit=[n.hostname for n in added])
        grown.save(spec_path)
    else:
        node = max(extra)
        if provision.node_pid(grown, node) is None:
            provision.cluster_up(grown)
    with connection.connect(spec.bootstrap) as conn:
        wait_for(lambda: node in [b.id for b in metadata.describe_cluster(conn)[2]], timeout=60,
                 what=f"broker {node} to register")
        snap = metadata.snapshot(conn, topics=[TOPIC], sizes=False, groups=False)
        if not snap.replicas_per_broker().get(node):
            rack_b = [p for p in snap.partitions if 2 in p.replicas and p.leader != 2][:2]
            reassignments.alter_partition_reassignments(conn, {p.topic_partition: tuple(node if b == 2 else b for b in p.replicas)
                                                       for p in rack_b})
            wait_for(lambda: not reassignments.list_partition_reassignments(conn), timeout=120,
                     what=f"two partitions to move onto broker {node}")
        wait_for(lambda: not metadata.snapshot(conn, topics=[TOPIC], sizes=False, groups=False).under_replicated,
                 timeout=60, what=f"{TOPIC} fully replicated with broker {node}")
        assert metadata.snapshot(conn, topics=[TOPIC], sizes=False, groups=False).replicas_per_broker().get(node)
    return node


def test_draining_a_broker_empties_it_and_stops_it_through_the_role(dagbag, cluster, fifth_broker) -> None:
    spec, spec_path = cluster
    node = fifth_broker
    grown = provision.ClusterSpec.load(spec_path)
    assert provision.node_pid(grown, node) is not None
    dag_run, record = run(dagbag, "kafka_reassign", operation="drain", drain_brokers=[node], stop_drained=True,
                          dry_run=False, approval="auto_approve", inventory=str(spec_path), throttle_mb_per_s=50)
    assert str(dag_run.state) == "success", record
    assert record["outcome"] == "success" and all(g["ok"] for g in record["gates"])
    with connection.connect(spec.bootstrap) as conn:
        snap = metadata.snapshot(conn, include_internal=True, sizes=False, groups=False)
        assert throttles_left(conn) == {}
    assert snap.replicas_per_broker().get(node, 0) == 0
    assert not snap.under_replicated
    assert provision.node_pid(grown, node) is None  # stopped by the role after the verified drain
    # the record's "after" is the cluster after the stop, its batches ended, each step one row
    assert node not in [b["id"] for b in record["after"]["brokers"] if b.get("online", True)], record["after"]
    assert record["batches"] and all(b["status"] == "done" for b in record["batches"]), record["batches"]
    assert len({s["name"] for s in record["steps"]}) == len(record["steps"])
    # its log dirs were cordoned for the run (Kafka 4.3+) and the cordon lifted before the stop
    assert [(c["brokers"], c["skipped"]) for c in record["cordons_set"]] == [([node], None)], record["cordons_set"]
    assert [(c["brokers"], c["left"]) for c in record["cordons_lifted"]] == [([node], [])], record["cordons_lifted"]
    assert {s["name"]: s["status"] for s in record["steps"]}.keys() >= {"set_cordons", "lift_cordons"}
    assert all(s["status"] == "success" for s in record["steps"] if s["name"] in ("set_cordons", "lift_cordons"))


def test_an_unreachable_store_fails_the_run_at_begin_before_kafka_is_touched(dagbag, cluster, monkeypatch) -> None:
    spec, spec_path = cluster
    port = provision.free_ports(1)[0]  # nothing listens there
    monkeypatch.setenv("AIRFLOW_CONN_KAFKAOPS_STORE", json.dumps(
        {"conn_type": "postgres", "host": "127.0.0.1", "port": port, "login": "kafkaops", "password": "s3cret-pw",
         "schema": "kafkaops"}))
    before = assignment(spec)
    # begin retries a store that does not answer (3 retries, as deployed); 1 s apart and doubling here,
    # not 10 s (70 s of waiting that tells nothing more)
    monkeypatch.setattr(dagbag.dags["kafka_reassign"].get_task("begin"), "retry_delay", dt.timedelta(seconds=1))
    dag_run = run_dag(dagbag, "kafka_reassign", operation="rebalance", dry_run=False, approval="auto_approve",
                      inventory=str(spec_path))
    assert str(dag_run.state) == "failed"
    states = {ti.task_id: str(ti.state) for ti in dag_run.get_task_instances()}
    tries = {ti.task_id: ti.try_number for ti in dag_run.get_task_instances()}
    assert tries["begin"] == 4, f"begin was tried {tries['begin']} times, not 1 + 3 retries"
    assert states["begin"] == "failed" and states["preflight_gate"] == "upstream_failed", states
    assert states["execute_batches"] in ("upstream_failed", "skipped", "None"), states
    assert assignment(spec) == before
    with connection.connect(spec.bootstrap) as conn:
        assert throttles_left(conn) == {}
    assert store.current().operation("kafka_reassign", dag_run.run_id) is None  # nothing reached the default store
    from kafkaops.airflow.hooks import kafkaops_store

    with pytest.raises(store.StoreUnavailable, match=rf"connection 'kafkaops_store'.*127\.0\.0\.1:{port}") as err:
        kafkaops_store()
    assert "s3cret-pw" not in str(err.value)
