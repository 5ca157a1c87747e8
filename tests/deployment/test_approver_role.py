"""The approver who cannot trigger (docs/operations.md, "Roles"): Airflow with the FAB auth manager, the role
``kafkaops approver-role`` sets up, and a user with it signing in through the api-server.

One throw-away Airflow for the module: PostgreSQL (Airflow's metadata and the kafkaops store), the project's wheel
installed outside the checkout (kafkaops/testing/deployment.py), ``airflow db migrate`` and ``airflow dags
reserialize`` (the kafkaops DAGs into the metadata database, and FAB's resource of each), and the api-server with
``AIRFLOW__CORE__AUTH_MANAGER`` set to FAB's; no scheduler, worker or Kafka: nothing here runs a task. The role
is made before the api-server starts (as an init step would make it), the users after it, as an operator makes
them, their passwords never in argv or a log: ``operator`` (Admin) with FAB's
``airflow users create`` (the password on its prompt, stdin), ``approver`` through FAB's users API as the
operator. ``operator`` triggers a ``kafka_scale_out`` run; its approval task is then made to wait for an answer
as a worker would have left it (task instance awaiting input, its human-in-the-loop detail), and its record is
seeded in the kafkaops store. Every check is a real HTTP call with a token from FAB's ``/auth/token``.
"""
from __future__ import annotations

import json
import re
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
import sqlalchemy as sa
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC
from cryptography.fernet import Fernet

from kafkaops.airflow import roles
from kafkaops.platform import provision, state, store as store_
from kafkaops.testing import deployment as harness, watchdog
from tests.deployment.conftest import REPO
from tests.deployment.runs import run_path
from tests.deployment.ui import AirflowUI

pytestmark = [pytest.mark.deployment, pytest.mark.slow, pytest.mark.timeout(600)]

DAG = "kafka_scale_out"
OTHER_DAG = "kafka_capacity_review"  # asks no approval: the role may not pause it
FAB = roles.FAB_AUTH_MANAGER
# What a worker leaves when an approval task parks (Airflow's execution API writes the same rows).
WAITING_APPROVAL = """
import json, sys
from pathlib import Path
from sqlalchemy import select
from airflow.configuration import conf
from airflow.models.dagbag import DBDagBag
from airflow.models.dagrun import DagRun
from airflow.models.hitl import HITLDetail
from airflow.models.taskinstance import TaskInstance
from airflow.utils.session import create_session
from airflow.utils.state import TaskInstanceState

dag_id, run_id = sys.argv[1:3]
with create_session() as session:
    run = session.scalar(select(DagRun).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id))
    run.dag = DBDagBag().get_dag_for_run(run, session=session)
    run.verify_integrity(session=session, dag_version_id=run.created_dag_version_id)
    session.flush()
    ti = session.scalar(select(TaskInstance).where(TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id,
                                                   TaskInstance.task_id == "approval"))
    ti.state, ti.try_number = TaskInstanceState.AWAITING_INPUT, 1
    session.add(HITLDetail(ti_id=ti.id, options=["Approve", "Reject"], subject="Approve the kafkaops scale-out plan",
                           body="the plan", defaults=None, multiple=False, params={}))
# its first try's log, where the api-server reads a task's log (Airflow's default log_filename_template)
log = Path(conf.get("logging", "base_log_folder"), f"dag_id={dag_id}", f"run_id={run_id}", "task_id=approval",
           "attempt=1.log")
log.parent.mkdir(parents=True, exist_ok=True)
log.write_text(json.dumps({"timestamp": "2026-11-28T06:30:00.000000Z", "level": "info",
                           "event": "Waiting for the approval of the scale-out plan"}) + "\\n")
"""


