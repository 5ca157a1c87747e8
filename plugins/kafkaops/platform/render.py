"""What an operator reads: a cluster snapshot as text tables, the units and times every page and
table uses (human bytes, UTC times, durations), and the Jinja2 environment of the HTML pages.

The pages' templates live with their package (``kafkaops/<package>/templates/``) and extend
``base.html.j2`` of ``kafkaops/platform/templates/``, which holds the style and the table macro.
Autoescape is on: every value a template prints is HTML-escaped unless marked safe.
"""
from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from kafkaops.model import Cluster

if TYPE_CHECKING:
    import jinja2

BROKER_COLUMNS = ("broker", "host:port", "rack", "state", "replicas", "leaders", "bytes")
PARTITION_COLUMNS = ("partition", "leader", "replicas", "isr", "records", "size")
GROUP_COLUMNS = ("group", "state", "members", "lag")


def human_bytes(n: int | None) -> str:
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


def utc_time(ts: float | None) -> str:
    """Epoch seconds as ``2026-11-23 09:40:12 UTC``; ``-`` when unknown."""
    if ts is None:
        return "-"
    return dt.datetime.fromtimestamp(float(ts), dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def duration(seconds: float | None) -> str:
    """``0.42 s``, ``12.3 s``, ``4 min 05 s``, ``2 h 03 min``; ``-`` when unknown."""
    if seconds is None:
        return "-"
    s = float(seconds)
    if s < 10:
        return f"{s:.2f} s"
    if s < 60:
        return f"{s:.1f} s"
    if s < 3600:
        return f"{int(s // 60)} min {int(s % 60):02d} s"
    return f"{int(s // 3600)} h {int(s % 3600 // 60):02d} min"


def plain(value: Any) -> str:
    """A parameter value in words: lists comma separated, None ``-``, mappings as compact JSON."""
    if value is None or value == "":
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple)):
        return ", ".join(plain(v) for v in value) if value else "(none)"
    if isinstance(value, Mapping):
        return json.dumps(value, sort_keys=True, default=str)
    return str(value)


def offsets(by_partition: Mapping[Any, int]) -> str:
    """Offsets per partition in words, partitions in order (keys may be ints or, through JSON, strings):
    ``partition 0 at 21,857, 1 at 10,000``."""
    ordered = sorted(((int(p), int(o)) for p, o in by_partition.items()))
    if not ordered:
        return "no partition"
    return "partition " + ", ".join(f"{p} at {o:,}" for p, o in ordered)


def plan_facts(plan: Mapping[str, Any]) -> list[tuple[str, str]]:
    """A recorded plan's size in words: partitions and replicas that move, bytes (of tiered partitions apart),
    time at the throttle."""
    facts = []
    if "moves" in plan:
        facts.append(("partitions that move", str(plan["moves"])))
    if "replica_moves" in plan:
        facts.append(("replicas that move", str(plan["replica_moves"])))
    if "bytes_to_move" in plan:
        facts.append(("bytes to copy", human_bytes(plan["bytes_to_move"])))
    if plan.get("tiered_moves"):  # a tiered topic's new replica copies the leader's local log only
        facts.append(("tiered partitions that move (local log only)",
                      f"{plan['tiered_moves']}, {human_bytes(plan.get('tiered_bytes'))}"))
    if plan.get("eta_s") is not None:
        facts.append(("time at the throttle", duration(plan["eta_s"])))
    return facts


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[str(h) for h in headers]] + [["-" if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.rjust(w) if c[:1].isdigit() else c.ljust(w) for c, w in zip(row, widths)).rstrip()
             for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def cluster_headline(cluster: Cluster) -> str:
    return (f"cluster {cluster.cluster_id}  controller {cluster.controller_id}  "
            f"{len(cluster.brokers)} brokers ({len(cluster.offline_broker_ids)} offline)  "
            f"{len(cluster.topics)} topics  {len(cluster.partitions)} partitions  "
            f"{len(cluster.under_replicated)} under-replicated  {len(cluster.offline_partitions)} offline")


def broker_rows(cluster: Cluster) -> list[list[object]]:
    """One row per broker, in :data:`BROKER_COLUMNS` order."""
    replicas = cluster.replicas_per_broker()
    leaders = cluster.leaders_per_broker()
    size = cluster.bytes_per_broker()
    return [[b.id, f"{b.host}:{b.port}" if b.host else None, b.rack, "online" if b.online else "OFFLINE",
             replicas.get(b.id, 0), leaders.get(b.id, 0), human_bytes(size.get(b.id, 0))] for b in cluster.brokers]


def partition_rows(cluster: Cluster) -> list[list[object]]:
    """One row per partition, in :data:`PARTITION_COLUMNS` order."""
    return [[p.name, p.leader, ",".join(map(str, p.replicas)), ",".join(map(str, p.isr)), p.records,
             human_bytes(p.size_bytes)] for p in cluster.partitions]


def group_rows(cluster: Cluster) -> list[list[object]]:
    """One row per consumer group, in :data:`GROUP_COLUMNS` order."""
    return [[g.group_id, g.state, g.members, g.total_lag] for g in cluster.groups]


def render_snapshot(cluster: Cluster, *, hottest: int = 5) -> str:
    """Brokers with their load, partitions with leaders and sizes, and the hottest partitions."""
    out = [cluster_headline(cluster), "", table(BROKER_COLUMNS, broker_rows(cluster)), "",
           table(PARTITION_COLUMNS, partition_rows(cluster))]
    sized = [p for p in cluster.partitions if p.records]
    if sized:
        mean = sum(p.records or 0 for p in sized) / len(sized)
        top = sorted(sized, key=lambda p: (-(p.records or 0), p.topic_partition))[:hottest]
        out += ["", f"hottest partitions (mean {mean:.0f} records):",
                table(["partition", "records", "x mean", "size"],
                      [[p.name, p.records, f"{(p.records or 0) / mean:.2f}", human_bytes(p.size_bytes)] for p in top])]
    if cluster.groups:
        out += ["", table(GROUP_COLUMNS, group_rows(cluster))]
    return "\n".join(out)


def html_templates(package: str) -> jinja2.Environment:
    """The Jinja2 environment of ``package``'s pages: its ``templates/`` folder, then the shared
    ``base.html.j2``; autoescape on; the filters ``bytes``, ``utc``, ``duration`` and ``plain``."""
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.ChoiceLoader([jinja2.PackageLoader(package, "templates"),
                                    jinja2.PackageLoader("kafkaops.platform", "templates")]),
        autoescape=True, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(bytes=human_bytes, utc=utc_time, duration=duration, plain=plain)
    return env
