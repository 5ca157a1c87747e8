"""The load section of the capacity report: per-broker CPU, network in and out and Produce p99 over the window
(UTC), each limit dashed and labelled, a gap a break in the line (NaN), a plot without data says so; the rules
not checked and the CPU's source as tables; the load plots stored beside the report for the record page."""
from __future__ import annotations

import base64
import math

import pytest

from kafkaops.capacity import review as capacity
from kafkaops.capacity.load import LoadThresholds, LoadWindow
from kafkaops.capacity.report import (NOTHING_TO_SHOW, _measure, _threshold, gaps_of, line_with_gaps, load_caption, load_figure, plots,
                                      render_review_html, write_report)
from tests.unit.airflow.test_pages import text_of
from tests.unit.capacity.test_review import cluster

PNG = b"\x89PNG\r\n\x1a\n"
START = 1_795_305_600.0  # 2026-11-22 00:00 UTC
STEP = 360.0
BROKERS = ("broker 1", "broker 2", "broker 3")
GAP = (START + 3 * 3600, START + 5 * 3600)  # broker 2 is not scraped 03:00-05:00 UTC


def synthetic_window(hours: float = 24, step_s: float = STEP) -> LoadWindow:
    """Three brokers over ``hours`` from 2026-11-22 00:00 UTC: a daily curve peaking mid-afternoon, broker 1 the
    busiest (its CPU above 70 % in the afternoon), broker 2 unscraped for two hours (a gap, not zeros)."""
    steps = int(hours * 3600 / step_s)
    indicators: dict[str, dict[str, tuple[tuple[float, float], ...]]] = {
        k: {} for k in ("cpu", "bytes_in", "bytes_out", "handler_idle", "produce_p99_ms", "under_min_isr")}
    for n, broker in enumerate(BROKERS):
        weight = (1.35, 1.0, 0.85)[n]
        rows: dict[str, list[tuple[float, float]]] = {k: [] for k in indicators}
        for i in range(steps + 1):
            t = START + i * step_s
            if broker == "broker 2" and GAP[0] <= t < GAP[1]:
                continue
            hour = (t - START) / 3600 % 24
            day = max(0.0, math.cos((hour - 15) / 24 * 2 * math.pi))  # 0 at night, 1 at 15:00
            wobble = 0.03 * math.sin(i * 0.7 + n)
            cpu = weight * (0.18 + 0.4 * day ** 2) + wobble
            rows["cpu"].append((t, cpu))
            rows["bytes_in"].append((t, weight * (12e6 + 45e6 * day ** 2) * (1 + wobble)))
            rows["bytes_out"].append((t, weight * (25e6 + 70e6 * day ** 2) * (1 + wobble)))
            rows["handler_idle"].append((t, max(0.05, 0.9 - cpu)))
            rows["produce_p99_ms"].append((t, 12 + 90 * max(0.0, cpu - 0.45) + 40 * max(0.0, cpu - 0.7) + 3 * wobble))
            rows["under_min_isr"].append((t, 0.0))
        for k in indicators:
            indicators[k][broker] = tuple(rows[k])
    return LoadWindow(START, START + steps * step_s, step_s, indicators, {},
                      {"broker 1": "host (node_exporter)", "broker 2": "broker JVM", "broker 3": "broker JVM"})


def review_with(window: LoadWindow | None, **thresholds: float) -> capacity.Review:
    b = cluster(t=START + 86_400, offsets={0: 900, 1: 100, 2: 100}, sizes={0: 9000, 1: 1000, 2: 1000})
    return capacity.review(b, load=window, load_thresholds=LoadThresholds(**thresholds))


def _lines(ax):
    return [line for line in ax.get_lines() if line.get_linestyle() == "-"]


def _limits(ax) -> list[float]:
    return [line.get_ydata()[0] for line in ax.get_lines() if line.get_linestyle() == "--"]


def _texts(ax) -> str:
    return " | ".join(t.get_text() for t in ax.texts)


