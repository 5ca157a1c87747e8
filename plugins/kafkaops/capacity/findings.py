"""What every capacity rule gives and the error of bad review input, shared by the storage and throughput rules
(:mod:`kafkaops.capacity.review`) and the load rules (:mod:`kafkaops.capacity.load`). Pure."""
from __future__ import annotations

from dataclasses import dataclass

from kafkaops.errors import KafkaOpsError


class CapacityError(KafkaOpsError):
    """Input a capacity review cannot use (a target of 0, snapshots out of order, ...)."""


@dataclass(frozen=True)
class Finding:
    """One indicator that fired: the rule, what it is about, the measured value and the limit."""

    rule: str
    subject: str
    value: float
    threshold: float
    message: str
