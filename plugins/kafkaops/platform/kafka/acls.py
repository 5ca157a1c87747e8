"""Write ACLs: a live migration's quiesce denies the producers' principals writes to a topic, and
allows them again. Needs an authorizer on the cluster, and Alter on it (:func:`acl_problem` checks both
before a run changes anything)."""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType,
                                   ResourcePatternType, ResourceType)

from kafkaops.errors import KafkaOpsError
from kafkaops.platform.kafka import configs, connection, metadata
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


def allow_writes(conn: KafkaConnection, topic: str, principals: Iterable[str]) -> int:
    """Remove the DENY Write ACLs :func:`deny_writes` created (idempotent); returns how many went."""
    filters = [AclBindingFilter(b.restype, b.name, b.resource_pattern_type, b.principal, b.host, b.operation,
                                b.permission_type) for b in _write_denials(topic, principals)]
    if not filters:
        return 0
    futures = conn.admin.delete_acls(filters, request_timeout=conn.timeout_s)
    return sum(len(connection.wait_for(futures[f], conn, f"removing DENY Write ACLs on {topic}")) for f in filters)


def acl_problem(conn: KafkaConnection) -> str | None:
    """Why DENY Write ACLs cannot quiesce producers on this cluster, or None when they can, in three
    reads that change nothing: each broker's ``authorizer.class.name`` (a broker without one enforces no
    ACL; a KRaft cluster without any answers DescribeAcls with an empty list, not SECURITY_DISABLED), one
    DescribeAcls (CLUSTER_AUTHORIZATION_FAILED: a principal without Describe on the cluster), then the
    connection's authorized operations on the cluster, which must include Alter (creating and deleting
    ACLs; a principal without any right there is also answered an empty list of ACLs)."""
    brokers = [b.id for b in metadata.describe_cluster(conn)[2]]
    try:
        lacking = [b for b in brokers if not (configs.config_value(conn, "broker", b, AUTHORIZER) or "").strip()]
    except KafkaOpsError as err:
        if err.code == NOT_ALLOWED:
            return (f"the Kafka connection's principal may not read the brokers' configs at {conn.bootstrap}, so it "
                    "cannot manage ACLs either; it needs DescribeConfigs, Describe and Alter on the Cluster resource")
        raise
    if lacking:
        return (f"broker(s) {', '.join(map(str, lacking))} of the cluster at {conn.bootstrap} have no authorizer "
                f"({AUTHORIZER} is not set), so no ACL can deny writes there")
    every = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,  # type: ignore[arg-type]
                             AclOperation.ANY, AclPermissionType.ANY)  # None: any (the stubs say str)
    try:
        connection.wait_for(conn.admin.describe_acls(every, request_timeout=conn.timeout_s), conn, "the cluster's ACLs")
    except KafkaOpsError as err:
        if err.code == NO_AUTHORIZER:  # ZooKeeper-era brokers answer so
            return (f"the cluster at {conn.bootstrap} has no authorizer ({AUTHORIZER} is not set), so no ACL can "
                    "deny writes")
        if err.code == NOT_ALLOWED:
            return (f"the Kafka connection's principal may not describe the ACLs of the cluster at {conn.bootstrap}; "
                    "it needs Describe and Alter on the Cluster resource")
        raise
    described = connection.wait_for(conn.admin.describe_cluster(include_authorized_operations=True,
                                                                request_timeout=conn.timeout_s),
                                    conn, "the operations the connection may do on the cluster")
    allowed = set(described.authorized_operations or ())  # asked for: none means no operation at all
    if not allowed & {AclOperation.ALTER, AclOperation.ALL}:
        may = ", ".join(sorted(op.name for op in allowed)) or "nothing"
        return (f"the Kafka connection's principal may not create or delete ACLs on the cluster at {conn.bootstrap} "
                f"(on the Cluster resource it may: {may}); it needs Alter on the Cluster resource")
    return None
