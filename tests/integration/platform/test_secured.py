"""kafkaops against the session's SASL_SSL (SCRAM-SHA-512) cluster, brought up by the role
(``tests/secured.py``): every client path takes the whole client config, and the recognisable
password of ``tests/secured.py`` appears in no output, log, trigger kwargs, audit event, artifact
or Spark argv. Wrong credentials and an untrusted certificate fail at
once with an error naming the connection."""
from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from kafkaops.airflow.spark_submit import SparkSubmitLauncher
from kafkaops.errors import KafkaAuthFailed
from kafkaops.platform import lifecycle, spark, store
from kafkaops.platform.kafka import connection, metadata, records, topics
from kafkaops.testing import spark as spark_harness
from kafkaops.testing.spark import DriverProbe
from tests.secured import PASSWORD, SecuredCluster, self_signed
from tests.store_fixtures import local_store  # noqa: F401

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def broker(secured_cluster: SecuredCluster) -> SecuredCluster:
    """The session's SASL_SSL cluster (tests/conftest.py): the DAG tests may have grown it by a broker."""
    return secured_cluster


@pytest.fixture
def config_file(broker: SecuredCluster, tmp_path: Path) -> Path:
    path = tmp_path / "kafka.json"
    path.write_text(json.dumps(broker.config()))
    return path


