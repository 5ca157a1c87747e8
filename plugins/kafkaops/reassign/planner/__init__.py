"""A pure, deterministic Kafka reassignment planner: scale-out, rebalance and drain plans.

No I/O and no clients: a :class:`~kafkaops.model.Cluster` in, a :class:`ReassignmentPlan` out.
:mod:`kafkaops.cli.planfile` reads Kafka's reassignment JSON, :mod:`kafkaops.cli.plan` is the
``kafkaops plan`` command.
"""
from __future__ import annotations

from kafkaops.reassign.planner.budget import PlanTimedOut, time_budget
from kafkaops.reassign.planner.errors import PlanInfeasible, PlanInputError
from kafkaops.reassign.planner.goals import Goals
from kafkaops.model import Move
from kafkaops.reassign.planner.plan import LoadStats, ReassignmentPlan
from kafkaops.reassign.planner.planning import lower_bound_moves, plan_drain, plan_rebalance, plan_scale_out

__all__ = [
    "Goals", "LoadStats", "Move", "PlanInfeasible", "PlanInputError", "PlanTimedOut", "ReassignmentPlan",
    "lower_bound_moves", "plan_drain", "plan_rebalance", "plan_scale_out", "time_budget",
]
