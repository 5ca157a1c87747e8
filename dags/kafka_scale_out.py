"""Broker addition (scale-out): provision brokers with the kafka_broker role, then move the
fewest replicas onto them under a throttle, with gates, approval, teardown and an audit record."""
from airflow.sdk import Param

from kafkaops.airflow.operation_dag import build_operation_dag, numbers_param, texts_param

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
        "new_broker_ids": numbers_param("New broker ids", "Explicit ids of the brokers to add (hosts kafka-<id> in "
                                                          "an Ansible inventory); empty: the ids after the highest."),
        "new_broker_racks": texts_param("Racks of the new brokers",
                                        "Rack of each new broker, in order; empty: cycle the cluster's racks."),
    },
)
