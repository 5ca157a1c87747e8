"""The capacity review as one self-contained HTML page: the verdict, findings, recommendations with their
numbers in units, tables per broker and partition, and plots (PNG, base64-embedded); stored per run in
the kafkaops store next to ``review.json``, the same review as data, which the page links instead of
printing it. The page is ``templates/report.html.j2`` (Jinja2, autoescaped) over the shared ``base.html.j2``;
times are UTC, a plot with nothing to show says so.

Plots: bytes / leaders / replicas per broker; throughput and lag per partition; the key-skew
histogram; what-if curves (max/mean per candidate partition count, now and with the candidate key).
"""
from __future__ import annotations

import base64
import io
import json
from collections.abc import Mapping, Sequence
from typing import Any

from kafkaops.capacity.records import ReportPaths
from kafkaops.capacity.review import Review
from kafkaops.errors import KafkaOpsError
from kafkaops.platform import store as store_
from kafkaops.platform.paths import safe_name
from kafkaops.platform.render import duration, html_templates, human_bytes


_templates = html_templates("kafkaops.capacity")


class ReportError(KafkaOpsError):
    """A capacity report that cannot be written."""


def _png(fig: Any) -> str:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=80)
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _figure(rows: int = 1, cols: int = 1, size: tuple[float, float] = (9, 3)) -> tuple[Any, Any]:
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt.subplots(rows, cols, figsize=size, squeeze=False)


def plot_brokers(review: Review) -> str:
    fig, axes = _figure(1, 3)
    ids = [str(b.broker) for b in review.broker_load]
    top = max((b.bytes for b in review.broker_load), default=0)
    unit, scale = next(((u, f) for u, f in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)) if top >= f), ("B", 1))
    for ax, (title, values) in zip(axes[0], ((f"bytes ({unit})", [b.bytes / scale for b in review.broker_load]),
                                             ("leaders", [b.leaders for b in review.broker_load]),
                                             ("replicas", [b.replicas for b in review.broker_load]))):
        ax.bar(ids, values, color="#4c78a8")
        ax.set_title(title)
        ax.set_xlabel("broker")
    return _png(fig)


NO_THROUGHPUT = "no data: throughput needs an earlier review of the same cluster (from the second review on)"
IDLE_THROUGHPUT = "no data: no partition received records since the previous review"
NO_LAG = "no data: no consumer group commits offsets"


def _bars(ax: Any, labels: Sequence[str], values: Sequence[float], color: str, title: str, empty: str) -> None:
    """Bars, or ``empty`` written across the plot when there is nothing to draw (no labels, or all zero)."""
    if labels and any(values):
        ax.bar(labels, values, color=color)
        ax.tick_params(axis="x", labelrotation=60, labelsize=7)
    else:
        ax.text(0.5, 0.5, empty, ha="center", va="center", transform=ax.transAxes, color="#777", wrap=True)
        ax.set_xticks([])
        ax.set_yticks([])
    ax.set_title(title)


def throughput_note(review: Review) -> str | None:
    """Why the throughput plot is empty, or None when it has data."""
    if not review.throughput:
        return NO_THROUGHPUT
    if not any(p.records for p in review.throughput):
        return IDLE_THROUGHPUT
    return None


def plot_partitions(review: Review) -> str:
    fig, axes = _figure(2, 1, (9, 5))
    _bars(axes[0][0], [f"{p.topic}-{p.partition}" for p in review.throughput],
          [p.records_per_s for p in review.throughput], "#f58518", "throughput per partition (records/s)",
          throughput_note(review) or "")
    _bars(axes[1][0], [f"{x.group}:{x.topic}-{x.partition}" for x in review.lag], [x.lag for x in review.lag],
          "#e45756", "lag per partition (records)", NO_LAG if not review.lag else "no data: every group is caught up")
    return _png(fig)


def plot_key_histogram(skew: Mapping[str, Any]) -> str:
    fig, axes = _figure(1, 2)
    top = skew.get("top_keys") or []
    ax = axes[0][0]
    ax.barh([t["key"] for t in reversed(top)], [t["records"] for t in reversed(top)], color="#54a24b")
    ax.set_title(f"hottest keys of {skew.get('topic')} (records)")
    ax.tick_params(axis="y", labelsize=7)
    ax = axes[0][1]
    counts = skew.get("key_histogram") or [0]
    ax.hist(counts, bins=min(40, max(1, len(set(counts)))), color="#54a24b", log=True)
    ax.set_title("records per key (keys, log)")
    ax.set_xlabel("records of a key")
    return _png(fig)


def plot_what_if(skew: Mapping[str, Any]) -> str:
    fig, axes = _figure(1, 1, (7, 3))
    ax = axes[0][0]
    what_if = skew.get("what_if") or {}
    ns = sorted(int(n) for n in what_if)
    ax.plot(ns, [what_if[str(n)]["max_mean_ratio"] for n in ns], marker="o", label="current key")
    cand = skew.get("candidate") or {}
    if cand.get("what_if"):
        cns = sorted(int(n) for n in cand["what_if"])
        ax.plot(cns, [cand["what_if"][str(n)] for n in cns], marker="s", label=f"field {cand['field']}")
    ax.axhline(2.0, color="grey", linestyle="--", label="hot partition rule (2)")
    ax.set_xlabel("partition count")
    ax.set_ylabel("max / mean records")
    ax.set_title("what-if: partition load spread by partition count")
    ax.legend(fontsize=8)
    return _png(fig)


