"""The planner's time budget: planning that runs longer than its caller allows ends with
:class:`PlanTimedOut`, naming the budget and how to raise it, instead of holding a task for minutes.

The caller sets the budget around a plan (:func:`time_budget`); the planner's loops call :func:`check`, which
costs a clock read when a budget is set and nothing else. Without a budget (the CLI, the benchmarks) nothing
is checked. A context variable carries it, so the pure planning functions keep their signatures.
"""
from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from kafkaops.errors import KafkaOpsError


class PlanTimedOut(KafkaOpsError):
    """Planning used its whole time budget: a retry with the same budget would end the same way."""

    final = True


@dataclass(frozen=True)
class _Budget:
    seconds: float
    started: float
    raise_it: str

    @property
    def deadline(self) -> float:
        return self.started + self.seconds


_CURRENT: ContextVar[_Budget | None] = ContextVar("kafkaops_plan_budget", default=None)


@contextmanager
def time_budget(seconds: float | None, *, raise_it: str = "") -> Iterator[None]:
    """Planning inside the block ends with :class:`PlanTimedOut` once ``seconds`` have passed (None: no
    budget). ``raise_it``: how the operator raises the budget, for the message (e.g. the param's name)."""
    token = _CURRENT.set(None if seconds is None else _Budget(float(seconds), time.monotonic(), raise_it))
    try:
        yield
    finally:
        _CURRENT.reset(token)


def check(stage: str) -> None:
    """Raise :class:`PlanTimedOut` when the budget is used up; ``stage``: what the planner was doing."""
    budget = _CURRENT.get()
    if budget is None:
        return
    now = time.monotonic()
    if now > budget.deadline:
        raise PlanTimedOut(f"planning stopped after {now - budget.started:.1f} s, while {stage}: its time budget is "
                           f"{budget.seconds:g} s. Nothing was changed. {budget.raise_it or 'Give it a larger budget'}"
                           " (a plan of many brokers or partitions takes longer), or plan fewer topics or brokers")
