"""The rekey backfill on the package's one-broker cluster (tests/integration/rekey/conftest.py): 3 -> 6 partitions with skewed keys,
every invariant checked on the target read back read_committed (what consumers see) with
confluent-kafka; a re-run writes nothing; a task attempt that dies mid-slice with its transaction
open and is retried, and a run killed half-way (SIGKILL of its process group) and run again, both
give the exact result; records
without the key field land in the dead-letter topic with the reason code of docs/key-rules.md. Both
copies are covered: the
direct one (every new key in one source partition: by the record key, or by a value field equal to
it) and the merged one (by a value field whose values span source partitions; and when a direct
copy finds keys spanning source partitions, where it is deleted and done again merged), also by
``window_key`` for a Kafka Streams window store changelog. One SparkSession per module."""
from __future__ import annotations

import contextlib
import json
from collections import Counter
import os
import re
import signal
import struct
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer

from kafkaops.platform import waits
from kafkaops.platform.kafka import connection, records, topics
from kafkaops.platform import keyrules
from kafkaops.rekey import backfill
from kafkaops.cli import datagen
from kafkaops.platform import provision
from kafkaops.rekey.backfill import BackfillPlan
from kafkaops.testing.integrity import OutputRecord, SourceRecord, check_integrity
from kafkaops.platform.partitioner import partition_for
from tests.conftest import wait_for
from tests.integration.rekey.conftest import seed_source

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]
SOURCE = "payments"
RECORDS = 20_000
BAD = [b'{"id": -1, "note": "no key field"}', b"not json at all", b'{"id": -2, "key": null}']
#: A record without a key but with a key field: a dead letter by the record key, a record by field:key.
KEYLESS = b'{"id": -3, "key": "k-keyless"}'
#: rule -> (copy, target records, dead letters). The value's ``key`` is the record key (each key in one
#: source partition: the direct copy); ``seq`` counts per key from 0, so its values span partitions.
RULES = {"field:key": ("direct", RECORDS + 1, 3), "field:seq": ("merged", RECORDS, 4),
         "record_key": ("direct", RECORDS + 3, 1)}


@pytest.fixture(scope="module")
def cluster(rekey_cluster: provision.ClusterSpec) -> provision.ClusterSpec:
    seed_source(rekey_cluster, SOURCE, datagen.DatagenSpec(records=RECORDS, keys=300, skew="zipf", record_bytes=250),
                BAD, keyless=KEYLESS)
    return rekey_cluster


def plan_for(spec: provision.ClusterSpec, target: str, rule: str = "field:key", source: str = SOURCE,
             partitions: int = 6) -> BackfillPlan:
    ranges = records.end_offsets({"bootstrap.servers": spec.bootstrap}, source)
    plan = BackfillPlan(source, tuple((p, s, e) for p, (s, e) in sorted(ranges.items())), target, partitions, rule)
    with connection.connect(spec.bootstrap) as conn:
        topics.create_topic(conn, plan.target_topic, partitions, 1)
        topics.create_topic(conn, plan.dead_letter_topic, 1, 1)
    return plan


def read_back(spec: provision.ClusterSpec, plan: BackfillPlan
              ) -> tuple[list[SourceRecord], list[OutputRecord], list[OutputRecord]]:
    config = {"bootstrap.servers": spec.bootstrap}
    source = [SourceRecord(r.partition, r.offset, r.timestamp, r.key, r.value) for r in
              records.read_ranges(config, plan.source_topic, {p: (s, e) for p, s, e in plan.source_offsets})]

    def out(topic: str) -> list[OutputRecord]:
        return [OutputRecord(r.topic, r.partition, r.offset, r.key, r.value,  # the copy's headers come last
                             (r.last_header(backfill.LINEAGE_HEADER) or b"").decode() or None,
                             (r.last_header(backfill.CODE_HEADER) or b"").decode() or None)
                for r in read_output(spec, topic, "read_committed")]

    return source, out(plan.target_topic), out(plan.dead_letter_topic)


