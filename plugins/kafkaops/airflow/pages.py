"""The HTML pages of the operation records (served by :mod:`kafkaops.airflow.ui`), from the Jinja2
templates in ``kafkaops/airflow/templates/`` (autoescaped; tables with units and UTC times).

    record.html.j2    one operation record (``state.read_record``): who, params, steps, notes, the
                      cluster before and after; the frame of the kinds' templates (:data:`TEMPLATES`):
    record_reassignment.html.j2        scale_out, rebalance, drain, decommission: approval, gates with
                                       their Data Docs, the plan as tables, batches, throttles
    record_partition_increase.html.j2  approval, gates, the partition plan in words
    record_capacity_review.html.j2     the report, linked first, with its verdict, load plots, findings and
                                       recommendations
    records.html.j2   the operations rows, newest first
    message.html.j2   a page that says why there is nothing to show (no record, not logged in ...)

Links stay inside the plugin: records under :data:`RECORDS`, stored artifacts (Data Docs, capacity
reports) under :data:`ARTIFACTS` + their store path.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote

from markupsafe import Markup

from kafkaops.model import Cluster, Move
from kafkaops.capacity.records import ReportNote
from kafkaops.platform import render, state
from kafkaops.reassign.planner.errors import PlanInputError
from kafkaops.reassign.planner.plan import ReassignmentPlan
from kafkaops.errors import KafkaOpsError
from kafkaops.rekey.backfill import BackfillPlan
from kafkaops.rekey.records import FIRST_PASS, CatchUpNote, FinalPassNote, LiveRecord, StreamsCutNote
from kafkaops.rekey.steps import KeyChange, KeySample, Mode, PartitionPlan
from kafkaops.rekey.streams import StreamsPlan

OUTCOME_CLASS = {"success": "ok", "dry_run": "ok", "running": "running", "abandoned": "running"}
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


# one template per kind of operation; a kind not listed gets the generic record.html.j2
REASSIGNMENT_TEMPLATE = "record_reassignment.html.j2"
TEMPLATES = {"scale_out": REASSIGNMENT_TEMPLATE, "rebalance": REASSIGNMENT_TEMPLATE, "drain": REASSIGNMENT_TEMPLATE,
             "decommission": REASSIGNMENT_TEMPLATE, "partition_increase": "record_partition_increase.html.j2",
             "capacity_review": "record_capacity_review.html.j2"}
MAX_MOVES_SHOWN = 200


def template_of(record: Mapping[str, Any]) -> str:
    """The template of a record's kind of operation."""
    return TEMPLATES.get(str(record.get("operation") or record.get("kind")), "record.html.j2")


def _value(value: Any) -> str:
    """A parameter (or any recorded) value in words: lists joined, mappings as ``name: value`` pairs."""
    if isinstance(value, Mapping):
        return "; ".join(f"{k}: {_value(v)}" for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))) or "-"
    if isinstance(value, (list, tuple)) and not value:
        return "(empty)"
    return render.plain(value)


def _rate(rate: Any) -> str:
    if rate is None:
        return "-"
    return f"{float(rate) / 1e6:.1f} MB/s ({render.human_bytes(int(rate))}/s)"


def _left(left: Mapping[str, Any] | None) -> str:
    """Throttle rates a removal left in place: ``broker 2: follower..., leader...``."""
    if not left:
        return "none"
    return "; ".join(f"broker {b}: {', '.join(map(str, keys))}" for b, keys in sorted(left.items()))


def _throttles(record: Mapping[str, Any]) -> dict[str, tuple[list[str], list[list[Any]]]]:
    return {
        "set": (["brokers", "topics", "rate", "at"],
                [[render.plain(t.get("brokers")), render.plain(t.get("topics")), _rate(t.get("rate")),
                  render.utc_time(t.get("ts"))] for t in record.get("throttles_set") or ()]),
        "removed": (["brokers", "topics", "left in place (a broker was down)", "at"],
                    [[render.plain(t.get("brokers")), render.plain(t.get("topics")), _left(t.get("left")),
                      render.utc_time(t.get("ts"))] for t in record.get("throttles_removed") or ()])}


def _batches(record: Mapping[str, Any]) -> tuple[list[str], list[list[Any]]]:
    return (["batch", "partitions", "bytes", "status", "batches after it", "submitted", "ended", "took"],
            [[b.get("index"), b.get("partitions"), render.human_bytes(b.get("bytes")), b.get("status"),
              b.get("remaining"), render.utc_time(b.get("ts")), render.utc_time(b.get("ended_at")),
              None if b.get("ended_at") is None else render.duration(b["ended_at"] - b["ts"])]
             for b in record.get("batches") or ()])


def _arrow(before: Any, after: Any) -> str:
    return str(before) if before == after else f"{before} \u2192 {after}"


