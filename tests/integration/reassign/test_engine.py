"""The executor on a real cluster of its own: scale-out onto a broker added through the role,
drain, cancel and kill mid-way, each verified, with no throttle left and no record lost."""
from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from kafkaops.platform.kafka import configs, connection, metadata, reassignments, topics
from kafkaops.cli import datagen
from kafkaops.reassign import cordons, engine
from kafkaops.reassign import verify
from kafkaops.reassign.engine import ReassignmentCancelled, ReassignmentError
from kafkaops.errors import KafkaOpsError, ReplicationFactorChangeRefused, UnknownTopic
from kafkaops.model import Cluster, TopicPartition
from tests.conftest import wait_for
from tests.integration.conftest import GrowableCluster, Traffic, throttles_left, wait_for_no_throttles

pytestmark = pytest.mark.integration

PLUGINS = Path(__file__).resolve().parents[3] / "plugins"
log = logging.getLogger(__name__)


def whole(conn: connection.KafkaConnection, **kwargs: bool) -> Cluster:
    return metadata.snapshot(conn, include_internal=True, groups=False, **kwargs)


def ensure_broker_4(cluster: GrowableCluster, conn: connection.KafkaConnection) -> None:
    if not cluster.has_node(4):
        cluster.add_broker(4, rack="rack-b")
    wait_for(lambda: any(b.id == 4 for b in metadata.describe_cluster(conn)[2]), timeout=60, what="broker 4 to register")


def fill(conn: connection.KafkaConnection, topic: str, partitions: int, rf: int, records: int, record_bytes: int,
         assignment: Sequence[Sequence[int]] = ()) -> Cluster:
    """``topic`` made (Kafka's placement, or ``assignment``: each partition's replicas) and filled."""
    if assignment:
        from confluent_kafka.admin import NewTopic

        future = conn.admin.create_topics([NewTopic(topic, len(assignment),
                                                    replica_assignment=[list(r) for r in assignment])],
                                          request_timeout=conn.timeout_s)[topic]
        connection.wait_for(future, conn, f"the creation of {topic}")
        wait_for(lambda: topic in metadata.topic_names(conn), timeout=30, what=f"{topic} in the metadata")
    else:
        topics.create_topic(conn, topic, partitions, rf)
    datagen.produce(conn.config, topic, datagen.DatagenSpec(records=records, keys=200, skew="uniform",
                                                            record_bytes=record_bytes, seed=5))
    return metadata.snapshot(conn, topics=[topic], groups=False)


def replace_second(snap: Cluster, topic: str, partitions: int) -> dict[TopicPartition, tuple[int, ...]]:
    """Each partition keeps its leader and swaps its second replica for a broker it lacks."""
    desired = {}
    for p in snap.partitions_of(topic)[:partitions]:
        spare = min(b for b in snap.online_broker_ids if b not in p.replicas)
        desired[p.topic_partition] = (p.replicas[0], spare) + p.replicas[2:]
    return desired


def assert_verified(conn: connection.KafkaConnection, desired: Mapping[TopicPartition, tuple[int, ...]], before: Cluster) -> None:
    result = wait_for(lambda: (r := verify.verify_live(conn, desired, before)).ok and r, timeout=30,
                      what="the reassignment to verify")
    assert isinstance(result, verify.VerificationResult) and result.failures == ()


