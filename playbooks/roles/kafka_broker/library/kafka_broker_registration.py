#!/usr/bin/python
"""Ansible module: is a Kafka node registered (and unfenced) with the controller, and are its
partitions in sync?

Runs on the Ansible controller (delegate_to: localhost) with a Python that has
confluent-kafka, and asks the cluster through the node's own listener with the full client
config (security protocol, SASL, TLS), which it never returns.
"""
from __future__ import annotations

DOCUMENTATION = r"""
module: kafka_broker_registration
short_description: Report which brokers the KRaft controller has registered.
options:
  bootstrap:
    description: host:port of a broker listener.
    required: true
    type: str
  node_id:
    description: the node that must be registered.
    required: true
    type: int
  client_config:
    description: librdkafka settings beside bootstrap.servers (security.protocol, sasl.*, ssl.*).
    type: dict
    default: {}
  timeout:
    description: seconds to wait for an answer.
    type: float
    default: 5
"""

from ansible.module_utils.basic import AnsibleModule


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "bootstrap": {"type": "str", "required": True},
            "node_id": {"type": "int", "required": True},
            "client_config": {"type": "dict", "default": {}, "no_log": True},
            "timeout": {"type": "float", "default": 5.0},
        },
        supports_check_mode=True,
    )
    try:
        from confluent_kafka.admin import AdminClient
    except ImportError as err:
        module.fail_json(msg=f"confluent-kafka is missing on the Ansible controller's Python: {err}; "
                             "set kafka_broker_check_python to the kafkaops virtualenv's python")
        return
    params = module.params
    config = {str(k): str(v) for k, v in (params["client_config"] or {}).items()}
    admin = AdminClient({**config, "bootstrap.servers": params["bootstrap"],
                         "socket.connection.setup.timeout.ms": int(params["timeout"] * 1000),
                         "log_level": 0})
    try:
        cluster = admin.describe_cluster(request_timeout=params["timeout"]).result(timeout=params["timeout"] + 1)
        metadata = admin.list_topics(timeout=params["timeout"])
    except Exception as err:  # an unreachable broker is an answer, not a module failure
        module.exit_json(changed=False, registered=False, brokers=[], controller=None, error=str(err),
                         under_replicated=None, out_of_sync=[])
        return
    brokers = sorted(node.id for node in cluster.nodes)
    node = params["node_id"]
    partitions = [(topic.topic, p) for topic in metadata.topics.values() for p in topic.partitions.values()]
    module.exit_json(
        changed=False,
        registered=node in brokers,
        brokers=brokers,
        controller=cluster.controller.id if cluster.controller else None,
        cluster_id=cluster.cluster_id,
        under_replicated=sum(1 for _, p in partitions if len(p.isrs) < len(p.replicas)),
        out_of_sync=sorted(f"{t}-{p.id}" for t, p in partitions if node in p.replicas and node not in p.isrs),
        error=None,
    )


if __name__ == "__main__":
    main()
