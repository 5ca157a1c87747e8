"""The planner as of commit ab0e95c, pinned for benchmarks/bench_planner_scale.py as the reference (imports
adjusted to `reference_planner`; do not edit).

A pure, deterministic Kafka reassignment planner: scale-out, rebalance and drain plans.

No I/O and no clients: a :class:`~kafkaops.model.Cluster` in, a :class:`ReassignmentPlan` out.
:mod:`kafkaops.cli.planfile` reads Kafka's reassignment JSON, :mod:`kafkaops.cli.plan` is the
``kafkaops plan`` command.
"""
from __future__ import annotations

from reference_planner.errors import PlanInfeasible, PlanInputError
from reference_planner.goals import Goals
from kafkaops.model import Move
from reference_planner.plan import LoadStats, ReassignmentPlan
from reference_planner.planning import lower_bound_moves, plan_drain, plan_rebalance, plan_scale_out

__all__ = [
    "Goals", "LoadStats", "Move", "PlanInfeasible", "PlanInputError", "ReassignmentPlan",
    "lower_bound_moves", "plan_drain", "plan_rebalance", "plan_scale_out",
]