def test_scale_out_onto_a_broker_added_by_the_role_under_load_loses_nothing(
        own_cluster: GrowableCluster, own_conn: connection.KafkaConnection) -> None:
    topic = f"scale-out-{time.monotonic_ns() % 10**6}"
    fill(own_conn, topic, partitions=6, rf=2, records=3000, record_bytes=400)  # on the running brokers
    # a new id: in a shuffled order another test of the module may have added broker 4 already
    new = max(n.node_id for n in own_cluster.spec.nodes) + 1
    result = own_cluster.add_broker(new, rack="rack-b")
    assert set(result.changed) == {f"kafka-{new}"}  # the running nodes were not touched
    wait_for(lambda: any(b.id == new for b in metadata.describe_cluster(own_conn)[2]), timeout=60,
             what=f"broker {new} to register")

    with Traffic(own_cluster.config, topic, 6) as traffic:
        before = whole(own_conn)
        # three partitions onto the new broker, as their preferred leader
        desired = {p.topic_partition: (new, p.replicas[0]) for p in before.partitions_of(topic)[:3]}

        dry = engine.execute(own_conn, desired, throttle_bytes_per_s=1_000_000, max_moves_per_broker=2)
        assert dry.dry_run and dry.submitted == () and [len(b.moves) for b in dry.batches] == [2, 1]
        assert reassignments.list_partition_reassignments(own_conn) == {}
        assert all(whole(own_conn, offsets=False, sizes=False).partition(*k).replicas == before.partition(*k).replicas
                   for k in desired)

        report = engine.execute(own_conn, desired, throttle_bytes_per_s=1_000_000, max_moves_per_broker=2,
                                  dry_run=False, poll_interval_s=0.5)
        assert sorted(report.submitted) == sorted(desired) and len(report.batches) == 2
        assert report.progress is not None and report.progress.done
        assert report.progress.bytes_total >= sum(before.partition(*k).size_bytes or 0 for k in desired) > 0
        assert set(report.throttles.brokers) == {new} | {b for k in desired for b in before.partition(*k).replicas}
        assert report.throttles.topics == (topic,)
        assert_verified(own_conn, desired, before)
        wait_for_no_throttles(own_conn)

        reassignments.elect_preferred_leaders(own_conn, [p.topic_partition for p in before.partitions_of(topic)])
        wait_for(lambda: all(p.leader == p.replicas[0] for p in
                             metadata.snapshot(own_conn, topics=[topic], offsets=False, sizes=False,
                                              groups=False).partitions),
                 timeout=30, what=f"every partition of {topic} to be led by its first replica")
        time.sleep(2)  # keep producing across the leader changes
    traffic.check(at_least=500)


