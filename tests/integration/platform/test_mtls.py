"""kafkaops over an mTLS listener (SSL, client certificate required) of the role-provisioned nodes of
``secured_node.py``, with the client certificate, its encrypted key and the key's password taken
from an Airflow ``kafka`` connection: the CLI's datagen, snapshot, plan, execute and verify
(``--kafka-conn``), the deferrable triggers (their kwargs carry the connection's id), and the
lifecycle's begin, Great Expectations preflight gate and finish. An untrusted client certificate, a
broker certificate the client does not trust and a wrong key password are refused within a bounded
time, naming the connection, classified by code. The key's password appears in no output, log,
trigger kwargs, returned value, audit event or store artifact."""
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

from kafkaops.errors import ConfigError
from kafkaops.platform import lifecycle, store
from kafkaops.platform.kafka import connection, metadata, reassignments, topics
from tests.integration.platform.secured_node import KEY_PASSWORD, SecuredNodes
from tests.integration.platform.test_secured import refused_at_begin
from tests.store_fixtures import local_store  # noqa: F401

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]
CONN_ID = "kafka_mtls"


def conn_env(conn_id: str, extra: dict[str, str]) -> dict[str, str]:
    """An Airflow connection of type ``kafka`` with ``extra`` as its extras, as an environment variable."""
    return {f"AIRFLOW_CONN_{conn_id.upper()}": json.dumps({"conn_type": "kafka", "extra": extra})}


