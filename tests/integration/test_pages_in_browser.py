"""Every page kafkaops renders, opened in headless Chromium with a value that tries to run a script: the record
pages, a capacity report and a gate's Data Docs carry a topic, key, host, cluster id and param named like markup
(Kafka refuses such a topic name, the form's params are checked; the pages must not depend on either). Chromium
must show it as text and run nothing (the title stays; the DOM has no element the value made)."""
from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from kafkaops.airflow.pages import render_record
from kafkaops.capacity import report
from kafkaops.capacity import review as capacity
from kafkaops.capacity.skew import summarize
from kafkaops.model import Broker, Cluster, PartitionAssignment
from kafkaops.platform import gates
from tests.unit.airflow.test_pages import a_record, capacity_record

pytestmark = pytest.mark.integration

#: The value: a script and an image whose error handler would both change the page's title.
PAYLOAD = "<script>document.title='pwned'</script><img src=x onerror=\"document.title='pwned'\">"
CHROMIUM = os.environ.get("KAFKAOPS_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"


def _dom(page: Path) -> str:
    """The page's DOM after its scripts (if any) ran, as Chromium serializes it."""
    if not Path(CHROMIUM).exists():
        message = "chromium not found: the browser test needs Debian's chromium (make test installs it as root)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    done = subprocess.run([CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                           f"--user-data-dir={page.parent / 'profile'}", "--virtual-time-budget=3000",
                           "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=60,
                          start_new_session=True)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def _shows_as_text(dom: str, where: str) -> None:
    assert "pwned" not in dom.split("</title>")[0], f"{where}: a script ran (the title changed)"
    assert "<script>document.title" not in dom and "<img src=\"x\"" not in dom, f"{where}: the value became markup"
    assert "&lt;script&gt;document.title='pwned'&lt;/script&gt;" in dom, f"{where}: the value is not shown as text"


def test_record_pages_show_a_value_like_markup_as_text(tmp_path: Path) -> None:
    reassignment = a_record(triggered_by=PAYLOAD, params={"topics": [PAYLOAD]})
    reassignment["notes"] = [{"ts": 1_764_403_200.0, "text": PAYLOAD}]
    review = capacity_record()
    review["notes"][0] = {**review["notes"][0], "verdict": PAYLOAD, "findings": [PAYLOAD], "recommendations": [PAYLOAD]}
    for name, record in (("reassignment", reassignment), ("capacity", review)):
        page = tmp_path / f"{name}.html"
        page.write_text(render_record(record))
        _shows_as_text(_dom(page), f"the {name} record page")


def test_a_capacity_report_shows_a_hot_key_and_a_topic_like_markup_as_text(tmp_path: Path) -> None:
    cluster = Cluster(brokers=tuple(Broker(i, disk_total_bytes=10**11, disk_usable_bytes=9 * 10**10) for i in (1, 2, 3)),
                      partitions=tuple(PartitionAssignment("orders", p, (1, 2), 1, (1, 2), 0, 10, size_bytes=1000)
                                       for p in range(3)), cluster_id="c1", taken_at=1_764_403_200.0)
    reviewed = capacity.review(cluster)
    reviewed = replace(reviewed, findings=(capacity.Finding("hot_partition", PAYLOAD, 3.0, 2.0, PAYLOAD),))
    skew = summarize(PAYLOAD, {PAYLOAD.encode(): (60, 6000), b"calm": (40, 4000)}, partitions=3)
    page = tmp_path / "report.html"
    page.write_text(report.render_review_html(reviewed, skew))
    _shows_as_text(_dom(page), "the capacity report")


def test_data_docs_show_a_topic_like_markup_as_text(tmp_path: Path) -> None:
    brokers = (Broker(1, host=PAYLOAD, port=9092), Broker(2, host="b2", port=9092), Broker(3, online=False))
    parts = (PartitionAssignment(PAYLOAD, 0, (1, 2, 3), 1, (1, 2)),)  # under-replicated: named on the index
    result = gates.run("preflight", gates.preflight_frames(Cluster(brokers=brokers, partitions=parts, cluster_id=PAYLOAD,
                                                                   controller_id=1)), docs_dir=tmp_path)
    pages = [Path(result.docs_path), *map(Path, result.details["docs_pages"])]
    shown = 0
    for page in pages:
        dom = _dom(page)
        assert "pwned" not in dom.split("</title>")[0], f"{page}: a script ran"
        assert "<script>document.title" not in dom and "<img src=\"x\"" not in dom, f"{page}: the value became markup"
        shown += "&lt;script&gt;document.title" in dom
    assert shown, f"the topic named like markup is on none of the Data Docs pages {pages}"
