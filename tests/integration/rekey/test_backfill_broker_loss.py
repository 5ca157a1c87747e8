"""The rekey backfill losing a broker while it writes (issue 36, item 4): the real Spark job (``python -m
spark_apps.rekey_backfill run --verify``, as tests/integration/rekey/test_backfill.py runs it) copies a keyed topic
of 3 partitions into 6, every topic with RF 3 and ``min.insync.replicas=2`` (one broker lost still takes
acks=all writes), on the module's three brokers (tests/integration/conftest.py ``own_cluster``: node 1 the only
controller). Once the target's offsets grow, a broker-only node that leads target partitions is SIGKILLed (the
marker group's and the slices' coordinators too when it holds them); the copy must finish on the brokers left:
every source record in the target (or the dead-letter topic) once, on the partition Kafka's partitioner gives
its key, in per-key order, as the job's own verify and the harness's oracle say, and the marker group counting
every record. The broker comes back at the end, and the test waits until every ISR is whole again."""
from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer

from kafkaops.cli import datagen
from kafkaops.errors import KafkaOpsError
from kafkaops.model import Cluster
from kafkaops.platform import provision, waits
from kafkaops.platform.kafka import connection, metadata, offsets, records, topics
from kafkaops.platform.partitioner import partition_for
from kafkaops.rekey import backfill
from kafkaops.rekey.backfill import BackfillPlan
from kafkaops.rekey.records import PassResult
from kafkaops.testing import clusters
from kafkaops.testing.integrity import check_integrity
from tests.conftest import wait_for
from tests.integration.conftest import GrowableCluster, throttles_left
from tests.integration.rekey.test_backfill import _backfill_process, _log_tail, marked, read_back, written

pytestmark = pytest.mark.integration

log = logging.getLogger(__name__)

SOURCE = "ledger"
RECORDS = 20_000
#: Every topic of the copy: one broker of three lost leaves two in-sync replicas, enough for acks=all.
SAFE = {"min.insync.replicas": "2"}
#: Small batches, one request in flight, 500 rows a transaction: the write takes seconds, so the kill lands in it.
SLOW = ["--kafka-option", "kafka.batch.size=2048", "--kafka-option", "kafka.linger.ms=0",
        "--kafka-option", "kafka.max.in.flight.requests.per.connection=1",
        "--kafka-option", "kafkaops.chunk.rows=500"]
#: How long the job may take after the kill: the clients find the new leaders and coordinators within seconds.
JOB_DEADLINE_S = 300


@pytest.fixture(scope="module")
def cluster(own_cluster: GrowableCluster) -> Iterator[GrowableCluster]:
    """The module's three brokers; at the end its broker-only nodes stop before the controller
    (:func:`kafkaops.testing.clusters.stop_brokers_first`): stopped beside it, as the teardown stops every node at
    once, a broker's controlled shutdown can wait the role's 30 s for a controller gone."""
    yield own_cluster
    clusters.stop_brokers_first(own_cluster.spec)


def java_hash(text: str) -> int:
    """``String.hashCode()`` of an ASCII ``text``, through Kafka's ``Utils.abs``: which partition of
    ``__consumer_offsets`` (a group) or ``__transaction_state`` (a transactional id) coordinates it."""
    h = 0
    for ch in text:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    h = h - (1 << 32) if h >= 1 << 31 else h
    return 0 if h == -(1 << 31) else abs(h)


def coordinators(snap: Cluster, plan: BackfillPlan) -> dict[str, int | None]:
    """The broker coordinating the plan's marker group and each direct slice's transactional id
    (jvm/spark-udf SliceConfig.transactionalId: ``<backfill_id>/<slice topic>-<partition>``)."""
    def leader(topic: str, key: str) -> int | None:
        parts = {p.partition: p for p in snap.partitions_of(topic)}
        return parts[java_hash(key) % len(parts)].leader if parts else None

    name = backfill.backfill_id(plan)
    found = {f"group {name}": leader("__consumer_offsets", name)}
    for topic, p in backfill.slices(plan, backfill.DIRECT):
        found[f"transactions of slice {topic}-{p}"] = leader("__transaction_state", f"{name}/{topic}-{p}")
    return found


def whole(spec: provision.ClusterSpec) -> bool:
    """Every partition of the cluster, internal ones too, with its every replica in sync."""
    try:
        with connection.connect({"bootstrap.servers": spec.bootstrap}, timeout_s=5) as conn:
            snap = metadata.snapshot(conn, include_internal=True, offsets=False, sizes=False, groups=False)
    except KafkaOpsError as err:  # a moment without answers while the broker rejoins
        log.info("the cluster does not answer yet: %s", err)
        return False
    return not snap.under_replicated and not snap.offline_broker_ids


