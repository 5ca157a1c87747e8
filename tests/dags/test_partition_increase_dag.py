"""kafka_partition_increase end to end with dag.test() on the package's one-broker cluster: migrate
(rekey backfill in a Spark subprocess, backfill gate, offsets translated and committed for the new
group) and the in_place refusal of a keyed topic."""
from __future__ import annotations

from collections.abc import Iterator

import pytest

from kafkaops.platform import admin
from kafkaops.platform import state, store
from kafkaops.platform import provision
from tests.conftest import committed_copy, run_dag
from tests.dags.conftest import kafka_default_connection, keyed_topic

pytestmark = pytest.mark.integration

TOPIC = "ledger"
RECORDS = 5_000


@pytest.fixture(scope="module")
def cluster(one_broker_cluster: provision.ClusterSpec) -> Iterator[provision.ClusterSpec]:
    with kafka_default_connection(one_broker_cluster.bootstrap):
        with admin.connect(one_broker_cluster.bootstrap) as conn:
            keyed_topic(conn, TOPIC, RECORDS)
            ends = {p: e for p, (_, e) in admin.end_offsets(conn.config, TOPIC).items()}
            admin.commit_group_offsets(conn, "billing", TOPIC, ends)  # a group that has caught up
        yield one_broker_cluster


def run(dagbag, **conf):
    dag_run = run_dag(dagbag, "kafka_partition_increase", **conf)
    return dag_run, state.AuditLog.for_run("kafka_partition_increase", dag_run.run_id).summary()


def test_in_place_on_a_keyed_topic_is_refused_naming_the_moved_keys(dagbag, cluster) -> None:
    dag_run, record = run(dagbag, topic=TOPIC, new_partition_count=6, mode="in_place", dry_run=False,
                          approval="auto_approve")
    assert str(dag_run.state) == "failed"
    assert record["outcome"] == "refused", record
    assert "distinct keys" in record["outcome_reason"] and "mode=migrate" in record["outcome_reason"]
    with admin.connect(cluster.bootstrap) as conn:
        assert len(admin.snapshot(conn, topics=[TOPIC], sizes=False, groups=False).partitions) == 3
        assert store.current().lease(admin.describe_cluster(conn)[0]).free


def test_migrate_rekeys_gates_and_translates_offsets(dagbag, cluster) -> None:
    dag_run, record = run(dagbag, topic=TOPIC, new_partition_count=6, mode="migrate", key_rule="field:key",
                          dry_run=False, approval="auto_approve", cutover_group_suffix=".v2")
    assert str(dag_run.state) == "success", record
    assert record["outcome"] == "success", record
    assert [(g["gate"], g["ok"]) for g in record["gates"]] == [("preflight", True), ("backfill", True)]
    cut = next(n for n in record["notes"] if "offset_translation" in n)["offset_translation"]
    assert set(cut) == {"billing"} and cut["billing"]["redelivered"] == 0
    config = {"bootstrap.servers": cluster.bootstrap}
    copied, after = committed_copy(config, f"{TOPIC}.v2")
    assert len(copied) == RECORDS
    assert cut["billing"]["target"] == {str(p): e for p, e in after.items()}
    with admin.connect(cluster.bootstrap) as conn:
        snap = admin.snapshot(conn, topics=[f"{TOPIC}.v2"], sizes=False)
    moved = {x.partition: x.committed for g in snap.groups if g.group_id == "billing.v2" for x in g.partitions}
    assert moved == after
