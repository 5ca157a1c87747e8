"""The HTML pages of the operation records (served by :mod:`kafkaops.airflow.ui`), from the Jinja2
templates in ``kafkaops/airflow/templates/`` (autoescaped; tables with units and UTC times).

    record.html.j2    one operation record (``state.summarize``): who, params, steps, gates, plan,
                      batches, throttles, notes, the cluster before and after
    records.html.j2   every record, newest first
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kafkaops.model import Cluster
from kafkaops.platform import render

OUTCOME_CLASS = {"success": "ok", "dry_run": "ok", "running": "running"}

_templates = render.html_templates("kafkaops.airflow")


def _cluster_view(data: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if not data:
        return None
    cluster = Cluster.from_dict(data)
    return {"headline": render.cluster_headline(cluster),
            "brokers": (render.BROKER_COLUMNS, render.broker_rows(cluster)),
            "partitions": (render.PARTITION_COLUMNS, render.partition_rows(cluster)),
            "groups": (render.GROUP_COLUMNS, render.group_rows(cluster))}


def _plan_facts(plan: Mapping[str, Any]) -> list[tuple[str, str]]:
    facts = []
    if "moves" in plan:
        facts.append(("partitions that move", str(plan["moves"])))
    if "replica_moves" in plan:
        facts.append(("replicas that move", str(plan["replica_moves"])))
    if "bytes_to_move" in plan:
        facts.append(("bytes to copy", render.human_bytes(plan["bytes_to_move"])))
    if plan.get("eta_s") is not None:
        facts.append(("time at the throttle", render.duration(plan["eta_s"])))
    return facts


def render_record(record: Mapping[str, Any], *, docs_base: str = "") -> str:
    """An operation record (``state.summarize``) as one self-contained HTML page."""
    plan = record.get("plan") or {}
    started, ended = record.get("started_at"), record.get("ended_at")
    return _templates.get_template("record.html.j2").render(
        record=record, docs_base=docs_base, plan=plan, plan_facts=_plan_facts(plan),
        params=[(name, render.plain(value)) for name, value in sorted((record.get("params") or {}).items())],
        outcome_class=OUTCOME_CLASS.get(str(record.get("outcome")), "bad"),
        took=None if started is None or ended is None else ended - started,
        clusters=[(stage, _cluster_view(record.get(stage))) for stage in ("before", "after")])


def render_record_list(records: Iterable[tuple[str, Mapping[str, Any]]]) -> str:
    """``(href, record)`` pairs, newest first, as the list page."""
    rows = [(href, r, OUTCOME_CLASS.get(str(r.get("outcome")), "bad")) for href, r in records]
    return _templates.get_template("records.html.j2").render(rows=rows)
