"""A kafkaops task that waits on Kafka longer than its ``execution_timeout`` really stops, within the
timeout and a second or two, when dag.test() runs it.

Airflow 3.3 enforces ``execution_timeout`` with a SIGALRM in the task's process
(airflow.sdk.execution_time.timeout, armed by task_runner._execute_task; dag.test() runs the task
runner in this process, on the main thread): its handler raises AirflowTaskTimeout, but only once the
main thread is back in Python. A wait that sat in one librdkafka call (``flush(120)``, a consume of a
minute) would hold the timeout off until that call returned; kafkaops waits call Kafka in slices of at
most a second (kafkaops.platform.waits), so the timeout lands within about a second. Measured inside
the task (the same process), from the call into the product to the exception leaving it.
"""
from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable

import pytest

from kafkaops.cli import datagen
from kafkaops.errors import WaitTimedOut
from kafkaops.platform import provision
from kafkaops.platform.kafka import records, topics

TIMEOUT_S = 3
GRACE_S = 1.5
"""A slice of a wait is at most a second; the rest is the exception leaving librdkafka's call."""


def serialize(dag: object) -> None:
    """Write a DAG defined here into Airflow's DB: dag.test() runs only DAGs of a bundle it finds serialized
    (it re-syncs the DAG's bundle, dags-folder, which does not hold this one)."""
    from types import SimpleNamespace

    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import sync_bag_to_db

    DagBundlesManager().sync_bundles_to_db()  # the bundle's row, which the DAG's refers to
    sync_bag_to_db(SimpleNamespace(dags={dag.dag_id: dag}, import_errors={}, bundle_path=None,  # type: ignore[arg-type]
                                   file_last_changed={}, dag_warnings=set()), "dags-folder", None)


def run_with_timeout(dag_id: str, wait: Callable[[], object]) -> tuple[str, float, str]:
    """Run ``wait`` as the one task of a DAG with ``execution_timeout`` TIMEOUT_S (dag.test()); what
    stopped it, after how many seconds, and the task instance's state."""
    from airflow.sdk import DAG, task

    seen: list[tuple[str, float]] = []
    with DAG(dag_id, schedule=None, start_date=dt.datetime(2026, 1, 1), catchup=False) as dag:
        @task(execution_timeout=dt.timedelta(seconds=TIMEOUT_S), retries=0)
        def waits_on_kafka() -> None:
            started = time.monotonic()
            try:
                wait()
            except BaseException as err:
                seen.append((type(err).__name__, time.monotonic() - started))
                raise
            seen.append(("returned", time.monotonic() - started))

        waits_on_kafka()
    serialize(dag)
    dag_run = dag.test()
    states = {ti.task_id: str(ti.state) for ti in dag_run.get_task_instances()}
    assert len(seen) == 1, seen
    return seen[0][0], seen[0][1], states["waits_on_kafka"]


def test_a_flush_to_an_unreachable_cluster_stops_at_the_execution_timeout(airflow_db) -> None:
    """datagen's final flush waits up to 120 s for acknowledgements that never come (nothing listens
    on the port); the task's 3 s execution_timeout stops it."""
    bootstrap = f"127.0.0.1:{provision.free_ports(1)[0]}"

    def produce() -> None:
        datagen.produce({"bootstrap.servers": bootstrap}, "never-acked", datagen.DatagenSpec(records=10, keys=2))

    stopped_by, seconds, state = run_with_timeout("kafkaops_timeout_flush", produce)
    assert (stopped_by, state) == ("AirflowTaskTimeout", "failed")
    assert TIMEOUT_S - 0.5 < seconds < TIMEOUT_S + GRACE_S, seconds


def test_a_read_of_records_that_never_come_stops_at_the_execution_timeout(airflow_db, kafka_cluster,
                                                                          topic_name: str) -> None:
    """A bounded read (records.read_ranges, 120 s) of offsets 0..5 of an empty topic of the session's real
    cluster: the records never come; the task's 3 s execution_timeout stops it."""
    with kafka_cluster.connect() as conn:
        topics.create_topic(conn, topic_name, 1, 1)

    def read() -> None:
        list(records.read_ranges(kafka_cluster.config, topic_name, {0: (0, 5)}))

    stopped_by, seconds, state = run_with_timeout("kafkaops_timeout_read", read)
    assert (stopped_by, state) == ("AirflowTaskTimeout", "failed")
    assert TIMEOUT_S - 0.5 < seconds < TIMEOUT_S + GRACE_S, seconds


def test_the_products_own_deadline_ends_the_flush_first() -> None:
    """Without Airflow: datagen's flush ends at its own deadline with WaitTimedOut naming the numbers."""
    bootstrap = f"127.0.0.1:{provision.free_ports(1)[0]}"
    started = time.monotonic()
    with pytest.raises(WaitTimedOut) as caught:
        datagen.produce({"bootstrap.servers": bootstrap}, "never-acked", datagen.DatagenSpec(records=10, keys=2),
                        flush_timeout_s=2.0)
    assert time.monotonic() - started < 2.0 + GRACE_S
    text = str(caught.value)
    assert "waited 2.0 s of 2 s for the acknowledgements of 10 datagen record(s) to never-acked" in text, text
    assert "10 record(s) were still unacknowledged and were purged" in text and "run the same datagen" in text
