"""What kafkaops reads of Kafka's kafka-cluster tool's failures (pure: the tool's output as text)."""
from __future__ import annotations

import pytest

from kafkaops.platform.kafka import registrations

NOT_REGISTERED = """\
org.apache.kafka.common.errors.BrokerIdNotRegisteredException: Broker ID 99 is not currently registered
java.util.concurrent.ExecutionException: org.apache.kafka.common.errors.BrokerIdNotRegisteredException: Broker ID 99 is not currently registered
\tat java.base/java.util.concurrent.CompletableFuture.reportGet(CompletableFuture.java:396)
\tat org.apache.kafka.tools.ClusterTool.main(ClusterTool.java:48)
Caused by: org.apache.kafka.common.errors.BrokerIdNotRegisteredException: Broker ID 99 is not currently registered
"""


def test_the_tools_innermost_java_error_is_its_code_and_its_cause_line_the_message() -> None:
    assert registrations._error_class(NOT_REGISTERED) == registrations.NOT_REGISTERED
    assert registrations._cause(NOT_REGISTERED) == ("org.apache.kafka.common.errors.BrokerIdNotRegisteredException: "
                                                    "Broker ID 99 is not currently registered")
    timeout = "Error while executing: org.apache.kafka.common.errors.TimeoutException: Timed out waiting for a node"
    assert registrations._error_class(timeout) is None  # not at a line's start nor after "Caused by"
    assert registrations._cause(timeout) == timeout
    assert registrations._error_class("usage: kafka-cluster unregister [-h]") is None
    assert registrations._cause("") == "no output"


def test_an_id_already_unregistered_counts_as_done_and_another_failure_names_those_done(monkeypatch) -> None:
    asked: list[list[str]] = []

    def tool(config, args, *, timeout_s):
        asked.append(list(args))
        if args[-1] == "5":
            raise registrations.UnregisterFailed("exited 1", code=registrations.NOT_REGISTERED)
        if args[-1] == "6":
            raise registrations.UnregisterFailed("exited 1: TimeoutException", code="TimeoutException")
        return ""

    monkeypatch.setattr(registrations, "run_cluster_tool", tool)
    assert registrations.unregister_brokers({}, [5, 4]) == (4, 5)
    with pytest.raises(registrations.UnregisterFailed,  # a timeout does not count as unregistered
                       match=r"broker 6 was not unregistered \(unregistered before it: 4\): exited 1: Timeout"):
        registrations.unregister_brokers({}, [6, 4])
    assert asked[:2] == [["unregister", "--id", "4"], ["unregister", "--id", "5"]]
