"""``kafkaops records list|show``: the operation records in the kafkaops store, as tables or JSON
(the same records the plugin's pages show in Airflow)."""
from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from typing import Any

from kafkaops.cli.options import add_store, open_store, positive
from kafkaops.errors import NotFound
from kafkaops.platform import render, state
from kafkaops.platform.store import Store
from kafkaops.reassign import records as reassign_records

LIST_COLUMNS = ("DAG", "run", "kind", "cluster", "triggered by", "state", "outcome", "started", "ended", "took")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION", title="actions")
    listing = sub.add_parser("list", help="the runs, newest first, as a table",
                             description="The runs in the kafkaops store, newest first: DAG, run, kind, cluster, "
                                         "who triggered it, state, outcome, start and end (UTC), duration.")
    listing.add_argument("--dag", metavar="DAG", help="only this DAG's runs")
    listing.add_argument("--limit", type=positive, default=50, metavar="N", help="at most N runs (default 50)")
    add_store(listing)
    show = sub.add_parser("show", help="one run's record as text (or JSON)",
                          description="One run's record: who triggered it with which params, the steps with status "
                                      "and seconds, gates, plan, approval, batches, throttles, notes and the outcome.")
    show.add_argument("dag", metavar="DAG", help="the DAG id, e.g. kafka_scale_out")
    show.add_argument("run", metavar="RUN", help="the run id, as 'records list' shows it")
    show.add_argument("--json", action="store_true", help="print the record as JSON")
    add_store(show)
    verify = sub.add_parser("verify", help="whether a run's audit trail is whole (exit 1 when not)",
                            description="Check a run's audit trail against its hash chain: every event's hash over "
                                        "its content and the event before it. Exit 0: whole; 1: an event was "
                                        "edited, deleted, inserted or reordered outside kafkaops (named).")
    verify.add_argument("run", metavar="RUN", help="the run id, as 'records list' shows it")
    verify.add_argument("--dag", metavar="DAG", help="the DAG id, when runs of several DAGs share the run id")
    add_store(verify)


def run(args: argparse.Namespace) -> int:
    store = open_store(args)
    if args.action == "list":
        operations = state.list_records(args.dag, store=store, limit=args.limit)
        if not operations:
            print(f"no kafkaops runs{' of DAG ' + args.dag if args.dag else ''} in the store {store.where}")
        else:
            print(render.table(LIST_COLUMNS, [_list_row(op) for op in operations]))
        return 0
    if args.action == "verify":
        check = store.verify_events(_dag_of(store, args.run, args.dag), args.run)
        print(check.text)
        return 0 if check.whole else 1
    record = state.read_record(args.dag, args.run, store=store, folds=(reassign_records.fold_record,))
    if record is None:
        raise NotFound(f"no kafkaops record for run {args.run} of DAG {args.dag} in the store {store.where}; list the "
                       f"runs: python -m kafkaops records list --dag {args.dag}")
    print(json.dumps(record, indent=2, sort_keys=True, default=str) if args.json else render_record(record))
    return 0


def _dag_of(store: Store, run_id: str, dag_id: str | None) -> str:
    """The DAG of ``run_id``: ``dag_id`` when given, else the only DAG with a run of that id in the store."""
    if dag_id:
        return dag_id
    dags = store.dags_of_run(run_id)
    if not dags:
        raise NotFound(f"no kafkaops run {run_id} in the store {store.where}; list the runs: python -m kafkaops "
                       "records list")
    if len(dags) > 1:
        raise NotFound(f"runs of {len(dags)} DAGs have the id {run_id} ({', '.join(dags)}); name one with --dag")
    return dags[0]


def _list_row(op: Mapping[str, Any]) -> list[object]:
    took = None if op["ended_at"] is None else op["ended_at"] - op["started_at"]
    return [op["dag_id"], op["run_id"], op["kind"], op["cluster_id"], op["triggered_by"], op["state"], op["outcome"],
            render.utc_time(op["started_at"]), render.utc_time(op["ended_at"]), render.duration(took)]


def _section(title: str, headers: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    if not rows:
        return ["", f"{title}: none"]
    return ["", f"{title}:", *("  " + line for line in render.table(headers, rows).splitlines())]


def render_record(record: Mapping[str, Any]) -> str:
    """A record (``state.read_record``) as text: headline, who and when, then one section each."""
    started, ended = record.get("started_at"), record.get("ended_at")
    out = [f"{record.get('operation') or '?'} on cluster {record.get('cluster_id') or '?'}: {record.get('outcome')}"
           + (f" ({record['outcome_reason']})" if record.get("outcome_reason") else ""),
           f"DAG {record['dag_id']}, run {record['run_id']}, triggered by {record.get('triggered_by') or '?'}",
           f"started {render.utc_time(started)}, "
           + (f"ended {render.utc_time(ended)} ({render.duration(ended - started)})"
              if ended is not None and started is not None else "not ended")
           + f"; attempt {record.get('attempt') or 1}"]
    params = sorted((record.get("params") or {}).items())
    out += _section("params", ("name", "value"), [(k, render.plain(v)) for k, v in params])
    approval = record.get("approval")
    out += ["", "approval: " + ("not asked (yet)" if not approval else
                                f"{'approved' if approval.get('approved') else 'rejected'} by {approval.get('by')} "
                                f"({approval.get('mode')}) at {render.utc_time(approval.get('ts'))}")]
    out += _section("steps", ("step", "status", "tries", "started", "seconds", "error"),
                    [(s["name"], s.get("status"), s.get("tries"), render.utc_time(s.get("started_at")),
                      s.get("seconds"), s.get("error")) for s in record.get("steps") or ()])
    out += _section("gates", ("gate", "result", "failures", "Data Docs (artifact)", "at"),
                    [(g.get("gate"), "passed" if g.get("ok") else "FAILED", "; ".join(g.get("failures") or ()) or None,
                      g.get("docs_path"), render.utc_time(g.get("ts"))) for g in record.get("gates") or ()])
    plan = record.get("plan")
    out += ["", "plan: " + (plan.get("summary") or "(no summary)" if plan else "none (yet)")]
    out += [f"  {name}: {value}" for name, value in render.plan_facts(plan or {})]
    out += _section("batches", ("batch", "partitions", "bytes", "status", "after it", "submitted"),
                    [(b.get("index"), b.get("partitions"), render.human_bytes(b.get("bytes")), b.get("status"),
                      b.get("remaining"), render.utc_time(b.get("ts"))) for b in record.get("batches") or ()])
    out += _section("throttles set", ("brokers", "topics", "rate", "at"),
                    [(render.plain(t.get("brokers")), render.plain(t.get("topics")),
                      None if t.get("rate") is None else f"{t['rate'] / 1e6:.1f} MB/s", render.utc_time(t.get("ts")))
                     for t in record.get("throttles_set") or ()])
    out += _section("throttles removed", ("brokers", "topics", "left in place", "at"),
                    [(render.plain(t.get("brokers")), render.plain(t.get("topics")),
                      render.plain(t.get("left")) if t.get("left") else None, render.utc_time(t.get("ts")))
                     for t in record.get("throttles_removed") or ()])
    out += _section("notes", ("at", "note"), [(render.utc_time(n.get("ts")), n.get("text"))
                                              for n in record.get("notes") or ()])
    return "\n".join(out)