def test_a_broker_is_drained_to_zero_replicas_in_capped_batches(
        own_cluster: GrowableCluster, own_conn: connection.KafkaConnection) -> None:
    ensure_broker_4(own_cluster, own_conn)
    topic = f"drain-{time.monotonic_ns() % 10**6}"
    victim = 3  # in every partition, whatever Kafka's placement and the other tests' topics would give
    fill(own_conn, topic, partitions=4, rf=2, records=1000, record_bytes=300,
         assignment=[(victim, 1), (victim, 2), (1, victim), (2, victim)])
    before = whole(own_conn)
    load = {b: n for b, n in before.replicas_per_broker().items() if b != victim}
    desired = {}
    for p in before.partitions:
        if victim in p.replicas:
            spare = min((b for b in load if b not in p.replicas), key=lambda b: (load[b], b))
            load[spare] += 1
            desired[p.topic_partition] = tuple(spare if r == victim else r for r in p.replicas)
    assert len(desired) >= 4

    report = engine.execute(own_conn, desired, throttle_bytes_per_s=10_000_000, max_moves_per_broker=2,
                              dry_run=False, poll_interval_s=0.5)
    assert len(report.batches) == -(-len(desired) // 2)  # the victim is in every move: 2 per batch
    assert all(max(b.moves_per_broker().values()) <= 2 for b in report.batches)
    assert_verified(own_conn, desired, before)
    assert whole(own_conn, offsets=False, sizes=False).replicas_per_broker()[victim] == 0
    wait_for_no_throttles(own_conn)


def _slow_move(own_conn: connection.KafkaConnection, name: str) -> tuple[str, Cluster, dict[TopicPartition, tuple[int, ...]]]:
    topic = f"{name}-{time.monotonic_ns() % 10**6}"
    snap = fill(own_conn, topic, partitions=2, rf=2, records=8000, record_bytes=500)  # ~2 MB a partition
    return topic, snap, replace_second(snap, topic, 2)


@pytest.mark.parametrize("how", ["engine.cancel", "standalone cancel()"])
def test_cancel_mid_way_leaves_a_healthy_cluster_without_throttles(
        own_cluster: GrowableCluster, own_conn: connection.KafkaConnection, how: str) -> None:
    topic, before, desired = _slow_move(own_conn, "cancel")
    run = engine.Executor(own_cluster.connect(), desired, throttle_bytes_per_s=50_000, dry_run=False,
                            poll_interval_s=0.5)
    outcome: list[BaseException | engine.ExecutionReport] = []

    def target() -> None:
        try:
            outcome.append(run.execute())
        except BaseException as err:  # noqa: BLE001 - handed to the test thread
            outcome.append(err)
        finally:
            run.conn.close()

    with Traffic(own_cluster.config, topic, 2) as traffic:
        thread = threading.Thread(target=target, daemon=True)
        started = time.time()
        thread.start()
        wait_for(lambda: set(reassignments.list_partition_reassignments(own_conn)) == set(desired), timeout=30,
                 what="both moves to be in flight")
        adding = {k: v[1] for k, v in desired.items()}
        wait_for(lambda: all(f"{p}:{b}" in throttles_left(own_conn).get(f"topic {topic}", {}).get(
            engine.FOLLOWER_REPLICAS, "") for (_, p), b in adding.items()), timeout=20,
                 what="the adding replicas to be follower-throttled")
        assert throttles_left(own_conn)[f"broker {adding[(topic, 0)]}"] == {
            engine.LEADER_RATE: "50000", engine.FOLLOWER_RATE: "50000"}
        mid = engine.progress(own_conn, engine.moves_for(before, desired), elapsed_s=time.time() - started)
        assert mid.partitions_in_flight == 2 and mid.bytes_done < mid.bytes_total and not mid.done

        if how == "engine.cancel":
            run.cancel()
        else:  # as a teardown task in another process would: no record, only the partitions
            assert engine.cancel(own_conn, desired) == tuple(sorted(desired))
        thread.join(60)
        assert not thread.is_alive()
        assert len(outcome) == 1 and isinstance(outcome[0], ReassignmentError)
        if how == "engine.cancel":
            assert isinstance(outcome[0], ReassignmentCancelled) and "reverted 2 move(s)" in str(outcome[0])

        wait_for(lambda: reassignments.list_partition_reassignments(own_conn) == {}, timeout=30, what="nothing in flight")
        wait_for(lambda: not whole(own_conn, offsets=False, sizes=False).under_replicated, timeout=60,
                 what="no under-replicated partition")
        after = metadata.snapshot(own_conn, topics=[topic], offsets=False, sizes=False, groups=False)
        assert {k: after.partition(*k).replicas for k in desired} == {k: before.partition(*k).replicas for k in desired}
        wait_for_no_throttles(own_conn)
    traffic.check(at_least=100)


def test_a_stalled_batch_names_its_partitions_and_the_replicas_missing_from_the_isr(
        own_conn: connection.KafkaConnection) -> None:
    topic, before, desired = _slow_move(own_conn, "stall")
    with pytest.raises(engine.ReassignmentStalled) as caught:
        engine.execute(own_conn, desired, throttle_bytes_per_s=50_000, dry_run=False, batch_timeout_s=2,
                         poll_interval_s=0.5)
    message = str(caught.value)
    for (t, p), replicas in desired.items():
        assert f"{t}-{p} (adding [{replicas[1]}], not in ISR: [{replicas[1]}])" in message
    assert "did not finish within 2 s" in message and "cancel(conn, partitions)" in message
    # the throttles are gone (so the moves, still in flight, may finish any moment); cancel cleans up
    wait_for_no_throttles(own_conn)
    engine.cancel(own_conn, desired)
    wait_for(lambda: reassignments.list_partition_reassignments(own_conn) == {}, timeout=30, what="nothing in flight")
    wait_for(lambda: not whole(own_conn, offsets=False, sizes=False).under_replicated, timeout=60,
             what="no under-replicated partition after the cancel")
    after = metadata.snapshot(own_conn, topics=[topic], offsets=False, sizes=False, groups=False)
    assert all(after.partition(*k).replicas in (before.partition(*k).replicas, v) for k, v in desired.items())


RUN_EXECUTOR = """
import json, logging, sys
from kafkaops.platform.kafka import configs, connection, metadata, reassignments, topics
from kafkaops.reassign import engine
logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
desired = {(t, p): tuple(r) for t, p, r in json.loads(sys.argv[2])}
with connection.connect(sys.argv[1], timeout_s=15) as conn:
    report = engine.execute(conn, desired, throttle_bytes_per_s=int(sys.argv[3]), dry_run=False, poll_interval_s=0.5)
print(json.dumps(report.to_dict()))
"""


def test_a_killed_run_is_resumed_without_resubmitting(
        own_cluster: GrowableCluster, own_conn: connection.KafkaConnection, tmp_path: Path) -> None:
    topic, before, desired = _slow_move(own_conn, "resume")
    args = json.dumps([[t, p, list(r)] for (t, p), r in desired.items()])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(PLUGINS), os.environ.get("PYTHONPATH")]))}
    with Traffic(own_cluster.config, topic, 2) as traffic, open(tmp_path / "run.log", "w") as out:
        proc = subprocess.Popen([sys.executable, "-c", RUN_EXECUTOR, own_cluster.bootstrap, args, "50000"],
                                stdout=out, stderr=subprocess.STDOUT, env=env)
        try:
            wait_for(lambda: set(reassignments.list_partition_reassignments(own_conn)) == set(desired), timeout=60,
                     what=f"the subprocess's moves to be in flight (log: {tmp_path / 'run.log'})")
            wait_for(lambda: f"topic {topic}" in throttles_left(own_conn), timeout=20, what="its throttles")
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)
        assert proc.returncode == -signal.SIGKILL
        # killed: the moves and their throttles are still there
        assert set(reassignments.list_partition_reassignments(own_conn)) == set(desired)
        assert f"topic {topic}" in throttles_left(own_conn)

        report = engine.execute(own_conn, desired, throttle_bytes_per_s=20_000_000, dry_run=False,
                                  poll_interval_s=0.5)
        assert report.submitted == () and report.batches == ()
        assert {m.topic_partition for m in report.resumed} == set(desired)
        assert all(m.before == before.partition(*m.topic_partition).replicas for m in report.resumed)
        assert_verified(own_conn, desired, before)
        wait_for_no_throttles(own_conn)
        again = engine.execute(own_conn, desired, throttle_bytes_per_s=20_000_000, dry_run=False)
        assert again.already_done == tuple(sorted(desired)) and again.submitted == () and again.resumed == ()
    traffic.check(at_least=100)


