"""``python -m kafkaops plan | execute | verify | cancel`` in-process against the session's real
3-broker cluster: live plans, a dry run that changes nothing, a run that verifies, a cancel and a
Ctrl-C of slow moves that leave the cluster healthy and unthrottled."""
from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import NewTopic

from kafkaops.platform.kafka import connection, metadata, reassignments
from kafkaops.cli import datagen
from kafkaops.cli.main import build_parser, main
from kafkaops.errors import UnknownTopic
from kafkaops.model import Cluster, TopicPartition
from tests.conftest import RunningCluster, wait_for
from tests.integration.conftest import throttles_left, wait_for_no_throttles

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def create(conn: connection.KafkaConnection, topic: str, assignment: Sequence[Sequence[int]], records: int,
           record_bytes: int = 200) -> Cluster:
    """A topic with exactly ``assignment``, filled with ``records`` records. A creation that timed out (a
    cluster just started, on a loaded machine: librdkafka still "waiting for controller") is asked again
    for up to 2 minutes; one that then finds the topic there (the first request went through) is done."""
    deadline = time.monotonic() + 120
    while True:
        future = conn.admin.create_topics([NewTopic(topic, len(assignment), replica_assignment=[
            list(r) for r in assignment])], request_timeout=30)[topic]
        try:
            future.result(60)
            break
        except KafkaException as err:
            code = err.args[0].code()
            if code == KafkaError.TOPIC_ALREADY_EXISTS:
                break
            if code not in (KafkaError._TIMED_OUT, KafkaError.REQUEST_TIMED_OUT) or time.monotonic() > deadline:
                raise
    wait_for(lambda: len(partitions_of(conn, topic)) == len(assignment), timeout=30, what=f"{topic} in the metadata")
    time.sleep(1)
    datagen.produce(conn.config, topic, datagen.DatagenSpec(records=records, keys=50, skew="uniform",
                                                            record_bytes=record_bytes, seed=9))
    return metadata.snapshot(conn, topics=[topic], groups=False)


def partitions_of(conn: connection.KafkaConnection, topic: str) -> tuple[object, ...]:
    """The topic's partitions, none while the metadata has not caught up with its creation."""
    try:
        return metadata.snapshot(conn, topics=[topic], offsets=False, sizes=False, groups=False).partitions
    except UnknownTopic:
        return ()


def write_plan(path: Path, desired: Mapping[TopicPartition, Sequence[int]]) -> str:
    path.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": list(r)} for (t, p), r in desired.items()]}))
    return str(path)


def replicas(conn: connection.KafkaConnection, topic: str) -> dict[TopicPartition, tuple[int, ...]]:
    return {p.topic_partition: p.replicas for p in metadata.snapshot(conn, topics=[topic], offsets=False, sizes=False,
                                                        groups=False).partitions}


def healthy(conn: connection.KafkaConnection) -> bool:
    return not reassignments.list_partition_reassignments(conn) and not metadata.snapshot(
        conn, include_internal=True, offsets=False, sizes=False, groups=False).under_replicated


def test_live_plan_reads_the_cluster_and_restricts_to_topics(kafka_cluster: RunningCluster,
                                                             kafka_conn: connection.KafkaConnection, topic_name: str,
                                                             tmp_path: Path) -> None:
    create(kafka_conn, topic_name, [(1, 2), (2, 1), (1, 2)], records=300)
    output = tmp_path / "plan.json"
    code, out, err = cli("plan", "--bootstrap-server", kafka_cluster.bootstrap, "--topic", topic_name,
                         "--output", str(output))
    assert code == 0 and err == "", err
    proposed = {(p["topic"], p["partition"]): p["replicas"] for p in json.loads(output.read_text())["partitions"]}
    assert {t for t, _ in proposed} == {topic_name}
    after = {**replicas(kafka_conn, topic_name), **{k: tuple(v) for k, v in proposed.items()}}
    assert sum(3 in r for r in after.values()) == 2  # 6 replicas over 3 brokers: broker 3 takes its 2
    assert f"wrote {len(proposed)} partitions to {output}" in out

    # brokers not registered yet are new brokers of a scale-out; the file is rewritten
    code, out, _ = cli("plan", "--bootstrap-server", kafka_cluster.bootstrap, "--topic", topic_name,
                       "--brokers", "1,2,3,4", "--racks", "4:rack-a", "--output", str(output))
    assert code == 0 and "4 (new)" in out and "scale-out:" in out
    assert any(4 in p["replicas"] for p in json.loads(output.read_text())["partitions"])

    code, out, err = cli("plan", "--bootstrap-server", kafka_cluster.bootstrap, "--topic", "no-such-topic",
                         "--output", str(tmp_path / "other.json"))
    assert code == 2 and out == "" and err.count("\n") == 1 and "no-such-topic" in err
    assert not (tmp_path / "other.json").exists()


