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
  wait:
    description: >-
      seconds to keep asking (every 0.2 s, over one connection) until the node is registered and in the
      ISR of all its partitions; 0 asks once. The task's until/retries/delay still bound the whole check.
    type: float
    default: 0
"""

import time

from ansible.module_utils.basic import AnsibleModule


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "bootstrap": {"type": "str", "required": True},
            "node_id": {"type": "int", "required": True},
            "client_config": {"type": "dict", "default": {}, "no_log": True},
            "timeout": {"type": "float", "default": 5.0},
            "wait": {"type": "float", "default": 0.0},
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
    deadline = time.monotonic() + params["wait"]
    while True:
        answer = ask(admin, params["node_id"], params["timeout"])
        if (answer["registered"] and not answer["out_of_sync"]) or time.monotonic() >= deadline:
            module.exit_json(changed=False, **answer)
            return
        time.sleep(0.2)


def ask(admin, node: int, timeout: float) -> dict:
    """One look at the cluster: the brokers the controller lists, and the partitions of ``node``
    it is not in the ISR of. An unreachable broker is an answer (``error``), not a failure."""
    try:
        cluster = admin.describe_cluster(request_timeout=timeout).result(timeout=timeout + 1)
        metadata = admin.list_topics(timeout=timeout)
    except Exception as err:
        return {"registered": False, "brokers": [], "controller": None, "error": str(err),
                "under_replicated": None, "out_of_sync": []}
    brokers = sorted(n.id for n in cluster.nodes)
    partitions = [(topic.topic, p) for topic in metadata.topics.values() for p in topic.partitions.values()]
    return {
        "registered": node in brokers,
        "brokers": brokers,
        "controller": cluster.controller.id if cluster.controller else None,
        "cluster_id": cluster.cluster_id,
        "under_replicated": sum(1 for _, p in partitions if len(p.isrs) < len(p.replicas)),
        "out_of_sync": sorted(f"{t}-{p.id}" for t, p in partitions if node in p.replicas and node not in p.isrs),
        "error": None,
    }

if __name__ == "__main__":
    main()
