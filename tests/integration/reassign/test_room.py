"""The receiving brokers' disk room on a real cluster: the log dirs' bytes as DescribeLogDirs gives them, and a
scale-out's check of its new brokers once they answer (the plan could not read them), against the brokers' real
free bytes. The refusal at the plan is run end to end in tests/dags/test_operation_dags.py."""
from __future__ import annotations

from dataclasses import replace

import pytest

from kafkaops.cli import datagen
from kafkaops.platform import lifecycle
from kafkaops.platform.kafka import metadata, topics
from kafkaops.reassign import steps
from kafkaops.reassign.planner import plan_drain
from kafkaops.reassign.planner.room import MIN_FREE_FRACTION, NotEnoughRoom
from kafkaops.reassign.records import PlannedReassignment
from tests.store_fixtures import local_store  # noqa: F401

pytestmark = pytest.mark.integration


def test_a_new_brokers_room_is_read_from_its_log_dirs_and_a_copy_larger_than_it_refuses_the_run(
        kafka_cluster, topic_name, local_store) -> None:  # noqa: F811
    with kafka_cluster.connect() as conn:
        topics.create_topic(conn, topic_name, 1, 1)
        datagen.produce(conn.config, topic_name, datagen.DatagenSpec(records=500, keys=10, record_bytes=200))
        cluster = metadata.snapshot(conn, topics=[topic_name], groups=False)
        disks = metadata.log_dirs(conn, cluster.broker_ids)
    assert sorted(disks) == list(cluster.broker_ids)
    for broker in cluster.brokers:  # the snapshot's brokers carry the same answers
        found = disks[broker.id]
        assert 0 < found.usable_bytes <= found.total_bytes and found.offline == 0, found
        assert broker.disk_total_bytes == found.total_bytes, (broker, found)
    [held] = cluster.partitions
    plan = plan_drain(cluster, list(held.replicas))
    [move] = plan.moves
    [receiver] = move.adding
    ctx = lifecycle.OperationContext(dag_id="kafka_scale_out", run_id="room", conn_config=kafka_cluster.config,
                                     params=steps.OperationParams(kind="scale_out", new_broker_ids=(receiver,)))
    local_store.start_operation("kafka_scale_out", "room", kind="scale_out", triggered_by="t", params={})

    room = steps.check_new_brokers_room(ctx, PlannedReassignment(plan, plan.summary(), 0.0, "").to_dict(), [receiver])
    assert [(b.broker, b.incoming_bytes, b.known) for b in room.brokers] == [(receiver, move.size_bytes, True)]
    assert room.ok and held.size_bytes and move.size_bytes == held.size_bytes
    assert f"disk room checked on receiving broker(s) [{receiver}]" in local_store.events(
        "kafka_scale_out", "room")[-1].data["text"]

    # a copy as large as the broker's free bytes would leave less than the tenth it must keep
    free = disks[receiver].usable_bytes
    huge = replace(plan, moves=(replace(move, size_bytes=free),))
    with pytest.raises(NotEnoughRoom) as refused:
        steps.check_new_brokers_room(ctx, PlannedReassignment(huge, huge.summary(), 0.0, "").to_dict(), [receiver])
    message = str(refused.value)
    assert message.startswith(f"not enough room on the log dirs of broker(s) [{receiver}] for the approved drain "
                              f"plan; no replica moved: broker(s) [{receiver}] were provisioned and hold none, and "
                              "the run's finish stops, removes and unregisters them: "), message
    assert f"({MIN_FREE_FRACTION:.0%}) free" in message and "give the new brokers larger log dirs" in message
    with kafka_cluster.connect() as conn:
        topics.delete_topics(conn, [topic_name])
