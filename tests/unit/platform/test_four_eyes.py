"""The four-eyes rule's decision (kafkaops.platform.lifecycle.self_approval and its texts); the Airflow
wiring that reads ``[kafkaops] four_eyes`` and asks again is exercised on the deployment
(tests/deployment/test_deployment.py, test_operator_path.py)."""
from __future__ import annotations

import pytest

from kafkaops.platform import lifecycle

AT = "2026-11-28 06:30:00 UTC"


def test_an_approval_by_the_user_who_triggered_the_run_is_refused_naming_the_user_and_the_time() -> None:
    reason = lifecycle.self_approval(four_eyes=True, approved=True, triggered_by="operator",
                                     answered_by=("operator", "operator"), at=AT)
    assert reason is not None and "operator triggered this run and approved it at " + AT in reason
    assert "asked again" in reason and "Nothing changed" in reason


@pytest.mark.parametrize("four_eyes, approved, triggered_by, answered_by", [
    (False, True, "operator", ("operator", "operator")),  # the rule is off
    (True, False, "operator", ("operator", "operator")),  # a rejection by the trigger stands: it changes nothing
    (True, True, "operator", ("2", "approver")),  # another user
    (True, True, None, ("2", "approver")),  # a scheduled run: no one to exclude
    (True, True, None, (None, None)),
])
def test_every_other_answer_stands(four_eyes: bool, approved: bool, triggered_by: str | None,
                                   answered_by: tuple[str | None, ...]) -> None:
    assert lifecycle.self_approval(four_eyes=four_eyes, approved=approved, triggered_by=triggered_by,
                                   answered_by=answered_by, at=AT) is None


def test_the_user_is_matched_by_id_or_by_name() -> None:
    """FAB's auth manager gives a numeric id and the user name; Airflow records the trigger's name."""
    assert lifecycle.self_approval(four_eyes=True, approved=True, triggered_by="alice", answered_by=("7", "alice"),
                                   at=AT)


def test_auto_approve_under_four_eyes_is_refused_saying_nothing_changed_and_what_to_do() -> None:
    err = lifecycle.four_eyes_auto_approve("manual__1", "operator")
    assert isinstance(err, lifecycle.FourEyesError)
    assert "manual__1" in str(err) and "approval=manual" in str(err) and "Nothing changed" in str(err)


def test_the_approval_names_who_may_answer() -> None:
    rule = lifecycle.four_eyes_rule("operator")
    assert "operator triggered this run and may reject it" in rule and "only another user may approve" in rule
