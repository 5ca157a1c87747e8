"""DAG runs through Airflow's REST API, for the deployment tests: their tasks' states, logs and ends."""
from __future__ import annotations

import time
from typing import Any

import pytest

from kafkaops.testing.deployment import Deployment

# How long one run may take from its trigger to its end (or to its approval): generous for two busy cores.
RUN_TIMEOUT_S = 600.0
FINAL_STATES = {"success", "failed"}


run_path = Deployment.run_path


def task_states(d: Deployment, dag_id: str, run_id: str) -> dict[str, tuple[str | None, int]]:
    tis = d.api("GET", f"{run_path(dag_id, run_id)}/taskInstances", params={"limit": 100})["task_instances"]
    return {t["task_id"]: (t["state"], t["try_number"]) for t in tis}


def task_log_tail(d: Deployment, dag_id: str, run_id: str, task_id: str, try_number: int) -> str:
    content = d.api("GET", f"{run_path(dag_id, run_id)}/taskInstances/{task_id}/logs/{max(try_number, 1)}",
                    params={"full_content": True}).get("content") or []
    lines = [e.get("event", "") + (f" {e['error_detail']}" if e.get("error_detail") else "")
             for e in content if isinstance(e, dict)]
    return "\n".join(lines[-25:])


def wait_for_run(d: Deployment, dag_id: str, run_id: str, *, expect: str = "success",
                 timeout: float = RUN_TIMEOUT_S) -> dict[str, Any]:
    """The run once it ended in ``expect``; else fail with its task states and the failed tasks' logs."""
    deadline = time.monotonic() + timeout
    run: dict[str, Any] = {}
    while time.monotonic() < deadline:
        run = d.api("GET", run_path(dag_id, run_id))
        if run["state"] in FINAL_STATES:
            break
        time.sleep(2)
    if run.get("state") != expect:
        states = task_states(d, dag_id, run_id)
        failed = [t for t, (s, _) in states.items() if s == "failed"]
        logs = "\n".join(f"--- {t} (try {states[t][1]}):\n{task_log_tail(d, dag_id, run_id, t, states[t][1])}"
                         for t in failed)
        pytest.fail(f"{dag_id} run {run_id} is {run.get('state')!r}, expected {expect!r}, after {timeout:.0f} s "
                    f"(no task was cleared); tasks: {states}\n{logs}")
    return run


def wait_for_task(d: Deployment, dag_id: str, run_id: str, task_id: str, states: set[str], *,
                  timeout: float = RUN_TIMEOUT_S, poll_s: float = 1.0) -> tuple[str, int]:
    """``task_id``'s state (one of ``states``) and try number; fail if the run ends first."""
    deadline = time.monotonic() + timeout
    seen: dict[str, tuple[str | None, int]] = {}
    while time.monotonic() < deadline:
        seen = task_states(d, dag_id, run_id)
        state, tries = seen.get(task_id, (None, 0))
        if state in states:
            return state, tries
        run = d.api("GET", run_path(dag_id, run_id))
        if run["state"] in FINAL_STATES:
            pytest.fail(f"{dag_id} run {run_id} ended {run['state']} before {task_id} was {states}: {seen}")
        time.sleep(poll_s)
    pytest.fail(f"{task_id} of {dag_id} run {run_id} not {states} after {timeout:.0f} s: {seen}")
