"""The capacity report renders as a readable page (UTC times, tables with units, no JSON dump, a plot with
no data says so, the verdict over findings and recommendations that agree with it), and its plots are real PNGs."""
from __future__ import annotations

import base64
import json
import re

from kafkaops.capacity import review as capacity
from kafkaops.cli import datagen
from kafkaops.capacity import skew
from kafkaops.capacity.report import (IDLE_THROUGHPUT, NO_THROUGHPUT, plot_partitions, plots, render_review_html,
                                      throughput_note, write_report)
from tests.unit.capacity.test_review import GB, cluster, group, on_one_host, sized
from tests.unit.airflow.test_pages import text_of

PNG = b"\x89PNG\r\n\x1a\n"


def a_review() -> capacity.Review:
    a = cluster(t=0.0, offsets={0: 0, 1: 0, 2: 0}, sizes={0: 0, 1: 0, 2: 0}, groups=[group("g", 1, {0: (0, 0)})])
    b = cluster(t=10.0, offsets={0: 900, 1: 100, 2: 100}, sizes={0: 9000, 1: 1000, 2: 1000},
                groups=[group("g", 1, {0: (5, 900)})])
    return capacity.review(b, [capacity.ReviewPoint.of(a)],
                           targets=capacity.CapacityTargets((capacity.TopicTarget("orders", 500, 100),)))


def a_skew() -> dict:
    pairs = datagen.generate_records(datagen.DatagenSpec(records=500, keys=20, skew="hot", record_bytes=80))
    return skew.analyze("orders", pairs, partitions=3, candidate_field="id")


def test_plots_are_non_empty_pngs() -> None:
    images = plots(a_review(), a_skew())
    assert set(images) == {"brokers", "partitions", "key_skew", "what_if"}
    for name, data in images.items():
        raw = base64.b64decode(data)
        assert raw[:8] == PNG, name
        assert len(raw) > 5_000, (name, len(raw))


def test_html_embeds_the_plots_and_findings_and_links_the_json_next_to_it(local_store) -> None:
    review, sk = a_review(), a_skew()
    page = render_review_html(review, sk)
    embedded = re.findall(r"data:image/png;base64,([A-Za-z0-9+/=]+)", page)
    assert len(embedded) == 4 and all(base64.b64decode(e)[:8] == PNG for e in embedded)
    assert "hot_partition" in page and "orders-0" in page and "partitions" in page
    assert '<a href="review.json">the review as JSON</a>' in page and '"review"' not in page
    paths = write_report(review, sk, run_id="scheduled__2026-01-01T00:00:00+00:00")
    assert paths.html.endswith("/scheduled__2026-01-01T00_00_00_00_00/report.html")
    assert local_store.artifact(paths.html).body.decode() == page
    assert local_store.artifact(paths.html).content_type.startswith("text/html")
    data = json.loads(local_store.artifact(paths.json).body)
    assert capacity.Review.from_dict(data["review"]) == review and data["key_skew"]["topic"] == "orders"


def test_html_without_skew_or_history() -> None:
    review = capacity.review(cluster(t=1.0, offsets={0: 0}))
    page = render_review_html(review)
    assert page.count("data:image/png;base64,") == 2 and "Empty topics" in page


def test_names_from_the_cluster_are_escaped_and_times_are_utc() -> None:
    import dataclasses

    review = dataclasses.replace(a_review(), cluster_id="<script>alert(1)</script>",
                                 empty_topics=("<img src=x onerror=alert(1)>",))
    page = render_review_html(review)
    assert "<script>" not in page and "<img src=x" not in page
    assert "Capacity review of cluster &lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "taken 1970-01-01 00:00:10 UTC; previous review 1970-01-01 00:00:00 UTC" in page


def test_the_page_shows_tables_with_units_and_no_raw_numbers() -> None:
    page = render_review_html(a_review(), a_skew())
    text = text_of(page)
    assert "hot_partition orders-0 2.45 x mean 2.00 x mean partition orders-0 carries 2.45 x the mean" in text
    assert "lag_growing group g 895 records not growing" in text
    assert "partitions topic orders 6 partitions (today 3)" in text
    assert "brokers cluster at least 1 broker(s) (today 3)" in text
    assert "disk_per_broker_bytes: 93.1 GiB" in text and "throughput_bytes_per_s: 1.1 KiB/s" in text
    assert "max_disk_use: 70%" in text
    assert "orders-0 900 10.0 s 90.0 900 B/s" in text
    assert "disk of size used use Kafka's data other data broker 1 93.1 GiB 46.6 GiB 50.0% 9.8 KiB 46.6 GiB" in text
    assert "<tr><th>keys</th><td>20</td></tr>" in page
    assert "{" not in text and "1970-01-01 00:00:10 UTC" in text and "taken 10.0" not in text


def test_a_page_is_short_without_a_json_dump() -> None:
    page = render_review_html(a_review(), a_skew())
    without_images = re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "", page)
    assert len(without_images) < 20_000 and "<pre" not in page


def test_an_empty_throughput_plot_and_table_say_there_is_no_data() -> None:
    first = capacity.review(cluster(t=1.0, offsets={0: 5, 1: 5, 2: 5}))
    assert throughput_note(first) == NO_THROUGHPUT
    idle_before, idle_after = cluster(t=1.0, offsets={0: 5, 1: 5, 2: 5}), cluster(t=61.0, offsets={0: 5, 1: 5, 2: 5})
    idle = capacity.review(idle_after, [capacity.ReviewPoint.of(idle_before)])
    assert throughput_note(idle) == IDLE_THROUGHPUT and throughput_note(a_review()) is None
    for review, note in ((first, NO_THROUGHPUT), (idle, IDLE_THROUGHPUT)):
        assert note in text_of(render_review_html(review))
    import matplotlib.pyplot as plt

    drawn = []
    real_text = plt.Axes.text
    try:
        plt.Axes.text = lambda self, x, y, s, *a, **k: drawn.append(s) or real_text(self, x, y, s, *a, **k)
        plot_partitions(idle)
    finally:
        plt.Axes.text = real_text
    assert IDLE_THROUGHPUT in drawn  # written across the empty plot itself


def test_the_verdict_heads_the_page_and_findings_and_recommendations_agree_with_it() -> None:
    laptop = on_one_host(sized(cluster(t=1.0, offsets={0: 10, 1: 10, 2: 10}, disk=(270 * GB, 80 * GB)), 2_000_000))
    review = capacity.review(laptop)
    text = text_of(render_review_html(review))
    assert text.index("Free disk: brokers 1, 2, 3 (one disk) is above 70%") < text.index("Findings")
    findings = text[text.index("Findings"):text.index("Recommendations")]
    recommendations = text[text.index("Recommendations"):text.index("Brokers")]
    assert "free that disk" in findings and "add brokers" not in findings.lower()
    assert "add none, more would not help" in recommendations and "add 1" not in recommendations
