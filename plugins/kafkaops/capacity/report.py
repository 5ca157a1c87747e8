"""The capacity review as one self-contained HTML page: the verdict, findings, recommendations with their
numbers in units, tables per broker and partition, and plots (PNG, base64-embedded); stored per run in
the kafkaops store next to ``review.json``, the same review as data, which the page links instead of
printing it. The page is ``templates/report.html.j2`` (Jinja2, autoescaped) over the shared ``base.html.j2``;
times are UTC, a plot with nothing to show says so.

Plots: bytes / leaders / replicas per broker; throughput and lag per partition; the key-skew
histogram; what-if curves (max/mean per candidate partition count, now and with the candidate key); the
brokers' load over the review window (CPU, network in and out, Produce p99; the limits dashed, a gap a break
in the line), also stored as ``load.png`` beside the page for the run's record page.
"""
from __future__ import annotations

import base64
import io
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC
from typing import Any

from kafkaops.capacity.load import LoadThresholds, LoadWindow, Point, utc_minute
from kafkaops.capacity.records import ReportPaths
from kafkaops.capacity.review import Review
from kafkaops.errors import KafkaOpsError
from kafkaops.platform import store as store_
from kafkaops.platform.paths import safe_name
from kafkaops.platform.render import duration, html_templates, human_bytes


_templates = html_templates("kafkaops.capacity")


class ReportError(KafkaOpsError):
    """A capacity report that cannot be written."""


def _png(fig: Any, dpi: int = 80) -> str:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=dpi)
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


# -- the brokers' load over the review window ------------------------------------------------------------------

NOTHING_TO_SHOW = "nothing to show"
NO_LOAD = ("no load: the review read no Prometheus window (give the connection prometheus_default or the param "
           "prometheus_url for the load rules and these plots)")
LIMIT_COLOR = "#cf222e"


def line_with_gaps(points: Sequence[Point], step_s: float) -> tuple[list[float], list[float]]:
    """The timestamps and values of a line through ``points``, with a NaN between two points more than 1.5 steps
    apart, so the line breaks where Prometheus had no sample instead of bridging the gap."""
    xs: list[float] = []
    ys: list[float] = []
    for t, v in points:
        if xs and t - xs[-1] > 1.5 * step_s:
            xs.append((xs[-1] + t) / 2)
            ys.append(math.nan)
        xs.append(t)
        ys.append(v)
    return xs, ys


def gaps_of(points: Sequence[Point], step_s: float, start: float | None = None, end: float | None = None
            ) -> list[tuple[float, float]]:
    """The stretches (from, to; Unix seconds) without a finite point, more than 1.5 steps long; with ``start`` and
    ``end``, also before the first point and after the last (a broker down at the window's edge)."""
    seen = [t for t, v in points if math.isfinite(v)]
    if not seen:
        return [] if start is None or end is None else [(start, end)]
    edges = [*([start] if start is not None else []), *seen, *([end] if end is not None else [])]
    return [(a, b) for a, b in zip(edges, edges[1:]) if b - a > 1.5 * step_s]


def observed_span(window: LoadWindow) -> tuple[float, float]:
    """The part of the window Prometheus has any broker's data for (first and last finite point of any
    indicator): what the plots span. A server younger than the window (a new cluster, a new Prometheus) leaves
    the start empty for every broker: that is not a gap of one broker, it is no data at all."""
    return window.observed_span() or (window.start, window.end)


def _window_text(window: LoadWindow) -> str:
    seconds = window.end - window.start
    span = f"{seconds / 3600:.3g} h" if seconds >= 3600 else f"{seconds / 60:.3g} min"
    step = f"{window.step_s / 60:g} min" if window.step_s >= 60 else f"{window.step_s:g} s"
    asked = ("" if window.asked_start is None else
             f" of the {(window.end - window.asked_start) / 3600:.3g} h asked: Prometheus has no older data")
    return f"{utc_minute(window.start)} to {utc_minute(window.end)} ({span}{asked}, a point every {step})"


