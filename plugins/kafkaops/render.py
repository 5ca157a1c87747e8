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
