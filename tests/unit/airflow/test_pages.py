"""The operation-record pages from their Jinja2 templates: every value escaped, tables with units and UTC times."""
from __future__ import annotations

import re

from kafkaops.airflow.pages import render_message, render_record, render_record_list
from kafkaops.platform.state import AuditEvent, summarize
from tests.unit.clusters import three_brokers_one_topic

SCRIPT = "<script>alert('x')</script>"
T0 = 1_795_426_812.0  # 2026-11-23 09:40:12 UTC


def a_record(**started: object) -> dict:
    events = [
        ("started", {"operation": "scale_out", "dag_id": "kafka_scale_out", "run_id": "manual__1",
                     "triggered_by": "alice", "params": {"topics": ["orders", "payments"], "add_brokers": 1,
                                                         "dry_run": False}, **started}),
        ("snapshot", {"stage": "before", "cluster": three_brokers_one_topic().to_dict()}),
        ("step", {"name": "plan", "status": "started"}),
        ("step", {"name": "plan", "status": "success"}),
        ("plan", {"summary": "scale-out: 2 partitions change", "diff": ["orders-0: [1,2,3] -> [4,2,3]"],
                  "table": ["broker  replicas"], "moves": 2, "replica_moves": 2, "bytes_to_move": 3 * 2**30,
                  "eta_s": 250.0}),
        ("gate", {"gate": "plan", "ok": False, "failures": ["plan: broker 4 gets 9 replicas"],
                  "docs_path": "docs/kafka_scale_out/manual__1/plan/index.html"}),
        ("throttle_set", {"brokers": [1, 4], "topics": ["orders"], "rate": 10_000_000}),
        ("batch", {"index": 1, "partitions": 2, "bytes": 5 * 2**20, "status": "submitted", "remaining": 0}),
        ("outcome", {"outcome": "failed", "reason": "failed steps: plan_gate"}),
    ]
    return summarize(AuditEvent(T0 + i, kind, data) for i, (kind, data) in enumerate(events))


def text_of(page: str) -> str:
    body = page.split("<body>", 1)[1]
    return " ".join(re.sub(r"<[^>]+>", " ", body).split())


def test_a_script_in_any_value_is_escaped() -> None:
    record = a_record(triggered_by=SCRIPT, params={"topics": [SCRIPT]})
    record["notes"] = [{"ts": T0, "text": SCRIPT, "url": '"><script>alert(1)</script>'}]
    record["gates"][0]["failures"] = [SCRIPT]
    record["steps"][0]["error"] = SCRIPT
    operation = {"dag_id": "d", "run_id": "r", "kind": "drain", "cluster_id": SCRIPT, "triggered_by": SCRIPT,
                 "state": "finished", "outcome": "failed", "started_at": T0, "ended_at": T0 + 5}
    for page in (render_record(record), render_record_list([operation]), render_message(SCRIPT, SCRIPT)):
        assert "<script>" not in page and "&lt;script&gt;alert(" in page
    assert 'href="&#34;&gt;&lt;script&gt;' in render_record(record)


def test_the_page_shows_the_plan_steps_and_gates_with_units_and_utc_times() -> None:
    page = render_record(a_record())
    text = text_of(page)
    assert '<h1 class="bad">scale_out: failed</h1>' in page
    assert "started 2026-11-23 09:40:12 UTC" in text and "(8.00 s)" in text
    assert "scale-out: 2 partitions change" in text and "orders-0: [1,2,3] -&gt; [4,2,3]" in page
    assert "bytes to copy 3.0 GiB" in text and "time at the throttle 4 min 10 s" in text
    assert "plan success 2026-11-23 09:40:14 UTC 1.00 s" in text
    assert "plan FAILED plan: broker 4 gets 9 replicas Data Docs 2026-11-23 09:40:17 UTC" in text
    assert 'href="/kafkaops/artifacts/docs/kafka_scale_out/manual__1/plan/index.html"' in page
    assert "topics orders, payments" in text and "dry_run no" in text
    assert "10.0 MB/s (9.5 MiB/s)" in text and "5.0 MiB" in text
    assert "Cluster before" in text and "127.0.0.1:9091" in text and "Cluster after" not in text
    assert "{" not in text  # tables, not JSON


def test_a_record_that_only_started_still_renders() -> None:
    record = summarize([AuditEvent(T0, "started", {"operation": "drain", "dag_id": "d", "run_id": "r"})])
    text = text_of(render_record(record))
    assert "drain: running" in text and "not ended" in text and "no plan (yet)" in text


def test_a_capacity_report_note_links_the_stored_report() -> None:
    record = a_record()
    record["notes"] = [{"ts": T0, "text": "capacity report", "url": "/kafkaops/capacity/c1/r1/report.html"},
                       {"ts": T0, "text": "stored", "artifact": "capacity/c1/r2/report.html"}]
    page = render_record(record)
    assert 'href="/kafkaops/artifacts/capacity/c1/r1/report.html"' in page
    assert 'href="/kafkaops/artifacts/capacity/c1/r2/report.html"' in page


def test_the_list_links_each_run_and_shows_kind_cluster_outcome_and_times() -> None:
    page = render_record_list([
        {"dag_id": "kafka_scale_out", "run_id": "manual__2026-11-22T10:00:00+00:00", "kind": "scale_out",
         "cluster_id": "c1", "triggered_by": "alice", "state": "finished", "outcome": "success", "started_at": T0,
         "ended_at": T0 + 250},
        {"dag_id": "kafka_reassign", "run_id": "r2", "kind": "drain", "cluster_id": None, "triggered_by": None,
         "state": "running", "outcome": None, "started_at": T0, "ended_at": None}])
    assert 'href="/kafkaops/records/kafka_scale_out/manual__2026-11-22T10%3A00%3A00%2B00%3A00"' in page
    text = text_of(page)
    assert "kafka_scale_out manual__2026-11-22T10:00:00+00:00 scale_out c1 success alice 2026-11-23 09:40:12 UTC " \
           "4 min 10 s" in text
    assert "kafka_reassign r2 drain - running - 2026-11-23 09:40:12 UTC -" in text