def load_limits(review: Review) -> list[str]:
    """The load rules' limits as the plots draw them, in words (``CPU 70 %``, ``network 80 % of 1,250 MB/s``)."""
    t = review.load_thresholds or LoadThresholds()
    capacity = t.network_capacity()
    network = (f"network {t.max_network:.0%} of {capacity / 1e6:,.0f} MB/s = {t.max_network * capacity / 1e6:,.0f} MB/s"
               if capacity is not None else "network: no capacity stated (param network_capacity_mb_per_s), no limit")
    return [f"CPU {t.max_cpu:.0%}", network, f"Produce p99 {t.max_produce_p99_ms:,.0f} ms"]


def load_caption(review: Review) -> str | None:
    """What the load plots show, for a caption: the window (UTC) and the limits drawn dashed; None: no load."""
    if review.load is None:
        return None
    first, _ = observed_span(review.load)
    asked = review.load.asked_start
    if asked is not None:
        since = (f" Prometheus has data from {utc_minute(first)} only, of the {(review.load.end - asked) / 3600:.3g} h "
                 "asked: the load was read from there, and the plots and rules cover that.")
    else:
        since = (f" Prometheus has data from {utc_minute(first)} only: the plots start there."
                 if first > review.load.start + 1.5 * review.load.step_s else "")
    return (f"The brokers' load {_window_text(review.load)}, one line per broker; a break in a line is a gap in "
            f"the data (shaded). Dashed: the limits: {'; '.join(load_limits(review))}.{since}")


@dataclass(frozen=True)
class _Panel:
    """One load plot: each broker's points (``scale`` to the plotted unit), its limit (None: none to draw) and why
    it is empty, if it is."""

    title: str
    ylabel: str
    series: Mapping[str, tuple[Point, ...]]
    scale: float
    limit: float | None
    limit_label: str | None
    why_empty: str
    note: str | None = None
    ymax: float | None = None


def _panels(review: Review, window: LoadWindow) -> list[_Panel]:
    t = review.load_thresholds or LoadThresholds()
    capacity = t.network_capacity()

    def series(name: str) -> Mapping[str, tuple[Point, ...]]:
        return {b: pts for b, pts in window.indicators.get(name, {}).items() if any(math.isfinite(v) for _, v in pts)}

    def why(name: str) -> str:
        reason = window.skipped.get(name) or review.skipped.get(name)
        return f"{NOTHING_TO_SHOW}: {reason}" if reason else f"{NOTHING_TO_SHOW}: no {name} point in the window"

    net_limit = None if capacity is None else t.max_network * capacity / 1e6
    net_label = None if capacity is None else (f"limit {t.max_network:.0%} of {capacity / 1e6:,.0f} MB/s = "
                                               f"{t.max_network * capacity / 1e6:,.0f} MB/s")
    net_note = None if capacity is not None else "no network capacity stated: no limit line"
    sources = set(window.network_source.values())
    net_what = ("the host's devices" if sources and all(v.startswith("host ") for v in sources)
                else "clients and replication" if not any(v.startswith("host ") for v in sources)
                else "host's devices or the broker's bytes: see where the load came from")
    return [
        _Panel("CPU per broker (% of its host's processors)", "CPU (%)", series("cpu"), 100.0, t.max_cpu * 100,
               f"limit {t.max_cpu:.0%}", why("cpu"), ymax=100.0),
        _Panel(f"Network in per broker ({net_what})", "in (MB/s)", series("bytes_in"), 1e-6, net_limit,
               net_label, why("bytes_in"), net_note),
        _Panel(f"Network out per broker ({net_what})", "out (MB/s)", series("bytes_out"), 1e-6, net_limit,
               net_label, why("bytes_out"), net_note),
        _Panel("Produce request latency per broker (p99)", "Produce p99 (ms)", series("produce_p99_ms"), 1.0,
               t.max_produce_p99_ms, f"limit {t.max_produce_p99_ms:,.0f} ms", why("produce_p99_ms")),
    ]


def _datetimes(ts: Sequence[float]) -> Any:
    import numpy as np

    return np.array([int(round(x)) for x in ts], dtype="datetime64[s]")


def _nothing(ax: Any, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="#777", wrap=True)
    ax.set_xticks([])
    ax.set_yticks([])