@dataclass
class FabAirflow:
    url: str
    env: dict[str, str] = field(repr=False)
    python: Path
    home: Path
    log: Path  # the api-server's; each one-shot command's output goes beside it
    http: httpx.Client = field(repr=False)
    passwords: dict[str, str] = field(repr=False)
    run_id: str = ""
    store: Any = field(default=None, repr=False)  # the kafkaops store (its records)
    outputs: dict[str, str] = field(default_factory=dict, repr=False)  # what each one-shot command printed
    _tokens: dict[str, str] = field(default_factory=dict, repr=False)

    def token(self, user: str) -> str:
        if user not in self._tokens:
            answer = self.http.post(f"{self.url}/auth/token",
                                    json={"username": user, "password": self.passwords[user]}, timeout=60)
            assert answer.status_code == 201, f"{user} could not sign in: {answer.status_code} {answer.text[:300]}"
            self._tokens[user] = answer.json()["access_token"]
        return self._tokens[user]

    def call(self, method: str, path: str, *, user: str, **kwargs: Any) -> httpx.Response:
        return self.http.request(method, f"{self.url}{path}", timeout=60,
                                 headers={"Authorization": f"Bearer {self.token(user)}"}, **kwargs)

    def run(self, name: str, *argv: str, stdin: str | None = None, expect: int = 0, timeout: float = 300) -> str:
        """``python -m ARGV`` as the components run it, in a session of its own (no terminal: a password prompt
        reads stdin); fail naming it unless it exits ``expect``. Its output is kept, and written beside the log."""
        done = subprocess.run([str(self.python), "-m", *argv], cwd=self.home, env=self.env, input=stdin,
                              capture_output=True, text=True, timeout=timeout, start_new_session=True)
        self.outputs[name] = done.stdout + done.stderr
        slug = re.sub(r"[^\w.]+", "-", name).strip("-")
        (self.log.parent / f"fab-{slug}.log").write_text(self.outputs[name])
        if done.returncode != expect:
            pytest.fail(f"{' '.join(argv)} exited {done.returncode}, not {expect}:\n{done.stdout[-3000:]}"
                        f"{done.stderr[-3000:]}")
        return done.stdout


def waiting_run(d: FabAirflow) -> str:
    """A ``kafka_scale_out`` run the operator triggered, its approval task waiting for an answer as a worker
    would have left it, with its kafkaops record; its run id."""
    triggered = d.call("POST", f"/api/v2/dags/{DAG}/dagRuns", user="operator", json={"logical_date": None, "conf": {}})
    assert triggered.status_code == 200, f"the operator could not trigger {DAG}: {triggered.status_code} " \
                                         f"{triggered.text[:500]}"
    run_id = str(triggered.json()["dag_run_id"])
    done = subprocess.run([str(d.python), "-c", WAITING_APPROVAL, DAG, run_id], cwd=d.home, env=d.env,
                          capture_output=True, text=True, timeout=180, start_new_session=True)
    assert done.returncode == 0, f"the approval task could not be made to wait: {done.stderr[-3000:]}"
    d.store.start_operation(DAG, run_id, kind="scale_out", triggered_by="operator", params={}, at=time.time())
    state.AuditLog(DAG, run_id, store=d.store, task_id="begin", try_number=1).append(
        "started", operation="scale_out", dag_id=DAG, run_id=run_id, triggered_by="operator", params={})
    return run_id


def settings(*, home: Path, metadata_url: str, store: dict[str, Any], url: str, port: int, dags_folder: str
             ) -> dict[str, str]:
    return {
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__AUTH_MANAGER": FAB,
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": metadata_url,
        "AIRFLOW__CORE__DAGS_FOLDER": dags_folder,
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__FERNET_KEY": Fernet.generate_key().decode(),
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{url}/execution/",
        "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "120",
        "AIRFLOW__API__BASE_URL": url,
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__WORKERS": "1",
        "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(64),
        "AIRFLOW__API__SECRET_KEY": secrets.token_urlsafe(32),
        "AIRFLOW__KAFKAOPS__FOUR_EYES": "True",
        f"AIRFLOW_CONN_{harness.STORE_CONN_ID.upper()}": json.dumps(store),
        "KAFKAOPS_CACHE": str(home / "kafkaops-cache"),
        "GX_ANALYTICS_ENABLED": "false",
    }


