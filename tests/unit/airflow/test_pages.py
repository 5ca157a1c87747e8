"""The operation-record pages from their Jinja2 templates, one per kind of operation: every value escaped,
tables with units and UTC times, no JSON or Python reprs, no section a kind does not have."""
from __future__ import annotations

import html
import re
from dataclasses import replace

import pytest

from kafkaops.airflow.pages import TEMPLATES, render_message, render_record, render_record_list, template_of
from kafkaops.model import Broker
from kafkaops.platform.state import AuditEvent, summarize
from kafkaops.reassign.planner import plan_scale_out
from kafkaops.reassign.records import summarize as reassignment_record
from kafkaops.rekey.backfill import BackfillPlan
from kafkaops.rekey.records import (Action, ActionNote, BackfillRun, CatchUpNote, FinalPassNote, GroupTranslation,
                                    PassRow, Quiesced, QuiescedNote, RunNote, SwitchDecision, SwitchObserved,
                                    SwitchObservedNote, TranslationNote)
from tests.unit.clusters import three_brokers_one_topic

SCRIPT = "<script>alert('x')</script>"
T0 = 1_795_426_812.0  # 2026-11-23 09:40:12 UTC
DAG, RUN = "kafka_scale_out", "manual__1"


def plan_data() -> dict:
    """What reassign.steps.make_plan records: the plan of adding broker 4 to the fixture cluster."""
    plan = plan_scale_out(three_brokers_one_topic(), [Broker(4, rack="a")])
    return {"plan": plan.to_dict(), "kafka_json": plan.to_kafka_json(), "diff": list(plan.diff()),
            "table": list(plan.table()), "summary": plan.summary(), "moves": len(plan.moves),
            "replica_moves": plan.replica_moves, "bytes_to_move": 3 * 2**30, "eta_s": 250.0}


def events_of(kinds: list[tuple[str, dict]], *, task: str = "execute_batches") -> list[AuditEvent]:
    return [AuditEvent(T0 + i, kind, data, task, 1) for i, (kind, data) in enumerate(kinds)]


def scale_out_events(**started: object) -> list[tuple[str, dict]]:
    after = replace(three_brokers_one_topic(), brokers=(*three_brokers_one_topic().brokers,
                                                        Broker(4, host="127.0.0.1", port=9095, rack="a")))
    return [
        ("started", {"operation": "scale_out", "dag_id": DAG, "run_id": RUN, "triggered_by": "alice",
                     "params": {"topics": ["orders", "payments"], "add_brokers": 1, "dry_run": False,
                                "max_bytes_to_move": None, "extra": {"a": 1}}, **started}),
        ("snapshot", {"stage": "before", "cluster": three_brokers_one_topic().to_dict()}),
        ("step", {"name": "plan", "status": "started"}),
        ("plan", plan_data()),
        ("step", {"name": "plan", "status": "success"}),
        ("gate", {"gate": "plan", "ok": False, "failures": ["plan: broker 4 gets 9 replicas"],
                  "docs_path": f"docs/{DAG}/{RUN}/plan/index.html"}),
        ("approval", {"approved": True, "by": "bob", "mode": "manual"}),
        ("throttle_set", {"brokers": [1, 4], "topics": ["orders"], "rate": 10_000_000}),
        ("step", {"name": "execute_batches", "status": "started"}),
        ("batch", {"index": 1, "partitions": 2, "bytes": 5 * 2**20, "status": "submitted", "remaining": 1}),
        ("batch", {"index": 2, "partitions": 1, "bytes": 2**20, "status": "submitted", "remaining": 0}),
        ("step", {"name": "execute_batches", "status": "success"}),
        ("throttle_removed", {"brokers": [1, 4], "topics": ["orders"], "left": {"4": ["leader.replication."
                                                                                     "throttled.rate"]}}),
        ("snapshot", {"stage": "after", "cluster": after.to_dict()}),
        ("outcome", {"outcome": "failed", "reason": "failed steps: remove_throttles"}),
    ]


def a_record(**started: object) -> dict:
    return reassignment_record(events_of(scale_out_events(**started)))


def text_of(page: str) -> str:
    body = page.split("<body>", 1)[1]
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", body)).split())


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