def test_bad_input_is_refused_before_any_change(own_conn: connection.KafkaConnection) -> None:
    topic = f"refuse-{time.monotonic_ns() % 10**6}"
    topics.create_topic(own_conn, topic, 2, 2)
    cases = {
        ((topic, 7), (1, 2)): f"partition {topic}-7 does not exist; {topic} has partitions 0..1",
        ((topic, 0), (1, 99)): f"{topic}-0: replicas \\[1, 99\\] name broker\\(s\\) \\[99\\] that are not registered",
        ((topic, 0), (2, 2)): "name broker\\(s\\) \\[2\\] more than once",
        (("no-such-topic", 0), (1, 2)): "no-such-topic",
    }
    for (key, replicas), message in cases.items():
        with pytest.raises(engine.InvalidReassignment, match=message):
            engine.execute(own_conn, {key: replicas}, throttle_bytes_per_s=1_000, dry_run=False)
    assert reassignments.list_partition_reassignments(own_conn) == {}
    assert throttles_left(own_conn) == {}


def test_the_throttles_of_a_topic_deleted_meanwhile_are_removed_without_error(own_conn: connection.KafkaConnection) -> None:
    topic = f"deleted-{time.monotonic_ns() % 10**6}"
    snap = fill(own_conn, topic, partitions=1, rf=1, records=10, record_bytes=100)
    source = snap.partitions[0].replicas[0]
    moves = engine.moves_for(snap, {(topic, 0): (next(b for b in snap.online_broker_ids if b != source),)})
    record = engine.plan_throttles(own_conn, moves)
    engine.set_throttles(own_conn, record, 1_000_000)
    topics.delete_topics(own_conn, [topic])

    def unknown() -> bool:  # the broker a request goes to learns of the deletion a moment after the controller
        try:
            configs.describe_configs(own_conn, "topic", [topic])
        except UnknownTopic:
            return True
        return False

    try:
        wait_for(unknown, timeout=30, what=f"{topic} to be unknown to the brokers")
        removal = engine.remove_throttles(own_conn, record)
        assert removal.failures == () and removal.keep == ()
    finally:  # whatever failed above, the module's next tests get a cluster without this test's throttles
        if throttles_left(own_conn):
            engine.remove_throttles(own_conn, record)
    wait_for_no_throttles(own_conn)


