"""The operation-record pages as Airflow serves them: Airflow's own API app, built in-process with
the plugin mounted, the SimpleAuthManager (users from the environment, tokens from its ``/auth/token``
login), a migrated metadata DB holding the repository's DAGs, and a kafkaops store in a temp SQLite
file that the ``kafkaops_store`` connection names."""
from __future__ import annotations

import json
import re
import secrets
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import jwt
import pytest
from fastapi.testclient import TestClient

from kafkaops.platform import store as store_
from kafkaops.platform.state import AuditLog
from tests.unit.clusters import three_brokers_one_topic

pytestmark = pytest.mark.slow

DAG, RUN = "kafka_scale_out", "manual__2026-11-22T10:00:00+00:00"
DOCS = "docs/kafka_scale_out/manual__2026-11-22T10_00_00_00_00/preflight/index.html"
DOCS_HTML = b"<html><body><h1>Data Docs: preflight</h1></body></html>"
REPORT = "capacity/c1/scheduled__2026-11-22/report.html"
REPORT_HTML = b"<html><body>capacity report of c1</body></html>"
REVIEW = "capacity/c1/scheduled__2026-11-22/review.json"
# alice administers, vera only views, nobody is a user the auth manager allows nothing (no role)
USERS = "alice:admin,vera:viewer,nobody:"
ROUTES = ["/kafkaops/records", f"/kafkaops/records/{DAG}/{RUN}", f"/kafkaops/records/{DAG}/{RUN}.json",
          f"/kafkaops/artifacts/{DOCS}", f"/kafkaops/artifacts/{REPORT}"]


@dataclass
class Api:
    client: TestClient
    store: store_.Store
    home: Path

    def token(self, user: str) -> str:
        """Log ``user`` in as the UI does: its password from the auth manager's file, POST /auth/token."""
        passwords = json.loads(Path(self.home / "passwords.json").read_text())
        response = self.client.post("/auth/token", json={"username": user, "password": passwords[user]})
        assert response.status_code == 201, response.text
        return response.json()["access_token"]

    def get(self, path: str, token: str | None = None, **kwargs: object):
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return self.client.get(path, headers=headers, **kwargs)


def seed(store: store_.Store) -> None:
    store.start_operation(DAG, RUN, kind="scale_out", triggered_by="alice", params={"add_brokers": 1}, at=1.0)
    store.update_operation(DAG, RUN, cluster_id="c1")
    log = AuditLog(DAG, RUN, store=store, task_id="begin", try_number=1)
    log.append("started", operation="scale_out", dag_id=DAG, run_id=RUN, triggered_by="alice",
               params={"add_brokers": 1, "topics": ["orders"]})
    log.append("snapshot", stage="before", cluster=three_brokers_one_topic().to_dict())
    log.append("step", name="preflight", status="started")
    log.append("step", name="preflight", status="success")
    log.append("gate", gate="preflight", ok=True, failures=[], docs_path=DOCS)
    log.append("plan", summary="scale-out: 3 partitions change", diff=["orders-0: [1,2,3] -> [4,2,3]"])
    log.append("approval", approved=True, by="bob", mode="manual")
    log.append("note", text="capacity report of c1", url="/kafkaops/capacity/c1/scheduled__2026-11-22/report.html")
    log.append("outcome", outcome="success")
    store.put_artifact(DOCS, DOCS_HTML)
    store.put_artifact(REPORT, REPORT_HTML)
    store.put_artifact(REVIEW, b'{"review": {}}')
    # a run of a DAG Airflow no longer has: nobody's list shows it (Airflow's DAG filter)
    store.start_operation("retired_dag", "manual__1", kind="drain", triggered_by="carol", params={})


