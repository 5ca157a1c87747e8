"""The planner's errors. Both derive from :class:`kafkaops.errors.KafkaOpsError`."""
from __future__ import annotations

from kafkaops.errors import KafkaOpsError


class PlanInputError(KafkaOpsError):
    """A request the planner cannot read: unknown or duplicate broker ids, partial racks, bad files."""

    final = True


class PlanInfeasible(KafkaOpsError):
    """A hard goal (distinct brokers, racks, replication factor) that no assignment can meet."""

    final = True
