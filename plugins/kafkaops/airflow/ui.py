"""The operation records in Airflow's UI: a FastAPI app the kafkaops plugin mounts at ``/kafkaops``.

    /kafkaops/records                          the runs the user may read, newest first
    /kafkaops/records/{dag_id}/{run_id}        one record as a page (a tab on the DAG run)
    /kafkaops/records/{dag_id}/{run_id}.json   the same record as JSON
    /kafkaops/artifacts/{path}                 a stored artifact with its content type: Data Docs
                                               (``docs/<dag>/<run>/<suite>/...``) and capacity reports
                                               (``capacity/<cluster>/<run>/...``, DAG kafka_capacity_review)

Everything comes from the kafkaops store (:func:`kafkaops.airflow.hooks.kafkaops_store`, opened
once per api-server process), nothing from local disk. Every route needs a user that Airflow's auth
manager authenticated (the UI's ``_token`` cookie or a Bearer token) and allows to read the DAG's
runs, through Airflow's own FastAPI dependencies; the list shows only the DAGs the user may read.
Pages that cannot show what was asked say why, as HTML (401, 403, 404, 422, 503), never as FastAPI's
``{"detail": ...}`` JSON, also inside the DAG run's "Operation record" tab (an iframe of the record
route); only the ``.json`` route answers errors as JSON.
"""
from __future__ import annotations

import functools
from typing import Annotated, Any
from urllib.parse import quote

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
from airflow.api_fastapi.core_api.security import GetUserDep, requires_access_dag
from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.exception_handlers import http_exception_handler, request_validation_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from kafkaops.airflow.hooks import kafkaops_store
from kafkaops.airflow.pages import render_message, render_record, render_record_list
from kafkaops.platform import state
from kafkaops.reassign import records as reassign_records
from kafkaops.platform.store import Store, StoreError

CAPACITY_DAG_ID = "kafka_capacity_review"

app = FastAPI(title="kafkaops operation records")


@functools.cache
def current_store() -> Store:
    """The kafkaops store of this api-server (the ``kafkaops_store`` connection, read once; a
    changed connection takes effect when the api-server restarts)."""
    return kafkaops_store()


StoreDep = Annotated[Store, Depends(current_store)]
READ_RUN = Depends(requires_access_dag("GET", DagAccessEntity.RUN))


def artifact_dag_id(path: str) -> str | None:
    """The DAG whose runs made the artifact at ``path``: the segment after ``docs/`` (Data Docs) or
    ``backfill/`` (a backfill's Spark log, plan and result); capacity reports belong to
    kafka_capacity_review; None for any other path."""
    parts = path.split("/")
    if len(parts) < 3 or any(p in ("", ".", "..") for p in parts):
        return None
    return parts[1] if parts[0] in ("docs", "backfill") else CAPACITY_DAG_ID if parts[0] == "capacity" else None


def read_artifact_dag(path: str, request: Request, user: GetUserDep) -> None:
    """Authorize reading the artifact at ``path`` as reading its DAG's runs."""
    dag_id = artifact_dag_id(path)
    if dag_id is None:
        raise HTTPException(404, f"{path!r} is not a kafkaops artifact path (docs/<dag>/<run>/..., "
                                 "backfill/<dag>/<run>/... or capacity/<cluster>/<run>/...); open the artifact from its run's record")
    requires_access_dag("GET", DagAccessEntity.RUN, param_dag_id=dag_id)(request, user)


def _record(store: Store, dag_id: str, run_id: str) -> dict[str, Any]:
    record = state.read_record(dag_id, run_id, store=store, folds=(reassign_records.fold_record,))
    if record is None:
        raise HTTPException(404, f"no kafkaops record for run {run_id} of DAG {dag_id} yet: the run has not "
                                 "reached its first kafkaops step, or it is not a kafkaops operation. Its task logs "
                                 "are on the run's page; every record is listed at /kafkaops/records")
    return record


@app.get("/records", response_class=HTMLResponse)
def list_records(user: GetUserDep, store: StoreDep, dag_id: str | None = None,
                 limit: Annotated[int, Query(ge=1, le=1000)] = 200) -> str:
    readable = get_auth_manager().get_authorized_dag_ids(user=user, method="GET")
    return render_record_list(state.list_records(dag_id, store=store, limit=limit, dag_ids=readable))


