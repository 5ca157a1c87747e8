"""The capacity report renders, and its plots are real PNGs."""
from __future__ import annotations

import base64
import json
import re

from kafkaops.capacity import review as capacity
from kafkaops.cli import datagen
from kafkaops.capacity import skew
from kafkaops.capacity.report import plots, render_review_html, write_report
from tests.unit.capacity.test_review import cluster, group

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


def test_html_embeds_the_plots_findings_and_json(local_store) -> None:
    review, sk = a_review(), a_skew()
    page = render_review_html(review, sk)
    embedded = re.findall(r"data:image/png;base64,([A-Za-z0-9+/=]+)", page)
    assert len(embedded) == 4 and all(base64.b64decode(e)[:8] == PNG for e in embedded)
    assert "hot_partition" in page and "orders-0" in page and "partitions" in page
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


def test_the_page_shows_tables_with_units() -> None:
    page = render_review_html(a_review(), a_skew())
    assert "disk_per_broker_bytes=93.1 GiB" in page and "throughput_bytes_per_s=1.1 KiB/s" in page
    assert "<td>orders-0</td><td class=\"num\">900</td><td>10</td><td>90.0</td><td>900 B/s</td>" in page
    assert "<tr><th>keys</th><td>20</td></tr>" in page
