"""Airflow for DAG tests: the DAGs' Kafka connection. The migrated metadata DB and the DagBag are session
fixtures of tests/conftest.py, so every package that runs a DAG shares one."""
from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager


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