def test_a_gap_of_more_than_one_and_a_half_steps_breaks_the_line_with_nan() -> None:
    points = ((0.0, 1.0), (10.0, 2.0), (25.0, 3.0), (100.0, 4.0), (110.0, 5.0))
    xs, ys = line_with_gaps(points, 10.0)
    assert xs == [0.0, 10.0, 25.0, 62.5, 100.0, 110.0]  # 15 s (1.5 steps) is no gap; 75 s is
    assert ys[:3] == [1.0, 2.0, 3.0] and math.isnan(ys[3]) and ys[4:] == [4.0, 5.0]
    assert line_with_gaps((), 10.0) == ([], [])
    assert gaps_of(points, 10.0) == [(25.0, 100.0)]
    assert gaps_of(points, 10.0, -30.0, 160.0) == [(-30.0, 0.0), (25.0, 100.0), (110.0, 160.0)]
    assert gaps_of((), 10.0, 0.0, 50.0) == [(0.0, 50.0)]


def test_the_load_plots_draw_one_line_per_broker_with_the_gap_and_every_limit_dashed_and_labelled() -> None:
    fig = load_figure(review_with(synthetic_window(), network_capacity_bytes_per_s=125e6))
    cpu, net_in, net_out, p99 = fig.axes
    assert [line.get_label() for line in _lines(cpu)] == list(BROKERS)
    broker2 = dict((line.get_label(), line) for line in _lines(cpu))["broker 2"]
    assert sum(math.isnan(v) for v in broker2.get_ydata()) == 1  # the two-hour gap, not zeros
    assert not any(math.isnan(v) for v in dict((x.get_label(), x) for x in _lines(cpu))["broker 1"].get_ydata())
    assert max(v for v in _lines(cpu)[0].get_ydata() if not math.isnan(v)) > 70  # percent, not a share
    assert _limits(cpu) == [70.0] and "limit 70%" in _texts(cpu)
    assert _limits(net_in) == _limits(net_out) == [100.0] and "limit 80% of 125 MB/s = 100 MB/s" in _texts(net_out)
    assert _limits(p99) == [100.0] and "limit 100 ms" in _texts(p99)
    assert cpu.get_ylabel() == "CPU (%)" and net_in.get_ylabel() == "in (MB/s)" and p99.get_ylabel() == "Produce p99 (ms)"
    assert all(ax.get_xlabel() == "time (UTC)" for ax in fig.axes)
    assert "broker 2: no data (gap)" in [t.get_text() for t in cpu.get_legend().get_texts()]


def test_without_a_network_capacity_no_network_limit_is_drawn_and_the_plot_says_why() -> None:
    fig = load_figure(review_with(synthetic_window()))
    assert _limits(fig.axes[1]) == [] and "no network capacity stated" in _texts(fig.axes[1])
    assert _limits(fig.axes[0]) == [70.0]
    assert "network: no capacity stated" in (load_caption(review_with(synthetic_window())) or "")


def test_a_plot_without_data_says_so_instead_of_an_empty_axis() -> None:
    window = synthetic_window(hours=2)
    skipped = LoadWindow(window.start, window.end, window.step_s,
                         {k: v for k, v in window.indicators.items() if k != "produce_p99_ms"},
                         {"produce_p99_ms": "kafka_network_requestmetrics_totaltimems: no series"})
    p99 = load_figure(review_with(skipped)).axes[3]
    assert _lines(p99) == [] and _texts(p99) == f"{NOTHING_TO_SHOW}: kafka_network_requestmetrics_totaltimems: no series"
    nothing = LoadWindow(window.start, window.end, window.step_s, {}, {"cpu": "no Prometheus connection given"})
    [ax] = load_figure(review_with(nothing)).axes
    assert "nothing to show: no Prometheus connection given" in _texts(ax) and not ax.get_lines()
    [ax] = load_figure(review_with(None)).axes
    assert _texts(ax).startswith(NOTHING_TO_SHOW)


