"""The HTML pages of the operation records (served by :mod:`kafkaops.airflow.ui`), from the Jinja2
templates in ``kafkaops/airflow/templates/`` (autoescaped; tables with units and UTC times).

    record.html.j2    one operation record (``state.read_record``): who, params, steps, gates with
                      their Data Docs, plan, batches, throttles, notes, the cluster before and after
    records.html.j2   the operations rows, newest first
    message.html.j2   a page that says why there is nothing to show (no record, not logged in ...)

Links stay inside the plugin: records under :data:`RECORDS`, stored artifacts (Data Docs, capacity
reports) under :data:`ARTIFACTS` + their store path.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote

from kafkaops.model import Cluster
from kafkaops.platform import render

OUTCOME_CLASS = {"success": "ok", "dry_run": "ok", "running": "running"}
RECORDS = "/kafkaops/records"
ARTIFACTS = "/kafkaops/artifacts"
_LEGACY_CAPACITY = "/kafkaops/capacity/"  # capacity report URLs from before the store

_templates = render.html_templates("kafkaops.airflow")


def _cluster_view(data: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if not data:
        return None
    cluster = Cluster.from_dict(data)
    return {"headline": render.cluster_headline(cluster),
            "brokers": (render.BROKER_COLUMNS, render.broker_rows(cluster)),
            "partitions": (render.PARTITION_COLUMNS, render.partition_rows(cluster)),
            "groups": (render.GROUP_COLUMNS, render.group_rows(cluster))}


def record_href(dag_id: str, run_id: str) -> str:
    return f"{RECORDS}/{quote(dag_id, safe='')}/{quote(run_id, safe='')}"


def artifact_href(path: str) -> str:
    """The plugin's URL of a stored artifact (``docs/<dag>/<run>/<suite>/index.html``, ``capacity/...``)."""
    return f"{ARTIFACTS}/{quote(path.lstrip('/'))}"


def _note_href(note: Mapping[str, Any]) -> str | None:
    if note.get("artifact"):
        return artifact_href(str(note["artifact"]))
    url = note.get("url")
    if isinstance(url, str) and url.startswith(_LEGACY_CAPACITY):
        return artifact_href("capacity/" + url[len(_LEGACY_CAPACITY):])
    return url or None


def render_record(record: Mapping[str, Any]) -> str:
    """An operation record (``state.read_record`` or ``state.summarize``) as one self-contained HTML page."""
    plan = record.get("plan") or {}
    started, ended = record.get("started_at"), record.get("ended_at")
    return _templates.get_template("record.html.j2").render(
        record=record, plan=plan, plan_facts=render.plan_facts(plan),
        docs=[artifact_href(g["docs_path"]) if g.get("docs_path") else None for g in record.get("gates") or ()],
        notes=[(n, _note_href(n)) for n in record.get("notes") or ()],
        params=[(name, render.plain(value)) for name, value in sorted((record.get("params") or {}).items())],
        outcome_class=OUTCOME_CLASS.get(str(record.get("outcome")), "bad"),
        took=None if started is None or ended is None else ended - started,
        clusters=[(stage, _cluster_view(record.get(stage))) for stage in ("before", "after")])


def render_record_list(operations: Iterable[Mapping[str, Any]]) -> str:
    """Operations rows (``state.list_records``), newest first, as the list page."""
    rows = [(record_href(op["dag_id"], op["run_id"]), op,
             OUTCOME_CLASS.get(str(op.get("outcome") or op.get("state")), "bad"),
             None if op.get("ended_at") is None else op["ended_at"] - op["started_at"]) for op in operations]
    return _templates.get_template("records.html.j2").render(rows=rows)


def render_message(title: str, text: str, *, link: tuple[str, str] | None = None) -> str:
    """A page that says why there is nothing to show, with where to go next (``(href, label)``)."""
    return _templates.get_template("message.html.j2").render(title=title, text=text, link=link,
                                                              records=RECORDS)