def test_a_reassignment_page_shows_plan_approval_batches_and_throttles_as_tables() -> None:
    page = render_record(a_record())
    text = text_of(page)
    assert '<h1 class="bad">scale_out: failed</h1>' in page
    assert "started 2026-11-23 09:40:12 UTC" in text and "(14.0 s)" in text
    assert plan_data()["summary"] in text
    assert "bytes to copy 3.0 GiB" in text and "time at the throttle 4 min 10 s" in text
    assert "broker role replicas leaders bytes 1 3 → 2 1 5.9 KiB → 3.9 KiB" in text  # load before -> after
    assert "4 new 0 → 1 0 0 B → 2.0 KiB spread 3 → 2" in text
    assert "orders-1 2, 3, 1 2, 3, 4 4 1 2.0 KiB" in text  # the move: before, after, copies to, drops from, bytes
    assert "decision approved by bob how a person in Airflow's Required actions at 2026-11-23 09:40:18 UTC" in text
    assert "plan FAILED plan: broker 4 gets 9 replicas Data Docs 2026-11-23 09:40:17 UTC" in text
    assert f'href="/kafkaops/artifacts/docs/{DAG}/{RUN}/plan/index.html"' in page
    assert "1 2 5.0 MiB done 1 2026-11-23 09:40:21 UTC 2026-11-23 09:40:22 UTC 1.00 s" in text
    assert "2 1 1.0 MiB done 0 2026-11-23 09:40:22 UTC 2026-11-23 09:40:23 UTC 1.00 s" in text
    assert "1, 4 orders 10.0 MB/s (9.5 MiB/s)" in text
    assert "broker 4: leader.replication.throttled.rate" in text
    assert "execute_batches success 1 2026-11-23 09:40:20 UTC" in text
    assert "topics orders, payments" in text and "dry_run no" in text and "extra a: 1" in text
    assert "max_bytes_to_move -" in text
    assert "Cluster before" in text and "Cluster after" in text and "127.0.0.1:9095" in text
    assert "{" not in text and "[" not in text and "'" not in text.replace("Airflow's", "")  # no JSON, no reprs
    assert "epoch" not in text and str(int(T0)) not in page


def test_every_kind_has_its_template_and_an_unknown_kind_the_generic_one() -> None:
    for kind in ("scale_out", "rebalance", "drain", "decommission"):
        assert template_of({"operation": kind}) == "record_reassignment.html.j2"
    assert template_of({"operation": None, "kind": "partition_increase"}) == TEMPLATES["partition_increase"]
    assert template_of({"operation": "capacity_review"}) == "record_capacity_review.html.j2"
    assert template_of({"operation": "something_new"}) == "record.html.j2"
    text = text_of(render_record(summarize(events_of([("started", {"operation": "something_new"}),
                                                      ("step", {"name": "x", "status": "started"})]))))
    assert "something_new: running" in text and "x running" in text and "Batches" not in text


def test_a_record_that_only_started_still_renders() -> None:
    record = summarize([AuditEvent(T0, "started", {"operation": "drain", "dag_id": "d", "run_id": "r",
                                                   "params": {"dry_run": True}})])
    text = text_of(render_record(record))
    assert "drain: running" in text and "not ended" in text and "no plan (yet)" in text
    assert "not asked: a dry run stops before the approval" in text
    assert "Batches" not in text and "Throttles" not in text


