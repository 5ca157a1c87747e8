"""Airflow for DAG tests: the DAGs' Kafka connection. The migrated metadata DB and the DagBag are session
fixtures of tests/conftest.py, so every package that runs a DAG shares one."""
from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import pytest

from kafkaops.cli import datagen
from kafkaops.testing import clusters
from kafkaops.platform import own, provision, state
from kafkaops.platform.kafka import connection, offsets, records, topics
from kafkaops.testing.clusters import TEST_BROKER_CONFIG
from kafkaops.testing.dag_runs import run_dag


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
    with clusters.temporary_cluster("kafkaops-dags-1b-", brokers=1, controllers=1,
                                    extra_config=TEST_BROKER_CONFIG) as spec:
        yield spec


def keyed_topic(conn: connection.KafkaConnection, topic: str, records: int) -> None:
    """``topic`` with 3 partitions and ``records`` datagen records of 100 keys (200 bytes each)."""
    topics.create_topic(conn, topic, 3, 1)
    datagen.produce(conn.config, topic, datagen.DatagenSpec(records=records, keys=100, record_bytes=200))


@contextmanager
def with_keyed_topic(cluster: provision.ClusterSpec, topic: str, count: int,
                     caught_up_group: str | None = None) -> Iterator[provision.ClusterSpec]:
    """``cluster`` as the DAGs' default connection, holding :func:`keyed_topic` ``topic`` (and, when named,
    ``caught_up_group`` committed at its end offsets: a group that has read everything)."""
    with kafka_default_connection(cluster.bootstrap):
        with connection.connect(cluster.bootstrap) as conn:
            keyed_topic(conn, topic, count)
            if caught_up_group:
                ends = {p: e for p, (_, e) in records.end_offsets(conn.config, topic).items()}
                offsets.commit_group_offsets(conn, caught_up_group, topic, ends)
        yield cluster


def marker_groups(config: Mapping[str, str] | str, target: str) -> list[str]:
    """The consumer groups of backfills into ``target`` on the cluster of ``config`` (a bootstrap too): the passes'
    commit markers and the tail's position (:func:`kafkaops.rekey.backfill.backfill_id`)."""
    with connection.connect(config) as conn:
        return [g for g in offsets.group_ids(conn) if g.startswith(f"{own.MARKER_GROUP_PREFIX}{target}-")]


def run_partition_increase(dagbag, **conf) -> tuple[Any, dict[str, Any]]:
    """A kafka_partition_increase run of ``conf`` (:func:`kafkaops.testing.dag_runs.run_dag`) and its audit
    record's summary."""
    dag_run = run_dag(dagbag, "kafka_partition_increase", **conf)
    return dag_run, state.AuditLog.for_run("kafka_partition_increase", dag_run.run_id).summary()
