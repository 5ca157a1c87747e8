"""Write ACLs: a live migration's quiesce denies the producers' principals writes to a topic, and
allows them again. Needs an authorizer on the cluster, and Alter on it (a live migration's preflight checks
both before it changes anything: :func:`kafkaops.rekey.migration.acl_problem`)."""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType,
                                   ResourcePatternType, ResourceType)

from kafkaops.platform.kafka import connection
from kafkaops.platform.kafka.connection import KafkaConnection

#: The broker setting that names the authorizer; empty: the broker enforces no ACL.
AUTHORIZER = "authorizer.class.name"

#: The Kafka error codes that say an ACL request cannot work: no authorizer, or a principal not allowed.
NO_AUTHORIZER = "SECURITY_DISABLED"
NOT_ALLOWED = "CLUSTER_AUTHORIZATION_FAILED"


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


def describe_all(conn: KafkaConnection) -> list[Any]:
    """Every ACL binding the connection may see (one DescribeAcls); its errors classified."""
    every = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,  # type: ignore[arg-type]
                             AclOperation.ANY, AclPermissionType.ANY)  # None: any (the stubs say str)
    return list(connection.wait_for(conn.admin.describe_acls(every, request_timeout=conn.timeout_s), conn,
                                    "the cluster's ACLs"))


def cluster_operations(conn: KafkaConnection) -> set[str]:
    """The operations the connection's principal may do on the Cluster resource, by name (``ALTER``...):
    DescribeCluster with its authorized operations; none at all is an empty set."""
    described = connection.wait_for(conn.admin.describe_cluster(include_authorized_operations=True,
                                                                request_timeout=conn.timeout_s),
                                    conn, "the operations the connection may do on the cluster")
    return {op.name for op in described.authorized_operations or ()}


def allow_writes(conn: KafkaConnection, topic: str, principals: Iterable[str]) -> int:
    """Remove the DENY Write ACLs :func:`deny_writes` created (idempotent); returns how many went."""
    filters = [AclBindingFilter(b.restype, b.name, b.resource_pattern_type, b.principal, b.host, b.operation,
                                b.permission_type) for b in _write_denials(topic, principals)]
    if not filters:
        return 0
    futures = conn.admin.delete_acls(filters, request_timeout=conn.timeout_s)
    return sum(len(connection.wait_for(futures[f], conn, f"removing DENY Write ACLs on {topic}")) for f in filters)

