"""The one exception family of kafkaops. Every message names the object, the numbers and a fix."""
from __future__ import annotations


class KafkaOpsError(Exception):
    """Base of every error kafkaops raises on purpose.

    ``code`` names the Kafka error behind it, when there is one (a librdkafka code name such as
    ``NOT_COORDINATOR``, or a kafka-python error class); ``retriable`` says whether asking again
    may succeed. :func:`kafkaops.platform.kafka.errors.retrying` asks again only when it is true.
    ``final`` says that a retry of the whole step would end the same way (the parameters, the
    plan, the data or the lock must change first): Airflow's one retry rule
    (:class:`kafkaops.airflow.operation_dag.FinalErrors`) fails the task at once on a final error.
    """

    code: str | None = None
    retriable: bool = False
    final: bool = False


class ConfigError(KafkaOpsError):
    """A connection or parameter set that cannot work."""

    final = True


class KafkaUnreachable(KafkaOpsError):
    """The bootstrap servers did not answer in time."""


class KafkaAuthFailed(ConfigError):
    """The cluster refused the connection's credentials or TLS handshake: wrong SASL user or password,
    an untrusted or rejected certificate. Asking again cannot help; the connection must change."""


class UnknownTopic(KafkaOpsError):
    """A topic that the cluster does not hold. Retriable, as in Kafka: a topic created a moment ago
    reaches every broker's metadata a little later."""

    retriable = True


class TopicExists(KafkaOpsError):
    """A topic that the cluster holds already (asked to create it)."""


class ProvisionError(KafkaOpsError):
    """An Ansible run of the kafka_broker role failed."""


class HostUnreachable(ProvisionError):
    """Ansible could not log in to a host (no answer on its SSH port, or the login refused): nothing ran
    there. Asking again cannot help; the inventory or the SSH connection must change."""

    final = True


class SetupError(KafkaOpsError):
    """A missing local prerequisite: java, the jars, the virtualenv."""


class NotFound(KafkaOpsError):
    """Something asked for by name that the store does not hold: a run's record."""


class WaitTimedOut(KafkaOpsError):
    """A wait on Kafka (or another server) reached its deadline: the message names what was awaited,
    how long it waited of how long it may, what state it left behind and what to run next. The wait
    already used its whole deadline, so it is not asked again by :func:`kafkaops.platform.kafka.errors.retrying`."""


class ReplicationFactorChangeRefused(KafkaOpsError):
    """Kafka refused a reassignment that would change a partition's replication factor (kafkaops sends every
    reassignment with ``AllowReplicationFactorChange`` false where the brokers take it, Kafka 4.1+). Asking
    again ends the same way: the replica list must keep the partition's replica count."""

    code = "INVALID_REPLICATION_FACTOR"
    final = True
