"""The rekey's dead-letter topic: made as durable as its target."""
from __future__ import annotations

from kafkaops.rekey.steps import dead_letter_configs


def test_the_dead_letter_topic_keeps_its_records_as_safely_as_the_target() -> None:
    source = {"min.insync.replicas": "2", "retention.ms": "604800000", "cleanup.policy": "compact",
              "unclean.leader.election.enable": "false"}
    assert dead_letter_configs(source) == {"min.insync.replicas": "2", "unclean.leader.election.enable": "false"}
    assert dead_letter_configs(None) == {} == dead_letter_configs({"retention.ms": "1"})
