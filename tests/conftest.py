"""Shared fixtures. ``kafka_cluster`` is a real 3-broker KRaft cluster started through the
project's Ansible role on free loopback ports, in a temp dir, once per test session."""
from __future__ import annotations

import atexit
import os
import re
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

# Airflow reads its configuration when first imported: point it at a throw-away home before any
# test module imports it, so tests never touch a developer's ~/airflow.
_REPO = Path(__file__).resolve().parents[1]
_AIRFLOW_HOME = Path(tempfile.mkdtemp(prefix="kafkaops-airflow-"))
os.environ.update({
    "AIRFLOW_HOME": str(_AIRFLOW_HOME),
    "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    "AIRFLOW__CORE__DAGS_FOLDER": str(_REPO / "dags"),
    "AIRFLOW__CORE__PLUGINS_FOLDER": str(_REPO / "plugins"),
    "GX_ANALYTICS_ENABLED": "false",
})
atexit.register(shutil.rmtree, _AIRFLOW_HOME, True)

from kafkaops.platform import admin  # noqa: E402

from kafkaops.platform import provision  # noqa: E402

# Fast failure detection for tests that stop brokers: fenced after 3 s without heartbeats.
TEST_BROKER_CONFIG = {
    "broker.heartbeat.interval.ms": 500,
    "broker.session.timeout.ms": 3000,
    "replica.lag.time.max.ms": 5000,
    "log.segment.bytes": 8 * 1024 * 1024,
}


@dataclass(frozen=True)
class RunningCluster:
    spec: provision.ClusterSpec

    @property
    def bootstrap(self) -> str:
        return self.spec.bootstrap

    @property
    def config(self) -> dict[str, str]:
        return {"bootstrap.servers": self.bootstrap}

    def connect(self, timeout_s: float = 15.0) -> admin.KafkaConnection:
        return admin.connect(self.config, timeout_s=timeout_s)


def wait_for(predicate: Callable[[], object], *, timeout: float, what: str, interval: float = 0.5) -> object:
    """Poll until ``predicate()`` is truthy; fail the test naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")


@pytest.fixture(scope="session")
def kafka_cluster() -> Iterator[RunningCluster]:
    with provision.temporary_cluster("kafkaops-it-", brokers=3, extra_config=TEST_BROKER_CONFIG) as spec:
        yield RunningCluster(spec)


@pytest.fixture
def kafka_conn(kafka_cluster: RunningCluster) -> Iterator[admin.KafkaConnection]:
    with kafka_cluster.connect() as conn:
        yield conn


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    """A topic name unique to this test."""
    return f"{re.sub(r'[^a-zA-Z0-9._-]', '-', request.node.name)[:40]}-{uuid.uuid4().hex[:6]}"
