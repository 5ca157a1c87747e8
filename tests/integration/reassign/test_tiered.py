"""Tiered storage (KIP-405) on a real Kafka 4.4 cluster with Kafka's own LocalTieredStorage plugin: a new
replica of a tiered topic copies the leader's local log only, and the plan, the approval, the record and
the engine's progress count that, not what was produced."""
from __future__ import annotations

import io
import logging
import time
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
from confluent_kafka.admin import NewTopic

from kafkaops.cli import datagen
from kafkaops.cli.main import main
from kafkaops.platform import lifecycle, provision, render
from kafkaops.platform.kafka import configs, connection, metadata
from kafkaops.reassign import approval, engine, steps
from kafkaops.reassign.planner.plan import ReassignmentPlan
from kafkaops.testing.clusters import tiered_cluster
from tests.conftest import wait_for
from tests.store_fixtures import local_store  # noqa: F401

pytestmark = pytest.mark.integration
log = logging.getLogger(__name__)

TIERED, PLAIN = "tiered", "plain"
SEGMENT = 1 << 20  # Kafka's smallest segment.bytes
RECORDS, RECORD_BYTES = 8_000, 1_000  # about 8 segments


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[provision.ClusterSpec, Path]]:
    """Two brokers (node 1 also the controller), tiered storage on, LocalTieredStorage in a shared folder."""
    with tiered_cluster(brokers=2, controllers=1) as found:
        yield found


def create(conn: connection.KafkaConnection, topic: str, config: dict[str, str]) -> None:
    """``topic``: one partition, its one replica on broker 1 (the broker the test drains)."""
    future = conn.admin.create_topics([NewTopic(topic, 1, replica_assignment=[[1]], config=config)],
                                      request_timeout=conn.timeout_s)[topic]
    connection.wait_for(future, conn, f"the creation of {topic}")
    wait_for(lambda: topic in metadata.topic_names(conn), timeout=30, what=f"{topic} in the metadata")