@pytest.fixture(scope="module")
def api(airflow_db: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:  # noqa: F811
    home = tmp_path_factory.mktemp("ui")
    env = {
        "AIRFLOW__CORE__AUTH_MANAGER": "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": USERS,
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / "passwords.json"),
        "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(32),
        "AIRFLOW_CONN_KAFKAOPS_STORE": json.dumps({"conn_type": "sqlite", "host": str(home / "kafkaops.db")}),
    }
    with pytest.MonkeyPatch.context() as mp:
        for name, value in env.items():
            mp.setenv(name, value)
        # the DAGs into the metadata DB, as the DAG processor does: the auth manager filters on them
        done = subprocess.run([str(Path(sys.executable).parent / "airflow"), "dags", "reserialize"],
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        from airflow.api_fastapi.app import create_app, purge_cached_app

        from kafkaops.airflow import ui

        store = store_.open_store(f"sqlite:///{home / 'kafkaops.db'}")
        seed(store)
        ui.current_store.cache_clear()
        purge_cached_app()
        with TestClient(create_app("core")) as client:
            yield Api(client, store, home)
        purge_cached_app()
        ui.current_store.cache_clear()


def test_every_route_refuses_a_request_without_a_login(api: Api) -> None:
    for route in ROUTES:
        response = api.get(route)
        assert response.status_code == 401, route
        if route.endswith(".json"):
            assert response.json() == {"detail": "Not authenticated"}
        else:
            assert "text/html" in response.headers["content-type"] and "log in to Airflow" in response.text, route
            assert "/auth/login?next=" in response.text, route


def test_a_token_the_auth_manager_did_not_sign_is_refused(api: Api) -> None:
    real = api.token("vera")
    claims = {**jwt.decode(real, options={"verify_signature": False}), "role": "admin"}
    forged = jwt.encode(claims, secrets.token_hex(64), algorithm=jwt.get_unverified_header(real)["alg"])
    for route in ROUTES:
        response = api.get(route, forged)
        assert response.status_code == 403 and "Invalid JWT token" in response.text, route


def test_a_user_the_auth_manager_allows_nothing_sees_no_record(api: Api) -> None:
    token = api.token("nobody")
    for route in ROUTES[1:]:
        response = api.get(route, token)
        assert response.status_code == 403, route
    page = api.get(ROUTES[1], token)
    assert f"Airflow does not let your user read the runs of DAG {DAG}" in page.text
    assert "runs of DAG kafka_capacity_review" in api.get(f"/kafkaops/artifacts/{REPORT}", token).text
    listing = api.get("/kafkaops/records", token)
    assert listing.status_code == 200 and RUN not in listing.text and "you may read" in listing.text


def test_the_record_page_shows_the_record_and_links_its_stored_data_docs(api: Api) -> None:
    token = api.token("alice")
    page = api.get(f"/kafkaops/records/{DAG}/{RUN}", token)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    for text in ("scale_out: success", "triggered by <b>alice</b>", "cluster <code>c1</code>", "add_brokers",
                 "orders-0: [1,2,3] -&gt; [4,2,3]", "preflight", "passed", "bob", "Cluster before",
                 "2026-11-23"[:4]):
        assert text in page.text, text
    docs = re.search(r'href="(/kafkaops/artifacts/docs/[^"]+)">Data Docs<', page.text).group(1)
    report = re.search(r'href="(/kafkaops/artifacts/capacity/[^"]+)">capacity report of c1<', page.text).group(1)
    # the links work with the UI's session cookie, as in the DAG run's tab
    api.client.cookies.set("_token", token)
    try:
        served = api.client.get(docs)
        assert served.status_code == 200 and served.content == DOCS_HTML
        assert served.headers["content-type"] == "text/html; charset=utf-8"
        assert api.client.get(report).content == REPORT_HTML
    finally:
        api.client.cookies.clear()
    as_json = api.get(f"/kafkaops/records/{DAG}/{RUN}.json", token).json()
    assert as_json["outcome"] == "success" and as_json["gates"][0]["docs_path"] == DOCS
    assert as_json["steps"][0]["name"] == "preflight" and as_json["cluster_id"] == "c1"


def test_artifacts_are_served_with_their_content_type(api: Api) -> None:
    token = api.token("vera")
    review = api.get(f"/kafkaops/artifacts/{REVIEW}", token)
    assert review.status_code == 200 and review.headers["content-type"] == "application/json"
    # served in a sandbox of its own origin: no script runs, nothing is fetched but its own images
    csp = [d.strip() for d in review.headers["content-security-policy"].split(";")]
    assert csp[0] == "sandbox allow-same-origin" and "default-src 'none'" in csp and "script-src" not in review.headers[
        "content-security-policy"]
    assert review.headers["x-content-type-options"] == "nosniff"
    assert review.json() == {"review": {}}
    missing = api.get("/kafkaops/artifacts/docs/kafka_scale_out/nope/preflight/index.html", token)
    assert missing.status_code == 404 and "holds no artifact" in missing.text
    assert api.get("/kafkaops/artifacts/elsewhere/a/b.html", token).status_code == 404
    assert api.get("/kafkaops/artifacts/docs/x/../../capacity/c1/r/report.html", token).status_code == 404


def test_the_list_shows_the_readable_runs_newest_first(api: Api) -> None:
    listing = api.get("/kafkaops/records", api.token("vera"))
    assert listing.status_code == 200
    assert f'href="/kafkaops/records/{DAG}/manual__2026-11-22T10%3A00%3A00%2B00%3A00"' in listing.text
    assert "retired_dag" not in listing.text
    bad = api.get("/kafkaops/records?limit=0", api.token("vera"))
    assert bad.status_code == 422 and bad.headers["content-type"].startswith("text/html")
    assert "Bad request" in bad.text and "query.limit: Input should be greater than or equal to 1" in bad.text
    # the quoted link leads to the record
    assert api.get(f"/kafkaops/records/{DAG}/manual__2026-11-22T10%3A00%3A00%2B00%3A00",
                   api.token("vera")).status_code == 200


def test_an_unknown_run_is_a_readable_404(api: Api) -> None:
    token = api.token("alice")
    # as the DAG run's tab asks for it: Airflow's UI puts the URI-encoded run id into the iframe's href
    tab = api.get(f"/kafkaops/records/{DAG}/manual__2026-11-23T11%3A37%3A30.936718%2B00%3A00", token)
    assert tab.status_code == 404 and tab.headers["content-type"].startswith("text/html")
    assert "<h1>No operation record yet</h1>" in tab.text and 'target="_top"' in tab.text
    assert '"detail"' not in tab.text and "no kafkaops record for run manual__2026-11-23T11:37:30.936718+00:00" \
        in tab.text
    page = api.get(f"/kafkaops/records/{DAG}/manual__nope", token)
    assert page.status_code == 404 and page.headers["content-type"].startswith("text/html")
    assert "no kafkaops record for run manual__nope of DAG kafka_scale_out yet" in page.text
    assert 'href="/dags/kafka_scale_out/runs/manual__nope"' in page.text
    as_json = api.get(f"/kafkaops/records/{DAG}/manual__nope.json", token)
    assert as_json.status_code == 404 and "no kafkaops record" in as_json.json()["detail"]


def test_the_plugin_adds_a_dag_run_tab() -> None:
    from kafkaops.airflow.plugin import KafkaOpsPlugin

    views = {v["name"]: v for v in KafkaOpsPlugin.external_views}
    assert views["Operation record"]["destination"] == "dag_run"
    assert "{RUN_ID}" in views["Operation record"]["href"]
    assert KafkaOpsPlugin().fastapi_apps[0]["url_prefix"] == "/kafkaops"


@pytest.mark.parametrize("path, dag_id", [
    ("docs/kafka_scale_out/manual__1/preflight/index.html", "kafka_scale_out"),
    ("capacity/c1/scheduled__1/report.html", "kafka_capacity_review"),
    ("backfill/kafka_partition_increase/manual__1/spark-try1.log", "kafka_partition_increase"),
    ("docs/kafka_scale_out", None), ("spark/x/y.log", None), ("docs/../capacity/c1/r/report.html", None),
    ("docs//kafka_scale_out/r/index.html", None),
])
def test_an_artifact_belongs_to_the_dag_named_in_its_path(path: str, dag_id: str | None) -> None:
    from kafkaops.airflow.ui import artifact_dag_id

    assert artifact_dag_id(path) == dag_id