def _reassignment_plan(plan: Mapping[str, Any]) -> dict[str, Any] | None:
    """A recorded reassignment plan as tables: load per broker before and after, and the moves."""
    data = plan.get("plan")
    if not isinstance(data, Mapping) or "stats_before" not in data:
        return None
    try:
        rp = ReassignmentPlan.from_dict(data)
    except PlanInputError:  # a plan recorded in another shape: the page shows its summary and moves as text
        return None
    before, after = rp.stats_before, rp.stats_after
    load = []
    for b in sorted(set(before.replicas) | set(after.replicas)):
        role = "new" if b in rp.new_brokers else "drained" if b in rp.drained else \
            "excluded" if b in rp.excluded else ""
        load.append([b, role, _arrow(before.replicas.get(b, 0), after.replicas.get(b, 0)),
                     _arrow(before.leaders.get(b, 0), after.leaders.get(b, 0)),
                     _arrow(render.human_bytes(before.bytes.get(b, 0)), render.human_bytes(after.bytes.get(b, 0)))])
    load.append(["spread", "", _arrow(before.replica_spread, after.replica_spread),
                 _arrow(before.leader_spread, after.leader_spread),
                 _arrow(render.human_bytes(before.byte_spread), render.human_bytes(after.byte_spread))])
    moves: list[Move] = list(rp.moves)
    return {"load": (["broker", "role", "replicas", "leaders", "bytes"], load),
            "moves": (["partition", "replicas before", "replicas after", "copies to", "drops from", "bytes to copy"],
                      [[m.name, render.plain(list(m.before)), render.plain(list(m.after)),
                        render.plain(list(m.adding)), render.plain(list(m.removing)), render.human_bytes(m.bytes)]
                       for m in moves[:MAX_MOVES_SHOWN]]),
            "more_moves": max(0, len(moves) - MAX_MOVES_SHOWN)}


def _partition_plan(plan: Mapping[str, Any]) -> list[tuple[str, str]]:
    """A recorded partition-increase plan in words (read as :class:`PartitionPlan`; none when the record's
    plan is not one)."""
    data = plan.get("plan")
    if not isinstance(data, Mapping):
        return []
    try:
        grow = PartitionPlan.from_dict(data)
        copy = BackfillPlan.from_dict(grow.backfill) if grow.backfill else None
    except (KafkaOpsError, KeyError, TypeError, ValueError):
        return []
    facts = [("mode", "in place (new partitions on the topic)" if grow.mode == Mode.IN_PLACE
              else "migrate (rekey into a new topic)"),
             ("topic", grow.topic),
             ("partitions", _arrow(grow.current_partitions, grow.new_partitions)),
             ("replication factor", str(grow.replication_factor))]
    change = grow.key_change
    if isinstance(change, KeyChange):
        facts.append(("keys that change partition", change.summary()))
    elif isinstance(change, KeySample):
        facts.append(("records sampled", f"{change.sampled_records:,} ({change.dead_letters_in_sample:,} without a key "
                                         "under the rule: dead letters)"))
    if copy is not None:
        facts += [("new topic", copy.target_topic), ("key rule", copy.key_rule),
                  ("dead-letter topic", copy.dead_letter_topic)]
    if grow.assignment:
        facts.append(("new partitions on brokers", "; ".join(render.plain(list(r)) for r in grow.assignment)))
    return facts


def _approval_body(plan: Mapping[str, Any]) -> Markup | None:
    """The approval's text as the run recorded it with its plan (Markdown, rendered with raw HTML escaped:
    topic names come from operators), or None when the plan has none."""
    from markdown_it import MarkdownIt

    text = plan.get("approval")
    if not isinstance(text, str) or not text.strip():
        return None
    return Markup(MarkdownIt("js-default").render(text))  # js-default escapes any HTML in the text


def _capacity_report(record: Mapping[str, Any]) -> dict[str, Any] | None:
    """The capacity review's report note: where the report is, its findings, recommendations and verdict, and its
    load plots (a stored PNG, with its caption) when the review had a load window."""
    for note in reversed(record.get("notes") or ()):
        if state.holds(note, ReportNote):
            report = ReportNote.from_dict(note)
            return {"href": _note_href(note), "findings": list(report.findings),
                    "recommendations": list(report.recommendations), "verdict": report.verdict, "ts": report.ts,
                    "load_plot": artifact_href(report.load_png) if report.load_png else None,
                    "load_caption": report.load_caption, "note": note}
    return None


def _steps(record: Mapping[str, Any]) -> tuple[list[str], list[list[Any]]]:
    return (["step", "status", "tries", "started", "took", "error / earlier tries"],
            [[s.get("name"), s.get("status"), s.get("tries", 1), render.utc_time(s.get("started_at")),
              render.duration(s.get("seconds")),
              "; ".join([*([s["error"]] if s.get("error") else []), *(s.get("earlier") or ())]) or ""]
             for s in record.get("steps") or ()])