def test_dry_run_changes_nothing_then_execute_moves_and_verifies(kafka_cluster: RunningCluster,
                                                                 kafka_conn: connection.KafkaConnection,
                                                                 topic_name: str, tmp_path: Path) -> None:
    bootstrap = kafka_cluster.bootstrap
    create(kafka_conn, topic_name, [(1, 2), (2, 1), (1, 2), (2, 1)], records=2000, record_bytes=300)
    code, out, _ = cli("snapshot", "--bootstrap-server", bootstrap, "--json")
    assert code == 0
    before_file = tmp_path / "before.json"
    before_file.write_text(out)
    output = str(tmp_path / "plan.json")
    assert cli("plan", "--bootstrap-server", bootstrap, "--topic", topic_name, "--output", output)[0] == 0
    desired = {(p["topic"], p["partition"]): tuple(p["replicas"]) for p in json.loads(Path(output).read_text())[
        "partitions"]}
    assert desired and all(3 in r for r in desired.values())
    start = replicas(kafka_conn, topic_name)

    code, out, _ = cli("verify", "--bootstrap-server", bootstrap, "--plan", output, "--before", str(before_file))
    assert code == 1 and "reassignment not verified" in out and "but plan" in out

    code, out, err = cli("execute", "--bootstrap-server", bootstrap, "--plan", output, "--throttle-mb", "10")
    assert code == 0 and err == ""
    assert f"would submit {len(desired)}" in out and "batch 1/1" in out and "dry run: nothing changed" in out
    assert replicas(kafka_conn, topic_name) == start and reassignments.list_partition_reassignments(kafka_conn) == {}
    assert throttles_left(kafka_conn) == {}

    code, out, err = cli("execute", "--bootstrap-server", bootstrap, "--plan", output, "--throttle-mb", "10",
                         "--max-moves-per-broker", "1", "--poll-interval", "0.5", "--execute")
    assert code == 0, err
    assert f"batch {len(desired)}/{len(desired)}" in out and "done: " in out  # broker 3 in every move: 1 a batch
    assert {k: replicas(kafka_conn, topic_name)[k] for k in desired} == desired
    wait_for(lambda: cli("verify", "--bootstrap-server", bootstrap, "--plan", output, "--before",
                         str(before_file))[0] == 0, timeout=30, what="kafkaops verify to exit 0")
    code, out, _ = cli("verify", "--bootstrap-server", bootstrap, "--plan", output)
    assert code == 0 and "reassignment verified" in out
    wait_for_no_throttles(kafka_conn)

    # the same plan again: everything is already as planned, nothing is submitted
    code, out, _ = cli("execute", "--bootstrap-server", bootstrap, "--plan", output, "--throttle-mb", "10",
                       "--execute")
    assert code == 0 and f"{len(desired)} partition(s) already as planned" in out and "submitting 0" in out


def test_a_plan_naming_missing_partitions_is_refused_by_every_command(kafka_cluster: RunningCluster,
                                                                      kafka_conn: connection.KafkaConnection,
                                                                      topic_name: str, tmp_path: Path) -> None:
    create(kafka_conn, topic_name, [(1, 2)], records=10)
    plan = write_plan(tmp_path / "plan.json", {(topic_name, 0): (2, 3), (topic_name, 5): (1, 3)})
    for argv in (["execute", "--throttle-mb", "5", "--execute"], ["verify"], ["cancel"]):
        code, out, err = cli(argv[0], "--bootstrap-server", kafka_cluster.bootstrap, "--plan", plan, *argv[1:])
        assert code == 2 and err.count("\n") == 1, (argv, err)
        assert f"{topic_name}-5" in err and "nothing was changed" in err and "0..0" in err
    assert replicas(kafka_conn, topic_name) == {(topic_name, 0): (1, 2)}
    assert reassignments.list_partition_reassignments(kafka_conn) == {} and throttles_left(kafka_conn) == {}


#: ``python -m kafkaops`` as a shell started from a terminal runs it: SIGINT at Python's default and not blocked,
#: whatever the pytest process left for its children (tests/signal_state.py warns of the test that did).
AS_FROM_A_TERMINAL = ("import runpy, signal; signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT}); "
                      "signal.signal(signal.SIGINT, signal.default_int_handler); "
                      "runpy.run_module('kafkaops', run_name='__main__')")
