"""Partition reassignment on its own: rebalance the brokers, or drain (decommission) brokers and
optionally stop them through the kafka_broker role. Same gates, approval, teardown and audit."""
from airflow.sdk import Param

from kafkaops.airflow.operation_dag import build_operation_dag, numbers_param

dag = build_operation_dag(
    "kafka_reassign",
    kind=None,
    description="Rebalance, or drain brokers to zero replicas",
    tags=["kafkaops", "kafka", "reassignment"],
    doc_md=__doc__,
    extra_params={
        "operation": Param("rebalance", type="string", enum=["rebalance", "drain"], title="Operation",
                           description="rebalance: even out replicas and leaders over the brokers. drain: move "
                                       "every replica off drain_brokers."),
        "drain_brokers": numbers_param("Brokers to drain", "With operation=drain: the brokers to empty."),
        "stop_drained": Param(False, type="boolean", title="Stop drained brokers",
                              description="After a verified drain, stop the drained brokers through the role "
                                          "(needs the inventory)."),
    },
)