def test_a_partition_increase_shows_its_plan_in_words_without_reassignment_sections() -> None:
    plan = {"summary": "grow orders in place from 3 to 6 partitions; new partitions on [[1, 2], [2, 3], [3, 1]]",
            "plan": {"mode": "in_place", "topic": "orders", "current_partitions": 3, "new_partitions": 6,
                     "replication_factor": 2, "assignment": [[1, 2], [2, 3], [3, 1]],
                     "key_change": {"sampled_records": 200, "keyed_records": 200, "distinct_keys": 50,
                                    "moved_keys": 0, "moved_records": 0, "old_partitions": 3, "new_partitions": 6,
                                    "summary": "0 of 50 distinct keys ..."}, "backfill": None,
                     "target_configs": {}}}
    record = summarize(events_of([
        ("started", {"operation": "partition_increase", "params": {"topic": "orders", "new_partition_count": 6}}),
        ("plan", plan), ("approval", {"approved": True, "by": "param approval=auto_approve", "mode": "auto_approve"}),
        ("note", {"text": "orders: grown 6 partitions"}), ("outcome", {"outcome": "success"})]))
    text = text_of(render_record(record))
    assert "partition_increase: success" in text
    assert "mode in place (new partitions on the topic) topic orders partitions 3 → 6 replication factor 2" in text
    assert ("keys that change partition 0 of 50 distinct keys (0 of 200 keyed records, 0.0%) in a sample of 200 "
            "would change partition going from 3 to 6 partitions") in text
    assert "new partitions on brokers 1, 2; 2, 3; 3, 1" in text
    assert "how the approval param (auto_approve)" in text and "orders: grown 6 partitions" in text
    for absent in ("Batches", "Throttles", "Moves", "Load per broker"):
        assert absent not in text


def test_an_abandoned_live_migration_shows_its_passes_quiesce_groups_and_why() -> None:
    record = summarize(events_of([
        ("started", {"operation": "partition_increase", "params": {"topic": "orders", "quiesce": "acl"}}),
        ("note", {"text": "backfill wrote 9 record(s)", "run": {"plan": {"source_topic": "orders"}, "written": 9,
                                                                 "mode": "merged", "seconds": 12.5}}),
        ("note", {"text": "catch-up pass 2", "catch_up": {"pass": 2, "lag_before": 4200, "records": 4200,
                                                          "written": 4200, "seconds": 20.0, "mode": "direct"}}),
        ("note", {"text": "writes denied", "action": "writes_denied"}),
        ("note", {"text": "producers quiesced", "quiesce": {"how": "acl", "asked_at": T0 + 3, "settled_at": T0 + 6,
                                                            "ends": {"0": 5}}}),
        ("note", {"text": "cut-over", "offset_translation": {"billing": {
            "source": {}, "target": {"10": 0, "2": 0}, "redelivered": 0, "committed_for": "billing",
            "settled": "drained", "stated": "no committed offset on the source: starts at the start of the target"}}}),
        ("note", {"text": "switch refused by bob", "switch_decision": {"approved": False, "by": "bob"}}),
        ("note", {"text": "live migration abandoned: the switch was refused. orders stays authoritative",
                  "abandoned": True}),
        ("outcome", {"outcome": "abandoned", "reason": "live migration abandoned: the switch was refused"})]))
    text = text_of(render_record(record))
    assert "partition_increase: abandoned" in text and "Live cut-over" in text
    assert "quiesce a DENY Write ACL on the source" in text and "2026-11-23 09:40:15 UTC" in text
    assert "1 backfill 9 merged 12.5 s" in text and "2 catch-up 4,200 4,200 direct 20.0 s" in text
    assert "billing billing drained 2: 0, 10: 0 0 no committed offset on the source" in text
    assert "switch refused by bob" in text and "abandoned live migration abandoned: the switch was refused" in text
    assert "{" not in text.split("Live cut-over", 1)[1].split("Notes", 1)[0]  # tables, not JSON


