"""The Spark jobs submitted through Airflow's Spark provider to a real Spark standalone cluster
(kafkaops/testing/spark.py: a Master and two Workers, each Worker as its own Unix user that sees nothing of the checkout):
the key skew and the rekey backfill read (and write) the session's Kafka cluster there, with nothing
but what spark-submit ships."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
from pathlib import Path

import pytest

from kafkaops.airflow.spark_submit import SparkSubmitLauncher
from kafkaops.capacity import skew
from kafkaops.capacity import steps as capacity_steps
from kafkaops.cli import datagen
from kafkaops.model import Cluster
from kafkaops.platform import spark
from kafkaops.platform.kafka import connection, records, topics
from kafkaops.rekey.backfill import LINEAGE_HEADER, BackfillPlan
from kafkaops.testing import spark as spark_harness
from kafkaops.testing.spark import DriverProbe, StandaloneSpark

pytestmark = pytest.mark.integration

CONN_ID = "spark_standalone"
#: What the Workers must not see: the checkout (the session's cluster hides it, tests/conftest.py).
HIDDEN = str(Path(__file__).resolve().parents[3])


@pytest.fixture
def launcher(spark_standalone: StandaloneSpark, monkeypatch: pytest.MonkeyPatch) -> SparkSubmitLauncher:
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", json.dumps(spark_standalone.connection()))
    monkeypatch.setenv("SPARK_CONF_DIR", str(spark_standalone.conf_dir))
    return SparkSubmitLauncher(CONN_ID)


def executor_dirs(spark_standalone: StandaloneSpark, app_id: str) -> dict[str, list[Path]]:
    """The executor folders the Workers made for ``app_id``, by the Unix user owning them."""
    found: dict[str, list[Path]] = {}
    for work in sorted(spark_standalone.folder.glob(f"worker*/work/{app_id}/*")):
        owner = work.owner()
        found.setdefault(owner, []).append(work)
    return found


def finished_app(spark_standalone: StandaloneSpark, name: str) -> dict:
    apps = [a for a in spark_standalone.applications() if a["name"] == name]
    assert apps, f"the master ran no application {name}: {spark_standalone.applications()}"
    return apps[-1]


def test_the_workers_run_as_their_own_users_and_see_no_repository(spark_standalone: StandaloneSpark) -> None:
    if not spark_standalone.isolated:
        pytest.skip("not root: the Workers run as this user")
    workers = spark_standalone.processes[1:]
    for _process, user in zip(workers, spark_standalone.users):
        jvm = subprocess.run(["pgrep", "-u", user, "-f", "org.apache.spark.deploy.worker.Worker"],
                             capture_output=True, text=True, check=True).stdout.split()
        assert len(jvm) == 1, f"{user} runs {jvm}"
        seen = subprocess.run(["nsenter", "--target", jvm[0], "--mount", "--", "ls", "-A", HIDDEN],
                              capture_output=True, text=True, check=True).stdout
        assert seen == "", f"{user} sees {seen!r} in the checkout {HIDDEN}"
    state = spark_standalone.state()
    assert len([w for w in state["workers"] if w["state"] == "ALIVE"]) == 2 and state["status"] == "ALIVE"


def test_the_key_skew_job_runs_on_the_standalone_cluster(kafka_cluster, launcher: SparkSubmitLauncher,
                                                         spark_standalone: StandaloneSpark, topic_name: str,
                                                         tmp_path: Path) -> None:
    config = kafka_cluster.config
    with connection.connect(config) as conn:
        topics.create_topic(conn, topic_name, 3, 1)
    datagen.produce(config, topic_name, datagen.DatagenSpec(records=900, keys=30, skew="hot", hot_share=0.6,
                                                            record_bytes=120, seed=9))
    params = capacity_steps.CapacityParams.from_params({"topics": [topic_name], "key_skew": True,
                                                        "sample_records": 600, "candidate_key_field": "id",
                                                        "candidate_partitions": [3, 6]})
    snap = capacity_steps.take_snapshot(config, params)
    submitted: list[list[str]] = []
    launch = spark.run_spark_app

    def recording(app: str, args: list[str], **kwargs: object) -> dict:
        return launch(app, args, on_start=submitted.append, **kwargs)  # type: ignore[arg-type]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(spark, "run_spark_app", recording)
        result = capacity_steps.run_key_skew(config, snap, params, "standalone-run", launcher=launcher)

    start, end = skew.sample_offsets(Cluster.from_dict(snap), topic_name, 600)
    sample = [(r.key, r.value, r.partition) for r in
              records.read_ranges(config, topic_name, {p: (start[p], end[p]) for p in start})]
    expected = skew.analyze(topic_name, sample, partitions=3, candidates=(3, 6), candidate_field="id")
    assert result.pop("sample") == {"start": {str(p): o for p, o in start.items()},
                                    "end": {str(p): o for p, o in end.items()}}
    assert result == json.loads(json.dumps(expected)) and result["records"] == len(sample) > 0
    [argv] = submitted
    assert argv[:3] == ["spark-submit", "--master", spark_standalone.master_url]
    assert Path(argv[argv.index("--kafka-config") + 1]).name == "kafka.properties"
    app = finished_app(spark_standalone, "kafkaops-key-skew")
    assert app["state"] == "FINISHED", app
    owners = executor_dirs(spark_standalone, app["id"])
    assert owners, f"no executor of {app['id']} ran on a Worker"
    if spark_standalone.isolated:
        assert set(owners) <= set(spark_standalone.users) and os.geteuid() == 0


def keyed_topic_and_plan(config: dict, topic: str, partitions: int, new_partitions: int,
                         data: datagen.DatagenSpec) -> BackfillPlan:
    """``topic`` with ``data``, and the backfill plan of its partition increase by the record key (target
    and dead-letter topics created)."""
    with connection.connect(config) as conn:
        topics.create_topic(conn, topic, partitions, 1)
    datagen.produce(config, topic, data)
    ranges = records.end_offsets(config, topic)
    plan = BackfillPlan(topic, tuple((p, s, e) for p, (s, e) in sorted(ranges.items())), f"{topic}.v2",
                        new_partitions, "record_key")
    with connection.connect(config) as conn:
        topics.create_topic(conn, plan.target_topic, new_partitions, 1)
        topics.create_topic(conn, plan.dead_letter_topic, 1, 1)
    return plan


CANARY = "Spark-Door-Canary-31"


def test_the_rekey_backfill_copies_and_verifies_on_the_standalone_cluster(
        kafka_cluster, launcher: SparkSubmitLauncher, spark_standalone: StandaloneSpark, topic_name: str,
        tmp_path: Path) -> None:
    """The plan goes as JSON on the command line, the report comes back in the driver's output. While it
    runs, a client without the cluster's secret gets nothing from the driver: its Kafka settings (a canary
    for a password among them) are not on the file server, and its RPC demands the authentication
    handshake (docs/security.md "Spark"); the secret is in no argv and no log."""
    config = {**kafka_cluster.config, "client.id": CANARY}  # the Java client reads it; a stand-in for a password
    plan = keyed_topic_and_plan(config, topic_name, 2, 4, datagen.DatagenSpec(records=400, keys=40, skew="zipf",
                                                                              seed=3))
    submitted: list[list[str]] = []
    log_file = tmp_path / "spark.log"
    with DriverProbe(log_file, (spark.KAFKA_PROPERTIES, spark.STORE_PROPERTIES)) as probe:
        result = spark.run_spark_app("rekey_backfill", ["run", "--verify", "--plan", plan.to_json()],
                                     launcher=launcher, log_file=log_file, timeout_s=600, ok_exit_codes=None,
                                     what="backfill on standalone", on_timeout="-", kafka_config=config,
                                     on_start=submitted.append)
    assert result["integrity"]["ok"], result["integrity"]
    assert probe.error is None and probe.rpc is not None, (probe, log_file.read_text()[-3000:])
    for name, (kind, body) in probe.fetched.items():
        # not served ("was not found" on Spark 4.2, whose file server would hand out what --files shipped)
        assert kind in (spark_harness.STREAM_FAILURE, "closed") and CANARY.encode() not in body, (name, kind, body)
    kind, body = probe.rpc
    assert kind in (spark_harness.RPC_FAILURE, "closed") and b"Deserializ" not in body, probe.rpc
    secret = spark.read_auth_secret(str(spark_standalone.secret_file), spark_standalone.master_url, "-")
    log = log_file.read_text()
    assert secret not in json.dumps(submitted) and secret not in log and CANARY not in json.dumps(submitted)
    assert "SecurityManager: authentication enabled" in log
    assert result["integrity"]["target_records"] + result["integrity"]["dead_letters"] == 400
    assert result["run"]["mode"] == "direct"
    app = finished_app(spark_standalone, "kafkaops-rekey-backfill")
    assert executor_dirs(spark_standalone, app["id"]), f"no executor of {app['id']} ran on a Worker"


def executor_pids(users: tuple[str, ...]) -> list[int]:
    """The executor JVMs the Workers run now (as their users when isolated, else as this user)."""
    pattern = "org.apache.spark.executor.CoarseGrainedExecutorBackend"
    found: list[int] = []
    for user in users or (None,):
        command = ["pgrep", "-f", pattern] + (["-u", user] if user else [])
        found += [int(pid) for pid in subprocess.run(command, capture_output=True, text=True).stdout.split()]
    return found


def test_an_executor_killed_mid_write_leaves_no_duplicate_and_no_gap(
        kafka_cluster, launcher: SparkSubmitLauncher, spark_standalone: StandaloneSpark, topic_name: str,
        tmp_path: Path) -> None:
    """kill -9 of an executor JVM while the copy writes: Spark reruns its tasks on another executor, each
    rerun resumes its slice from the committed marker (the transactional sink fenced the dead attempt),
    and the target read read_committed holds every record once, in order (the verify inside the job)."""
    config = kafka_cluster.config
    total = 120_000
    plan = keyed_topic_and_plan(config, topic_name, 4, 8, datagen.DatagenSpec(records=total, keys=500, skew="zipf",
                                                                              record_bytes=200, seed=11))
    killed: list[int] = []
    stop = threading.Event()

    def kill_an_executor_once_writing() -> None:
        """Kill -9 the first executor once the target has records (committed or not) and before the copy ends."""
        while not stop.is_set():
            written = sum(end for _, end in records.end_offsets(config, plan.target_topic).values())
            pids = executor_pids(spark_standalone.users)
            if 0 < written < total and pids:
                os.kill(pids[0], signal.SIGKILL)
                killed.append(pids[0])
                return
            stop.wait(0.05)

    killer = threading.Thread(target=kill_an_executor_once_writing, daemon=True)
    killer.start()
    try:
        result = spark.run_spark_app("rekey_backfill", ["run", "--verify", "--plan", plan.to_json()],
                                     launcher=launcher, log_file=tmp_path / "spark.log", timeout_s=900,
                                     ok_exit_codes=None, what="backfill with a killed executor", on_timeout="-",
                                     kafka_config=config)
    finally:
        stop.set()
        killer.join(timeout=10)
    assert killed, "no executor was killed while the copy wrote: the test proved nothing"
    integrity = result["integrity"]
    assert integrity["ok"], integrity
    assert integrity["target_records"] + integrity["dead_letters"] == total
    # what a consumer sees (librdkafka reads read_committed by default): every planned record exactly once
    committed = records.read_ranges(config, plan.target_topic, {p: (0, e) for p, (_, e) in
                                                               records.end_offsets(config, plan.target_topic).items()})
    lineages = [r.header(LINEAGE_HEADER) for r in committed]
    assert len(lineages) == len(set(lineages)) == total