def wait_until_serving(d: FabAirflow, process: subprocess.Popen[bytes], timeout: float = 240) -> None:
    """Until the api-server answers and FAB's token route refuses a wrong password (FAB's app is up)."""
    deadline, last = time.monotonic() + timeout, ""
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"the api-server exited {process.returncode}:\n{d.log.read_text(errors='replace')[-4000:]}")
        try:
            health = d.http.get(f"{d.url}/api/v2/monitor/health", timeout=5).json()
            last = str(health)
            if (health.get("metadatabase") or {}).get("status") == "healthy":
                refused = d.http.post(f"{d.url}/auth/token", json={"username": "nobody", "password": "wrong"},
                                      timeout=60)
                if refused.status_code == 401:
                    return
                last = f"{health}; POST /auth/token {refused.status_code} {refused.text[:200]}"
        except (httpx.HTTPError, ValueError) as err:
            last = repr(err)
        time.sleep(1.0)
    pytest.fail(f"the api-server at {d.url} is not serving after {timeout:.0f} s ({last}):\n"
                f"{d.log.read_text(errors='replace')[-4000:]}")


@pytest.fixture(scope="module")
def fab(artifacts: Path) -> Iterator[FabAirflow]:
    root = Path(tempfile.mkdtemp(prefix="kafkaops-fab-"))
    began = time.monotonic()
    with ExitStack() as stack:
        # should this process die first: every process here (by its AIRFLOW_HOME), the folder
        stack.enter_context(watchdog.guarding(watchdog.environ("AIRFLOW_HOME", f"{root}/"), watchdog.rmtree(root),
                                              name=f"fab airflow {root}"))
        stack.callback(shutil.rmtree, root, ignore_errors=True)
        databases = stack.enter_context(harness.postgres_databases("airflow", "kafkaops"))
        installation = harness.install_wheel(root, REPO)
        home = root / "airflow"
        (home / "kafkaops-cache").mkdir(parents=True)
        port = provision.free_ports(1)[0]
        url = f"http://127.0.0.1:{port}"
        store_url = sa.make_url(databases["kafkaops"])
        env = {**harness.clean_env(installation.venv),
               **settings(home=home, metadata_url=databases["airflow"], url=url, port=port,
                          store={"conn_type": "postgres", "host": store_url.host, "port": store_url.port,
                                 "login": store_url.username, "schema": store_url.database},
                          dags_folder=installation.resource("r.dags_folder()"))}
        log = artifacts / "fab-api-server.log"
        http = stack.enter_context(httpx.Client(limits=httpx.Limits(max_keepalive_connections=0)))
        d = FabAirflow(url=url, env=env, python=installation.python, home=home, log=log, http=http,
                       passwords={"operator": secrets.token_urlsafe(16), "approver": secrets.token_urlsafe(16)})

        d.run("kafkaops check --upgrade", "kafkaops", "check", "--upgrade")
        d.run("airflow db migrate", "airflow", "db", "migrate")
        d.run("airflow dags reserialize", "airflow", "dags", "reserialize")
        # the role right after the migration, as an init step would make it: the api-server's start (FAB's sync of
        # its own roles) must leave it as it is
        d.run("kafkaops approver-role", "kafkaops", "approver-role")
        with log.open("wb") as out:
            server = subprocess.Popen([str(installation.python), "-m", "airflow", "api-server"], cwd=home, env=env,
                                      stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                      start_new_session=True)
        stack.callback(harness.stop_group, server)
        wait_until_serving(d, server)

        # the users, as docs/operations.md gives them
        d.run("airflow users create", "airflow", "users", "create", "--username", "operator", "--role", "Admin",
              "--firstname", "Olga", "--lastname", "Operator", "--email", "operator@example.com",
              stdin=f"{d.passwords['operator']}\n{d.passwords['operator']}\n")
        made = d.call("POST", "/auth/fab/v1/users", user="operator",
                      json={"username": "approver", "first_name": "Anna", "last_name": "Approver",
                            "email": "approver@example.com", "roles": [{"name": roles.ROLE}],
                            "password": d.passwords["approver"]})
        assert made.status_code in (200, 201), f"the operator could not make the approver: {made.status_code} " \
                                               f"{made.text[:500]}"

        d.store = store_.open_store(databases["kafkaops"])
        d.run_id = waiting_run(d)
        print(f"\nFAB Airflow up with its users and a waiting approval in {time.monotonic() - began:.0f} s at {url}")
        yield d