# -- a drain's cordons (Kafka 4.3+) and replication-factor changes refused (4.1+) --------------------------

def cordon_of(conn: connection.KafkaConnection, broker: int) -> str | None:
    """The dynamic (per-broker) ``cordoned.log.dirs`` of ``broker``, None when it has none."""
    return configs.describe_configs(conn, "broker", [broker], keys=[cordons.CORDON_KEY])[str(broker)].get(
        cordons.CORDON_KEY)


def cordon_becomes(conn: connection.KafkaConnection, broker: int, value: str | None) -> bool:
    """Whether ``broker``'s cordon reads ``value`` within 10 s: a broker applies a config change once the
    controller's metadata reaches it, a moment after the change was accepted."""
    deadline = time.monotonic() + 10
    while (found := cordon_of(conn, broker)) != value and time.monotonic() < deadline:
        time.sleep(0.2)
    return found == value


def placed_off(conn: connection.KafkaConnection, broker: int, prefix: str) -> tuple[int, ...]:
    """Topics created with Kafka's placement until one lands no replica on ``broker`` (the controller learns of a
    cordon from the broker's next heartbeat, so the first may still land there); the brokers of that topic."""
    made: list[str] = []

    def placed() -> tuple[int, ...] | None:
        name = f"{prefix}-{len(made)}"
        made.append(name)
        try:
            topics.create_topic(conn, name, 6, 2)
        except KafkaOpsError as err:  # e.g. too few brokers uncordoned while another test's cordon fades
            log.info("%s not created: %s", name, err)
            return None

        def described() -> Cluster | None:  # the broker asked may learn of the new topic a moment later
            try:
                return metadata.snapshot(conn, topics=[name], offsets=False, sizes=False, groups=False)
            except UnknownTopic:
                return None

        snap = wait_for(described, timeout=10, what=f"{name} described")
        assert isinstance(snap, Cluster)
        used = tuple(sorted({b for p in snap.partitions for b in p.replicas}))
        log.info("%s placed on brokers %s", name, used)
        return None if broker in used else used

    try:
        return wait_for(placed, timeout=30, what=f"a topic placed by Kafka without broker {broker}")  # type: ignore[return-value]
    finally:
        topics.delete_topics(conn, [t for t in made if t in metadata.topic_names(conn)])


def test_a_drain_cordons_its_brokers_while_it_runs_and_lifts_the_cordon_after(
        own_conn: connection.KafkaConnection) -> None:
    drained = 2
    topic = f"cordoned-{time.monotonic_ns() % 10**6}"
    before = fill(own_conn, topic, partitions=2, rf=2, records=200, record_bytes=100, assignment=[(2, 1), (2, 3)])
    assert cordon_of(own_conn, drained) is None
    desired = {(topic, 0): (1, 3), (topic, 1): (3, 1)}
    seen: dict[str, Any] = {}

    def fence(action: str) -> None:  # called before each change: at the batch, the cordon is set
        if action.startswith("submit batch"):
            seen["cordoned"] = cordon_becomes(own_conn, drained, "*")
            seen["placed"] = placed_off(own_conn, drained, f"{topic}-new")

    dry = engine.execute(own_conn, desired, throttle_bytes_per_s=10_000_000, cordon=[drained])
    assert dry.cordons == cordons.CordonRecord() and cordon_of(own_conn, drained) is None  # a dry run cordons nothing
    report = engine.execute(own_conn, desired, throttle_bytes_per_s=10_000_000, dry_run=False, poll_interval_s=0.5,
                            cordon=[drained], fence=fence)
    assert seen["cordoned"] and drained not in seen["placed"], seen
    assert report.cordons.brokers == (drained,) and report.cordons.skipped is None
    assert report.cordons_lifted == cordons.CordonLift(deleted=(drained,))
    assert report.to_dict()["cordons"] == {"prior": [[drained, None]], "kept": [], "skipped": None, "down": []}
    assert cordon_becomes(own_conn, drained, None)
    assert_verified(own_conn, desired, before)


