"""Named fixture clusters for unit tests (pure values, no Kafka)."""
from __future__ import annotations

from kafkaops.model import Broker, Cluster, PartitionAssignment


def three_brokers_one_topic(*, sizes: bool = True) -> Cluster:
    """Brokers 1-3 on racks a, b, c; topic orders with 3 partitions at RF 3, rotated leaders."""
    brokers = tuple(Broker(id=i, host="127.0.0.1", port=9090 + i, rack="abc"[i - 1]) for i in (1, 2, 3))
    parts = tuple(
        PartitionAssignment("orders", p, replicas=rep, leader=rep[0], isr=rep, start_offset=0,
                            end_offset=100 * (p + 1), size_bytes=(1000 * (p + 1) if sizes else None))
        for p, rep in enumerate([(1, 2, 3), (2, 3, 1), (3, 1, 2)]))
    return Cluster(brokers=brokers, partitions=parts, cluster_id="c1", controller_id=1)


def three_brokers_one_down() -> Cluster:
    """Broker 3 is offline: replicas still name it, the ISR no longer does."""
    healthy = three_brokers_one_topic()
    parts = tuple(PartitionAssignment(p.topic, p.partition, p.replicas, leader=next(r for r in p.replicas if r != 3),
                                      isr=tuple(r for r in p.replicas if r != 3)) for p in healthy.partitions)
    brokers = tuple(b for b in healthy.brokers if b.id != 3) + (Broker(id=3, online=False),)
    return Cluster(brokers=brokers, partitions=parts, cluster_id="c1", controller_id=1)