def test_a_tiered_partitions_move_counts_the_leaders_local_log_only(cluster, local_store,  # noqa: F811
                                                                    tmp_path: Path) -> None:
    spec, remote = cluster
    with connection.connect(spec.bootstrap) as conn:
        create(conn, TIERED, {"remote.storage.enable": "true", "segment.bytes": str(SEGMENT),
                              "local.retention.bytes": str(SEGMENT)})
        create(conn, PLAIN, {"segment.bytes": str(SEGMENT)})
        produced = datagen.produce(conn.config, TIERED, datagen.DatagenSpec(
            records=RECORDS, keys=100, skew="uniform", record_bytes=RECORD_BYTES, seed=5)).bytes
        datagen.produce(conn.config, PLAIN, datagen.DatagenSpec(records=500, keys=10, skew="uniform",
                                                                record_bytes=RECORD_BYTES, seed=6))

        def local_log() -> int:
            return metadata.replica_sizes(conn, [(TIERED, 0)], [1]).get((TIERED, 0, 1), produced)

        # the rolled segments go to remote storage, then past local.retention.bytes they leave broker 1's disk
        wait_for(lambda: local_log() < 2 * SEGMENT, timeout=60, what=f"{TIERED}-0's segments copied to remote "
                                                                   "storage and deleted locally")
        in_remote = list(remote.rglob("*.log"))
        assert len(in_remote) >= produced // SEGMENT - 2, in_remote

        storage = configs.describe_topic_storage(conn, [TIERED, PLAIN])
        assert storage[TIERED].remote and storage[TIERED].local_retention_bytes == SEGMENT
        assert not storage[PLAIN].remote and storage[PLAIN].local_retention_bytes == -2
        before = metadata.snapshot(conn, topics=[TIERED, PLAIN], groups=False)

    tiered, plain = before.partition(TIERED, 0), before.partition(PLAIN, 0)
    local = tiered.leader_size_bytes
    # DescribeLogDirs reports the local log: the whole log is still there (offsets 0 to the end, served from
    # remote storage), but the broker's disk holds a fraction of what was produced
    assert (tiered.start_offset, tiered.end_offset) == (0, RECORDS)
    assert local is not None and local == tiered.size_bytes and SEGMENT // 2 < local < produced // 4
    assert plain.size_bytes and plain.leader_size_bytes == plain.size_bytes

    # the DAG's plan step: plan, read the moved topics' storage configs, record it
    ctx = lifecycle.OperationContext(dag_id="kafka_drain", run_id="tiered", conn_config={"bootstrap.servers":
                                                                                         spec.bootstrap},
                                     params=steps.OperationParams(kind="drain", drain_brokers=(1,)))
    local_store.start_operation("kafka_drain", "tiered", kind="drain", triggered_by="t", params={})
    data = steps.make_plan(ctx, before.to_dict())
    plan = ReassignmentPlan.from_dict(data["plan"])
    moves = {m.topic: m for m in plan.moves}
    assert (moves[TIERED].tiered, moves[TIERED].size_bytes, moves[TIERED].after) == (True, local, (2,))
    assert (moves[PLAIN].tiered, moves[PLAIN].size_bytes) == (False, plain.size_bytes)
    assert plan.bytes_to_move == data["bytes_to_move"] == local + plain.size_bytes
    assert (data["tiered_moves"], data["tiered_bytes"]) == (1, local)
    assert "1 of 2 moving partitions tiered (remote storage on)" in data["summary"]
    assert "**Tiered storage** 1 of the 2 moving partitions is of 1 topic with remote storage on" in data["approval"]
    assert f"{TIERED}: 1.0 MiB, its retention.ms" in data["approval"]
    recorded = [e.data for e in local_store.events("kafka_drain", "tiered") if e.kind == "plan"]
    assert len(recorded) == 1 and (recorded[0]["tiered_moves"], recorded[0]["tiered_bytes"]) == (1, local)
    assert recorded[0]["plan"]["storage"] == [storage[PLAIN].to_dict(), storage[TIERED].to_dict()]
    assert approval.plan_traffic(plan, ctx.params).bytes_in == {2: local + plain.size_bytes}
    # `kafkaops plan` on the live cluster reads the storage configs too
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(["plan", "--bootstrap-server", spec.bootstrap, "--topic", TIERED, "--topic", PLAIN, "--drain", "1",
                     "--output", str(tmp_path / "plan.json")])
    assert code == 0 and err.getvalue() == "", err.getvalue()
    assert f"1 of 2 moving partitions tiered (remote storage on): their new replicas copy the leader's local log " \
           f"only, {render.human_bytes(local)} of the {render.human_bytes(local + plain.size_bytes)}" in out.getvalue()

    # the engine: the moves it observes are sized alike, and its progress counts those bytes
    desired = {m.topic_partition: m.after for m in plan.moves}
    with connection.connect(spec.bootstrap) as conn:
        report = engine.execute(conn, desired, throttle_bytes_per_s=50_000_000, dry_run=False, poll_interval_s=0.5)
        assert report.progress is not None and report.progress.done, report
        assert report.progress.bytes_total == report.progress.bytes_done == plan.bytes_to_move
        assert {m.topic: (m.tiered, m.size_bytes) for m in report.moves} == {
            TIERED: (True, local), PLAIN: (False, plain.size_bytes)}
        # the DAG's progress poll of the same moves, from the plan's storage and the snapshot before
        polled = steps.progress_of({"bootstrap.servers": spec.bootstrap},
                                   steps.wait_spec(data, list(desired), before.to_dict()), time.time() - 1)
        assert polled.progress.done and polled.progress.bytes_total == plan.bytes_to_move
        # what broker 2 copied is the leader's local log, and the whole log is still readable from it
        copied = metadata.replica_sizes(conn, [(TIERED, 0)], [2])[(TIERED, 0, 2)]
        after = metadata.snapshot(conn, topics=[TIERED], groups=False).partition(TIERED, 0)
    log.info("tiered: %d bytes produced, %d in remote storage (%d segments), %d on the leader's disk, "
             "%d planned, %d copied", produced, sum(f.stat().st_size for f in in_remote), len(in_remote), local,
             moves[TIERED].bytes, copied)
    assert copied == local, (copied, local, produced)
    assert (after.replicas, after.start_offset, after.end_offset) == ((2,), 0, RECORDS)