# -- the role ------------------------------------------------------------------------------------------------

def test_the_role_set_up_gives_the_approver_role_exactly_its_permissions(fab: FabAirflow) -> None:
    assert f"created role {roles.ROLE}" in fab.outputs["kafkaops approver-role"], fab.outputs["kafkaops approver-role"]
    # after the api-server's start, which syncs FAB's roles
    again = fab.run("kafkaops approver-role --check", "kafkaops", "approver-role", "--check")
    assert f"role {roles.ROLE} has exactly" in again, again

    answer = fab.call("GET", f"/auth/fab/v1/roles/{roles.ROLE}", user="operator")
    assert answer.status_code == 200, answer.text[:500]
    held = {(p["action"]["name"], p["resource"]["name"]) for p in answer.json()["actions"]}
    assert held == {g.pair for g in roles.grants()}, (sorted(held - {g.pair for g in roles.grants()}),
                                                      sorted({g.pair for g in roles.grants()} - held))
    assert fab.call("GET", f"/auth/fab/v1/roles/{roles.ROLE}", user="approver").status_code == 403


def test_a_role_changed_by_hand_is_found_by_check_and_brought_back(fab: FabAirflow) -> None:
    try:
        fab.run("airflow roles add-perms", "airflow", "roles", "add-perms", roles.ROLE, "-r", "DAG Runs", "-a",
                "can_create")
        drift = fab.run("kafkaops approver-role --check (changed)", "kafkaops", "approver-role", "--check", expect=1)
        assert "extra: can_create on DAG Runs" in drift and "bring it back: kafkaops approver-role" in drift, drift
    finally:
        back = fab.run("kafkaops approver-role (again)", "kafkaops", "approver-role")
    assert f"role {roles.ROLE} exists" in back and "removed can_create on DAG Runs" in back, back
    fab.run("kafkaops approver-role --check (back)", "kafkaops", "approver-role", "--check")


# -- what the approver may do ----------------------------------------------------------------------------------

def test_the_approver_reads_dags_runs_task_instances_logs_and_the_record(fab: FabAirflow) -> None:
    run = run_path(DAG, fab.run_id)
    dags = fab.call("GET", "/api/v2/dags", user="approver", params={"limit": 100})
    assert dags.status_code == 200, dags.text[:500]
    assert {DAG, OTHER_DAG} <= {d["dag_id"] for d in dags.json()["dags"]}
    for path in (f"/api/v2/dags/{DAG}", f"/api/v2/dags/{DAG}/dagRuns", f"/api/v2{run}",
                 f"/api/v2{run}/taskInstances", f"/api/v2{run}/taskInstances/approval",
                 f"/api/v2{run}/taskInstances/approval/-1/hitlDetails", "/api/v2/dags/~/dagRuns/~/hitlDetails",
                 "/api/v2/plugins"):
        answer = fab.call("GET", path, user="approver")
        assert answer.status_code == 200, f"GET {path} as approver: {answer.status_code} {answer.text[:300]}"
    logs = fab.call("GET", f"/api/v2{run}/taskInstances/approval/logs/1", user="approver",
                    params={"full_content": True})
    assert logs.status_code == 200 and "Waiting for the approval" in logs.text, (logs.status_code, logs.text[:500])
    plugins = fab.call("GET", "/api/v2/plugins", user="approver").json()["plugins"]
    assert any(v["name"] == "Operation record" for p in plugins for v in p["external_views"]), plugins

    page = fab.call("GET", f"/kafkaops/records/{DAG}/{quote(fab.run_id, safe='')}", user="approver")
    assert page.status_code == 200 and fab.run_id in page.text, (page.status_code, page.text[:500])
    listing = fab.call("GET", "/kafkaops/records", user="approver")
    assert listing.status_code == 200 and fab.run_id in listing.text, (listing.status_code, listing.text[:500])

    menus = fab.call("GET", "/ui/auth/menus", user="approver").json()["authorized_menu_items"]
    assert {"Dags", "Required Actions"} <= set(menus) and "Connections" not in menus, menus