def plots(review: Review, skew: Mapping[str, Any] | None = None) -> dict[str, str]:
    """Every plot as base64 PNG, by name."""
    out = {"brokers": plot_brokers(review), "partitions": plot_partitions(review)}
    if skew and skew.get("records"):
        out["key_skew"] = plot_key_histogram(skew)
        out["what_if"] = plot_what_if(skew)
    return out


def _number(value: Any) -> str:
    if isinstance(value, float) and not value.is_integer():
        return f"{value:.4g}"
    return str(int(value)) if isinstance(value, float) else str(value)


_RULE_UNITS = {"disk_use": "percent", "replicas_per_broker": "replicas", "idle_consumers": "consumers",
               "lag_growing": "records", "partitions_not_multiple_of_brokers": "partitions", "hot_partition": "x mean"}


def _measure(rule: str, value: float) -> str:
    """A finding's value or threshold in its rule's unit: ``70.4 %``, ``2.31 x mean``, ``12 consumers``."""
    unit = _RULE_UNITS.get(rule)
    if unit == "percent":
        return f"{value:.1%}" if round(value, 3) != round(value, 2) else f"{value:.0%}"
    if unit == "x mean":
        return f"{value:.2f} x mean"
    return f"{_number(value)} {unit}" if unit else _number(value)


def _threshold(rule: str, value: float) -> str:
    if rule == "partitions_not_multiple_of_brokers":
        return f"a multiple of {_number(value)} brokers"
    if rule == "idle_consumers":
        return f"{_number(value)} partitions"
    if rule == "lag_growing":
        return "not growing"
    return _measure(rule, value)


def _input(name: str, value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "-" if value is None else str(value)
    if name.endswith("_bytes_per_s"):
        return f"{human_bytes(int(value))}/s"
    if name.endswith("_bytes"):
        return human_bytes(int(value))
    if name in ("max_disk_use", "share", "threshold", "candidate_top_share"):
        return f"{value:.0%}" if name in ("max_disk_use", "threshold") else f"{value:.1%}"
    return _number(value)


def _numbers(inputs: Mapping[str, Any]) -> list[str]:
    """A recommendation's inputs as ``name: value`` with units: ``disk_per_broker_bytes: 93.1 GiB``."""
    return [f"{name}: {_input(name, value)}" for name, value in sorted(inputs.items()) if value is not None]


def _recommended(kind: str, value: float, inputs: Mapping[str, Any]) -> str:
    """What a recommendation asks for, against today's number when it is known."""
    today = "" if inputs.get("current") is None else f" (today {inputs['current']})"
    if kind == "brokers":
        return f"at least {_number(value)} broker(s){today}"
    if kind == "partitions":
        return f"{_number(value)} partitions{today}"
    if kind == "key_change":
        return f"a new key: the top key holds {value:.1%}"
    return _number(value)


def render_review_html(review: Review, skew: Mapping[str, Any] | None = None, *, data_href: str | None = "review.json"
                       ) -> str:
    """The review as a standalone page (plots embedded); ``data_href`` links the review as JSON."""
    return _templates.get_template("report.html.j2").render(
        review=review, skew=skew, images=plots(review, skew), data_href=data_href,
        throughput_note=throughput_note(review), lag_note=None if review.lag else NO_LAG,
        findings=(["rule", "subject", "measured", "limit", "what it means"],
                  [[f.rule, f.subject, _measure(f.rule, f.value), _threshold(f.rule, f.threshold), f.message]
                   for f in review.findings]),
        recommendations=[{"kind": r.kind, "subject": r.subject, "value": _recommended(r.kind, r.value, r.inputs),
                          "rule": r.rule, "numbers": _numbers(r.inputs), "message": r.message}
                         for r in review.recommendations],
        brokers=(["broker", "replicas", "leaders", "bytes", "disk use"],
                 [[b.broker, b.replicas, b.leaders, human_bytes(b.bytes),
                   None if b.disk_use is None else f"{b.disk_use:.1%}"] for b in review.broker_load]),
        disks=(["disk of", "size", "used", "use", "Kafka's data", "other data"],
               [[d.subject, human_bytes(d.total_bytes), human_bytes(d.used_bytes), f"{d.use:.1%}",
                 human_bytes(d.kafka_bytes), human_bytes(d.other_bytes)]
                for d in (review.disk.disks if review.disk else ())]),
        throughput=(["partition", "records", "over", "records/s", "bytes/s"],
                    [[f"{p.topic}-{p.partition}", p.records, duration(p.seconds), f"{p.records_per_s:.1f}",
                      None if p.bytes_per_s is None else f"{human_bytes(int(p.bytes_per_s))}/s"]
                     for p in review.throughput]),
        lag=(["group", "partition", "lag (records)"],
             [[x.group, f"{x.topic}-{x.partition}", x.lag] for x in review.lag]
             + [[group, "all partitions", lag] for group, lag in sorted(review.group_lag.items())]))


def write_report(review: Review, skew: Mapping[str, Any] | None = None, *, run_id: str = "manual",
                 store: store_.Store | None = None) -> ReportPaths:
    """Store ``report.html`` (plots inline) and ``review.json`` as artifacts
    ``capacity/<cluster>/<run>/...`` in the kafkaops store, where the api-server serves them."""
    prefix = f"capacity/{safe_name(review.cluster_id or 'unknown')}/{safe_name(run_id)}"
    target = store or store_.current()
    page = target.put_artifact(f"{prefix}/report.html", render_review_html(review, skew).encode("utf-8"))
    data = target.put_artifact(f"{prefix}/review.json", json.dumps(
        {"review": review.to_dict(), "key_skew": skew}, indent=1, sort_keys=True, default=str).encode("utf-8"))
    return ReportPaths(page, data)
