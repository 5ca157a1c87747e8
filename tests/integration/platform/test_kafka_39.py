"""Kafka 3.9 as a target: one 3-node KRaft cluster of the 3.9 line (the jar set ``broker-3.9``, log4j 1
through reload4j, a static controller quorum), brought up by the role through the same ClusterSpec path
as the 4.x clusters, then the two operations operators run most, as DAG runs (dag.test()): a scale-out
that adds a fourth 3.9 broker through the role, and a partition increase in ``migrate`` mode (the Spark
rekey backfill, its gate, consumer offsets translated)."""
from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from kafkaops.cli import datagen
from kafkaops.errors import UnknownTopic
from kafkaops.testing import clusters
from kafkaops.platform import provision, store
from kafkaops.platform.kafka import connection, metadata, offsets, reassignments, records, topics
from kafkaops.platform.partitioner import partition_for
from kafkaops.reassign import cordons, engine
from kafkaops.platform.paths import jar_dir
from kafkaops.testing.clusters import TEST_BROKER_CONFIG
from tests.conftest import committed_copy, wait_for
from tests.dags.conftest import kafka_default_connection
from tests.dags.test_operation_dags import run
from tests.integration.conftest import throttles_left, wait_for_no_throttles

pytestmark = pytest.mark.integration

ORDERS = "orders"
LEDGER = "ledger"
LEDGER_RECORDS = 3_000


def kafka_39_release() -> str:
    """The 3.9.x release of the jar set (``make setup``'s jvm/broker-3.9), e.g. "3.9.2"."""
    jar = next(jar_dir("broker-3.9").glob("kafka-clients-*.jar"))
    return re.fullmatch(r"kafka-clients-(.+)\.jar", jar.name).group(1)


def running_release(spec: provision.ClusterSpec, node_id: int) -> str:
    """The Kafka release node ``node_id`` says it started as (its server.log, written through log4j 1)."""
    log = (spec.base_dir / f"node-{node_id}" / "logs" / "server.log").read_text(errors="replace")
    found = re.findall(r"Kafka version: (\S+)", log)
    assert found, f"node {node_id}'s server.log names no Kafka version; its tail: {log[-1500:]}"
    return found[-1]


@pytest.fixture(scope="module")
def cluster(airflow_db) -> Iterator[tuple[provision.ClusterSpec, Path]]:
    """Three combined 3.9 nodes (a quorum of three static voters), for this module only; its spec
    is the DAGs' inventory and grows with the scale-out."""
    with clusters.temporary_cluster("kafkaops-k39-", brokers=3, controllers=3, kafka_version="3.9",
                                    extra_config=TEST_BROKER_CONFIG) as spec, \
            kafka_default_connection(spec.bootstrap):
        spec_path = spec.save(spec.base_dir / "spec.json")
        with connection.connect(spec.bootstrap) as conn:
            topics.create_topic(conn, ORDERS, 6, 3)
            datagen.produce(conn.config, ORDERS, datagen.DatagenSpec(records=3_000, keys=100, record_bytes=200))
            topics.create_topic(conn, LEDGER, 3, 3)
            datagen.produce(conn.config, LEDGER, datagen.DatagenSpec(records=LEDGER_RECORDS, keys=100,
                                                                     record_bytes=200))
        yield spec, spec_path


def test_the_cluster_runs_kafka_3_9_with_its_own_config(cluster) -> None:
    spec, _ = cluster
    release = kafka_39_release()
    assert release.startswith("3.9.")
    assert {n.node_id: running_release(spec, n.node_id) for n in spec.nodes} == {1: release, 2: release, 3: release}
    config = spec.base_dir / "node-1" / "config"
    assert (config / "log4j.properties").is_file() and not (config / "log4j2.yaml").exists()
    server = (config / "server.properties").read_text()
    voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in spec.nodes)
    assert f"controller.quorum.voters={voters}\n" in server
    assert "share.coordinator" not in server  # a 4.x setting a 3.9 broker would warn about
    with connection.connect(spec.bootstrap) as conn:
        _, controller, brokers = metadata.describe_cluster(conn)
    # the module's three nodes are registered brokers (the scale-out test, which may run first in a shuffled
    # order, adds broker 4); a KRaft cluster names any live broker its "controller" to clients, 4 too
    ids = {b.id for b in brokers}
    assert {1, 2, 3} <= ids and controller in ids


def test_scale_out_adds_a_3_9_broker_and_moves_replicas_onto_it(dagbag, cluster) -> None:
    spec, spec_path = cluster
    dag_run, record = run(dagbag, "kafka_scale_out", dry_run=False, approval="auto_approve",
                          inventory=str(spec_path), add_brokers=1, topics=[ORDERS], throttle_mb_per_s=20)
    assert str(dag_run.state) == "success", record
    assert record["outcome"] == "success", record
    assert [(g["gate"], g["ok"]) for g in record["gates"]] == [("preflight", True), ("plan", True),
                                                                ("post_move", True)]
    assert record["throttles_set"] and record["throttles_removed"]
    grown = provision.ClusterSpec.load(spec_path)
    assert [n.node_id for n in grown.nodes] == [1, 2, 3, 4] and grown.kafka_version == "3.9"
    assert running_release(grown, 4) == kafka_39_release()
    with connection.connect(grown.bootstrap) as conn:
        snap = metadata.snapshot(conn, topics=[ORDERS], sizes=False, groups=False)
        assert throttles_left(conn) == {}
        assert store.current().lease(metadata.describe_cluster(conn)[0]).free
    # as on 4.x: broker 4 joins rack-a, so it and broker 1 share rack-a's 6 replicas; 3 moves
    assert snap.replicas_per_broker() == {1: 3, 2: 6, 3: 6, 4: 3}
    assert record["plan"]["replica_moves"] == 3
    assert all(set(p.isr) == set(p.replicas) and len(p.replicas) == 3 for p in snap.partitions)


