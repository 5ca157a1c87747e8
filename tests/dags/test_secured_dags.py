"""The DAGs on the session's SASL_SSL cluster (``tests/secured.py``, brought up by the role), with
the ``kafka_default`` connection carrying its SCRAM login and CA: a scale-out that adds a fourth
secured broker through the role, then a migrate (Spark rekey backfill), then a capacity review with
its Spark key skew, all with dag.test().
Afterwards the recognisable password is searched in every artifact the runs left: task logs,
XCom values and trigger kwargs in Airflow's database, what the operators deferred with, the
kafkaops store's events and artifacts, Spark's argv as recorded and its event logs (turned on for
the test), and Ansible's output and runner artifacts. Each search first proves it can fail: its
text is there and holds the topic (or the new broker's host)."""
from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import structlog

from kafkaops.cli import datagen
from kafkaops.platform import provision, state, store
from kafkaops.platform.kafka import connection, metadata, offsets, records, topics
from kafkaops.testing.dag_runs import run_dag
from tests.conftest import committed_copy
from tests.dags.conftest import kafka_default_connection
from tests.integration.conftest import throttles_left
from tests.secured import PASSWORD, SecuredCluster

pytestmark = pytest.mark.integration

TOPIC = "secured-ledger"
RECORDS = 3_000


class Recorder:
    """What the runs leave outside the store and Airflow's database: every ansible-runner run's
    stdout, events and artifact files (read before its private folder goes), and the kwargs of
    every trigger dag.test() ran."""

    def __init__(self) -> None:
        self.ansible: list[str] = []
        self.ansible_events: list[dict[str, Any]] = []
        self.triggers: list[str] = []

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from airflow.sdk.definitions import dag as dag_module

        run, inline = provision.run_ansible, dag_module._run_inline_trigger

        def recording_run(**kwargs: Any) -> Any:
            runner = run(**kwargs)
            self.ansible.append(runner.stdout.read())
            self.ansible_events.extend(runner.events)
            for path in sorted(Path(runner.config.artifact_dir).rglob("*")):
                if path.is_file():
                    self.ansible.append(f"== {path.name}\n{path.read_text(errors='replace')}")
            return runner

        def recording_trigger(trigger: Any, ti: Any) -> Any:
            self.triggers.append(json.dumps(trigger.serialize(), default=str))
            return inline(trigger, ti)

        monkeypatch.setattr(provision, "run_ansible", recording_run)  # every playbook run goes through it
        monkeypatch.setattr(dag_module, "_run_inline_trigger", recording_trigger)


@pytest.fixture(scope="module")
def cluster(airflow_db, secured_cluster: SecuredCluster) -> Iterator[SecuredCluster]:
    """The session's secured cluster as the DAGs' kafka_default connection, with a keyed topic (RF 2)
    and a consumer group that has read it."""
    config = secured_cluster.config()
    settings = {k: v for k, v in config.items() if k != "bootstrap.servers"}
    with kafka_default_connection(secured_cluster.bootstrap, settings):
        with connection.connect(config, timeout_s=60.0) as conn:  # the group coordinator loads slowly on a busy machine
            topics.create_topic(conn, TOPIC, 3, 2)
            datagen.produce(conn.config, TOPIC, datagen.DatagenSpec(records=RECORDS, keys=100, record_bytes=200))
            ends = {p: e for p, (_, e) in records.end_offsets(conn.config, TOPIC).items()}
            offsets.commit_group_offsets(conn, "billing", TOPIC, ends)
        yield secured_cluster


