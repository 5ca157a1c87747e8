"""``kafkaops approver-role``: the permissions docs/operations.md lists are the ones the command grants, and the
refusals that change nothing. The role itself, on a real FAB auth manager, is tests/deployment/test_approver_role.py's."""
from __future__ import annotations

import io
import itertools
import re
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from kafkaops.airflow import roles
from kafkaops.cli import exits
from kafkaops.cli.main import main

DOCS = Path(__file__).resolve().parents[3] / "docs" / "operations.md"


def invoke(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exit_:  # argparse
            code = int(exit_.code or 0)
    return code, out.getvalue(), err.getvalue()


def documented_pairs() -> set[tuple[str, str]]:
    text = DOCS.read_text()
    table = text[text.index("| action | resource | why |"):].split("\n\n", 1)[0]
    pairs = set()
    for row in table.splitlines()[2:]:
        action, resource = row.split("|")[1:3]
        pairs |= set(itertools.product(re.findall(r"`([^`]+)`", action), re.findall(r"`([^`]+)`", resource)))
    return pairs


def test_the_documented_permissions_are_the_ones_the_role_gets() -> None:
    assert documented_pairs() == {g.pair for g in roles.grants()}


def test_the_role_never_triggers_changes_runs_or_reads_connections() -> None:
    pairs = {g.pair for g in roles.grants()}
    assert ("can_create", "DAG Runs") not in pairs
    assert not {p for p in pairs if p[0] in ("can_create", "can_edit", "can_delete")
                and p[1] in ("DAG Runs", "Task Instances", "DAGs")}
    assert not {p for p in pairs if p[1] in ("Connections", "Variables", "Pools", "Configurations", "XComs")}
    assert {("can_edit", f"DAG:{d}") for d in roles.APPROVAL_DAGS} <= pairs
    assert [g.resource for g in roles.grants(["a", "b", "a"]) if g.resource.startswith("DAG:")] == ["DAG:a", "DAG:b"]


@pytest.mark.parametrize("role", ["Admin", "Viewer", "User", "Op", "Public", ""])
def test_a_built_in_or_empty_role_name_is_refused(role: str) -> None:
    code, _, err = invoke("approver-role", "--role", role)
    assert code == exits.EXIT_BAD_INPUT
    assert "--role kafkaops-approver" in err, err


def test_without_the_fab_auth_manager_it_says_how_to_switch_and_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    simple = "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
    monkeypatch.setenv("AIRFLOW__CORE__AUTH_MANAGER", simple)
    code, out, err = invoke("approver-role")
    assert code == exits.EXIT_BAD_INPUT, (out, err)
    assert err.startswith("kafkaops approver-role: error: Airflow's auth manager is " + simple), err
    assert f"AIRFLOW__CORE__AUTH_MANAGER={roles.FAB_AUTH_MANAGER}" in err and "docs/operations.md" in err, err


def test_a_blank_dag_id_is_refused_before_airflow_is_asked() -> None:
    code, _, err = invoke("approver-role", "--dag", "kafka_scale_out", "--dag", " ")
    assert code == exits.EXIT_BAD_INPUT
    assert "none blank" in err and "--dag kafka_scale_out" in err, err