def test_the_approver_answers_the_waiting_approval(fab: FabAirflow) -> None:
    path = f"/api/v2{run_path(DAG, fab.run_id)}/taskInstances/approval/-1/hitlDetails"
    answer = fab.call("PATCH", path, user="approver", json={"chosen_options": ["Approve"], "params_input": {}})
    assert answer.status_code == 200, f"the approver's answer: {answer.status_code} {answer.text[:500]}"
    # four eyes compares this name with the run's triggering user (kafkaops.airflow.operators)
    assert answer.json()["responded_by"]["name"] == "approver", answer.json()
    run = fab.call("GET", f"/api/v2{run_path(DAG, fab.run_id)}", user="approver").json()
    assert run["triggering_user_name"] == "operator", run  # the name four eyes holds the answer's to
    assert fab.call("GET", path, user="approver").json()["response_received"] is True
    again = fab.call("PATCH", path, user="operator", json={"chosen_options": ["Reject"], "params_input": {}})
    assert again.status_code == 409, again.text[:300]  # answered once; the operator may answer, too
    nowhere = fab.call("PATCH", f"/api/v2{run_path(DAG, 'manual__nowhere')}/taskInstances/approval/-1/hitlDetails",
                       user="approver", json={"chosen_options": ["Approve"], "params_input": {}})
    assert nowhere.status_code == 404, nowhere.text[:300]  # authorized, then not found


def test_the_approver_signs_in_on_fabs_page_answers_in_the_browser_and_reads_the_record(
        fab: FabAirflow, chrome: Any, artifacts: Path) -> None:
    """The approver's day in headless Chromium: FAB's sign-in page, Browse > Required Actions, the approval
    answered with its button, the run's Operation record tab; no Admin menu, and the Trigger form refused."""
    run_id = waiting_run(fab)  # a run of its own: the REST tests answer the module's run
    folder = artifacts / "fab-approver"
    folder.mkdir(exist_ok=True)
    ui = AirflowUI(chrome, fab.url, folder)
    ui.login_fab("approver", fab.passwords["approver"])
    home = ui.visible_text()
    ui.shot("approver-home")
    assert "Admin" not in home.split(), f"the approver's menu shows Admin (connections, variables):\n{home}"

    text = ui.open_required_action(DAG, run_id, timeout=120)
    ui.shot("approver-required-action")
    assert "Approve the kafkaops scale-out plan" in text and "Reject" in text, text
    ui.respond("Approve")
    ui.shot("approver-answered")
    detail = fab.call("GET", f"/api/v2{run_path(DAG, run_id)}/taskInstances/approval/-1/hitlDetails",
                      user="operator").json()
    assert detail["response_received"] is True and detail["chosen_options"] == ["Approve"], detail
    assert (detail.get("responded_by_user") or {}).get("name") == "approver", detail  # who answered

    ui.open_run_tab(DAG, run_id, "Operation record")
    ui.text_shown(run_id)
    record = ui.visible_text()
    ui.shot("approver-operation-record")
    assert f"run {run_id}, triggered by operator" in record, record
    ui.driver.switch_to.default_content()

    # the approver may open the DAG but not trigger it: the API refuses what the form would send
    before = len(fab.call("GET", f"/api/v2/dags/{DAG}/dagRuns", user="operator").json()["dag_runs"])
    ui.open(f"/dags/{DAG}")
    ui.text_shown(DAG)
    ui.shot("approver-dag-page")
    trigger = [b for b in ui.driver.find_elements(By.CSS_SELECTOR, "[data-testid=trigger-dag-button]")
               if b.is_displayed() and b.is_enabled()]
    if trigger:  # shown to every reader: submitting it must be refused, and no run made
        ui.click(trigger[0])
        submit = ui.wait(EC.element_to_be_clickable((By.CSS_SELECTOR, "[data-testid=trigger-dag-submit]")),
                         "the Trigger form's submit button")
        ui.click(submit)
        ui.wait(lambda d: re.search(r"(?i)forbidden|not authori[sz]ed|403|access denied|permission",
                                    ui.visible_text()), "the refusal of the approver's trigger", 30)
        ui.shot("approver-trigger-refused")
    after = len(fab.call("GET", f"/api/v2/dags/{DAG}/dagRuns", user="operator").json()["dag_runs"])
    assert after == before, f"the approver's Trigger made {after - before} run(s)"