@pytest.fixture(scope="module")
def runs(dagbag, cluster: SecuredCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The scale-out, then the migrate, each with dag.test(), recorded (:class:`Recorder`); their
    task logs as the test process printed and logged them (also in ``log``, to read when a run failed)."""
    recorder = Recorder()
    folder = tmp_path_factory.mktemp("secured-dags")
    log = folder / "runs.log"
    with pytest.MonkeyPatch.context() as monkeypatch, _captured() as logs:
        recorder.install(monkeypatch)
        spark_events = spark_event_logs(folder, monkeypatch)
        scale_out = _run(dagbag, "kafka_scale_out", dry_run=False, approval="auto_approve",
                         inventory=str(cluster.spec_path), add_brokers=1, topics=[TOPIC],
                         throttle_mb_per_s=0.05)  # 50 kB/s: the copy outlasts the check before deferring, so a trigger runs
        migrate = _run(dagbag, "kafka_partition_increase", topic=TOPIC, new_partition_count=6, mode="migrate",
                       key_rule="field:key", dry_run=False, approval="auto_approve", cutover_group_suffix=".v2")
        review = _run(dagbag, "kafka_capacity_review", topics=[TOPIC], key_skew=True,
                      sample_records=3 * RECORDS)  # each of the 3 partitions read whole
    log.write_text("\n".join(logs))
    yield {"scale_out": scale_out, "migrate": migrate, "review": review, "recorder": recorder, "logs": logs,
           "log": log, "spark_events": spark_events}


def spark_event_logs(folder: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Spark's event logs on, as an operator may turn them on (spark-defaults.conf of SPARK_CONF_DIR),
    written uncompressed into the folder returned (in ``folder``), for the leak searches."""
    spark_conf, spark_events = folder / "spark-conf", folder / "spark-events"
    spark_conf.mkdir()
    spark_events.mkdir()
    (spark_conf / "spark-defaults.conf").write_text(f"spark.eventLog.enabled true\nspark.eventLog.compress false\n"
                                                    f"spark.eventLog.dir {spark_events.as_uri()}\n")
    monkeypatch.setenv("SPARK_CONF_DIR", str(spark_conf))
    return spark_events


def airflow_rows(run_ids: list[str]) -> tuple[str, str]:
    """The XCom values of the runs ``run_ids`` as JSON, and every row of every table of Airflow's
    database (task instances' next_kwargs, rendered fields, run conf, triggers, HITL ...) as text."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    import sqlalchemy as sa

    with create_session() as session:
        xcoms = session.execute(sa.select(XComModel.task_id, XComModel.key, XComModel.value)
                                .where(XComModel.run_id.in_(run_ids))).all()
        database = [f"== {table}: {row}" for table in sa.inspect(session.get_bind()).get_table_names()
                    for row in session.execute(sa.text(f'SELECT * FROM "{table}"')).all()]
    return json.dumps([list(x) for x in xcoms], default=str), "\n".join(database)


def _run(dagbag, dag_id: str, **conf: Any) -> tuple[Any, dict[str, Any]]:
    dag_run = run_dag(dagbag, dag_id, **conf)
    return dag_run, state.AuditLog.for_run(dag_id, dag_run.run_id).summary()


@contextmanager
def _captured() -> Iterator[list[str]]:
    """Everything the test process writes while the runs go: its stdout and stderr (the Python
    streams, where structlog prints the task log lines, and the file descriptors, where librdkafka
    and child processes write) and every log record (kafkaops' from DEBUG up, the others' from INFO)."""
    text: list[str] = []
    streams = io.StringIO()
    handler = logging.Handler(logging.DEBUG)
    handler.emit = lambda record: text.append(f"{record.name}: {record.getMessage()}")  # type: ignore[method-assign]
    root, ours = logging.getLogger(), logging.getLogger("kafkaops")
    levels = root.level, ours.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    ours.setLevel(logging.DEBUG)
    # structlog's task log lines go to the stream Airflow configured it with: this one for now
    factory = structlog.get_config().get("logger_factory")
    configured = getattr(factory, "io", None)
    if configured is not None:
        factory.io = streams
    saved_fds = [os.dup(1), os.dup(2)]
    with tempfile.TemporaryFile() as fds, contextlib.redirect_stdout(streams), contextlib.redirect_stderr(streams):
        for fd in (1, 2):
            os.dup2(fds.fileno(), fd)
        try:
            yield text
        finally:
            if configured is not None:
                factory.io = configured
            for fd, saved in zip((1, 2), saved_fds):
                os.dup2(saved, fd)
                os.close(saved)
            root.removeHandler(handler)
            root.setLevel(levels[0])
            ours.setLevel(levels[1])
            fds.seek(0)
            text += [streams.getvalue(), fds.read().decode(errors="replace")]


def test_a_scale_out_adds_a_fourth_secured_broker_through_the_role(runs, cluster: SecuredCluster) -> None:
    dag_run, record = runs["scale_out"]
    assert str(dag_run.state) == "success" and record["outcome"] == "success", (runs["log"], record)
    assert [n.node_id for n in cluster.spec.nodes] == [1, 2, 3, 4]
    config = cluster.config()
    with connection.connect(config) as conn:
        snap = metadata.snapshot(conn, topics=[TOPIC], sizes=False, groups=False)
        assert throttles_left(conn) == {}
    assert snap.replicas_per_broker().get(4, 0) > 0, snap.replicas_per_broker()
    assert record["plan"]["replica_moves"] > 0 and all(g["ok"] for g in record["gates"])
    # the new broker got the inventory's SASL_SSL listener, and the role's registration check (its
    # spec holds no client config) passed with the connection's
    properties = (cluster.spec.base_dir / "node-4" / "config" / "server.properties").read_text()
    sasl_ssl = "listener.security.protocol.map=CONTROLLER:PLAINTEXT,CLIENT:SASL_SSL" in properties.splitlines()
    assert sasl_ssl, "node 4's server.properties has no SASL_SSL client listener"
    checked = [e["event_data"]["res"] for e in runs["recorder"].ansible_events
               if e.get("event") == "runner_on_ok" and e["event_data"].get("host") == "kafka-4"
               and e["event_data"].get("task_action") == "kafka_broker_registration"]
    assert checked and checked[-1]["registered"] and 4 in checked[-1]["brokers"], checked


def test_a_migrate_rekeys_into_a_new_topic_and_passes_its_gate(runs, cluster: SecuredCluster) -> None:
    dag_run, record = runs["migrate"]
    assert str(dag_run.state) == "success" and record["outcome"] == "success", (runs["log"], record)
    assert [(g["gate"], g["ok"]) for g in record["gates"]] == [("preflight", True), ("backfill", True)]
    copied, _ = committed_copy(cluster.config(), f"{TOPIC}.v2")
    assert len(copied) == RECORDS
    cut = next(n for n in record["notes"] if "offset_translation" in n)["offset_translation"]
    assert set(cut) == {"billing"} and cut["billing"]["redelivered"] == 0


def test_a_capacity_review_reports_on_the_secured_cluster_with_its_spark_key_skew(runs, cluster: SecuredCluster
                                                                                   ) -> None:
    dag_run, record = runs["review"]
    states = {ti.task_id: str(ti.state) for ti in dag_run.get_task_instances()}
    assert str(dag_run.state) == "success" and record["outcome"] == "success", (runs["log"], record, states)
    assert states["snapshot"] == states["key_skew"] == states["report"] == "success", states
    [note] = [n for n in record["notes"] if "report" in n]
    st = store.current()
    page = st.artifact(note["report"]["html"]).body.decode()
    assert page.startswith("<!") and TOPIC in page
    report = json.loads(st.artifact(note["report"]["json"]).body)
    assert report["review"]["cluster_id"] == cluster.spec.cluster_id
    # the review of the grown cluster: the four brokers' load, and the lag of the group that read the topic
    assert sorted(b["broker"] for b in report["review"]["broker_load"]) == [1, 2, 3, 4], report["review"]["broker_load"]
    assert "billing" in report["review"]["group_lag"], report["review"]["group_lag"]
    skew = report["key_skew"]  # Spark's Java client read the whole topic over SASL_SSL
    assert skew["topic"] == TOPIC and skew["records"] == RECORDS and 1 < skew["keys"] <= 100, skew


def test_no_artifact_of_any_run_holds_the_password(runs, cluster: SecuredCluster) -> None:
    from airflow.models.trigger import Trigger
    from airflow.utils.session import create_session
    import sqlalchemy as sa

    done = [runs["scale_out"], runs["migrate"], runs["review"]]
    st = store.current()
    events = [e for dag_run, _ in done for e in st.events(dag_run.dag_id, dag_run.run_id)]
    argv = [n["argv"] for _, record in done for n in record["notes"] if n.get("argv")]
    with create_session() as session:
        triggers = session.scalars(sa.select(Trigger)).all()
        trigger_rows = [f"{t.classpath} {t.encrypted_kwargs} {json.dumps(t.kwargs, default=str)}" for t in triggers]
    xcoms, database = airflow_rows([dag_run.run_id for dag_run, _ in done])
    artifacts = [f"== {path}\n" + st.artifact(path).body.decode(errors="replace") for path in st.artifact_paths()]
    recorder: Recorder = runs["recorder"]
    searched = {
        "the task logs (stdout, stderr, log records)": ("\n".join(runs["logs"]), TOPIC),
        "XCom values": (xcoms, TOPIC),
        "the trigger kwargs the operators deferred with": ("\n".join(recorder.triggers), TOPIC),
        "the trigger table": ("\n".join(trigger_rows), TOPIC),
        "Airflow's metadata database": (database, TOPIC),
        "the store's audit events": (json.dumps([e.data for e in events], default=str), TOPIC),
        "the store's operations": (json.dumps([st.operation(r.dag_id, r.run_id) for r, _ in done], default=str),
                                   TOPIC),
        "the store's artifacts (Data Docs, Spark log, capacity report)": ("\n".join(artifacts), TOPIC),
        "Spark's argv as recorded": (json.dumps(argv), "--kafka-config"),
        "Spark's event logs": ("\n".join(p.read_text(errors="replace") for p in runs["spark_events"].rglob("*")
                                         if p.is_file()), TOPIC),
        "Ansible's output, events and runner artifacts":
            ("\n".join(recorder.ansible) + json.dumps(recorder.ansible_events, default=str), "kafka-4"),
    }
    for where, (text, known) in searched.items():
        assert known in text, f"{where}: the search would find nothing ({len(text)} characters without {known!r})"
        assert PASSWORD not in text, f"the password leaked into {where}"
    # the brokers' store password passes through Ansible alone (server.properties, no_log)
    ansible = searched["Ansible's output, events and runner artifacts"][0]
    assert cluster.store_password not in ansible, "the TLS store password leaked into Ansible's output"