def _pass_row(note: CatchUpNote | FinalPassNote) -> list[Any]:
    row = note.value
    kind = "catch-up" if isinstance(note, CatchUpNote) else "final (after the quiesce)"
    if row.mode == "tail":  # the tail copy: one process, each part checked before its commit
        kind = "catch-up: tail copy" if isinstance(note, CatchUpNote) else "final (after the quiesce): last tail part"
    return [row.number, kind, "" if row.lag_before is None else f"{row.lag_before:,}", f"{row.written:,}",
            row.mode or "", render.duration(row.seconds), render.utc_time(note.ts)]


def _live(record: Mapping[str, Any]) -> dict[str, Any] | None:
    """A live migration's cut-over from its record's notes (None for any other run): the passes with
    their lag and copied records, the quiesce, the offsets committed per group, the switch."""
    live = LiveRecord.of(list(record.get("notes") or ()))
    if live is None:
        return None
    passes = [_pass_row(n) for n in live.passes]
    if live.backfill is not None and live.backfill.run is not None:  # the backfill: pass 1
        run = live.backfill.run
        passes.insert(0, [FIRST_PASS, "backfill", "", f"{run.written:,}", run.mode or "",
                          render.duration(run.seconds), render.utc_time(live.backfill.ts)])
    groups = [[group, g.committed_for or "recorded only", g.settled or "",
               ", ".join(f"{p}: {o:,}" for p, o in sorted(g.target.items(), key=lambda x: int(x[0]))),
               g.redelivered, g.stated or ""]
              for n in live.translations for group, g in sorted(n.groups.items())]
    facts = []
    if live.tail is not None:  # the tail copy's last word on its lag (every 10 s while it runs)
        facts.append(("tail copy (last report)", f"{live.tail.text} at {render.utc_time(live.tail.ts)}"))
    if live.quiesced:
        q = live.quiesced.value
        facts += [("quiesce", {"manual": "the record asked for the producers to stop (quiesce=manual); the source "
                                         "was then observed still",
                               "acl": "a DENY Write ACL on the source (quiesce=acl); the source was then observed "
                                      "still"}.get(q.how, q.how)),
                  ("producers asked to stop", render.utc_time(q.asked_at)),
                  ("source still (end offsets unchanged)", render.utc_time(q.settled_at))]
    if live.decision:
        facts.append(("switch", f"{'confirmed' if live.decision.approved else 'refused'} by {live.decision.by} at "
                                f"{render.utc_time(live.decision.ts)}"))
    if live.observed:
        seen = live.observed.value
        window = seen.write_window_s
        facts += [("switch observed", render.utc_time(live.observed.ts)),
                  ("write-unavailable window", "unknown" if window is None else
                   f"{window:.1f} s ({seen.window_from} to the first target record)"
                   if " to " not in seen.window_from  # else it says both ends (a Streams application's)
                   else f"{window:.1f} s ({seen.window_from})")]
        phases = live.window_phases()
        if phases:
            facts.append(("the window, by phase", "; ".join(f"{name} {render.duration(s)}" for name, s in phases)))
    if live.abandoned:
        facts.append(("abandoned", live.abandoned.text))
    return {"passes": (["pass", "kind", "lag before (records)", "copied (records)", "copy", "took",
                        "ended (UTC)"],
                       passes),
            "groups": (["group", "committed for", "settled", "target offsets (partition: offset)", "redelivered",
                        "note"], groups),
            "facts": facts}