def test_the_report_shows_the_load_with_its_window_limits_rules_not_checked_and_cpu_source(local_store) -> None:
    window = synthetic_window()
    window = LoadWindow(window.start, window.end, window.step_s, window.indicators,
                        {"under_min_isr": "<b>no</b> series"}, window.cpu_source)
    review = review_with(window)
    assert set(plots(review)) == {"brokers", "partitions", "load"}
    page = render_review_html(review)
    text = text_of(page)
    assert page.count("data:image/png;base64,") == 3
    assert "Load over the window 2026-11-22 00:00 UTC to 2026-11-23 00:00 UTC (24 h, a point every 6 min)" in text
    assert "limits: CPU 70%" in text and "Produce p99 100 ms" in text
    assert "Load rules not checked rule why it was not checked network no network capacity stated" in text
    assert "<td>under_min_isr</td><td>&lt;b&gt;no&lt;/b&gt; series</td>" in page and "<b>no</b>" not in page
    assert ("Where the load came from broker CPU from network from broker 1 host (node_exporter) - broker 2 broker JVM"
            in text)
    # every load finding's measure and limit in its unit
    cpu = next(f for f in review.findings if f.rule == "cpu")
    assert f"<td>cpu</td><td>broker 1</td><td>{cpu.value:.1%}</td><td>70%</td>" in page, page
    assert "<td>request_handler_idle</td><td>broker 1</td><td>14.4%</td><td>at least 30% idle</td>" in page, page
    paths = write_report(review, run_id="r1")
    assert paths.load_png == "capacity/c1/r1/load.png"
    stored = local_store.artifact(paths.load_png)
    assert stored.content_type == "image/png" and stored.body[:8] == PNG
    assert base64.b64encode(stored.body).decode() in local_store.artifact(paths.html).body.decode()


@pytest.mark.parametrize(("rule", "value", "threshold", "measured", "limit"), [
    ("produce_p99", 174.6, 100.0, "174.6 ms", "100 ms"),
    ("network", 0.934, 0.8, "93.4%", "80% of capacity"),
    ("under_min_isr", 2.0, 0.0, "2 partitions", "0 partitions"),
    ("hot_broker", 2.5, 2.0, "2.50 x median", "2.00 x median"),
    ("load_unobserved", 2.0, 0.0, "2 brokers", "0 brokers"),
    ("load_unobserved", 1.0, 0.0, "1 broker", "0 brokers"),
])
def test_each_load_finding_is_shown_in_its_unit(rule, value, threshold, measured, limit) -> None:
    assert (_measure(rule, value), _threshold(rule, threshold)) == (measured, limit)


def test_a_review_without_load_says_so_and_stores_no_plot(local_store) -> None:
    review = review_with(None)
    text = text_of(render_review_html(review))
    assert "Load over the window no load: the review read no Prometheus window" in text
    assert write_report(review, run_id="r1").load_png is None and load_caption(review) is None


def test_a_prometheus_younger_than_the_window_starts_the_plots_at_its_first_data_and_says_so() -> None:
    window = synthetic_window()
    late = START + 20 * 3600  # data from 20:00 only (a new cluster): not a 20-hour gap of every broker
    young = LoadWindow(window.start, window.end, window.step_s,
                       {k: {b: tuple(p for p in pts if p[0] >= late) for b, pts in v.items()}
                        for k, v in window.indicators.items()}, {}, window.cpu_source)
    review = review_with(young, network_capacity_bytes_per_s=125e6)
    fig = load_figure(review)
    cpu = fig.axes[0]
    import matplotlib.dates as mdates

    left, _ = cpu.get_xlim()
    assert abs(mdates.num2date(left).timestamp() - late) < 1
    assert "no data (gap)" not in " ".join(t.get_text() for t in cpu.get_legend().get_texts())
    assert "Prometheus has data from 2026-11-22 20:00 UTC only" in (load_caption(review) or "")
    assert "only" not in (load_caption(review_with(window)) or "")


def test_a_window_read_again_from_prometheus_first_data_says_what_was_asked_and_a_lone_point_is_a_dot() -> None:
    window = synthetic_window(hours=0.5, step_s=15.0)
    lone = {k: {b: pts[-1:] for b, pts in v.items()} for k, v in window.indicators.items()}
    young = LoadWindow(window.start, window.end, window.step_s, lone, {}, window.cpu_source,
                       asked_start=window.end - 24 * 3600)
    review = review_with(young)
    assert "Prometheus has data from 2026-11-22 00:30 UTC only, of the 24 h asked" in (load_caption(review) or "")
    assert "(30 min of the 24 h asked: Prometheus has no older data, a point every 15 s)" in text_of(
        render_review_html(review))
    cpu = load_figure(review).axes[0]
    assert [line.get_marker() for line in _lines(cpu)] == ["o", "o", "o"]
    assert {line.get_marker() for line in _lines(load_figure(review_with(window)).axes[0])} == {"None"}
    assert LoadWindow.from_dict(young.to_dict()) == young
