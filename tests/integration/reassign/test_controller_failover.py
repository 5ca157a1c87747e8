"""A reassignment outlives its cluster's active controller: killed mid-batch in a quorum of three, a new
controller is elected and the batch finishes under it; nothing lost, no throttle left."""
from __future__ import annotations

import os
import signal
import threading
import time

import pytest
from confluent_kafka.admin import NewTopic

from kafkaops.platform import provision
from kafkaops.platform.kafka import connection, metadata, offsets, reassignments
from kafkaops.cli import datagen
from kafkaops.reassign import engine, verify
from kafkaops.testing import clusters
from tests.conftest import RunningCluster, wait_for
from tests.integration.conftest import throttles_left

pytestmark = pytest.mark.integration

#: 6 MB a partition at 300 kB/s, ~20 s: both moves still copy when a killer thread starved by a loaded CI polls late
RECORDS = 12000


def test_the_active_controller_killed_mid_batch_leaves_the_batch_to_finish_under_the_new_one(
        kafka_cluster: RunningCluster, kafka_conn: connection.KafkaConnection, topic_name: str) -> None:
    spec = kafka_cluster.spec
    leader = clusters.active_controller(spec)
    assert len([n for n in spec.nodes if n.is_controller]) == 3  # a quorum that survives one loss
    a, b = sorted(n.node_id for n in spec.nodes if n.node_id != leader)
    # two partitions on the brokers that stay, each to move to the other: 6 MB each at 300 kB/s, ~20 s
    created = kafka_conn.admin.create_topics([NewTopic(topic_name, 2, replica_assignment=[[a], [b]])],
                                             request_timeout=kafka_conn.timeout_s)[topic_name]
    connection.wait_for(created, kafka_conn, f"the creation of {topic_name}")
    wait_for(lambda: topic_name in metadata.topic_names(kafka_conn), timeout=30, what=f"{topic_name} known")
    datagen.produce(kafka_conn.config, topic_name, datagen.DatagenSpec(records=RECORDS, keys=100, skew="uniform",
                                                                       record_bytes=1000, seed=7))
    before = metadata.snapshot(kafka_conn, include_internal=True, groups=False)
    desired = {(topic_name, 0): (b,), (topic_name, 1): (a,)}
    seen: dict[str, object] = {}

    def kill_the_controller_mid_batch() -> None:
        deadline = time.monotonic() + 60
        with kafka_cluster.connect(timeout_s=5) as conn:
            while time.monotonic() < deadline:
                moving = reassignments.list_partition_reassignments(conn, list(desired))
                if moving:
                    time.sleep(1.0)  # copying, throttled
                    pid = provision.node_pid(spec, leader)
                    assert pid is not None
                    os.kill(pid, signal.SIGKILL)
                    seen["killed_while_moving"] = sorted(moving)
                    return
                time.sleep(0.1)

    killer = threading.Thread(target=kill_the_controller_mid_batch, daemon=True)
    killer.start()
    try:
        report = engine.execute(kafka_conn, desired, throttle_bytes_per_s=300_000, dry_run=False,
                                poll_interval_s=0.5, batch_timeout_s=120)
        killer.join(10)
        assert seen.get("killed_while_moving") == sorted(desired), "the batch ended before the controller was killed"
        assert report.submitted == tuple(sorted(desired)) and len(report.batches) == 1  # submitted once
        assert report.progress is not None and report.progress.done
        kafka_conn.renew()  # the test's own clients may still wait on the controller they knew
        new_leader = clusters.active_controller(spec)
        assert new_leader != leader and new_leader in (a, b)
        _, ends = offsets.list_offsets(kafka_conn, metadata.snapshot(
            kafka_conn, topics=[topic_name], sizes=False, groups=False).partitions)
        assert sum(ends.values()) == RECORDS  # every record kept
    finally:
        provision.cluster_up(spec)  # the killed node back, through the role; the others as they are
        wait_for(lambda: not metadata.snapshot(kafka_conn, include_internal=True, offsets=False, sizes=False,
                                               groups=False).under_replicated, timeout=90,
                 what=f"node {leader} back in every ISR")
    # with every broker back (the cluster is shared: the other topics' replicas on the killed node are whole again,
    # and a down broker's configs cannot be read): the moves verified, not a throttle left
    result = verify.verify_live(kafka_conn, desired, before)
    assert result.ok, result
    assert throttles_left(kafka_conn) == {}
    assert reassignments.list_partition_reassignments(kafka_conn) == {}
