"""Write ACLs: a live migration's quiesce denies the producers' principals writes to a topic, and
allows them again. Needs an authorizer on the cluster."""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType,
                                   ResourcePatternType, ResourceType)

from kafkaops.platform.kafka import connection
from kafkaops.platform.kafka.connection import KafkaConnection


def _write_denials(topic: str, principals: Iterable[str]) -> list[Any]:
    return [AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, principal, "*", AclOperation.WRITE,
                       AclPermissionType.DENY) for principal in sorted(set(principals))]


def deny_writes(conn: KafkaConnection, topic: str, principals: Iterable[str]) -> int:
    """A DENY Write ACL on ``topic`` for each principal (``User:<name>``): their producers get
    TOPIC_AUTHORIZATION_FAILED. Needs an authorizer on the cluster. Returns how many were created."""
    bindings = _write_denials(topic, principals)
    what = f"DENY Write ACLs on {topic}"
    futures = conn.admin.create_acls(bindings, request_timeout=conn.timeout_s)
    for binding in bindings:
        connection.wait_for(futures[binding], conn, what)
    return len(bindings)


def allow_writes(conn: KafkaConnection, topic: str, principals: Iterable[str]) -> int:
    """Remove the DENY Write ACLs :func:`deny_writes` created (idempotent); returns how many went."""
    filters = [AclBindingFilter(b.restype, b.name, b.resource_pattern_type, b.principal, b.host, b.operation,
                                b.permission_type) for b in _write_denials(topic, principals)]
    if not filters:
        return 0
    futures = conn.admin.delete_acls(filters, request_timeout=conn.timeout_s)
    return sum(len(connection.wait_for(futures[f], conn, f"removing DENY Write ACLs on {topic}")) for f in filters)