def kafkaops(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m kafkaops ARGS`` as an operator runs it (this checkout's code: conftest's PYTHONPATH)."""
    return subprocess.run([sys.executable, "-m", "kafkaops", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=180, env={**os.environ, **(env or {})})


def no_canary(where: str, text: str) -> None:
    assert PASSWORD not in text, f"the password leaked into {where}"


def test_the_cli_snapshots_writes_plans_and_executes_on_sasl_ssl(broker: SecuredCluster, config_file: Path,
                                                                   tmp_path: Path) -> None:
    made = kafkaops("datagen", "--kafka-config", str(config_file), "--topic", "orders", "--partitions", "3",
                    "--replication-factor", "1", "--records", "300", "--skew", "hot")
    assert made.returncode == 0, made.stderr
    assert made.stdout.startswith("produced 300 records")
    snap = kafkaops("snapshot", "--kafka-config", str(config_file), "--topic", "orders", "--json")
    assert snap.returncode == 0, snap.stderr
    cluster = json.loads(snap.stdout)
    assert cluster["cluster_id"] == broker.spec.cluster_id
    assert sum(p["end_offset"] for p in cluster["partitions"]) == 300
    plan_file = tmp_path / "plan.json"
    planned = kafkaops("plan", "--bootstrap-server", broker.bootstrap, "--kafka-config", str(config_file),
                       "--topic", "orders", "--output", str(plan_file))
    assert planned.returncode == 0, planned.stderr
    # a plan that holds every partition where it is: execute converges at once (its kafka-python
    # calls, throttles and the store lock all on SASL_SSL)
    same = {"version": 1, "partitions": [{"topic": "orders", "partition": p["partition"], "replicas": p["replicas"]}
                                         for p in cluster["partitions"]]}
    plan_file.write_text(json.dumps(same))
    store_url = f"sqlite:///{tmp_path / 'kafkaops.db'}"
    ran = kafkaops("execute", "--bootstrap-server", broker.bootstrap, "--kafka-config", str(config_file),
                   "--plan", str(plan_file), "--throttle-mb", "10", "--execute", "--store", store_url)
    assert ran.returncode == 0, ran.stderr
    verified = kafkaops("verify", "--bootstrap-server", broker.bootstrap, "--kafka-config", str(config_file),
                        "--plan", str(plan_file))
    assert verified.returncode == 0, verified.stderr
    for step in (made, snap, planned, ran, verified):
        no_canary(f"the output of {step.args[3]}", step.stdout + step.stderr)
    st = store.open_store(store_url)
    operations = st.list_operations()
    assert operations, "execute --execute records its run in the store"
    for op in operations:
        no_canary("the store's operations", json.dumps(op, default=str))
        no_canary("the store's events", json.dumps(st.events(op["dag_id"], op["run_id"]), default=str))


def test_an_airflow_connection_feeds_the_cli_and_the_triggers(broker: SecuredCluster, caplog: pytest.LogCaptureFixture,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from kafkaops.airflow.triggers import ReassignmentProgressTrigger

    conn = json.dumps({"conn_type": "kafka", "extra": broker.config()})
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_SECURE", conn)
    checked = kafkaops("snapshot", "--kafka-conn", "kafka_secure", env={"AIRFLOW_CONN_KAFKA_SECURE": conn})
    assert checked.returncode == 0, checked.stderr
    no_canary("snapshot --kafka-conn", checked.stdout + checked.stderr)

    from kafkaops.reassign.records import WaitSpec

    with connection.connect(broker.config()) as kafka:
        topics.create_topic(kafka, "moved", 1, 1)
        before = metadata.snapshot(kafka, topics=["moved"])
    where = before.partition("moved", 0).replicas  # the trigger waits for a move already in place
    caplog.set_level(logging.DEBUG)
    progress = ReassignmentProgressTrigger("kafka_secure", WaitSpec.cut({("moved", 0): where}, before).to_dict(),
                                           time.time(),
                                           stall_timeout_s=20)

    async def first_event(trigger: Any) -> Any:
        async for event in trigger.run():
            return event.payload

    assert asyncio.run(first_event(progress))["status"] == "done"
    no_canary("the trigger kwargs", json.dumps(progress.serialize()))
    no_canary("the captured logs", caplog.text)


def test_the_key_skew_spark_job_reads_sasl_ssl_with_its_config_in_a_file(
        broker: SecuredCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    from kafkaops.capacity import steps as capacity_steps

    config = connection.connection_config(broker.config(), name="Airflow connection 'kafka_secure'")
    with connection.connect(config) as conn:
        topics.create_topic(conn, "skewed", 2, 1)
    from kafkaops.cli.datagen import DatagenSpec, produce

    produce(config, "skewed", DatagenSpec(records=400, keys=20, skew="hot", seed=7))
    seen: dict[str, Any] = {"argv": [], "log": ""}
    launch = spark.run_spark_app

    def recording(app: str, args: Any, **kwargs: Any) -> dict[str, Any]:
        try:
            with DriverProbe(kwargs["log_file"], (spark.KAFKA_PROPERTIES,)) as seen["probe"]:
                return launch(app, args, on_start=seen["argv"].append, **kwargs)
        finally:
            seen["log"] = kwargs["log_file"].read_text(errors="replace")

    monkeypatch.setattr(spark, "run_spark_app", recording)
    params = capacity_steps.CapacityParams(key_skew=True, skew_topic="skewed", sample_records=400)
    cluster = capacity_steps.take_snapshot(config, params)
    result = capacity_steps.run_key_skew(config, cluster, params, "secured-run", launcher=SparkSubmitLauncher())
    sampled = sum(int(e) - int(result["sample"]["start"][p]) for p, e in result["sample"]["end"].items())
    assert result["records"] == sampled > 0, seen["log"][-2000:]  # Spark read every sampled record
    assert "--kafka-config" in seen["argv"][0] and "--bootstrap" not in seen["argv"][0]
    assert Path(seen["argv"][0][seen["argv"][0].index("--kafka-config") + 1]).name == "kafka.properties"
    no_canary("the Spark argv", json.dumps(seen["argv"]))
    no_canary("the Spark log", seen["log"])
    # local[*]: the driver (its RPC, which serves shipped files, and its block manager) listens on loopback only,
    # and even there asks for the application's secret (docs/security.md "Spark")
    probe: DriverProbe = seen["probe"]
    assert probe.error is None and probe.rpc is not None, probe
    assert probe.listening == {"rpc": {"127.0.0.1"}, "blocks": {"127.0.0.1"}}, probe.listening
    kind, body = probe.fetched[spark.KAFKA_PROPERTIES]
    assert kind in (spark_harness.STREAM_FAILURE, "closed"), probe.fetched
    no_canary("the file server's answer", body.decode(errors="replace"))
    assert probe.rpc[0] in (spark_harness.RPC_FAILURE, "closed") and b"Deserializ" not in probe.rpc[1], probe.rpc


def test_the_rekey_backfill_copies_and_verifies_on_sasl_ssl(broker: SecuredCluster, tmp_path: Path) -> None:
    """Both the Spark source and sink and the driver's own admin calls (watermarks, the sample) use
    the file's settings."""
    from kafkaops.cli.datagen import DatagenSpec, produce
    from kafkaops.rekey.backfill import BackfillPlan

    config = broker.config()
    with connection.connect(config) as conn:
        topics.create_topic(conn, "payments", 2, 1)
    produce(config, "payments", DatagenSpec(records=300, keys=30, skew="zipf", seed=3))
    ranges = records.end_offsets(config, "payments")
    plan = BackfillPlan("payments", tuple((p, s, e) for p, (s, e) in sorted(ranges.items())), "payments.v2", 4,
                        "record_key")
    with connection.connect(config) as conn:
        topics.create_topic(conn, plan.target_topic, 4, 1)
        topics.create_topic(conn, plan.dead_letter_topic, 1, 1)
    log_file = tmp_path / "spark.log"
    argv: list[list[str]] = []
    result = spark.run_spark_app("rekey_backfill", ["run", "--verify", "--plan", plan.to_json()],
                                 launcher=SparkSubmitLauncher(), log_file=log_file, timeout_s=600,
                                 what="backfill on SASL_SSL", on_timeout="-", kafka_config=config,
                                 driver_memory="512m", on_start=argv.append)
    assert result["integrity"]["ok"], result["integrity"]
    assert result["integrity"]["target_records"] + result["integrity"]["dead_letters"] == 300
    no_canary("the backfill's argv", json.dumps(argv))
    no_canary("the backfill's Spark log", log_file.read_text(errors="replace"))


def refused_at_begin(config: dict[str, str], conn_id: str, run_id: str, st: store.Store) -> KafkaAuthFailed:
    """What ``begin`` raises with the client ``config`` of the Airflow connection ``conn_id``: a
    KafkaAuthFailed within 10 s (not its 15 s request timeout) that names the connection, also in the
    run's record."""
    named = connection.connection_config(config, name=f"Airflow connection '{conn_id}'")
    ctx = lifecycle.OperationContext("kafka_scale_out", run_id, named, SimpleNamespace(kind="scale_out", dry_run=True))
    started = time.monotonic()
    with pytest.raises(KafkaAuthFailed) as refused:
        lifecycle.begin(ctx, {"kafka_conn_id": conn_id})
    assert time.monotonic() - started < 10
    assert f"Airflow connection '{conn_id}'" in str(refused.value), str(refused.value)
    assert f"Airflow connection '{conn_id}'" in json.dumps(st.events("kafka_scale_out", run_id), default=str)
    return refused.value


def test_wrong_credentials_fail_begin_at_once_naming_the_connection(broker: SecuredCluster, local_store: Any,
                                                                    tmp_path: Path) -> None:
    wrong = refused_at_begin(broker.config(password="not-the-password"), "kafka_x", "secured-wrong", local_store)
    assert wrong.code == "_AUTHENTICATION" and "not-the-password" not in str(wrong), (wrong.code, str(wrong))
    record = json.dumps(local_store.events("kafka_scale_out", "secured-wrong"), default=str)
    assert "not-the-password" not in record

    _, other_ca = self_signed(tmp_path, "stranger", "changeit")  # the client does not trust the brokers
    untrusted = refused_at_begin(broker.config(ca_file=other_ca), "kafka_y", "secured-untrusted", local_store)
    assert untrusted.code == "_SSL", untrusted.code

    bad = kafkaops("snapshot", "--bootstrap-server", broker.bootstrap, "--kafka-config", str(_write(
        tmp_path / "wrong.json", broker.config(password="not-the-password"))), "--timeout", "5")
    assert bad.returncode == 2 and "refused the connection" in bad.stderr and "wrong.json" in bad.stderr, bad.stderr
    assert "not-the-password" not in bad.stdout + bad.stderr


def _write(path: Path, config: dict[str, str]) -> Path:
    path.write_text(json.dumps(config))
    return path