def test_migrate_rekeys_into_more_partitions_and_translates_offsets(dagbag, cluster) -> None:
    spec, _ = cluster
    with connection.connect(spec.bootstrap, timeout_s=60) as conn:  # a group that has caught up
        ends = {p: e for p, (_, e) in records.end_offsets(conn.config, LEDGER).items()}
        offsets.commit_group_offsets(conn, "billing", LEDGER, ends)
    dag_run, record = run(dagbag, "kafka_partition_increase", topic=LEDGER, new_partition_count=6, mode="migrate",
                          key_rule="field:key", dry_run=False, approval="auto_approve", cutover_group_suffix=".v2")
    assert str(dag_run.state) == "success", record
    assert record["outcome"] == "success", record
    assert [(g["gate"], g["ok"]) for g in record["gates"]] == [("preflight", True), ("backfill", True)]
    config = {"bootstrap.servers": spec.bootstrap}
    source = records.read_topic(config, LEDGER)
    target = records.read_topic(config, f"{LEDGER}.v2")
    assert len(target) == len(source) == LEDGER_RECORDS
    assert Counter(r.key for r in target) == Counter(json.loads(r.value)["key"].encode() for r in source)
    misplaced = [(r.key, r.partition) for r in target if r.partition != partition_for(r.key, 6)]
    assert misplaced == [], f"{len(misplaced)} records off their murmur2 partition, e.g. {misplaced[:5]}"
    seqs: dict[bytes, list[int]] = {}
    for r in sorted(target, key=lambda r: (r.partition, r.offset)):
        seqs.setdefault(r.key, []).append(json.loads(r.value)["seq"])
    assert {k: s for k, s in seqs.items() if s != list(range(len(s)))} == {}  # each key whole and in order
    cut = next(n for n in record["notes"] if "offset_translation" in n)["offset_translation"]
    _, after = committed_copy(config, f"{LEDGER}.v2")
    assert cut["billing"]["target"] == {str(p): e for p, e in after.items()}
    with connection.connect(spec.bootstrap) as conn:
        snap = metadata.snapshot(conn, topics=[f"{LEDGER}.v2"], sizes=False)
    moved = {x.partition: x.committed for g in snap.groups if g.group_id == "billing.v2" for x in g.partitions}
    assert moved == after


def _leader(conn: connection.KafkaConnection, topic: str) -> int | None:
    """The leader of ``topic``-0, or None while the broker asked does not have the topic in its metadata yet
    (another broker may have answered the check before: CI at 6ef625b)."""
    try:
        return metadata.snapshot(conn, topics=[topic], offsets=False, sizes=False, groups=False).partition(topic, 0).leader
    except UnknownTopic:
        return None


def test_a_3_9_broker_gets_reassignments_without_the_replication_factor_guard_and_no_cordon(cluster) -> None:
    """Kafka 3.9 speaks AlterPartitionReassignments v0 (no AllowReplicationFactorChange) and takes no cordon
    (metadata.version below 4.3-IV0): the same engine moves a drained broker's replica there, sends v0 and
    records why it cordoned nothing."""
    from confluent_kafka.admin import NewTopic

    spec, _ = cluster
    topic = "rf-guard-39"
    with connection.connect(spec.bootstrap) as conn:
        future = conn.admin.create_topics([NewTopic(topic, 1, replica_assignment=[[2, 1]])],
                                          request_timeout=conn.timeout_s)[topic]
        connection.wait_for(future, conn, f"the creation of {topic}")
        wait_for(lambda: topic in metadata.topic_names(conn), timeout=30, what=f"{topic} in the metadata")
        wait_for(lambda: _leader(conn, topic) == 2, timeout=30, what=f"{topic} led by 2")
        assert (metadata.metadata_version(conn) or 0) < cordons.CORDON_LEVEL
        assert reassignments.alter_partition_reassignments(conn, {(topic, 0): (1, 2)}) is False  # v0: no field
        wait_for(lambda: not reassignments.list_partition_reassignments(conn), timeout=30, what=f"{topic} reordered")
        report = engine.execute(conn, {(topic, 0): (1, 3)}, throttle_bytes_per_s=10_000_000, dry_run=False,
                                poll_interval_s=0.5, cordon=[2])
        assert report.cordons.brokers == () and "below 30 (Kafka 4.3-IV0)" in (report.cordons.skipped or "")
        assert report.cordons_lifted == cordons.CordonLift()
        assert metadata.snapshot(conn, topics=[topic], offsets=False, sizes=False, groups=False).partition(
            topic, 0).replicas == (1, 3)
        wait_for_no_throttles(conn)
