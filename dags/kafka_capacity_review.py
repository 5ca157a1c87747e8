"""Capacity review, daily by default: snapshot, history, optional Spark key skew, findings and
recommendations with plots (a report under the state dir, linked in the run's record), and on
request a proposed kafka_scale_out run that waits for a person's approval."""
from kafkaops.airflow.capacity_review import build_capacity_review_dag, schedule_from_env

dag = build_capacity_review_dag(
    "kafka_capacity_review",
    schedule=schedule_from_env(),
    description="Review Kafka capacity and recommend partitions, brokers and key changes",
    tags=["kafkaops", "kafka", "capacity"],
    doc_md=__doc__,
)
