"""The one retry rule of the retried tasks: an error its capability marks final fails at once, any other
takes the task's retries (kafkaops.airflow.operation_dag.FinalErrors over KafkaOpsError.final)."""
from __future__ import annotations

import pytest

from kafkaops.airflow.operation_dag import RETRIED
from kafkaops.errors import ConfigError, HostUnreachable, KafkaAuthFailed, KafkaUnreachable, ProvisionError
from kafkaops.platform.gates import GateFailed
from kafkaops.platform.keyrules import KeyRuleError
from kafkaops.platform.store import ClusterBusy, LockLost
from kafkaops.reassign.planner.errors import PlanInfeasible, PlanInputError
from kafkaops.rekey.backfill import BackfillIntegrityError
from kafkaops.rekey.steps import OrderingBreakRefused

FINAL = [ConfigError, KafkaAuthFailed, KeyRuleError, HostUnreachable, ClusterBusy, LockLost, GateFailed,
         PlanInputError, PlanInfeasible, OrderingBreakRefused, BackfillIntegrityError]


@pytest.mark.parametrize("error", FINAL)
def test_a_final_error_fails_the_task_at_once(error) -> None:
    raised = error.__new__(error)  # the class decides; some take a result or a report to build
    decision = RETRIED["retry_policy"].evaluate(raised, 1, 4)
    assert error.final and decision.action.value == "fail" and error.__name__ in decision.reason


@pytest.mark.parametrize("raised", [KafkaUnreachable("blink"), ProvisionError("ansible failed"), OSError("reset"),
                                    RuntimeError("?")])
def test_any_other_error_takes_the_tasks_retries(raised) -> None:
    assert RETRIED["retry_policy"].evaluate(raised, 1, 4).action.value == "default"
