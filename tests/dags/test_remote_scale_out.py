"""The kafka_scale_out DAG (dag.test()) adding a broker on a "remote" host over real SSH: the session's remote
cluster (tests/sshd.py: sshd on loopback, one Unix user per host, the checkout unreadable to them), the DAG's
inventory its Ansible inventory, the login from an Airflow SSH connection (AIRFLOW_CONN_..., a key file) named
by the ``ssh_conn_id`` param. A wrong key or a closed SSH port fails the provision step before anything
changes, naming the host and the failing task, without a retry. A drain that would stop its broker over SSH at
its end checks that login in ``begin``, before any replica moves."""
from __future__ import annotations

import json
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from kafkaops.platform import provision, store
from kafkaops.platform.kafka import connection, metadata
from tests.dags.test_operation_dags import run
from tests.integration.cli.test_reassign import create
from tests.integration.conftest import throttles_left
from tests.sshd import RemoteCluster

pytestmark = pytest.mark.integration

TOPIC = "payments"
RECORDS = 600
NEW = "kafka-6"  # 127.0.0.7, user kafkaops-host7: named in the inventory by its address only


@pytest.fixture(scope="module")
def remote(airflow_db, remote_cluster: RemoteCluster) -> Iterator[RemoteCluster]:
    """The remote cluster's brokers 1 and 2 running, the DAGs' Kafka connection ``kafka_remote`` on them,
    and TOPIC on brokers 1 and 2 only."""
    remote_cluster.up()
    with pytest.MonkeyPatch.context() as env:
        env.setenv("AIRFLOW_CONN_KAFKA_REMOTE", json.dumps(
            {"conn_type": "kafka", "extra": {"bootstrap.servers": remote_cluster.bootstrap}}))
        with connection.connect(remote_cluster.bootstrap, timeout_s=15) as conn:
            create(conn, TOPIC, [[1, 2], [2, 1], [1, 2], [2, 1], [1, 2], [2, 1]], records=RECORDS)
        yield remote_cluster


def scale_out(dagbag, remote: RemoteCluster, ssh_conn_id: str):
    return run(dagbag, "kafka_scale_out", dry_run=False, approval="auto_approve", kafka_conn_id="kafka_remote",
               inventory=str(remote.path), ssh_conn_id=ssh_conn_id, new_broker_ids=[6], new_broker_racks=["rack-6"],
               topics=[TOPIC], throttle_mb_per_s=50)


def ssh_masters() -> list[str]:
    """The SSH connection masters running now (``ssh: <control path> [mux]``)."""
    found = subprocess.run(["pgrep", "-af", r"^ssh: .*\[mux\]"], capture_output=True, text=True).stdout
    return found.splitlines()


def files_of(home: Path) -> dict[str, tuple[int, int]]:
    """What the role put under ``home``'s kafka folder (nothing if none), each file's size and modification
    time; not a running broker's own logs and data, which change while it runs."""
    folder = home / "kafka"
    if not folder.exists():
        return {}
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(folder.rglob("*"))
            if p.is_file() and not {"logs", "data"} & set(p.relative_to(folder).parts)}


def cluster_now(remote: RemoteCluster):
    with connection.connect(remote.bootstrap, timeout_s=15) as conn:
        return (metadata.snapshot(conn, topics=[TOPIC], sizes=False, groups=False), throttles_left(conn),
                metadata.describe_cluster(conn)[0])


@pytest.mark.parametrize("bad", ["wrong key", "closed port"])
def test_a_bad_ssh_connection_fails_the_provision_step_before_any_change(dagbag, remote: RemoteCluster, bad: str,
                                                                         tmp_path: Path, monkeypatch, request) -> None:
    if bad == "wrong key":
        key = tmp_path / "wrong_key"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
        conn, said = remote.connection(NEW, key=key), "Permission denied"
    else:
        # a port bound and never listened on, held for the test: refused, and no other process (another xdist
        # worker's broker or sshd) can take it meanwhile, as it could a port that was merely free (a broken pipe)
        closed = socket.socket()
        closed.bind((remote.hosts[NEW].address, 0))
        request.addfinalizer(closed.close)
        conn, said = remote.connection(NEW, port=closed.getsockname()[1]), "Connection refused"
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_HOSTS_BAD", json.dumps(conn))
    before, _, _ = cluster_now(remote)
    files_before = files_of(remote.hosts[NEW].home)
    dag_run, record = scale_out(dagbag, remote, "kafka_hosts_bad")
    assert str(dag_run.state) == "failed" and record["outcome"] == "failed", record
    steps = {s["name"]: s for s in record["steps"]}
    error = steps["provision"]["error"]
    assert steps["provision"]["status"] == "failed", steps
    assert error.startswith("HostUnreachable: playbook cluster_up.yml failed: host kafka-6 is unreachable at task "
                            "'Look at the host"), error
    assert said in error and "login from SSH connection 'kafka_hosts_bad'" in error, error
    assert steps["provision"]["tries"] == 1, "a login that failed was retried"  # a retry would fail the same way
    assert steps["plan"]["status"] == "success" and not {"set_throttles", "execute_batches"} & set(steps), steps
    assert any("provisioning broker(s) 6 on kafka-6" in n["text"] for n in record["notes"]), record["notes"]
    assert files_of(remote.hosts[NEW].home) == files_before, "the failed run changed files on kafka-6"
    after, throttles, cluster_id = cluster_now(remote)
    assert {p.topic_partition: p.replicas for p in after.partitions} == {p.topic_partition: p.replicas for p in before.partitions}
    assert after.broker_ids == before.broker_ids
    assert throttles == {}
    assert store.current().lease(cluster_id).free