def test_a_failing_drain_lifts_its_cordon_and_gives_back_the_operators(own_conn: connection.KafkaConnection) -> None:
    drained = 3
    topic = f"cordon-fails-{time.monotonic_ns() % 10**6}"
    fill(own_conn, topic, partitions=1, rf=2, records=100, record_bytes=100, assignment=[(3, 1)])
    log_dir = configs.config_value(own_conn, "broker", drained, "log.dirs")
    assert log_dir and "," not in log_dir
    configs.incremental_alter_configs(own_conn, "broker", {drained: [configs.ConfigOp(cordons.CORDON_KEY, "SET",
                                                                                       log_dir)]})
    assert cordon_becomes(own_conn, drained, log_dir)
    try:
        seen = {}

        def fence(action: str) -> None:
            if action.startswith("submit batch"):
                seen["cordoned"] = cordon_becomes(own_conn, drained, "*")
                raise KafkaOpsError("the lock is gone (the test's failure)")

        run = engine.Executor(own_conn, {(topic, 0): (1, 2)}, throttle_bytes_per_s=10_000_000, dry_run=False,
                              cordon=[drained], fence=fence)
        with pytest.raises(KafkaOpsError, match="the test's failure"):
            run.execute()
        assert seen["cordoned"]
        assert run.cordons.prior == ((drained, log_dir),)
        assert run.cordons_lifted == cordons.CordonLift(restored=(drained,))
        assert cordon_becomes(own_conn, drained, log_dir)  # the operator's cordon, as it was
        assert reassignments.list_partition_reassignments(own_conn) == {}
        wait_for_no_throttles(own_conn)
    finally:
        configs.incremental_alter_configs(own_conn, "broker", {drained: [configs.ConfigOp(cordons.CORDON_KEY,
                                                                                           "DELETE")]})
        assert cordon_becomes(own_conn, drained, None)


def test_a_replication_factor_change_is_refused_and_a_move_accepted(own_conn: connection.KafkaConnection) -> None:
    topic = f"rf-guard-{time.monotonic_ns() % 10**6}"
    fill(own_conn, topic, partitions=1, rf=2, records=50, record_bytes=100, assignment=[(1, 2)])
    with pytest.raises(ReplicationFactorChangeRefused, match=rf"{topic}-0: 2 replica\(s\) now, 3 asked"):
        reassignments.alter_partition_reassignments(own_conn, {(topic, 0): (1, 2, 3)})
    with pytest.raises(ReplicationFactorChangeRefused, match=rf"{topic}-0: 2 replica\(s\) now, 1 asked"):
        reassignments.alter_partition_reassignments(own_conn, {(topic, 0): (1,)})
    assert reassignments.list_partition_reassignments(own_conn) == {}
    assert metadata.snapshot(own_conn, topics=[topic], offsets=False, sizes=False, groups=False).partition(
        topic, 0).replicas == (1, 2)
    assert reassignments.alter_partition_reassignments(own_conn, {(topic, 0): (3, 1)}) is True  # v1: refusing
    wait_for(lambda: metadata.snapshot(own_conn, topics=[topic], offsets=False, sizes=False, groups=False).partition(
        topic, 0).replicas == (3, 1), timeout=30, what=f"{topic}-0 moved onto brokers 3 and 1")
