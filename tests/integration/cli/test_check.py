"""``python -m kafkaops check --kafka CONN_ID`` against the session's real 3-broker cluster, as a
component runs it: a subprocess whose Kafka connection is an Airflow connection in its environment."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from kafkaops.cli import exits
from kafkaops.platform import store as store_
from tests.conftest import RunningCluster
from tests.unit.cli.test_check import check

pytestmark = pytest.mark.integration


def test_the_kafka_connection_answers_with_its_cluster_and_brokers(kafka_cluster: RunningCluster,
                                                                   tmp_path: Path) -> None:
    with kafka_cluster.connect() as conn:
        cluster_id = conn.admin.describe_cluster().result(timeout=15).cluster_id
    store_.open_store(f"sqlite:///{tmp_path / 'kafkaops.db'}")
    connection = {"conn_type": "kafka", "extra": {"bootstrap.servers": kafka_cluster.bootstrap}}
    result = check("--kafka", "kafka_it", metadata=f"sqlite:///{tmp_path / 'airflow.db'}", home=tmp_path,
                   env={"AIRFLOW_CONN_KAFKA_IT": json.dumps(connection)})
    assert result.code == exits.EXIT_OK and result.err == "", result.err
    assert [line.split(":", 1)[0] for line in result.lines] == ["Airflow metadata database", "kafkaops store",
                                                                "Kafka connection 'kafka_it'"]
    assert result.lines[2].startswith(f"Kafka connection 'kafka_it': ok: cluster {cluster_id} at "
                                      f"{kafka_cluster.bootstrap}: 3 broker(s) (1, 2, 3), controller ")
