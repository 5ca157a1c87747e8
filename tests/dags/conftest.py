"""Airflow for DAG tests: the DAGs' Kafka connection. The migrated metadata DB and the DagBag are session
fixtures of tests/conftest.py, so every package that runs a DAG shares one."""
from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import pytest

from kafkaops.cli import datagen
from kafkaops.platform import admin, provision
from tests.conftest import TEST_BROKER_CONFIG


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


@pytest.fixture(scope="package")
def one_broker_cluster(airflow_db) -> Iterator[provision.ClusterSpec]:
    """One broker and one controller, shared by the partition-increase DAG tests (each module on a topic of its
    own, :func:`keyed_topic`): one broker start for both instead of one each."""
    with provision.temporary_cluster("kafkaops-dags-1b-", brokers=1, controllers=1,
                                     extra_config=TEST_BROKER_CONFIG) as spec:
        yield spec


def keyed_topic(conn: admin.KafkaConnection, topic: str, records: int) -> None:
    """``topic`` with 3 partitions and ``records`` datagen records of 100 keys (200 bytes each)."""
    admin.create_topic(conn, topic, 3, 1)
    datagen.produce(conn.config, topic, datagen.DatagenSpec(records=records, keys=100, record_bytes=200))
