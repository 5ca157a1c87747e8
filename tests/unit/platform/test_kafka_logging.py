"""kafka-python's per-connection log lines are quieted where kafkaops connects; kafkaops' own are not."""
from __future__ import annotations

import logging

import pytest

from kafkaops.platform.kafka import connection


@pytest.fixture
def kafka_logger():
    """The ``kafka`` logger with no level of its own, as kafka-python leaves it; restored afterwards."""
    logger = logging.getLogger("kafka")
    saved = logger.level
    logger.setLevel(logging.NOTSET)
    yield logger
    logger.setLevel(saved)


def test_kafka_python_connects_quietly_and_our_logs_stay(kafka_logger, monkeypatch, caplog) -> None:
    """kafka-python logs every connect and close at INFO: the connection raises its loggers to WARNING
    before building its client; kafkaops' loggers (not below ``kafka``) still log INFO."""
    seen = {}

    class Client:  # records the level kafka-python's connection logger has when the client connects
        def __init__(self, **kwargs: object) -> None:
            seen["level"] = logging.getLogger("kafka.conn").getEffectiveLevel()

        def close(self) -> None:
            seen["closed"] = True

    monkeypatch.setattr("kafka.admin.KafkaAdminClient", Client)
    caplog.set_level(logging.INFO)
    with connection.connect("127.0.0.1:1") as conn:
        conn.legacy_admin()
    assert seen["level"] == logging.WARNING and seen["closed"]
    logging.getLogger("kafka.conn").info("<BrokerConnection ...>: connecting")
    logging.getLogger("kafkaops.reassign.engine").info("batch 1/2")
    assert [r.getMessage() for r in caplog.records] == ["batch 1/2"]


def test_a_level_someone_chose_for_kafka_python_stays(kafka_logger) -> None:
    kafka_logger.setLevel(logging.DEBUG)
    connection.quiet_kafka_python()
    assert kafka_logger.level == logging.DEBUG
