"""Readable text tables of a cluster snapshot. Pure: a Cluster in, a string out."""
from __future__ import annotations

from collections.abc import Sequence

from kafkaops.model import Cluster


def human_bytes(n: int | None) -> str:
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[str(h) for h in headers]] + [["-" if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.rjust(w) if c[:1].isdigit() else c.ljust(w) for c, w in zip(row, widths)).rstrip()
             for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def render_snapshot(cluster: Cluster, *, hottest: int = 5) -> str:
    """Brokers with their load, partitions with leaders and sizes, and the hottest partitions."""
    replicas = cluster.replicas_per_broker()
    leaders = cluster.leaders_per_broker()
    size = cluster.bytes_per_broker()
    out = [f"cluster {cluster.cluster_id}  controller {cluster.controller_id}  "
           f"{len(cluster.brokers)} brokers ({len(cluster.offline_broker_ids)} offline)  "
           f"{len(cluster.topics)} topics  {len(cluster.partitions)} partitions  "
           f"{len(cluster.under_replicated)} under-replicated  {len(cluster.offline_partitions)} offline",
           "",
           table(["broker", "host:port", "rack", "state", "replicas", "leaders", "bytes"],
                 [[b.id, f"{b.host}:{b.port}" if b.host else None, b.rack, "online" if b.online else "OFFLINE",
                   replicas.get(b.id, 0), leaders.get(b.id, 0), human_bytes(size.get(b.id, 0))]
                  for b in cluster.brokers]),
           ""]
    out.append(table(["partition", "leader", "replicas", "isr", "records", "size"],
                     [[p.name, p.leader, ",".join(map(str, p.replicas)), ",".join(map(str, p.isr)),
                       p.records, human_bytes(p.size_bytes)] for p in cluster.partitions]))
    sized = [p for p in cluster.partitions if p.records]
    if sized:
        mean = sum(p.records or 0 for p in sized) / len(sized)
        top = sorted(sized, key=lambda p: (-(p.records or 0), p.key))[:hottest]
        out += ["", f"hottest partitions (mean {mean:.0f} records):",
                table(["partition", "records", "x mean", "size"],
                      [[p.name, p.records, f"{(p.records or 0) / mean:.2f}", human_bytes(p.size_bytes)] for p in top])]
    if cluster.groups:
        out += ["", table(["group", "state", "members", "lag"],
                          [[g.group_id, g.state, g.members, g.total_lag] for g in cluster.groups])]
    return "\n".join(out)


def render_record_html(record: dict, *, docs_base: str = "") -> str:
    """An operation record (``audit.summarize``) as one self-contained HTML page."""
    import html
    import json as _json

    def esc(value: object) -> str:
        return html.escape("" if value is None else str(value))

    def rows(items: list, columns: list[str]) -> str:
        head = "".join(f"<th>{esc(c)}</th>" for c in columns)
        body = "".join("<tr>" + "".join(f"<td>{esc(item.get(c))}</td>" for c in columns) + "</tr>" for item in items)
        return f"<table><tr>{head}</tr>{body}</table>" if items else "<p>none</p>"

    gates = []
    for g in record.get("gates", []):
        link = f' (<a href="{esc(docs_base)}/{esc(g["docs_path"])}">Data Docs</a>)' if g.get("docs_path") else ""
        status = "passed" if g.get("ok") else "FAILED"
        failures = "".join(f"<li>{esc(f)}</li>" for f in g.get("failures", []))
        gates.append(f"<li><b>{esc(g.get('gate'))}</b>: {status}{link}<ul>{failures}</ul></li>")
    plan = record.get("plan") or {}
    diff = "\n".join(plan.get("diff", []))
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>kafkaops operation record</title>",
        "<style>body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:2px 8px;text-align:left}pre{background:#f6f6f6;padding:8px}</style>",
        "</head><body>",
        f"<h1>{esc(record.get('operation'))}: {esc(record.get('outcome'))}</h1>",
        f"<p>DAG <code>{esc(record.get('dag_id'))}</code>, run <code>{esc(record.get('run_id'))}</code>, "
        f"triggered by <b>{esc(record.get('triggered_by'))}</b></p>",
    ]
    if record.get("outcome_reason"):
        parts.append(f"<p>reason: {esc(record['outcome_reason'])}</p>")
    parts += [
        "<h2>Parameters</h2>", f"<pre>{esc(_json.dumps(record.get('params', {}), indent=2))}</pre>",
        "<h2>Approval</h2>", f"<pre>{esc(_json.dumps(record.get('approval'), indent=2))}</pre>",
        "<h2>Steps</h2>", rows(record.get("steps", []), ["name", "status", "seconds"]),
        "<h2>Gates</h2>", f"<ul>{''.join(gates)}</ul>" if gates else "<p>none</p>",
        "<h2>Plan</h2>", f"<p>{esc(plan.get('summary'))}</p><pre>{esc(diff)}</pre>",
        "<h2>Batches</h2>", rows(record.get("batches", []), ["index", "partitions", "seconds", "status"]),
        "<h2>Notes</h2>", "<ul>" + "".join(
            f"<li>{esc(n.get('text'))}" + (f' (<a href="{esc(n["url"])}">open</a>)' if n.get("url") else "") + "</li>"
            for n in record.get("notes", [])) + "</ul>",
        "<h2>Throttles</h2>", "<h3>set</h3>", rows(record.get("throttles_set", []), ["brokers", "topics", "rate"]),
        "<h3>removed</h3>", rows(record.get("throttles_removed", []), ["brokers", "topics"]),
    ]
    for stage in ("before", "after"):
        cluster = record.get(stage)
        if cluster:
            from kafkaops.model import Cluster

            parts += [f"<h2>Cluster {stage}</h2>", f"<pre>{esc(render_snapshot(Cluster.from_dict(cluster)))}</pre>"]
    parts.append("</body></html>")
    return "\n".join(parts)
