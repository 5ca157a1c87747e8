"""Every DAG imports, touches no Kafka or connection at import time, and is tagged and retried."""
from __future__ import annotations

import datetime as dt
import subprocess
import sys
from pathlib import Path

import pytest

from kafkaops.errors import ConfigError, KafkaUnreachable

REPO = Path(__file__).resolve().parents[2]
CHANGES_A_CLUSTER = {"kafka_scale_out", "kafka_reassign", "kafka_partition_increase"}
DAG_IDS = {"kafka_scale_out", "kafka_reassign", "kafka_partition_increase", "kafka_capacity_review"}
_REASSIGNMENT = {"begin", "preflight_gate", "execute_batches", "post_move_gate", "finish"}
RETRIED = {"kafka_scale_out": _REASSIGNMENT | {"provision"},
           "kafka_reassign": _REASSIGNMENT | {"stop_drained"},
           "kafka_partition_increase": {"begin", "preflight_gate", "plan", "execute", "catch_up", "verify",
                                        "cutover", "finish"},
           "kafka_capacity_review": {"begin", "snapshot", "key_skew", "finish"}}


def test_every_dag_imports_without_errors(dagbag) -> None:
    assert dagbag.import_errors == {}
    assert DAG_IDS <= set(dagbag.dag_ids)


@pytest.mark.parametrize("dag_id", sorted(DAG_IDS))
def test_dags_are_tagged_single_run_and_retried(dagbag, dag_id: str) -> None:
    dag = dagbag.dags[dag_id]
    assert "kafkaops" in dag.tags
    assert dag.max_active_runs == 1
    # the tasks that wait on or touch the cluster retry (kafkaops.airflow.operation_dag.RETRIED); nothing else
    retried = {t.task_id for t in dag.tasks if t.retries}
    assert retried == RETRIED[dag_id]
    for t in dag.tasks:
        if t.retries:
            assert (t.retries, t.retry_delay, t.retry_exponential_backoff) == (3, dt.timedelta(seconds=10), 2.0)
            assert t.retry_policy.evaluate(ConfigError("bad"), 1, 4).action.value == "fail"
            assert t.retry_policy.evaluate(KafkaUnreachable("blink"), 1, 4).action.value == "default"
    assert dag.task_dict.get("approval") is None or dag.task_dict["approval"].retries == 0  # one question per run
    assert all(p.description and p.schema.get("title") for p in (dag.params.get_param(k) for k in dag.params))
    if dag_id in CHANGES_A_CLUSTER:
        assert dag.params["dry_run"] is True  # dry run is the default


def test_no_kafka_or_connection_access_at_import_time() -> None:
    """Import the DAG files in a fresh interpreter where any Kafka client, connection or Variable
    lookup raises: a DAG file that touches either fails to import."""
    probe = f"""
import sys
sys.path[:0] = [{str(REPO / 'plugins')!r}, {str(REPO / 'dags')!r}]
import confluent_kafka, confluent_kafka.admin, kafka
def boom(*a, **k):
    raise RuntimeError("Kafka or a connection was touched at import time")
confluent_kafka.Producer = confluent_kafka.Consumer = confluent_kafka.admin.AdminClient = boom
kafka.KafkaAdminClient = boom
from airflow.sdk import BaseHook, Variable
BaseHook.get_connection = classmethod(boom)
Variable.get = staticmethod(boom)
import runpy
for name in {sorted(p.name for p in (REPO / 'dags').glob('*.py'))!r}:
    runpy.run_path({str(REPO / 'dags')!r} + '/' + name)
print("imported")
"""
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "imported" in result.stdout


def test_dag_files_import_no_heavy_library() -> None:
    """Every task's process parses its DAG file, and the DAG processor parses them all: pandas, Great
    Expectations and pyspark (seconds each) are imported by the tasks that use them, not by a DAG file."""
    probe = f"""
import sys, runpy
sys.path[:0] = [{str(REPO / 'plugins')!r}, {str(REPO / 'dags')!r}]
for name in {sorted(p.name for p in (REPO / 'dags').glob('*.py'))!r}:
    runpy.run_path({str(REPO / 'dags')!r} + '/' + name)
print(sorted(m for m in ("pandas", "great_expectations", "pyspark", "numpy", "ansible_runner") if m in sys.modules))
"""
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1] == "[]"