# -- what the approver may not do, and the operator may --------------------------------------------------------

@pytest.mark.parametrize(("method", "path", "body"), [
    ("POST", f"/api/v2/dags/{DAG}/dagRuns", {"logical_date": None, "conf": {}}),  # trigger
    ("PATCH", f"/api/v2/dags/{OTHER_DAG}", {"is_paused": True}),  # pause a DAG that asks no approval
    ("DELETE", f"/api/v2/dags/{DAG}", None),
    ("POST", f"/api/v2/dags/{DAG}/clearTaskInstances", {"dry_run": True}),
    ("GET", "/api/v2/connections", None),
    ("POST", "/api/v2/connections", {"connection_id": "stolen", "conn_type": "http"}),
    ("GET", "/api/v2/connections/kafkaops_store", None),
    ("GET", "/api/v2/variables", None),
    ("GET", "/api/v2/pools", None),
    ("GET", "/auth/fab/v1/users", None),
])
def test_the_approver_is_refused_what_only_an_operator_may_do(fab: FabAirflow, method: str, path: str,
                                                              body: dict[str, Any] | None) -> None:
    answer = fab.call(method, path, user="approver", json=body)
    assert answer.status_code == 403, f"{method} {path} as approver: {answer.status_code} {answer.text[:300]}"


def test_the_approver_may_not_change_the_run_and_the_operator_may(fab: FabAirflow) -> None:
    run = f"/api/v2{run_path(DAG, fab.run_id)}"
    for method, path, body in (("PATCH", run, {"state": "failed"}), ("DELETE", run, None),
                               ("PATCH", f"{run}/taskInstances/approval", {"new_state": "success"})):
        refused = fab.call(method, path, user="approver", json=body)
        assert refused.status_code == 403, f"{method} {path} as approver: {refused.status_code} {refused.text[:300]}"
    assert fab.call("GET", "/api/v2/connections", user="operator").status_code == 200
    dry = fab.call("POST", f"/api/v2/dags/{DAG}/clearTaskInstances", user="operator", json={"dry_run": True})
    assert dry.status_code == 200, dry.text[:300]


def test_the_approver_may_pause_only_the_dags_whose_approvals_it_answers(fab: FabAirflow) -> None:
    """FAB asks for can_edit on the DAG with every answer, and can_edit on a DAG pauses it: the role's one write
    beyond the answer, on the approval DAGs only (docs/operations.md)."""
    paused = fab.call("GET", f"/api/v2/dags/{DAG}", user="approver").json()["is_paused"]
    same = fab.call("PATCH", f"/api/v2/dags/{DAG}", user="approver", json={"is_paused": paused})
    assert same.status_code == 200, same.text[:300]
    other = fab.call("PATCH", f"/api/v2/dags/{OTHER_DAG}", user="approver", json={"is_paused": True})
    assert other.status_code == 403, other.text[:300]


# -- no password on a command line or in a log -----------------------------------------------------------------

def test_no_password_is_in_a_command_output_or_the_api_servers_log(fab: FabAirflow) -> None:
    texts = {**fab.outputs, "api-server log": fab.log.read_text(errors="replace")}
    for user, password in fab.passwords.items():
        leaked = [name for name, text in texts.items() if password in text]
        assert not leaked, f"{user}'s password is in {leaked}"