@pytest.fixture
def mtls_conn(tls_nodes: SecuredNodes, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The Airflow connection ``kafka_mtls`` (this process and the CLI's): its environment variable."""
    env = conn_env(CONN_ID, tls_nodes.mtls_client)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env


def kafkaops(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``python -m kafkaops ARGS`` as an operator runs it (this checkout's code: conftest's PYTHONPATH)."""
    return subprocess.run([sys.executable, "-m", "kafkaops", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=240, env={**os.environ, **env})


def no_key_password(where: str, text: str) -> None:
    assert KEY_PASSWORD not in text, f"the client key's password leaked into {where}"


def stored_text(st: store.Store) -> str:
    """Everything the store holds about its runs: operations, audit events, artifacts."""
    parts = []
    for op in st.list_operations():
        parts += [json.dumps(op, default=str), json.dumps(st.events(op["dag_id"], op["run_id"]), default=str)]
    for path in st.artifact_paths():
        artifact = st.artifact(path)
        assert artifact is not None
        parts.append(artifact.body.decode(errors="replace"))
    return "\n".join(parts)


def test_the_cli_generates_snapshots_plans_moves_and_verifies_over_mtls(
        tls_nodes: SecuredNodes, mtls_conn: dict[str, str], tmp_path: Path) -> None:
    conn = ("--kafka-conn", CONN_ID)
    made = kafkaops("datagen", *conn, "--topic", "mtls-orders", "--partitions", "4", "--replication-factor", "1",
                    "--records", "400", "--skew", "hot", env=mtls_conn)
    assert made.returncode == 0, made.stderr
    assert made.stdout.startswith("produced 400 records")
    snap = kafkaops("snapshot", *conn, "--topic", "mtls-orders", "--json", env=mtls_conn)
    assert snap.returncode == 0, snap.stderr
    before = json.loads(snap.stdout)
    assert sorted(b["id"] for b in before["brokers"]) == [1, 2]
    assert sum(p["end_offset"] for p in before["partitions"]) == 400
    on_2 = sorted(p["partition"] for p in before["partitions"] if p["replicas"] == [2])
    assert on_2, f"the topic's 4 partitions were all created on broker 1: {before['partitions']}"
    (before_file := tmp_path / "before.json").write_text(snap.stdout)

    # drain broker 2: its partitions of the topic move to broker 1 (kafka-python's reassignment calls
    # and throttles over mTLS too, with the key's password as its ssl_password)
    plan_file, store_url = tmp_path / "plan.json", f"sqlite:///{tmp_path / 'kafkaops.db'}"
    where = ("--bootstrap-server", tls_nodes.mtls_bootstrap, *conn)
    planned = kafkaops("plan", *where, "--topic", "mtls-orders", "--drain", "2", "--output", str(plan_file),
                       env=mtls_conn)
    assert planned.returncode == 0, planned.stderr
    assert sorted(e["partition"] for e in json.loads(plan_file.read_text())["partitions"]) == on_2
    ran = kafkaops("execute", *where, "--plan", str(plan_file), "--throttle-mb", "10", "--execute",
                   "--store", store_url, env=mtls_conn)
    assert ran.returncode == 0, ran.stderr
    verified = kafkaops("verify", *where, "--plan", str(plan_file), "--before", str(before_file), env=mtls_conn)
    assert verified.returncode == 0, verified.stderr + verified.stdout
    with connection.connect(tls_nodes.mtls_client, name=f"Airflow connection '{CONN_ID}'") as kafka:
        after = metadata.snapshot(kafka, topics=["mtls-orders"])
    assert {p.replicas for p in after.partitions} == {(1,)}
    assert sum(p.end_offset for p in after.partitions) == 400

    for step in (made, snap, planned, ran, verified):
        no_key_password(f"the output of {step.args[3]}", step.stdout + step.stderr)
    st = store.open_store(store_url)
    assert st.list_operations(), "execute --execute records its run in the store"
    no_key_password("the store's records", stored_text(st))


def test_the_trigger_reads_the_connection_by_its_id(tls_nodes: SecuredNodes, mtls_conn: dict[str, str],
                                                    caplog: pytest.LogCaptureFixture) -> None:
    from kafkaops.airflow.triggers import ReassignmentProgressTrigger
    from kafkaops.cli.datagen import DatagenSpec, produce
    from kafkaops.reassign.records import WaitSpec

    config = connection.connection_config(tls_nodes.mtls_client, name=f"Airflow connection '{CONN_ID}'")
    with connection.connect(config) as kafka:
        topics.create_topic(kafka, "mtls-moved", 1, 1)
        produce(config, "mtls-moved", DatagenSpec(records=200, keys=20, seed=5))
        before = metadata.snapshot(kafka, topics=["mtls-moved"])
        (source,) = before.partition("mtls-moved", 0).replicas
        target = 3 - source
        reassignments.alter_partition_reassignments(kafka, {("mtls-moved", 0): [target]})
    caplog.set_level(logging.DEBUG)
    progress = ReassignmentProgressTrigger(CONN_ID, WaitSpec.cut({("mtls-moved", 0): (target,)}, before).to_dict(),
                                           time.time(),
                                           poll_interval_s=1, stall_timeout_s=60)

    async def first_event(trigger: Any) -> Any:
        async for event in trigger.run():
            return event.payload

    moved = asyncio.run(first_event(progress))
    assert moved["status"] == "done", moved
    with connection.connect(config) as kafka:
        assert metadata.snapshot(kafka, topics=["mtls-moved"]).partitions[0].replicas == (target,)
    kind, kwargs = progress.serialize()
    assert kwargs["kafka_conn_id"] == CONN_ID and not any(k.startswith(("ssl", "security")) for k in kwargs)
    no_key_password(f"the kwargs of {kind}", json.dumps(kwargs))
    no_key_password("the captured logs", caplog.text)


def test_begin_the_preflight_gate_and_finish_over_mtls(tls_nodes: SecuredNodes, mtls_conn: dict[str, str],
                                                       local_store: store.Store,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    from kafkaops.airflow.hooks import KafkaOpsHook

    caplog.set_level(logging.DEBUG)
    config = KafkaOpsHook(CONN_ID).get_config()
    assert config["ssl.key.password"] == KEY_PASSWORD and config.source == f"Airflow connection '{CONN_ID}'"
    ctx = lifecycle.OperationContext("kafka_rebalance", "mtls-run", config,
                                     SimpleNamespace(kind="rebalance", dry_run=True))
    began = lifecycle.begin(ctx, {"kafka_conn_id": CONN_ID})
    assert began["brokers"] == [1, 2] and began["lock_token"] is None  # a dry run reads the lock, takes none
    before = lifecycle.preflight(ctx)  # a snapshot over mTLS, gated by Great Expectations
    assert sorted(b["id"] for b in before["brokers"]) == [1, 2]
    record = ctx.audit.summary()
    assert [(g["gate"], g["ok"]) for g in record["gates"]] == [("preflight", True)]
    assert local_store.artifact_paths("docs/kafka_rebalance/mtls-run/preflight/"), "the gate's Data Docs are stored"
    finished = lifecycle.finish(ctx, began["cluster_id"])
    assert finished["outcome"] == "dry_run"
    no_key_password("the steps' returned values (XCom)", json.dumps([began, before, finished], default=str))
    no_key_password("the store's records", stored_text(local_store))
    no_key_password("the captured logs", caplog.text)


def test_an_untrusted_certificate_is_refused_at_begin_naming_the_connection(
        tls_nodes: SecuredNodes, local_store: store.Store, tmp_path: Path) -> None:
    stranger = tls_nodes.mtls_config(tls_nodes.stranger_cert, tls_nodes.stranger_key)
    refused = refused_at_begin(stranger, "kafka_stranger", "mtls-stranger", local_store)
    assert refused.code == "_SSL", (refused.code, str(refused))  # the brokers do not trust the client's certificate
    assert KEY_PASSWORD not in json.dumps(local_store.events("kafka_scale_out", "mtls-stranger"), default=str)

    untrusting = tls_nodes.mtls_config(tls_nodes.client_cert, tls_nodes.client_key, ca=tls_nodes.stranger_cert)
    untrusted = refused_at_begin(untrusting, "kafka_wrong_ca", "mtls-wrong-ca", local_store)
    assert untrusted.code == "_SSL", untrusted.code  # the client does not trust the brokers' certificate

    wrong_key = {**tls_nodes.mtls_client, "ssl.key.password": "not-the-key-password"}
    with pytest.raises(ConfigError, match="Airflow connection 'kafka_wrong_key'.*ssl.key") as unreadable:
        connection.connect(wrong_key, name="Airflow connection 'kafka_wrong_key'")
    assert "not-the-key-password" not in str(unreadable.value)

    env = conn_env("kafka_stranger", tls_nodes.mtls_config(tls_nodes.stranger_cert, tls_nodes.stranger_key))
    started = time.monotonic()
    bad = kafkaops("snapshot", "--kafka-conn", "kafka_stranger", "--timeout", "5", env=env)
    assert time.monotonic() - started < 30  # the interpreter's start-up and imports, then the refusal
    assert bad.returncode == 2 and "Airflow connection 'kafka_stranger'" in bad.stderr, bad.stderr
    no_key_password("a refused CLI's output", bad.stdout + bad.stderr)