#: The throttle of the slow move (MB/s). A throttled follower still fetches up to replica.fetch.max.bytes (1 MB)
#: at a time, then waits until that burst leaves the quota's ~11 s window: the move's time is set by its size
#: (~10 MB: about 10 bursts, over a minute and a half), not by a lower rate. At ~2.5 MB, under a CI run's load, the
#: move once ended before the test's Ctrl-C came.
SLOW_THROTTLE_MB = "0.05"


def _slow_plan(conn: connection.KafkaConnection, topic: str, tmp_path: Path) -> tuple[str, dict[TopicPartition, tuple[int, ...]]]:
    create(conn, topic, [(1, 2)], records=20_000, record_bytes=500)  # ~10 MB: see SLOW_THROTTLE_MB
    return write_plan(tmp_path / "plan.json", {(topic, 0): (1, 3)}), {(topic, 0): (1, 2)}


def _assert_reverted(conn: connection.KafkaConnection, topic: str, start: Mapping[TopicPartition, tuple[int, ...]]) -> None:
    wait_for(lambda: healthy(conn), timeout=60, what="nothing in flight and nothing under-replicated")
    assert replicas(conn, topic) == start
    wait_for_no_throttles(conn)


def test_cancel_reverts_an_in_flight_slow_move_and_clears_throttles(kafka_cluster: RunningCluster,
                                                                    kafka_conn: connection.KafkaConnection,
                                                                    topic_name: str, tmp_path: Path) -> None:
    bootstrap = kafka_cluster.bootstrap
    plan, start = _slow_plan(kafka_conn, topic_name, tmp_path)
    args = build_parser().parse_args(["execute", "--bootstrap-server", bootstrap, "--plan", plan, "--throttle-mb",
                                      SLOW_THROTTLE_MB, "--poll-interval", "0.5", "--execute"])
    out, err, codes = io.StringIO(), io.StringIO(), []
    worker = threading.Thread(target=lambda: codes.append(args.func(args, out, err)), daemon=True)
    worker.start()
    wait_for(lambda: (topic_name, 0) in reassignments.list_partition_reassignments(kafka_conn), timeout=30,
             what="the move to be in flight")
    wait_for(lambda: "broker 3" in throttles_left(kafka_conn), timeout=20, what="broker 3 to be throttled")

    code, said, problems = cli("cancel", "--bootstrap-server", bootstrap, "--plan", plan)
    assert code == 0, problems
    assert f"reverted 1 move(s) in flight: {topic_name}-0" in said
    assert "replication throttles cleared on brokers [1, 2, 3]" in said
    worker.join(60)
    assert codes == [1]  # the run saw its move undone: it failed, naming the partition
    assert "kafkaops execute: failed: " in err.getvalue() and f"{topic_name}-0" in err.getvalue()
    _assert_reverted(kafka_conn, topic_name, start)

    code, said, _ = cli("cancel", "--bootstrap-server", bootstrap, "--plan", plan)  # nothing left: still fine
    assert code == 0 and "reverted 0 move(s) in flight" in said


def test_ctrl_c_of_execute_reverts_the_move_and_removes_the_throttles(kafka_cluster: RunningCluster,
                                                                      kafka_conn: connection.KafkaConnection,
                                                                      topic_name: str, tmp_path: Path) -> None:
    plan, start = _slow_plan(kafka_conn, topic_name, tmp_path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "plugins"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-c", AS_FROM_A_TERMINAL, "execute", "--bootstrap-server",
                             kafka_cluster.bootstrap, "--plan", plan, "--throttle-mb", SLOW_THROTTLE_MB, "--poll-interval",
                             "0.5", "--execute"], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: (topic_name, 0) in reassignments.list_partition_reassignments(kafka_conn), timeout=60,
                 what="the move to be in flight")
        wait_for(lambda: "broker 3" in throttles_left(kafka_conn), timeout=20, what="broker 3 to be throttled")
        assert proc.poll() is None and (topic_name, 0) in reassignments.list_partition_reassignments(kafka_conn), \
            f"the move ended before the Ctrl-C (exit {proc.returncode}): nothing left to interrupt"
        signals = [line for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines()
                   if line.startswith(("SigBlk", "SigIgn", "SigCgt"))]
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, (signals, out, err)
    assert "interrupted: reverting the moves in flight" in out and "cancelled: cancelled during batch 1/1" in out
    _assert_reverted(kafka_conn, topic_name, start)