def _label_right(panel: _Panel, window: LoadWindow) -> bool:
    """Whether a limit's label goes at the right end of its line (else the left): the end whose third of the
    window has fewer points just below or above the limit, where the label would hide a line."""
    if panel.limit is None:
        return True
    third = (window.end - window.start) / 3
    near = [t for points in panel.series.values() for t, v in points
            if math.isfinite(v) and 0.75 * panel.limit <= v * panel.scale <= 1.3 * panel.limit]
    return sum(t > window.end - third for t in near) <= sum(t < window.start + third for t in near)


def load_figure(review: Review) -> Any:
    """The load plots as a matplotlib figure: CPU (%), network in and out (MB/s) and Produce p99 (ms) per broker
    over the window (UTC), the limits dashed and labelled, gaps as breaks (shaded); a panel without data says so."""
    window = review.load
    if window is None:
        fig, axes = _figure(1, 1, (10, 1.2))
        _nothing(axes[0][0], f"{NOTHING_TO_SHOW}: {NO_LOAD}")
        return fig
    panels = _panels(review, window)
    if not any(p.series for p in panels):
        reasons = sorted({p.why_empty for p in panels})
        fig, axes = _figure(1, 1, (10, 0.6 + 0.4 * len(reasons)))
        _nothing(axes[0][0], "\n".join(reasons))
        return fig
    import matplotlib.dates as mdates
    from matplotlib.patches import Patch

    fig, axes = _figure(len(panels), 1, (10, 2.6 * len(panels)))
    brokers = window.brokers()
    cmap = matplotlib_colors(len(brokers))
    colors = {b: cmap[i] for i, b in enumerate(brokers)}
    first, last = observed_span(window)
    x0, x1 = _datetimes([first, max(last, first + window.step_s)])
    for ax, panel in zip((row[0] for row in axes), panels):
        ax.set_title(panel.title, fontsize=10, loc="left")
        if not panel.series:
            _nothing(ax, panel.why_empty)
            continue
        top = 0.0
        for broker in brokers:
            points = panel.series.get(broker)
            if not points:
                continue
            xs, ys = line_with_gaps(points, window.step_s)
            values = [v * panel.scale for v in ys]
            top = max([top, *(v for v in values if math.isfinite(v))])
            ax.plot(_datetimes(xs), values, color=colors[broker], linewidth=1.3, label=broker,
                    marker="o" if len(points) < 3 else None, markersize=4)  # a lone point shows as a dot
            for a, b in gaps_of(points, window.step_s, first, last):
                ax.axvspan(*_datetimes([a, b]), color=colors[broker], alpha=0.12, linewidth=0)
        handles, labels = ax.get_legend_handles_labels()
        for broker in brokers:
            if gaps_of(panel.series.get(broker, ()), window.step_s, first, last):
                handles.append(Patch(color=colors[broker], alpha=0.25, linewidth=0))
                labels.append(f"{broker}: no data (gap)")
        if panel.limit is not None:
            line = ax.axhline(panel.limit, color=LIMIT_COLOR, linestyle="--", linewidth=1.2)
            right = _label_right(panel, window)
            ax.text(0.995 if right else 0.005, panel.limit, panel.limit_label, transform=ax.get_yaxis_transform(),
                    ha="right" if right else "left", va="bottom", fontsize=8, color=LIMIT_COLOR,
                    bbox={"facecolor": "white", "alpha": 0.7, "edgecolor": "none", "pad": 1})
            handles.append(line)
            labels.append(panel.limit_label or "limit")
            top = max(top, panel.limit)
        if panel.note:
            ax.text(0.005, 0.96, panel.note, transform=ax.transAxes, ha="left", va="top", fontsize=8, color="#777")
        ax.set_ylim(0, panel.ymax if panel.ymax is not None and top <= panel.ymax else (top or 1.0) * 1.15)
        ax.set_xlim(x0, x1)
        ax.set_ylabel(panel.ylabel)
        ax.grid(True, color="#eee")
        locator = mdates.AutoDateLocator(tz=UTC)
        ax.xaxis.set_major_locator(locator)
        ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator, tz=UTC, show_offset=False))
        ax.set_xlabel("time (UTC)")
        ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=8, frameon=False)
    return fig


def matplotlib_colors(n: int) -> list[str]:
    """``n`` distinguishable line colours (the tab10 cycle, then tab20 beyond 10 brokers)."""
    import matplotlib
    from matplotlib import colors

    cmap = matplotlib.colormaps["tab10" if n <= 10 else "tab20"]
    return [colors.to_hex(cmap(i % cmap.N)) for i in range(n)]


