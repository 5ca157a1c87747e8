"""Partition reassignment on its own: rebalance the brokers, or drain (decommission) brokers and
optionally stop them through the kafka_broker role. Same gates, approval, teardown and audit."""
from kafkaops.airflow.operation_dag import REASSIGN_PARAMS, build_operation_dag

dag = build_operation_dag(
    "kafka_reassign",
    kind=None,
    description="Rebalance, or drain brokers to zero replicas",
    tags=["kafkaops", "kafka", "reassignment"],
    doc_md=__doc__,
    extra_params=REASSIGN_PARAMS,
)
