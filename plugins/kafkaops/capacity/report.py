"""The capacity review as one self-contained HTML page: findings, recommendations with their numbers,
plots (PNG, base64-embedded) and the review's JSON; saved per run under the state dir. The page is
``templates/report.html.j2`` (Jinja2, autoescaped) over the shared ``base.html.j2``.

Plots: bytes / leaders / replicas per broker; throughput and lag per partition; the key-skew
histogram; what-if curves (max/mean per candidate partition count, now and with the candidate key).
"""
from __future__ import annotations

import base64
import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kafkaops.capacity.review import Review
from kafkaops.errors import KafkaOpsError
from kafkaops.platform import store as store_
from kafkaops.platform.paths import safe_name
from kafkaops.platform.render import html_templates, human_bytes


_templates = html_templates("kafkaops.capacity")


class ReportError(KafkaOpsError):
    """A capacity report that cannot be written."""


@dataclass(frozen=True)
class ReportPaths:
    """Artifact paths in the kafkaops store (served under ``/kafkaops/artifacts/``)."""

    html: str
    json: str

    @property
    def html_url(self) -> str:
        return f"/kafkaops/artifacts/{self.html}"

    def to_dict(self) -> dict[str, str]:
        return {"html": self.html, "json": self.json, "url": self.html_url}


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
    for ax, (title, values) in zip(axes[0], (("bytes (MiB)", [b.bytes / 2**20 for b in review.broker_load]),
                                             ("leaders", [b.leaders for b in review.broker_load]),
                                             ("replicas", [b.replicas for b in review.broker_load]))):
        ax.bar(ids, values, color="#4c78a8")
        ax.set_title(title)
        ax.set_xlabel("broker")
    return _png(fig)


def _bars(ax: Any, labels: Sequence[str], values: Sequence[float], color: str, title: str, empty: str) -> None:
    if labels:
        ax.bar(labels, values, color=color)
        ax.tick_params(axis="x", labelrotation=60, labelsize=7)
    else:
        ax.text(0.5, 0.5, empty, ha="center")
    ax.set_title(title)


def plot_partitions(review: Review) -> str:
    fig, axes = _figure(2, 1, (9, 5))
    _bars(axes[0][0], [f"{p.topic}-{p.partition}" for p in review.throughput],
          [p.records_per_s for p in review.throughput], "#f58518", "throughput per partition (records/s)",
          "no earlier review: throughput appears from the second review on")
    _bars(axes[1][0], [f"{x.group}:{x.topic}-{x.partition}" for x in review.lag], [x.lag for x in review.lag],
          "#e45756", "lag per partition (records)", "no consumer group commits offsets")
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


def _input(name: str, value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "-" if value is None else str(value)
    if name.endswith("_bytes_per_s"):
        return f"{human_bytes(int(value))}/s"
    if name.endswith("_bytes"):
        return human_bytes(int(value))
    return _number(value)


def _numbers(inputs: Mapping[str, Any]) -> str:
    """A recommendation's inputs as ``name=value`` with units: ``disk_per_broker_bytes=93.1 GiB``."""
    return ", ".join(f"{name}={_input(name, value)}" for name, value in sorted(inputs.items()))


def render_review_html(review: Review, skew: Mapping[str, Any] | None = None) -> str:
    """The review as a standalone page (plots embedded, JSON at the end)."""
    return _templates.get_template("report.html.j2").render(
        review=review, skew=skew, images=plots(review, skew),
        findings=(["rule", "subject", "value", "threshold", "message"],
                  [[f.rule, f.subject, _number(f.value), _number(f.threshold), f.message] for f in review.findings]),
        recommendations=(["kind", "subject", "value", "rule", "numbers", "message"],
                         [[r.kind, r.subject, _number(r.value), r.rule, _numbers(r.inputs), r.message]
                          for r in review.recommendations]),
        brokers=(["broker", "replicas", "leaders", "bytes", "disk use"],
                 [[b.broker, b.replicas, b.leaders, human_bytes(b.bytes),
                   None if b.disk_use is None else f"{b.disk_use:.1%}"] for b in review.broker_load]),
        throughput=(["partition", "records", "seconds", "records/s", "bytes/s"],
                    [[f"{p.topic}-{p.partition}", p.records, f"{p.seconds:.0f}", f"{p.records_per_s:.1f}",
                      None if p.bytes_per_s is None else f"{human_bytes(int(p.bytes_per_s))}/s"]
                     for p in review.throughput]),
        lag=(["group", "partition", "lag (records)"],
             [[x.group, f"{x.topic}-{x.partition}", x.lag] for x in review.lag]
             + [[group, "all partitions", lag] for group, lag in sorted(review.group_lag.items())]),
        data_json=json.dumps({"review": review.to_dict(), "key_skew": skew}, indent=1, sort_keys=True, default=str))


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
