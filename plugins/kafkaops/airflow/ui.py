"""The operation records in Airflow's UI: a FastAPI app mounted by the kafkaops plugin.

    /kafkaops/records                          every record, newest first
    /kafkaops/records/{dag_id}/{run_id}        one record as a page (a tab on the DAG run)
    /kafkaops/records/{dag_id}/{run_id}.json   the same record as JSON
    /kafkaops/docs/...                         Data Docs pages the gates kept
    /kafkaops/capacity/<cluster>/<run>/...     capacity review reports (HTML and JSON)
"""
from __future__ import annotations

from fastapi import FastAPI, HTTPException
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.staticfiles import StaticFiles

from kafkaops.platform import state
from kafkaops.platform.paths import state_dir
from kafkaops.airflow.pages import render_record, render_record_list

app = FastAPI(title="kafkaops operation records")


def _record(dag_id: str, run_id: str) -> dict:
    log = state.AuditLog.for_run(dag_id, run_id)
    if not log.path.exists():
        raise HTTPException(status_code=404, detail=f"no kafkaops record for {dag_id} run {run_id}")
    return log.summary()


@app.get("/records", response_class=HTMLResponse)
def list_records() -> str:
    return render_record_list((f"records/{path.parent.name}/{path.stem}", state.AuditLog(path).summary())
                              for path in state.list_records())


@app.get("/records/{dag_id}/{run_id}.json")
def record_json(dag_id: str, run_id: str) -> JSONResponse:
    return JSONResponse(_record(dag_id, run_id))


@app.get("/records/{dag_id}/{run_id}", response_class=HTMLResponse)
def record_page(dag_id: str, run_id: str) -> str:
    return render_record(_record(dag_id, run_id), docs_base="/kafkaops/docs")


def _mount_docs() -> None:
    docs = state_dir() / "docs"
    reports = state_dir() / "capacity" / "reports"
    for folder in (docs, reports):
        folder.mkdir(parents=True, exist_ok=True)
    app.mount("/docs", StaticFiles(directory=str(docs), html=True), name="docs")
    app.mount("/capacity", StaticFiles(directory=str(reports), html=True), name="capacity")


_mount_docs()