def test_a_confirmed_live_migration_shows_what_the_typed_notes_recorded() -> None:
    """The notes as rekey's steps write them (rekey.records): the page reads them back from the stored JSON."""
    bf = BackfillPlan("orders", ((0, 0, 9),), "orders.v2", 6)
    notes = [RunNote("backfill wrote 9 record(s)", BackfillRun(bf.to_dict(), 9, "direct", 3.0)),
             CatchUpNote("catch-up pass 2", PassRow(2, 40, 40, "direct", 4.0, lag_before=40)),
             ActionNote("stop the producers", Action.STOP_PRODUCERS, topic="orders", target_topic="orders.v2"),
             QuiescedNote("producers quiesced", Quiesced("manual", T0 + 1, T0 + 2, {0: 55})),
             FinalPassNote("final pass 3", PassRow(3, 6, 6, "direct", 2.0)),
             TranslationNote("cut-over", {"billing": GroupTranslation({"0": 55}, {"3": 20}, committed_for="billing",
                                                                      settled="drained")}),
             SwitchDecision(True, "param approval=auto_approve"),
             SwitchObservedNote("switch observed", SwitchObserved(1.5, 1, 1501, (3,)))]
    text = text_of(render_record(summarize(events_of([
        ("started", {"operation": "partition_increase", "params": {"topic": "orders", "quiesce": "manual"}}),
        *(("note", n.to_dict()) for n in notes), ("outcome", {"outcome": "success"})]))))
    shown = ["quiesce the record asked for the producers to stop (quiesce=manual); the source was then observed still",
             "1 backfill 9 direct 3.00 s",
             "2 catch-up 40 40 direct 4.00 s", "3 final (after the quiesce) 6 direct 2.00 s",
             "billing billing drained 3: 20 0", "switch confirmed by param approval=auto_approve",
             "write-unavailable window 1.5 s (the last source write to the first target record)"]
    assert [s for s in shown if s not in text] == []


def capacity_record(report: bool = True) -> dict:
    kinds: list[tuple[str, dict]] = [
        ("started", {"operation": "capacity_review", "dag_id": "kafka_capacity_review", "run_id": "r1",
                     "triggered_by": "alice", "params": {"topics": [], "key_skew": False}}),
        ("snapshot", {"stage": "before", "cluster": three_brokers_one_topic().to_dict()}),
        ("step", {"name": "report", "status": "started"})]
    if report:
        kinds.append(("note", {
            "text": "capacity report: /kafkaops/artifacts/capacity/c1/r1/report.html",
            "url": "/kafkaops/artifacts/capacity/c1/r1/report.html",
            "report": {"html": "capacity/c1/r1/report.html", "json": "capacity/c1/r1/review.json",
                       "url": "/kafkaops/artifacts/capacity/c1/r1/report.html"},
            "verdict": "brokers are enough for Kafka's data; the disk is full of other data: free it",
            "findings": ["broker 1: log dirs 70.1% full (> 70%)"],
            "recommendations": ["3 brokers; today 3 (enough)"]}))
        kinds += [("step", {"name": "report", "status": "success"}), ("outcome", {"outcome": "success"})]
    else:
        kinds += [("step", {"name": "report", "status": "failed", "error": "boom"}), ("outcome", {"outcome": "failed"})]
    return summarize(events_of(kinds))


def test_a_capacity_review_links_its_report_first_with_its_findings_and_no_empty_sections() -> None:
    page = render_record(capacity_record())
    text = text_of(page)
    assert re.search(r'<a class="button" href="/kafkaops/artifacts/capacity/c1/r1/report.html">'
                     r"Open the capacity report</a>", page)
    assert text.index("Open the capacity report") < text.index("Steps") < text.index("Parameters")
    assert "Verdict: brokers are enough for Kafka's data; the disk is full of other data: free it" in text
    assert "Findings broker 1: log dirs 70.1% full (> 70%)" in text
    assert "Recommendations 3 brokers; today 3 (enough)" in text
    assert "DAG kafka_capacity_review , run r1" in text and "topics (empty)" in text
    assert "Cluster as reviewed" in text and "capacity report:" not in text  # the note is the link, not a row
    for absent in ("Approval", "Plan", "Throttles", "Batches", "Gates", "(open)"):
        assert absent not in text
    failed = text_of(render_record(capacity_record(report=False)))
    assert "no report: the review ended before it wrote one" in failed and "report failed 1" in failed
    no_steps = capacity_record()
    no_steps["steps"] = []  # the review's tasks record no steps of their own: no empty section
    assert "Steps" not in text_of(render_record(no_steps))


def test_a_capacity_review_with_load_shows_its_load_plots_under_the_verdict_with_their_caption() -> None:
    record = capacity_record()
    note = record["notes"][-1]
    note["report"]["load_png"] = "capacity/c1/r 1/load.png"
    note["load_caption"] = f"The brokers' load 2026-11-22 00:00 UTC to 2026-11-23 00:00 UTC; limits: CPU 70% {SCRIPT}"
    page = render_record(record)
    text = text_of(page)
    assert re.search(r'<img alt="[^"]*load[^"]*" src="/kafkaops/artifacts/capacity/c1/r%201/load.png">', page)
    assert text.index("Verdict:") < text.index("The brokers' load 2026-11-22 00:00 UTC") < text.index("Findings")
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert "<img" not in render_record(capacity_record())  # an older note, or a review without load: no plot


