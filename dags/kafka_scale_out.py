"""Broker addition (scale-out): provision brokers with the kafka_broker role, then move the
fewest replicas onto them under a throttle, with gates, approval, teardown and an audit record."""
from airflow.sdk import Param

from kafkaops.airflow.lifecycle import build_operation_dag

dag = build_operation_dag(
    "kafka_scale_out",
    kind="scale_out",
    description="Add brokers and move the fewest replicas onto them",
    tags=["kafkaops", "kafka", "scale-out"],
    doc_md=__doc__,
    extra_params={
        "add_brokers": Param(1, type="integer", minimum=0, title="Brokers to add",
                             description="How many brokers to add (ids follow the highest); ignored when "
                                         "new_broker_ids is given."),
        "new_broker_ids": Param([], type="array", items={"type": "integer"}, title="New broker ids",
                                description="Explicit ids of the brokers to add (hosts kafka-<id> in an Ansible "
                                            "inventory)."),
        "new_broker_racks": Param([], type="array", items={"type": "string"}, title="Racks of the new brokers",
                                  description="Rack of each new broker, in order; default: cycle the cluster's racks."),
    },
)
