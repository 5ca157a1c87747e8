"""Broker addition (scale-out): provision brokers with the kafka_broker role, then move the
fewest replicas onto them under a throttle, with gates, approval, teardown and an audit record."""
from kafkaops.airflow.operation_dag import SCALE_OUT_PARAMS, build_operation_dag

dag = build_operation_dag(
    "kafka_scale_out",
    kind="scale_out",
    description="Add brokers and move the fewest replicas onto them",
    tags=["kafkaops", "kafka", "scale-out"],
    doc_md=__doc__,
    extra_params=SCALE_OUT_PARAMS,
)