def test_a_note_with_a_stored_artifact_links_it() -> None:
    record = a_record()
    record["notes"] = [{"ts": T0, "text": "capacity report", "url": "/kafkaops/capacity/c1/r1/report.html"},
                       {"ts": T0, "text": "stored", "artifact": "capacity/c1/r2/report.html"}]
    page = render_record(record)
    assert 'href="/kafkaops/artifacts/capacity/c1/r1/report.html">capacity report</a>' in page
    assert 'href="/kafkaops/artifacts/capacity/c1/r2/report.html">stored</a>' in page


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


@pytest.mark.parametrize("record", [a_record(), capacity_record()])
def test_every_page_is_self_contained(record: dict) -> None:
    page = render_record(record)
    assert "<script" not in page and "http://" not in page and "https://" not in page


def test_a_plan_recorded_in_another_shape_falls_back_to_its_summary_and_moves_as_text() -> None:
    record = a_record()
    record["plan"] = {**record["plan"], "plan": {"stats_before": {}, "kind": "scale_out"}}
    text = text_of(render_record(record))
    assert record["plan"]["summary"] in text and "orders-1: [2,3,1] -> [2,3,4]" in text
    assert "Load per broker" not in text


def test_a_dry_runs_record_shows_the_approval_it_would_ask_rendered_with_html_escaped() -> None:
    body = ("**Scale-out** of `orders` <script>alert(1)</script>\n\n| broker | replicas |\n|---|---|\n"
            "| 4 (new) | 0 → 3 |\n")
    events = [("started", {"operation": "scale_out", "params": {"dry_run": True}}),
              ("plan", {"summary": "scale-out: 3 moves", "approval": body}), ("outcome", {"outcome": "dry_run"})]
    page = render_record(summarize(events_of(events)))
    assert "What the approval would ask (dry run: nothing will be asked)" in page and "<details open>" in page
    assert "<td>4 (new)</td>" in page and "<strong>Scale-out</strong>" in page  # the Markdown table, as a table
    assert "<script>" not in page and "&lt;script&gt;" in page
    text = text_of(page)
    assert "not asked: a dry run stops before the approval" in text and "(yet)" not in text


def test_an_ended_run_says_what_it_never_reached_without_yet() -> None:
    events = [("started", {"operation": "drain", "params": {"dry_run": False}}),
              ("step", {"name": "preflight_gate", "status": "failed", "error": "broker 2 is offline"}),
              ("outcome", {"outcome": "failed"})]
    text = text_of(render_record(summarize(events_of(events))))
    assert "no plan: the run ended before it made one" in text
    assert "not asked: the run ended before the approval" in text and "(yet)" not in text


def test_a_live_migration_waiting_for_the_producers_to_stop_says_so_above_everything_with_its_deadline() -> None:
    request = ActionNote("Stop every producer writing to orders now.", Action.STOP_PRODUCERS, topic="orders",
                         target_topic="orders.v2", deadline=T0 + 900)
    started = ("started", {"operation": "partition_increase", "params": {"topic": "orders", "quiesce": "manual"}})
    waiting = summarize(events_of([started, ("note", request.to_dict())]))
    page = render_record(waiting)
    assert page.index('class="banner"') < page.index("<h2>")  # first on the page
    text = text_of(page)
    assert "Action needed: Stop every producer writing to orders now." in text
    assert "The run gives up at 2026-11-23 09:55:12 UTC." in text
    still = Quiesced("manual", T0, T0 + 30, {0: 10})
    quiesced = summarize(events_of([started, ("note", request.to_dict()),
                                    ("note", QuiescedNote("producers quiesced", still).to_dict())]))
    ended = summarize(events_of([started, ("note", request.to_dict()), ("outcome", {"outcome": "failed"})]))
    for record in (quiesced, ended):
        assert 'class="banner"' not in render_record(record)