def test_a_broker_killed_while_the_backfill_writes_leaves_the_copy_exactly_once(cluster: GrowableCluster, tmp_path
                                                                               ) -> None:
    spec = cluster.spec
    with connection.connect({"bootstrap.servers": spec.bootstrap}) as conn:
        topics.create_topic(conn, SOURCE, 3, 3, SAFE)
        datagen.produce(conn.config, SOURCE, datagen.DatagenSpec(records=RECORDS, keys=300, skew="zipf",
                                                                 record_bytes=250))
    producer = Producer(connection.client_config({"bootstrap.servers": spec.bootstrap, "acks": "all"}))
    producer.produce(SOURCE, key=None, value=b'{"note": "no key"}', partition=1)  # a dead letter by the record key
    assert waits.close_producer(producer, waits.Deadline(30)) == 0
    ranges = records.end_offsets({"bootstrap.servers": spec.bootstrap}, SOURCE)
    plan = BackfillPlan(SOURCE, tuple((p, s, e) for p, (s, e) in sorted(ranges.items())), f"{SOURCE}.v2", 6,
                        "record_key")
    total = plan.records
    assert total == RECORDS + 1
    with connection.connect({"bootstrap.servers": spec.bootstrap}) as conn:
        topics.create_topic(conn, plan.target_topic, 6, 3, SAFE)
        topics.create_topic(conn, plan.dead_letter_topic, 1, 3, SAFE)

    report_file = tmp_path / "report.json"
    started = time.monotonic()
    proc = _backfill_process(plan, tmp_path, spec.bootstrap, "--verify", "--report", str(report_file), *SLOW)
    victim = None
    try:
        wait_for(lambda: proc.poll() is not None or written(spec, plan) >= total // 5, timeout=240, interval=0.25,
                 what="the backfill to write a fifth of the copy")
        assert proc.poll() is None, f"the job ended (exit {proc.returncode}) before the kill:\n{_log_tail(tmp_path)}"
        with connection.connect({"bootstrap.servers": spec.bootstrap}) as conn:
            snap = metadata.snapshot(conn, include_internal=True, offsets=False, sizes=False, groups=False)
        held = coordinators(snap, plan)
        led = {b: [p.partition for p in snap.partitions_of(plan.target_topic) if p.leader == b]
               for b in (n.node_id for n in spec.nodes if not n.is_controller)}  # never the only controller
        # the broker-only node that leads target partitions and coordinates the most of the copy's transactions
        victim = max((b for b in led if led[b]), key=lambda b: (sum(v == b for v in held.values()), len(led[b])))
        at_kill = records.end_offsets({"bootstrap.servers": spec.bootstrap}, plan.target_topic)
        marked_at_kill = marked(spec, plan)
        pid = provision.node_pid(spec, victim)
        assert pid is not None, f"broker {victim} has no process"
        os.kill(pid, signal.SIGKILL)
        killed_at = time.monotonic() - started
        roles = [what for what, b in held.items() if b == victim]
        log.warning("killed broker %d (pid %d) %.1f s into the job, %d of %d rows marked: it led target partitions "
                    "%s and held %s", victim, pid, killed_at, marked_at_kill, total, led[victim], roles or "no coordinator")
        try:
            code = proc.wait(JOB_DEADLINE_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the backfill did not end within {JOB_DEADLINE_S} s of losing broker {victim}; its log "
                        f"ends:\n{_log_tail(tmp_path)}")
        took = time.monotonic() - started
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):  # the job's own process group: its Python and its JVM
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
        if victim is not None:  # the same role brings the killed node back; the others are left as they are
            back = time.monotonic()
            assert set(provision.cluster_up(spec, limit=[f"kafka-{victim}"]).changed) == {f"kafka-{victim}"}
            wait_for(lambda: whole(spec), timeout=90, what=f"broker {victim} back in every ISR")
            log.warning("broker %d back in every ISR after %.1f s", victim, time.monotonic() - back)

    spark_log = (tmp_path / "spark.log").read_text(errors="replace")
    assert code == 0, f"the backfill failed (exit {code}) after broker {victim} was killed:\n{_log_tail(tmp_path)}"
    assert 0 < marked_at_kill < total, f"the kill came at {marked_at_kill} of {total} rows: not during the write"

    # what the job says: one pass, no task retried (local[2]: one failure would have ended the job), all written
    result = PassResult.from_dict(json.loads(report_file.read_text()))
    assert result.run is not None and result.integrity is not None
    run = result.run
    assert (run.mode, run.rewritten, run.already_written, run.written, run.skipped, run.slices) == \
        ("direct", False, 0, total, 0, 3), run
    assert not re.search(r"Lost task|TaskSetManager.*(failed|FAILED)", spark_log), _log_tail(tmp_path)

    # the job's own verify (Spark, read_committed), and the harness's oracle over the records read back
    verified = backfill.IntegrityReport.from_dict(result.integrity)
    assert verified.ok, verified.failures
    assert (verified.source_records, verified.target_records, verified.dead_letters) == (total, RECORDS, 1)
    source, target, dead = read_back(spec, plan)
    oracle = check_integrity(plan, source, target, dead)
    assert oracle.ok, oracle.failures
    assert oracle.totals() == verified.totals()
    assert len(target) + len(dead) == total
    lineages = Counter(r.lineage for r in (*target, *dead))
    assert len(lineages) == total and max(lineages.values()) == 1  # each source record once
    assert all(r.partition == partition_for(r.key, 6) for r in target if r.key is not None)

    # the partitions the lost broker led were written on after it died: the producers moved to their new leaders
    after = records.end_offsets({"bootstrap.servers": spec.bootstrap}, plan.target_topic)
    assert any(after[p][1] > at_kill[p][1] for p in led[victim]), (led[victim], at_kill, after)

    # the marker group counts every row and stays for a rerun (finish deletes it); no throttle was set
    assert marked(spec, plan) == total
    with connection.connect({"bootstrap.servers": spec.bootstrap}) as conn:
        assert [g for g in offsets.group_ids(conn) if g.startswith(backfill.MARKER_GROUP_PREFIX)] == \
            [backfill.backfill_id(plan)]
        assert throttles_left(conn) == {}
    noticed = len(re.findall(rf"Connection to node {victim} .* could not be established", spark_log))
    log.warning("the copy survived broker %d's loss: %d rows, the job took %.1f s (killed at %.1f s); its clients "
                "logged %d failed connection(s) to it", victim, total, took, killed_at, noticed)