def plot_load(review: Review) -> str:
    """:func:`load_figure` as base64 PNG, 1000 px wide (read on its own on the record page too)."""
    return _png(load_figure(review), dpi=100)


def plots(review: Review, skew: Mapping[str, Any] | None = None) -> dict[str, str]:
    """Every plot as base64 PNG, by name."""
    out = {"brokers": plot_brokers(review), "partitions": plot_partitions(review)}
    if review.load is not None:
        out["load"] = plot_load(review)
    if skew and skew.get("records"):
        out["key_skew"] = plot_key_histogram(skew)
        out["what_if"] = plot_what_if(skew)
    return out


def _number(value: Any) -> str:
    if isinstance(value, float) and not value.is_integer():
        return f"{value:.4g}"
    return str(int(value)) if isinstance(value, float) else str(value)


_RULE_UNITS = {"disk_use": "percent", "replicas_per_broker": "replicas", "idle_consumers": "consumers",
               "lag_growing": "records", "partitions_not_multiple_of_brokers": "partitions", "hot_partition": "x mean",
               "cpu": "percent", "network": "percent", "request_handler_idle": "percent", "produce_p99": "ms",
               "under_min_isr": "partitions", "hot_broker": "x median", "load_unobserved": "brokers"}


def _measure(rule: str, value: float) -> str:
    """A finding's value or threshold in its rule's unit: ``70.4 %``, ``2.31 x mean``, ``12 consumers``."""
    unit = _RULE_UNITS.get(rule)
    if unit == "percent":
        return f"{value:.1%}" if round(value, 3) != round(value, 2) else f"{value:.0%}"
    if unit in ("x mean", "x median"):
        return f"{value:.2f} {unit}"
    if unit == "brokers":
        return f"{_number(value)} broker{'' if value == 1 else 's'}"
    return f"{_number(value)} {unit}" if unit else _number(value)


def _threshold(rule: str, value: float) -> str:
    if rule == "network":
        return f"{_measure(rule, value)} of capacity"
    if rule == "request_handler_idle":
        return f"at least {_measure(rule, value)} idle"
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


def render_review_html(review: Review, skew: Mapping[str, Any] | None = None, *, data_href: str | None = "review.json",
                       images: Mapping[str, str] | None = None) -> str:
    """The review as a standalone page (plots embedded: ``images``, default :func:`plots`); ``data_href`` links the
    review as JSON."""
    load = review.load
    return _templates.get_template("report.html.j2").render(
        review=review, skew=skew, images=plots(review, skew) if images is None else images, data_href=data_href,
        throughput_note=throughput_note(review), lag_note=None if review.lag else NO_LAG,
        load=None if load is None else {"window": _window_text(load), "caption": load_caption(review),
                                         "limits": load_limits(review)},
        no_load=NO_LOAD,
        load_skipped=(["rule", "why it was not checked"], sorted(review.skipped.items())),
        load_source=(["broker", "CPU from", "network from"],
                     [[b, (load.cpu_source.get(b) or "-"), (load.network_source.get(b) or "-")]
                      for b in sorted({*load.cpu_source, *load.network_source})] if load else []),
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
    """Store ``report.html`` (plots inline), ``review.json`` and, with a load window, ``load.png`` (the load plots,
    which the run's record page shows) as artifacts ``capacity/<cluster>/<run>/...`` in the kafkaops store, where
    the api-server serves them."""
    prefix = f"capacity/{safe_name(review.cluster_id or 'unknown')}/{safe_name(run_id)}"
    target = store or store_.current()
    images = plots(review, skew)
    load_png = None
    if "load" in images:
        load_png = target.put_artifact(f"{prefix}/load.png", base64.b64decode(images["load"]), "image/png")
    page = target.put_artifact(f"{prefix}/report.html", render_review_html(review, skew, images=images).encode("utf-8"))
    data = target.put_artifact(f"{prefix}/review.json", json.dumps(
        {"review": review.to_dict(), "key_skew": skew}, indent=1, sort_keys=True, default=str).encode("utf-8"))
    return ReportPaths(page, data, load_png)
