"""The one exception family of kafkaops. Every message names the object, the numbers and a fix."""
from __future__ import annotations


class KafkaOpsError(Exception):
    """Base of every error kafkaops raises on purpose."""


class ConfigError(KafkaOpsError):
    """A connection or parameter set that cannot work."""


class KafkaUnreachable(KafkaOpsError):
    """The bootstrap servers did not answer in time."""


class UnknownTopic(KafkaOpsError):
    """A topic that the cluster does not hold."""


class ProvisionError(KafkaOpsError):
    """An Ansible run of the kafka_broker role failed."""


class SetupError(KafkaOpsError):
    """A missing local prerequisite: java, the jars, the virtualenv."""
