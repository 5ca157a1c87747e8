"""Airflow for DAG tests: a migrated SQLite metadata DB in the session's throw-away AIRFLOW_HOME."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def airflow_db() -> Path:
    home = Path(os.environ["AIRFLOW_HOME"])
    result = subprocess.run([str(Path(sys.executable).parent / "airflow"), "db", "migrate"], capture_output=True,
                            text=True, env=os.environ.copy(), timeout=300)
    assert result.returncode == 0, f"airflow db migrate failed: {result.stderr[-2000:]}"
    return home


@pytest.fixture(scope="session")
def dagbag():
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(REPO / "dags"))


@contextmanager
def kafka_default_connection(bootstrap: str, settings: Mapping[str, str] | None = None) -> Iterator[None]:
    """Point the DAGs' default connection (kafka_default, from the environment) at ``bootstrap``,
    with more librdkafka ``settings`` in its extras (a secured cluster's ``security.protocol``, ``sasl.*``, ``ssl.*``)."""
    old = os.environ.get("AIRFLOW_CONN_KAFKA_DEFAULT")
    os.environ["AIRFLOW_CONN_KAFKA_DEFAULT"] = json.dumps(
        {"conn_type": "kafka", "extra": {**(settings or {}), "bootstrap.servers": bootstrap}})
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("AIRFLOW_CONN_KAFKA_DEFAULT", None)
        else:
            os.environ["AIRFLOW_CONN_KAFKA_DEFAULT"] = old