def written(spec: provision.ClusterSpec, plan: BackfillPlan) -> int:
    """Offsets used in the target and dead-letter topics: records of every transaction, committed or
    not, and the transactions' markers."""
    config = {"bootstrap.servers": spec.bootstrap}
    return sum(e - s for topic in (plan.target_topic, plan.dead_letter_topic)
               for s, e in records.end_offsets(config, topic).values())


#: The group coordinator's answers that a moment later are different: it is loading or has just moved.
COORDINATOR_MOVING = (KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                      KafkaError.COORDINATOR_NOT_AVAILABLE)


def marked(spec: provision.ClusterSpec, plan: BackfillPlan) -> int:
    """Rows the plan's commit markers count: its consumer group's committed offsets on every slice of
    both copies, read through a consumer of that group (read_uncommitted, so not require-stable: while a
    transaction holding a marker is open, the broker reports that partition unstable; then this counts
    the marker as last committed). Never through the admin API: its group-coordinator requests abort
    the process when one times out during a slow coordinator lookup (platform/kafka/offsets.py
    ``_group_coordinator_ready``), which is what crashed this module's workers under CPU load."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition  # per call: the tests' client guard replaces it

    names = backfill.slices(plan, backfill.DIRECT) + backfill.slices(plan, backfill.MERGED)
    consumer = Consumer(connection.client_config({"bootstrap.servers": spec.bootstrap, "log_level": 3,
                                                  "group.id": backfill.backfill_id(plan),
                                                  "enable.auto.commit": False,
                                                  "isolation.level": "read_uncommitted"}))
    deadline = waits.Deadline(60)
    try:
        while True:  # a coordinator still loading or just moved answers the same request a moment later
            try:
                found = consumer.committed([TopicPartition(topic, p) for topic, p in names],
                                           timeout=max(deadline.remaining(), 1.0))
                break
            except KafkaException as err:
                if err.args[0].code() not in COORDINATOR_MOVING or deadline.expired():
                    raise
                time.sleep(0.5)
    finally:
        consumer.close()
    assert not [tp for tp in found if tp.error], found
    return sum(max(tp.offset, 0) for tp in found)


def read_output(spec: provision.ClusterSpec, topic: str, isolation: str) -> list[records.Record]:
    """Every record of ``topic`` up to its end offsets now, read ``read_committed`` (what consumers
    see) or ``read_uncommitted`` (aborted transactions' records too)."""
    plain = {"bootstrap.servers": spec.bootstrap}
    return list(records.read_ranges({**plain, "isolation.level": isolation}, topic, records.end_offsets(plain, topic)))


def uncommitted(spec: provision.ClusterSpec, plan: BackfillPlan) -> int:
    """Records in the target and dead-letter topics read_uncommitted: aborted transactions' included."""
    return sum(len(read_output(spec, topic, "read_uncommitted"))
               for topic in (plan.target_topic, plan.dead_letter_topic))


def test_kafka_key_hash_on_the_jvm_is_partition_for(spark) -> None:
    """The direct copy's Spark SQL function (Kafka's own Utils.murmur2) against the Java-generated
    vectors that kafkaops.platform.partitioner is checked with."""
    from spark_apps import common
    from tests.unit.data.gen_murmur2_vectors import VECTORS

    vectors = json.loads(VECTORS.read_text())["vectors"]
    rows = [(bytes.fromhex(v["key_hex"]), i % 3) for i, v in enumerate(vectors)] + [(None, 0)]
    away = common.register_key_hash(spark, 3)
    frame = spark.createDataFrame(rows, "key binary, partition int")
    got = [r["hash"] for r in frame.selectExpr(f"{common.KAFKA_KEY_HASH}(key, partition) AS hash").collect()]
    assert got[-1] is None
    for vector, value in zip(vectors, got):
        assert value == vector["murmur2"] & 0x7FFFFFFF
        for n, partition in vector["partition_for"].items():
            assert value % int(n) == partition == partition_for(bytes.fromhex(vector["key_hex"]), int(n))
    off_home = sum(1 for i, v in enumerate(vectors) if v["partition_for"]["3"] != i % 3)
    assert away.value() == off_home > 0


@pytest.mark.parametrize("rule", list(RULES))
def test_rekey_3_to_6_partitions_keeps_every_invariant_and_a_rerun_writes_nothing(cluster, spark, rule) -> None:
    from spark_apps import rekey_backfill

    copy, target_records, dead_letters = RULES[rule]
    plan = plan_for(cluster, f"{SOURCE}.v2.{rule.replace(':', '.')}", rule)
    first = rekey_backfill.run(spark, plan, cluster.bootstrap)
    assert (first.already_written, first.mode, first.rewritten) == (0, copy, False)
    source, target, dlq = read_back(cluster, plan)
    report = check_integrity(plan, source, target, dlq)
    assert report.ok, report.failures
    assert (report.source_records, report.target_records, report.dead_letters) == \
        (RECORDS + 4, target_records, dead_letters)
    assert len({r.partition for r in target}) == 6
    reasons = {r.lineage: r for r in dlq}
    assert len(reasons) == dead_letters
    assert report.dead_letter_codes == {"field:key": {"FIELD_MISSING": 1, "NOT_JSON": 1, "NULL_VALUE": 1},
                                        "field:seq": {"FIELD_MISSING": 3, "NOT_JSON": 1},
                                        "record_key": {keyrules.NO_KEY: 1}}[rule]
    raw = read_output(cluster, plan.dead_letter_topic, "read_committed")
    codes = Counter(r.header(backfill.CODE_HEADER).decode() for r in raw)
    assert codes == report.dead_letter_codes and report.wrong_codes == 0  # as written by the JVM side
    assert all(r.header(backfill.REASON_HEADER) for r in raw)  # and a free-text detail beside each code

    assert (first.written, first.skipped) == (RECORDS + 4, 0)
    assert marked(cluster, plan) == RECORDS + 4
    offsets = written(cluster, plan)
    again = rekey_backfill.run(spark, plan, cluster.bootstrap)
    assert (again.already_written, again.mode, again.written, again.skipped) == \
        (RECORDS + 4, copy, 0, RECORDS + 4)
    assert written(cluster, plan) == offsets  # not one record, not one transaction
    assert check_integrity(plan, *read_back(cluster, plan)).ok
    spark_report = rekey_backfill.verify(spark, plan, cluster.bootstrap)  # Spark's own read-back agrees
    assert spark_report.ok and spark_report.totals() == report.totals()


def _backfill_process(plan: BackfillPlan, tmp_path: Path, bootstrap: str, *args: str) -> subprocess.Popen:
    """``python -m spark_apps.rekey_backfill run`` of ``plan`` in a process group of its own (its Python
    and its JVM), this checkout's code, the log in ``tmp_path/spark.log``."""
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(plan.to_json())
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'plugins'}{os.pathsep}{REPO}"}
    with (tmp_path / "spark.log").open("w") as log:
        return subprocess.Popen([sys.executable, "-m", "spark_apps.rekey_backfill", "run", "--plan", str(plan_file),
                                 "--bootstrap", bootstrap, "--driver-memory", "512m", *args],
                                cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def _log_tail(tmp_path: Path) -> str:
    return "\n".join((tmp_path / "spark.log").read_text(errors="replace").splitlines()[-15:])


@pytest.mark.parametrize("rule", ["field:key", "field:seq"])
def test_a_task_attempt_dying_mid_slice_is_retried_without_duplicates_or_gaps(cluster, tmp_path, rule) -> None:
    """Each task's first attempt commits two chunks of 1000 rows, sends 500 more and dies with that
    transaction open (as a lost executor leaves it). Spark retries the task (local[2,3]); the new
    attempt fences the old one, whose 500 rows are aborted, and resumes after the committed 2000."""
    plan = plan_for(cluster, f"{SOURCE}.retried.{rule.replace(':', '.')}", rule)
    report = tmp_path / "report.json"
    proc = _backfill_process(plan, tmp_path, cluster.bootstrap, "--master", "local[2,3]", "--report", str(report),
                             "--kafka-option", "kafkaops.fail_after_rows=2500",
                             "--kafka-option", "kafkaops.chunk.rows=1000")
    assert proc.wait(600) == 0, _log_tail(tmp_path)
    run = json.loads(report.read_text())["run"]
    failed = len(set(re.findall(r"stops the first attempt of slice (\S+) here",
                                (tmp_path / "spark.log").read_text(errors="replace"))))
    assert (run["mode"], run["already_written"]) == (RULES[rule][0], 0)
    assert failed >= 1 and run["skipped"] == 2000 * failed, (failed, run)  # each retried slice resumed at its marker
    assert run["written"] + run["skipped"] == RECORDS + 4
    source, target, dlq = read_back(cluster, plan)
    integrity = check_integrity(plan, source, target, dlq)
    assert integrity.ok, integrity.failures
    assert (integrity.target_records, integrity.dead_letters) == RULES[rule][1:]
    assert marked(cluster, plan) == RECORDS + 4
    # the dead attempts' rows are in the log, aborted: read_uncommitted shows them, consumers do not
    assert uncommitted(cluster, plan) >= RECORDS + 4 + 500 * failed


@pytest.mark.parametrize("rule", list(RULES))
def test_a_run_killed_half_way_and_run_again_gives_the_exact_result(cluster, spark, tmp_path, rule) -> None:
    from spark_apps import rekey_backfill

    plan = plan_for(cluster, f"{SOURCE}.killed.{rule.replace(':', '.')}", rule)
    slow = ["--kafka-option", "kafka.batch.size=2048", "--kafka-option", "kafka.linger.ms=0",
            "--kafka-option", "kafka.max.in.flight.requests.per.connection=1",
            "--kafka-option", "kafkaops.chunk.rows=500"]
    proc = _backfill_process(plan, tmp_path, cluster.bootstrap, *slow)
    try:
        wait_for(lambda: marked(cluster, plan) >= 2000 or proc.poll() is not None, timeout=240,
                 what="the backfill subprocess to commit 2000 records", interval=0.5)
    finally:
        with contextlib.suppress(ProcessLookupError):  # the job's own process group: its Python and its JVM
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    # the killed job's transactions: open ones are aborted, one it asked to commit is completed
    rekey_backfill.fence(spark, plan, cluster.bootstrap)
    partial = marked(cluster, plan)
    assert 0 < partial < RECORDS + 4, \
        f"the kill came at {partial} records; the test needs a partial write. The job's log ends:\n{_log_tail(tmp_path)}"

    resumed = rekey_backfill.run(spark, plan, cluster.bootstrap)
    assert (resumed.already_written, resumed.mode) == (partial, RULES[rule][0])
    assert resumed.written == RECORDS + 4 - partial
    report = check_integrity(plan, *read_back(cluster, plan))
    assert report.ok, report.failures
    assert report.target_records + report.dead_letters == RECORDS + 4


@pytest.mark.parametrize("spanning", [True, False])
def test_record_keys_off_their_home_partition(cluster, spark, spanning) -> None:
    """Keys placed by hand off their murmur2 home. Consistently (each key in one partition, as a
    producer with another partitioner does): the direct copy stands. Spread over partitions (as
    after an earlier increase): the direct copy is deleted from the target and the merged copy,
    which orders each key by time across source partitions, replaces it; a re-run writes nothing."""
    from spark_apps import rekey_backfill

    topic = f"moved.{'spanning' if spanning else 'consistent'}"
    with connection.connect(cluster.bootstrap) as conn:
        topics.create_topic(conn, topic, 3, 1)
    producer = Producer(connection.client_config({"bootstrap.servers": cluster.bootstrap}))
    for i in range(600):
        key = f"acct-{i % 40}".encode()
        home = partition_for(key, 3)
        partition = (home + 1 + (i // 40) % 2) % 3 if spanning else (home + 1) % 3
        producer.produce(topic, key=key, value=json.dumps({"i": i}).encode(), partition=partition)
        producer.poll(0)
    assert waits.close_producer(producer, waits.Deadline(30)) == 0
    plan = plan_for(cluster, f"{topic}.v2", "record_key", source=topic)
    first = rekey_backfill.run(spark, plan, cluster.bootstrap)
    assert (first.mode, first.rewritten) == (("merged", True) if spanning else ("direct", False)), first
    report = check_integrity(plan, *read_back(cluster, plan))
    assert report.ok, report.failures
    assert (report.target_records, report.dead_letters) == (600, 0)
    again = rekey_backfill.run(spark, plan, cluster.bootstrap)
    assert (again.already_written, again.mode, again.written) == (600, first.mode, 0)
    assert report.totals() == check_integrity(plan, *read_back(cluster, plan)).totals()


def _kept(spec: provision.ClusterSpec, plan: BackfillPlan) -> tuple[dict[str, records.Record], list[records.Record],
                                                                    list[records.Record]]:
    """The snapshot by lineage, and the target and dead-letter records read_committed, headers and timestamps
    as the broker gives them."""
    config = {"bootstrap.servers": spec.bootstrap}
    source = {backfill.format_lineage(plan.source_topic, r.partition, r.offset): r for r in
              records.read_ranges(config, plan.source_topic, {p: (s, e) for p, s, e in plan.source_offsets})}
    return (source, read_output(spec, plan.target_topic, "read_committed"),
            read_output(spec, plan.dead_letter_topic, "read_committed"))


def assert_kept(source: dict[str, records.Record], copied: list[records.Record], *, dead: bool = False) -> None:
    """Each copied record has its source record's timestamp and headers, in order, then the copy's own: its
    lineage (a dead letter: and its code and detail)."""
    own = [backfill.LINEAGE_HEADER] + ([backfill.CODE_HEADER, backfill.REASON_HEADER] if dead else [])
    for r in copied:
        lineage = (r.last_header(backfill.LINEAGE_HEADER) or b"").decode()
        origin = source[lineage]
        assert r.timestamp == origin.timestamp, (lineage, r.timestamp, origin.timestamp)
        assert r.headers[:len(origin.headers)] == origin.headers, (lineage, r.headers)
        assert [k for k, _ in r.headers[len(origin.headers):]] == own, (lineage, r.headers)
        assert r.headers[len(origin.headers)] == (backfill.LINEAGE_HEADER, lineage.encode())


@pytest.mark.parametrize("spanning", [False, True])
def test_a_window_store_changelog_goes_where_streams_puts_its_store_keys(cluster, spark, spanning) -> None:
    """A Kafka Streams window store changelog: keys of a store key, an 8-byte window start and a 4-byte
    sequence number (WindowKeySchema.toStoreKeyBinary), tombstones among the values, headers on some
    records, timestamps of their own, each record on murmur2(store key) % 3 as Streams writes it (one store
    key empty), and two records no window store writes. By ``window_key`` into 12 partitions: every record
    keeps its whole changelog key (what the application restores its store from) and sits on murmur2(store
    key) % 12 in its store key's source order, tombstones as records, the source's timestamps and headers
    kept (the lineage after them), the two as dead letters with their codes (and keys), the integrity gate
    passing. Spanning (some store keys also written to another partition): the direct pass finds them and
    the merged copy replaces it."""
    from kafkaops.platform import gates
    from kafkaops.rekey import steps as partitions
    from spark_apps import rekey_backfill

    topic = f"changelog.window.{'spanning' if spanning else 'home'}"
    with connection.connect(cluster.bootstrap) as conn:
        topics.create_topic(conn, topic, 3, 1)
    producer = Producer(connection.client_config({"bootstrap.servers": cluster.bootstrap}))
    stores = [f"sensor-{i}".encode() for i in range(40)] + [b""]
    tombstones = 0
    stamped = int(time.time() * 1000) - 3_600_000  # an hour ago, a millisecond apart: not the copy's clock
    for i in range(1200):
        store = stores[i % len(stores)]
        start = 1_700_000_000_000 + (i // (3 * len(stores))) * 60_000  # three records per window and store key
        value = None if i % 9 == 4 else json.dumps({"count": i}).encode()
        tombstones += value is None
        home = partition_for(store, 3)
        moved = spanning and i % len(stores) < 10 and (i // len(stores)) % 2  # every other record of 10 store keys
        producer.produce(topic, key=store + struct.pack(">qi", start, i % 4), value=value,
                         partition=(home + 1) % 3 if moved else home, timestamp=stamped + i,
                         headers=[("v", b"\x00"), ("trace", str(i).encode())] if i % 2 else None)
        producer.poll(0)
    producer.produce(topic, key=b"short", value=b"{}", partition=0, timestamp=stamped,
                     headers=[("trace", b"dead")])  # no room for the 12-byte suffix
    producer.produce(topic, key=None, value=b"{}", partition=2, timestamp=stamped)
    assert waits.close_producer(producer, waits.Deadline(30)) == 0
    plan = plan_for(cluster, f"{topic}.v2", "window_key", source=topic, partitions=12)

    first = rekey_backfill.run(spark, plan, cluster.bootstrap)
    assert (first.mode, first.rewritten, first.written) == (("merged", True, 1202) if spanning
                                                            else ("direct", False, 1202)), first
    source, target, dlq = read_back(cluster, plan)
    by_lineage = {backfill.format_lineage(topic, r.partition, r.offset): r for r in source}
    placed: dict[bytes, list[tuple[int, int]]] = defaultdict(list)
    for r in target:  # in target offset order per partition; a store key is in one target partition
        origin = by_lineage[r.lineage]
        assert origin.key is not None and r.key == origin.key and r.value == origin.value  # the changelog key, whole
        assert r.partition == partition_for(origin.key[:-12], 12)  # placed by the store key
        placed[origin.key[:-12]].append((origin.partition, origin.offset))
    assert set(placed) == set(stores) and sum(map(len, placed.values())) == 1200
    for store, got in placed.items():  # each source partition's records of a store key in offset order
        for p in range(3):
            assert [o for q, o in got if q == p] == sorted(o for q, o in got if q == p), store
        if not spanning:
            assert got == sorted(got) and len({p for p, _ in got}) == 1, store
    assert sum(r.value is None for r in target) == tombstones > 0
    assert sorted((r.key or b"") for r in dlq) == [b"", b"short"] and \
        [r.key for r in dlq if r.code == keyrules.NO_KEY] == [None]  # dead letters keep their key too
    kept, raw, dead = _kept(cluster, plan)
    assert_kept(kept, raw)
    assert_kept(kept, dead, dead=True)
    assert {r.headers[0] for r in raw if len(r.headers) > 1} == {("v", b"\x00")}  # some with headers, kept
    assert Counter(r.last_header(backfill.CODE_HEADER).decode() for r in dead) == \
        {keyrules.NOT_A_WINDOWED_KEY: 1, keyrules.NO_KEY: 1}  # as the JVM side wrote them

    report = check_integrity(plan, source, target, dlq)
    assert report.ok, report.failures
    assert report.dead_letter_codes == {keyrules.NOT_A_WINDOWED_KEY: 1, keyrules.NO_KEY: 1}
    assert sum(p.keys for p in report.partitions if p.topic == plan.target_topic) == len(stores)  # store keys
    spark_report = rekey_backfill.verify(spark, plan, cluster.bootstrap)
    assert spark_report.ok and spark_report.totals() == report.totals()
    assert spark_report.to_dict() == report.to_dict()
    assert gates.run("backfill", partitions.integrity_frames(spark_report)).ok


@pytest.mark.parametrize("rule", ["record_key", "field:acct"])  # the direct copy and the merged copy
def test_a_copy_keeps_the_source_timestamps_and_headers_also_of_a_topic_copied_before(cluster, spark, rule) -> None:
    """Records with timestamps of their own and headers (repeated names, a null value, and on some the
    lineage header of an earlier kafkaops copy: this topic is a copy being copied again), and dead letters:
    every target record and dead letter has its source's timestamp and headers, in order, the new lineage
    after them; check_integrity and the verify read the last lineage, and both pass."""
    from spark_apps import rekey_backfill

    topic = f"stamped.{rule.replace(':', '.')}"
    with connection.connect(cluster.bootstrap) as conn:
        topics.create_topic(conn, topic, 3, 1)
    producer = Producer(connection.client_config({"bootstrap.servers": cluster.bootstrap}))
    stamped = int(time.time() * 1000) - 7_200_000
    for i in range(900):
        headers = [("trace", str(i).encode()), ("note", None), ("trace", b"again")] if i % 3 else []
        if i % 5 == 0:
            headers.append((backfill.LINEAGE_HEADER, f"older/{i % 4}/{i}".encode()))
        value = json.dumps({"acct": f"a-{i % 17}", "i": i} if i % 97 else {"i": i}).encode()  # 10 without acct
        producer.produce(topic, key=None if i % 301 == 5 else f"k-{i % 50}".encode(), value=value,
                         timestamp=stamped + 7 * i, headers=headers or None)
        producer.poll(0)
    assert waits.close_producer(producer, waits.Deadline(30)) == 0
    plan = plan_for(cluster, f"{topic}.v2", rule, source=topic)
    done = rekey_backfill.run(spark, plan, cluster.bootstrap)
    assert done.mode == {"record_key": "direct", "field:acct": "merged"}[rule], done
    kept, raw, dead = _kept(cluster, plan)
    assert len(raw) + len(dead) == 900 and dead
    assert_kept(kept, raw)
    assert_kept(kept, dead, dead=True)
    assert sum(1 for r in raw if [k for k, _ in r.headers].count(backfill.LINEAGE_HEADER) == 2) > 0
    report = check_integrity(plan, *read_back(cluster, plan))
    assert report.ok, report.failures
    spark_report = rekey_backfill.verify(spark, plan, cluster.bootstrap)
    assert spark_report.ok and spark_report.to_dict() == report.to_dict()


def test_a_value_rule_whose_keys_span_partitions_past_the_sample_is_redone_merged(cluster, spark, monkeypatch
                                                                                 ) -> None:
    """With no sample, a value rule starts with the direct copy; its key hashes show keys in several
    source partitions, so the direct output is deleted and the merged copy written instead."""
    from spark_apps import rekey_backfill

    monkeypatch.setattr(rekey_backfill, "SAMPLE_RECORDS", 0)
    plan = plan_for(cluster, f"{SOURCE}.unsampled", "field:seq")
    first = rekey_backfill.run(spark, plan, cluster.bootstrap)
    assert (first.mode, first.rewritten) == ("merged", True), first
    assert "hashes" in first.mode_reason
    report = check_integrity(plan, *read_back(cluster, plan))
    assert report.ok, report.failures
    assert (report.target_records, report.dead_letters) == (RECORDS, 4)


def _partial_direct_copy(spark, plan: BackfillPlan, bootstrap: str) -> int:
    """Commit the first 3000 records of source partition 0 as the direct copy does (its slice's
    marker counting them), as a run stopped during its direct pass leaves them; returns the count."""
    from pyspark.sql import functions as F

    from spark_apps import common, rekey_backfill

    common.register_functions(spark, plan)
    partial = rekey_backfill.direct_frame(spark, plan, bootstrap).where(
        (F.col("src_partition") == 0) & (F.col("src_offset") < 3000))  # source partition 0's first records
    slices, rows, skipped = rekey_backfill.write(rekey_backfill._sink_frame(partial, plan), plan, bootstrap)
    assert (slices, skipped) == (1, 0) and 0 < rows < RECORDS
    return rows


def test_a_partial_direct_copy_of_keys_spanning_partitions_is_replaced_by_the_merged_copy(cluster, spark) -> None:
    """A run that stopped during its direct copy, before it found keys in several source partitions,
    leaves part of the direct copy in the target. The re-run resumes the direct pass, which finds
    them, deletes the direct copy and its markers, and writes the merged copy."""
    from spark_apps import rekey_backfill

    plan = plan_for(cluster, f"{SOURCE}.stopped.direct", "field:seq")
    left = _partial_direct_copy(spark, plan, cluster.bootstrap)
    result = rekey_backfill.run(spark, plan, cluster.bootstrap)
    assert (result.mode, result.rewritten, result.already_written) == ("merged", True, left), result
    report = check_integrity(plan, *read_back(cluster, plan))
    assert report.ok, report.failures
    assert (report.target_records, report.dead_letters) == (RECORDS, 4)
    assert marked(cluster, plan) == RECORDS + 4  # the merged slices' markers only


def test_markers_of_output_deleted_to_switch_copies_are_forgotten(cluster, spark) -> None:
    """A run that deleted the direct copy to write the merged one and stopped before it deleted the
    markers: the re-run finds markers counting records no longer there, forgets them, starts afresh."""
    from spark_apps import rekey_backfill

    plan = plan_for(cluster, f"{SOURCE}.switched", "field:key")
    _partial_direct_copy(spark, plan, cluster.bootstrap)
    rekey_backfill._truncate_output(plan, cluster.bootstrap, {})
    result = rekey_backfill.run(spark, plan, cluster.bootstrap)
    assert (result.mode, result.already_written, result.written) == ("direct", 0, RECORDS + 4), result
    report = check_integrity(plan, *read_back(cluster, plan))
    assert report.ok, report.failures
    assert report.target_records + report.dead_letters == RECORDS + 4


@pytest.mark.parametrize(("lineage", "message"), [
    (b"payments/0/999999", "another plan"),
    (b"payments/0/0", "no commit marker"),  # this plan's lineage, but no transaction of it wrote the record
    (None, "without a kafkaops.lineage header"),
])
def test_a_target_written_by_something_else_is_refused(cluster, spark, lineage, message) -> None:
    from spark_apps import rekey_backfill

    plan = plan_for(cluster, f"{SOURCE}.foreign.{lineage is None}.{len(lineage or b'')}")
    producer = Producer(connection.client_config({"bootstrap.servers": cluster.bootstrap}))
    producer.produce(plan.target_topic, key=b"x", value=b"y", partition=2,
                     headers=[(backfill.LINEAGE_HEADER, lineage)] if lineage else None)
    assert waits.close_producer(producer, waits.Deadline(30)) == 0
    with pytest.raises(backfill.BackfillError, match=message):
        rekey_backfill.run(spark, plan, cluster.bootstrap)
    assert written(cluster, replace(plan)) == 1


@pytest.mark.parametrize("rule", ["record_key", "field:seq"])  # the direct copy and the merged copy
def test_a_copy_in_passes_appends_each_catch_up_and_verifies_as_one_copy(cluster, spark, rule) -> None:
    """A live migration's backfill: a first pass, records arriving, a catch-up pass from where the first
    ended (a re-run of it writes nothing), then the whole copy checked as one: every record once, each
    pass after the one before."""
    from spark_apps import rekey_backfill

    source = f"passes.{rule.replace(':', '.')}"
    seed_source(cluster, source, datagen.DatagenSpec(records=3000, keys=50, record_bytes=200), BAD[:1])
    first = plan_for(cluster, f"{source}.v2", rule, source)
    assert rekey_backfill.run(spark, first, cluster.bootstrap).written == 3001
    with connection.connect(cluster.bootstrap) as conn:  # producers keep writing during the first pass
        datagen.produce(conn.config, source, datagen.DatagenSpec(records=2000, keys=50, record_bytes=200, seed=7))
    ends = {p: e for p, (_, e) in records.end_offsets({"bootstrap.servers": cluster.bootstrap}, source).items()}
    second = first.next_pass(ends)
    assert second.records == 2000 and second.continues
    done = rekey_backfill.run(spark, second, cluster.bootstrap)
    assert (done.already_written, done.written, done.mode) == (0, 2000, RULES[rule][0])
    again = rekey_backfill.run(spark, second, cluster.bootstrap)
    assert (again.already_written, again.written) == (2000, 0)
    whole = second.whole_copy()
    read = read_back(cluster, whole)
    report = check_integrity(whole, *read)
    assert report.ok, report.failures
    assert report.source_records == 5001 and report.target_records + report.dead_letters == 5001
    assert rekey_backfill.verify(spark, whole, cluster.bootstrap).totals() == report.totals()
    with pytest.raises(backfill.BackfillError, match="another plan"):  # the first pass again: refused, not doubled
        rekey_backfill.run(spark, first, cluster.bootstrap)