def _streams(record: Mapping[str, Any]) -> dict[str, Any] | None:
    """A Kafka Streams application's migration from its record (None for any other run): the plan's inputs,
    stores and repartition topics and, once the cut ran, each copy with its gate and the offsets committed."""
    data = (record.get("plan") or {}).get("plan")
    if not isinstance(data, Mapping) or not data.get("streams"):
        return None
    try:
        made = StreamsPlan.from_dict(data["streams"])
    except KafkaOpsError:
        return None
    cut = next(iter(state.read_notes(list(record.get("notes") or ()), StreamsCutNote)), None)
    done = {c.source: c for c in cut.value.copies} if cut else {}
    moved = {o.source: o for o in cut.value.offsets} if cut else {}
    drained = {r.name: r for r in cut.value.repartitions} if cut else {}

    def copied(source: str) -> list[Any]:
        c = done.get(source)
        if c is None:
            return ["not copied", "", ""]
        return [f"{c.target_records:,} of {c.source_records:,}" + (f", {c.dead_letters:,} dead letters"
                                                                   if c.dead_letters else ""),
                "passed" if c.gate_passed else "FAILED", render.duration(c.seconds)]

    def offsets(source: str) -> str:
        o = moved.get(source)
        if o is None:
            return ""
        return ", ".join(f"{p}: {n:,}" for p, n in o.translated) + (f" ({o.redelivered:,} read again)"
                                                                     if o.redelivered else "")
    inputs = [[m.source, m.target, *copied(m.source), offsets(m.source)] for m in made.inputs]
    stores = [[s.store.name, s.store.kind.value.replace("_", "-"), s.store.how, s.store.changelog, s.target,
               s.key_rule, *copied(s.store.changelog)] for s in made.stores]
    repartitions = [[r.name, f"{r.lag:,}" if r.lag is not None else "",
                     ("drained (lag 0)" if not drained[r.name].lag else f"lag {drained[r.name].lag:,}")
                     if r.name in drained else "not checked (the cut did not run)"] for r in made.repartitions]
    facts = [("application", f"{made.application_id} -> {made.new_application_id} (a new application.id: the old "
                             "one stays whole for a rollback)"),
             ("partitions", _arrow(made.old_partitions, made.new_partitions)),
             ("cut", render.utc_time(cut.ts) + "; " + made.start_text() if cut else "not done")]
    live = cut.value.live if cut else None
    if live is not None:  # a live cut: when each moment was, and how long the application was down
        facts += [("cut-over", f"live ({live.how}): inputs quiesced at {render.utc_time(live.asked_at)}, "
                               f"application seen stopped at {render.utc_time(live.stopped_at)}, switch asked at "
                               f"{render.utc_time(live.ready_at)}"),
                  ("application down", f"{live.stopped_s:.1f} s from kafkaops seeing it stopped to the new "
                                       f"application's offsets committed ({live.last_part_records:,} record(s) "
                                       "copied after it stopped; "
                                       f"{live.tail_records:,} by the tail copies in all)"),
                  ("inputs' write window", f"{live.window_s:.1f} s from the quiesce to the switch asked, at least")]
    return {"facts": facts,
            "inputs": (["input topic", "new topic", "copied (records)", "gate", "took",
                        f"offsets committed for {made.new_application_id} (partition: offset)"], inputs),
            "stores": (["store", "kind", "told by", "changelog", "new changelog", "key rule", "copied (records)",
                        "gate", "took"], stores),
            "repartitions": (["repartition topic", "lag at the plan (records)", "at the cut"], repartitions)}


def _banner(record: Mapping[str, Any]) -> str | None:
    """What the operator must do now, above everything else on the page: a live migration's request to
    stop the producers, with its deadline, while the run waits for the source to go still."""
    if record.get("ended_at") is not None:
        return None
    live = LiveRecord.of(list(record.get("notes") or ()))
    if live is None or live.stop_request is None or live.quiesced or live.abandoned:
        return None
    request = live.stop_request
    deadline = f" The run gives up at {render.utc_time(request.deadline)}." if request.deadline else ""
    return f"Action needed: {request.text}{deadline}"


def render_record(record: Mapping[str, Any]) -> str:
    """An operation record (``state.read_record`` or ``state.summarize``) as one self-contained HTML page,
    from its kind's template (:data:`TEMPLATES`)."""
    plan = record.get("plan") or {}
    started, ended = record.get("started_at"), record.get("ended_at")
    report = _capacity_report(record) if template_of(record) == TEMPLATES["capacity_review"] else None
    notes = [(n, _note_href(n)) for n in record.get("notes") or () if report is None or n is not report["note"]]
    approval = record.get("approval")
    return _templates.get_template(template_of(record)).render(
        record=record, plan=plan, plan_facts=render.plan_facts(plan), reassignment=_reassignment_plan(plan),
        partition_plan=_partition_plan(plan), report=report, live=_live(record), streams=_streams(record),
        docs=[artifact_href(g["docs_path"]) if g.get("docs_path") else None for g in record.get("gates") or ()],
        notes=notes, steps=_steps(record), batches=_batches(record), throttles=_throttles(record),
        params=[(name, _value(value)) for name, value in sorted((record.get("params") or {}).items())],
        approval=None if not approval else [
            ("decision", "approved" if approval.get("approved") else "rejected"), ("by", approval.get("by")),
            ("how", {"manual": "a person in Airflow's Required actions", "auto_approve": "the approval param "
                     "(auto_approve)", "auto_reject": "the approval param (auto_reject)"}.get(
                         str(approval.get("mode")), approval.get("mode"))),
            ("at", render.utc_time(approval.get("ts")))],
        outcome_class=OUTCOME_CLASS.get(str(record.get("outcome")), "bad"),
        took=None if started is None or ended is None else ended - started, ended=ended is not None,
        approval_body=_approval_body(plan), banner=_banner(record),
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
