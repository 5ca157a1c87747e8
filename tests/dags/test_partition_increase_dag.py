"""kafka_partition_increase end to end with dag.test() on the package's one-broker cluster: migrate
(rekey backfill in a Spark subprocess, backfill gate, offsets translated and committed for the new
group) and the in_place refusal of a keyed topic."""
from __future__ import annotations

from collections.abc import Iterator

import pytest

from kafkaops.model import Cluster
from kafkaops.platform.kafka import connection, metadata
from kafkaops.platform import store
from kafkaops.platform import provision
from tests.conftest import committed_copy
from tests.dags.conftest import marker_groups, run_partition_increase, with_keyed_topic

pytestmark = pytest.mark.integration

TOPIC = "ledger"
RECORDS = 5_000


@pytest.fixture(scope="module")
def cluster(one_broker_cluster: provision.ClusterSpec) -> Iterator[provision.ClusterSpec]:
    with with_keyed_topic(one_broker_cluster, TOPIC, RECORDS, caught_up_group="billing") as spec:
        yield spec


run = run_partition_increase


def test_in_place_on_a_keyed_topic_is_refused_naming_the_moved_keys(dagbag, cluster) -> None:
    dag_run, record = run(dagbag, topic=TOPIC, new_partition_count=6, mode="in_place", dry_run=False,
                          approval="auto_approve")
    assert str(dag_run.state) == "failed"
    assert record["outcome"] == "refused", record
    assert "distinct keys" in record["outcome_reason"] and "mode=migrate" in record["outcome_reason"]
    with connection.connect(cluster.bootstrap) as conn:
        assert len(metadata.snapshot(conn, topics=[TOPIC], sizes=False, groups=False).partitions) == 3
        assert store.current().lease(metadata.describe_cluster(conn)[0]).free


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
    with connection.connect(cluster.bootstrap) as conn:
        snap = metadata.snapshot(conn, topics=[f"{TOPIC}.v2"], sizes=False)
    moved = {x.partition: x.committed for g in snap.groups if g.group_id == "billing.v2" for x in g.partitions}
    assert moved == after
    # the record ends with the cluster as the run left it (the new topic in it) and what to do now
    assert {f"{TOPIC}.v2", f"{TOPIC}.v2.dlq"} <= set(Cluster.from_dict(record["after"]).topics)
    assert record["next_steps"].startswith(f"{TOPIC}.v2 holds {TOPIC} as it was at the snapshot"), record["next_steps"]
    # past its rollback point (verified, cut over): the backfill's marker groups are deleted, and the record says so
    [deleted] = [n for n in record["notes"] if n.get("markers_deleted")]
    assert deleted["deleted"] and not deleted["left"] and not deleted["error"], deleted
    assert marker_groups(config, f"{TOPIC}.v2") == []
