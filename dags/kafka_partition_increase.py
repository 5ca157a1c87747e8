"""Partition increase: grow a topic in place (refused for a keyed topic unless the ordering break
is accepted), or migrate it into a new topic with the new count, rekeyed by Spark with per-key
order kept and every record exactly once, gated, with consumer offsets translated for the cut-over."""
from kafkaops.airflow.partition_increase import build_partition_increase_dag

dag = build_partition_increase_dag(
    "kafka_partition_increase",
    description="Raise a topic's partition count without breaking per-key order",
    tags=["kafkaops", "kafka", "partitions"],
    doc_md=__doc__,
)
