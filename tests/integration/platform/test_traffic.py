"""The traffic check on the shared real cluster: through a reassignment with leader changes it counts
every record, and nothing is lost, duplicated or out of order."""
from __future__ import annotations

import time

from kafkaops.cli import datagen
from kafkaops.platform.kafka import connection, metadata, reassignments, topics
from kafkaops.testing import traffic
from kafkaops.reassign import engine
from tests.conftest import RunningCluster, wait_for


def test_traffic_through_a_reassignment_loses_duplicates_and_reorders_nothing(
        kafka_cluster: RunningCluster, kafka_conn: connection.KafkaConnection, topic_name: str) -> None:
    topics.create_topic(kafka_conn, topic_name, 3, 2)
    datagen.produce(kafka_cluster.config, topic_name, datagen.DatagenSpec(records=2000, keys=50, record_bytes=200))
    before = metadata.snapshot(kafka_conn, topics=[topic_name], groups=False)
    brokers = set(before.broker_ids)
    # each partition gets the broker it lacks, as its new preferred leader: data moves and leaders change
    desired = {p.topic_partition: (next(iter(sorted(brokers - set(p.replicas)))), p.replicas[0]) for p in before.partitions}

    with traffic.TrafficCheck(kafka_cluster.config, topic_name, keys=20, rate_per_s=300) as check:
        time.sleep(1.0)
        report = engine.execute(kafka_conn, desired, throttle_bytes_per_s=5_000_000, dry_run=False,
                                poll_interval_s=0.5)
        assert sorted(report.submitted) == sorted(desired) and report.progress is not None and report.progress.done
        reassignments.elect_preferred_leaders(kafka_conn, list(desired))
        wait_for(lambda: all(p.leader == p.replicas[0] for p in metadata.snapshot(
            kafka_conn, topics=[topic_name], offsets=False, sizes=False, groups=False).partitions),
            timeout=30, what=f"every partition of {topic_name} to be led by its new first replica")
        time.sleep(1.0)  # keep producing across the leader changes
        # the check's group reads the topic (it shows once it has committed there: on a loaded machine, later)
        reading = wait_for(lambda: next((g for g in metadata.snapshot(kafka_conn, topics=[topic_name]).groups
                                         if g.group_id == check.group_id), None),
                           timeout=60, what=f"group {check.group_id} reading {topic_name}")
        assert reading.members == 1, reading
    result = check.stop()

    assert result.cluster_ok, str(result)  # a duplicate only where the producer changed its epoch
    assert result.acknowledged == result.sent >= 300, str(result)
    assert result.received - result.redelivered == result.acknowledged + result.duplicated and result.keys == 20
    assert (result.lost, result.out_of_order) == (0, 0)
    assert check.identity.lines > 0  # the producer's idempotence log reaches the check (its epoch changes do)
    # the consumer read this check's records only, from its own group, which it deleted at the end
    assert len(check.received) == result.received and check.group_id.startswith("kafkaops-traffic-")
    assert check.group_id not in {g.group_id for g in metadata.snapshot(kafka_conn).groups}


def test_a_missing_topic_is_refused_naming_it(kafka_cluster: RunningCluster, topic_name: str) -> None:
    check = traffic.TrafficCheck(kafka_cluster.config, topic_name)
    try:
        check.start(timeout_s=10)
    except traffic.TrafficError as err:
        assert topic_name in str(err) and "create it first" in str(err)
    else:
        raise AssertionError(f"a traffic check on the missing topic {topic_name} started")
    finally:
        check.stop(timeout_s=1)