@app.get("/records/{dag_id}/{run_id}.json", dependencies=[READ_RUN])
def record_json(dag_id: str, run_id: str, store: StoreDep) -> JSONResponse:
    return JSONResponse(_record(store, dag_id, run_id))


@app.get("/records/{dag_id}/{run_id}", response_class=HTMLResponse, dependencies=[READ_RUN])
def record_page(dag_id: str, run_id: str, store: StoreDep) -> str:
    return render_record(_record(store, dag_id, run_id))


ARTIFACT_CSP = ("sandbox allow-same-origin; default-src 'none'; img-src 'self' data:; style-src 'unsafe-inline'; base-uri 'none'; "
                "form-action 'none'; frame-ancestors 'self'")
"""What a stored artifact (Data Docs, a capacity report: HTML carrying topic names, keys and field values from the
cluster) may do when it opens under the Airflow UI's origin: nothing. ``sandbox`` runs no script, submits no form
and opens no popup, whatever the page holds; it keeps the page's origin (``allow-same-origin``, harmless without
scripts) only so that following a Data Docs link sends the login cookie like any navigation (an opaque origin's
links arrive without it: "Not logged in"). ``default-src 'none'`` fetches nothing else; the rest allows what the
pages need offline: their inline styles and embedded (``data:``) plots, and the Data Docs' favicon beside them."""

ARTIFACT_HEADERS = {"Content-Security-Policy": ARTIFACT_CSP, "X-Content-Type-Options": "nosniff",
                    "Referrer-Policy": "no-referrer", "Cache-Control": "private, no-store"}


@app.get("/artifacts/{path:path}", dependencies=[Depends(read_artifact_dag)])
def artifact(path: str, store: StoreDep) -> Response:
    found = store.artifact(path)
    if found is None:
        raise HTTPException(404, f"the kafkaops store holds no artifact {path}; the run that makes it may not have "
                                 "got there: see the run's record")
    return Response(found.body, media_type=found.content_type, headers=ARTIFACT_HEADERS)


# -- errors: HTML pages that say why (JSON for the .json route) --------------------------------------------

_TITLES = {401: "Not logged in", 403: "Not allowed", 404: "Not found", 422: "Bad request",
           503: "kafkaops store unavailable"}


def _wants_json(request: Request) -> bool:
    return request.url.path.endswith(".json")


def _explain(request: Request, status: int, detail: str) -> tuple[str, tuple[str, str] | None]:
    params = request.path_params
    dag_id = params.get("dag_id") or artifact_dag_id(params.get("path", ""))
    if status == 401:
        login = get_auth_manager().get_url_login(next_url=str(request.url))
        return f"You are not logged in to Airflow ({detail}).", (login, "log in to Airflow")
    if status == 403:
        what = f"the runs of DAG {dag_id}" if dag_id else "this page"
        return (f"Airflow does not let your user read {what} ({detail}); ask an Airflow admin for read access "
                "to that DAG."), None
    if status == 404 and params.get("dag_id") and params.get("run_id"):
        return detail, (f"/dags/{quote(params['dag_id'])}/runs/{quote(params['run_id'])}", "the run in Airflow")
    return detail, None


@app.exception_handler(StarletteHTTPException)
async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
    if _wants_json(request):
        return await http_exception_handler(request, exc)
    text, link = _explain(request, exc.status_code, str(exc.detail))
    title = _TITLES.get(exc.status_code, "Error")
    if exc.status_code == 404 and request.path_params.get("run_id"):
        title = "No operation record yet"
    return HTMLResponse(render_message(title, text, link=link),
                        status_code=exc.status_code, headers=getattr(exc, "headers", None))


@app.exception_handler(RequestValidationError)
async def _bad_request(request: Request, exc: RequestValidationError) -> Response:
    if _wants_json(request):
        return await request_validation_exception_handler(request, exc)
    problems = "; ".join(f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg')}" for e in exc.errors())
    return HTMLResponse(render_message(_TITLES[422], f"This address asks for something the page cannot show: "
                                                     f"{problems}."), status_code=422)


@app.exception_handler(StoreError)
async def _store_error(request: Request, exc: StoreError) -> Response:
    if _wants_json(request):
        return JSONResponse({"detail": str(exc)}, status_code=503)
    return HTMLResponse(render_message(_TITLES[503], str(exc)), status_code=503)