def test_the_worker_preload_imports_what_tasks_use_and_touches_nothing() -> None:
    """kafkaops.airflow.worker, which the Celery worker imports before it forks its tasks: pandas, GX and the
    DAG builders are loaded; no Kafka client, connection or thread is made (a fork after it is safe)."""
    probe = f"""
import sys, threading
sys.path[:0] = [{str(REPO / 'plugins')!r}]
import confluent_kafka, confluent_kafka.admin, kafka, kafka.admin
def boom(*a, **k):
    raise RuntimeError("Kafka or a connection was touched by the worker preload")
confluent_kafka.Producer = confluent_kafka.Consumer = confluent_kafka.admin.AdminClient = boom
kafka.KafkaAdminClient = kafka.admin.KafkaAdminClient = boom
from airflow.sdk import BaseHook
BaseHook.get_connection = classmethod(boom)
import kafkaops.airflow.worker
print(threading.active_count(), sorted(m for m in ("pandas", "great_expectations", "kafkaops.airflow.operation_dag",
                                                   "kafkaops.reassign.frames") if m in sys.modules))
"""
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1] == (
        "1 ['great_expectations', 'kafkaops.airflow.operation_dag', 'kafkaops.reassign.frames', 'pandas']")


@pytest.mark.parametrize("dag_id", ["kafka_scale_out", "kafka_reassign"])
def test_finish_is_the_teardown_of_begin(dagbag, dag_id: str) -> None:
    """finish runs whatever failed after begin took the lock: it removes throttles still set, records the
    outcome and releases the lock (execute_batches removes its throttles itself unless its worker died)."""
    dag = dagbag.dags[dag_id]
    assert {t.task_id for t in dag.tasks if t.is_teardown} == {"finish"}
    assert {t.task_id for t in dag.tasks if t.is_setup} == {"begin"}


def test_airflow_loads_the_kafkaops_plugin_from_the_packages_entry_point() -> None:
    """Airflow's own plugin loader finds the kafkaops plugin once, through the installed package's
    ``airflow.plugins`` entry point (no plugins folder), with its record pages and DAG-run tab; a
    plugins folder pointed at plugins/ adds no second registration (.airflowignore)."""
    import json
    import os

    airflow = str(Path(sys.executable).parent / "airflow")
    env = {**os.environ, "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO / "plugins")}
    result = subprocess.run([airflow, "plugins", "--output", "json"], capture_output=True, text=True, timeout=180,
                            env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    found = [p for p in json.loads(result.stdout[result.stdout.index("["):]) if p["name"] == "kafkaops"]
    assert len(found) == 1 and found[0]["source"].startswith("kafkaops=="), [p["source"] for p in found]
    assert found[0]["fastapi_apps"][0]["url_prefix"] == "/kafkaops"
    assert any(v["destination"] == "dag_run" for v in found[0]["external_views"])


def test_a_refused_switch_or_any_failure_before_it_reaches_the_rollback(dagbag) -> None:
    """A rejected HITL step skips its direct downstream tasks whatever their trigger rule: the rollback must
    not be one of them, and it runs after all the live steps whatever their state."""
    dag = dagbag.dags["kafka_partition_increase"]
    switch, abandon = dag.task_dict["switch"], dag.task_dict["abandon"]
    assert "abandon" not in switch.downstream_task_ids and switch.ignore_downstream_trigger_rules is False
    assert str(abandon.trigger_rule) in ("all_done", "TriggerRule.ALL_DONE")
    assert {"catch_up", "quiesce", "verify", "cutover", "confirm"} <= abandon.upstream_task_ids
    assert "switch" in {t.task_id for t in abandon.get_flat_relatives(upstream=True)}  # it runs after the switch
    assert dag.task_dict["finish"].is_teardown


LONG = {"kafka_partition_increase": {"execute", "catch_up", "quiesce", "confirm"}}


@pytest.mark.parametrize("dag_id", sorted(DAG_IDS))
def test_every_task_has_an_execution_timeout(dagbag, dag_id: str) -> None:
    """Every task ends: Airflow stops one that overran its execution_timeout (kafkaops.airflow.operation_dag), an
    hour, or six for a partition increase's Spark passes and waits for producers."""
    from kafkaops.airflow.operation_dag import LONG_TASK_TIMEOUT, TASK_TIMEOUT

    found = {t.task_id: t.execution_timeout for t in dagbag.dags[dag_id].tasks}
    expected = {t: LONG_TASK_TIMEOUT if t in LONG.get(dag_id, ()) else TASK_TIMEOUT for t in found}
    assert found == expected
