from __future__ import annotations

import json

import pytest

from kafkaops.errors import UnknownTopic
from kafkaops.model import Broker, Cluster, ConsumerGroup, GroupPartitionLag, ModelError, PartitionAssignment
from tests.unit.clusters import three_brokers_one_down, three_brokers_one_topic


def test_load_per_broker_counts_replicas_leaders_and_bytes() -> None:
    cluster = three_brokers_one_topic()
    assert cluster.replicas_per_broker() == {1: 3, 2: 3, 3: 3}
    assert cluster.leaders_per_broker() == {1: 1, 2: 1, 3: 1}
    assert cluster.bytes_per_broker() == {1: 6000, 2: 6000, 3: 6000}
    assert cluster.racks == ("a", "b", "c")
    assert cluster.partition("orders", 1).records == 200


def test_health_of_a_cluster_with_a_broker_down() -> None:
    cluster = three_brokers_one_down()
    assert cluster.offline_broker_ids == (3,)
    assert cluster.online_broker_ids == (1, 2)
    assert len(cluster.under_replicated) == 3
    assert cluster.offline_partitions == ()


def test_with_assignments_returns_a_new_cluster_and_leaves_the_old_one() -> None:
    cluster = three_brokers_one_topic()
    moved = cluster.with_assignments({("orders", 0): (1, 2, 4)})
    assert moved.partition("orders", 0).replicas == (1, 2, 4)
    assert moved.partition("orders", 0).leader == 1
    assert cluster.partition("orders", 0).replicas == (1, 2, 3)
    assert moved.replicas_per_broker()[4] == 1


def test_round_trip_through_json() -> None:
    cluster = three_brokers_one_topic()
    cluster = Cluster(brokers=cluster.brokers, partitions=cluster.partitions, cluster_id="c1", controller_id=2,
                      groups=(ConsumerGroup("g", "STABLE", 2, (GroupPartitionLag("orders", 0, 40, 100),)),))
    again = Cluster.from_dict(json.loads(json.dumps(cluster.to_dict())))
    assert again == cluster
    assert again.group("g").total_lag == 60


@pytest.mark.parametrize("build, message", [
    (lambda: PartitionAssignment("t", 0, (1, 1, 2)), r"t-0: replicas \[1, 1, 2\] name a broker twice"),
    (lambda: PartitionAssignment("t", 0, ()), "t-0: no replicas"),
    (lambda: PartitionAssignment("t", -1, (1,)), "cannot be negative"),
    (lambda: Cluster(brokers=(Broker(1), Broker(1)), partitions=()), r"broker ids \[1\] appear more than once"),
    (lambda: Cluster(brokers=(Broker(1),), partitions=(PartitionAssignment("t", 0, (1,)),) * 2),
     "partition t-0 appears twice"),
])
def test_invalid_models_are_refused_with_the_object_named(build, message: str) -> None:
    with pytest.raises(ModelError, match=message):
        build()


def test_unknown_topic_and_partition_are_named() -> None:
    cluster = three_brokers_one_topic()
    with pytest.raises(UnknownTopic, match="'payments' does not exist.*orders"):
        cluster.partitions_of("payments")
    with pytest.raises(ModelError, match=r"orders-9 does not exist; orders has partitions 0..2"):
        cluster.partition("orders", 9)


def test_lag_counts_a_partition_without_commit_from_zero() -> None:
    assert GroupPartitionLag("t", 0, None, 50).lag == 50
    assert GroupPartitionLag("t", 0, 20, 50).lag == 30
    assert GroupPartitionLag("t", 0, 20, None).lag is None