@pytest.mark.parametrize("bad", ["missing connection", "wrong key"])
def test_a_drain_that_stops_its_broker_checks_the_ssh_login_at_begin(dagbag, remote: RemoteCluster, bad: str,
                                                                     tmp_path: Path, monkeypatch) -> None:
    """The stop comes after the replicas moved: a login that cannot work is refused before that, naming
    the connection (and the host), with the cluster as it was and its lock free."""
    if bad == "wrong key":
        key = tmp_path / "wrong_key"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
        monkeypatch.setenv("AIRFLOW_CONN_KAFKA_HOSTS_DRAIN", json.dumps(remote.connection("kafka-2", key=key)))
        # a login with the right key just before: Ansible's default SSH master would outlive that run by 60 s
        # and let the next one to kafka-2's user ride it, whatever key it brings
        provision.run_playbook("hosts_login.yml", remote.path, limit="kafka-2")
        assert not ssh_masters(), "an SSH connection master outlived its Ansible run"
    before, _, cluster_id = cluster_now(remote)
    assert before.replicas_per_broker().get(2), "broker 2 holds no replica: the drain would move nothing"
    remote.write(**{"kafka-2": remote.scale_out_vars("kafka-2")})  # its login from the connection alone
    try:
        dag_run, record = run(dagbag, "kafka_reassign", operation="drain", drain_brokers=[2], stop_drained=True,
                              dry_run=False, approval="auto_approve", kafka_conn_id="kafka_remote",
                              inventory=str(remote.path), ssh_conn_id="kafka_hosts_drain", topics=[TOPIC])
    finally:
        remote.write()
    assert str(dag_run.state) == "failed" and record["outcome"] == "refused", record
    reason = record["outcome_reason"]
    if bad == "wrong key":
        assert reason.startswith("the drain stops broker(s) 2 on kafka-2 through ") and "their login failed at its start" \
            in reason, reason
        assert "host kafka-2 is unreachable at task 'Log in to the host'" in reason and "Permission denied" in reason
        assert "login from SSH connection 'kafka_hosts_drain'" in reason and "no replica moved" in reason, reason
    else:
        assert "SSH connection 'kafka_hosts_drain', which Airflow does not have" in reason, reason
    states = {ti.task_id: str(ti.state) for ti in dag_run.get_task_instances()}
    assert states["begin"] == "failed" and states["execute_batches"] != "success", states
    assert [ti.try_number for ti in dag_run.get_task_instances() if ti.task_id == "begin"] == [1]  # no retry
    after, throttles, _ = cluster_now(remote)
    assert {p.topic_partition: p.replicas for p in after.partitions} == {p.topic_partition: p.replicas for p in before.partitions}
    assert 2 in after.broker_ids and throttles == {}
    lease = store.current().lease(cluster_id)  # None: no run has locked this cluster yet (refused before the lock)
    assert lease is None or lease.free, lease


@pytest.mark.last_in_module  # broker 6 stays: the failing scale-outs above plan onto the same id
def test_the_dag_adds_a_broker_on_a_remote_host_and_moves_replicas_onto_it(dagbag, remote: RemoteCluster,
                                                                            monkeypatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_HOSTS", json.dumps(remote.connection(NEW)))
    dag_run, record = scale_out(dagbag, remote, "kafka_hosts")
    assert str(dag_run.state) == "success" and record["outcome"] == "success", record
    remote.assert_runs_there(NEW)  # as kafka-6's user, from kafka-6's folders, listening only on its address
    # replicas moved onto it, nothing lost, no throttle left, the cluster free again
    after, throttles, cluster_id = cluster_now(remote)
    assert after.replicas_per_broker().get(6, 0) >= 2 and record["plan"]["replica_moves"] >= 2, \
        after.replicas_per_broker()
    assert not after.under_replicated and sum(p.end_offset for p in after.partitions) == RECORDS
    assert throttles == {}
    assert record["throttles_set"] and record["throttles_removed"]
    assert store.current().lease(cluster_id).free
    # the record names the host: the inventory's kafka-6, and broker 6 registered at its address
    steps = {s["name"]: s for s in record["steps"]}
    assert steps["provision"]["status"] == "success" and steps["wait_until_registered"]["registered"]
    assert any(n["text"] == "broker(s) 6 on kafka-6 provisioned" for n in record["notes"]), record["notes"]
    [broker_6] = [b for b in record["after"]["brokers"] if b["id"] == 6]
    assert (broker_6["host"], broker_6["port"]) == (remote.hosts[NEW].address, remote.port), broker_6
