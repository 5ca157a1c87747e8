"""The operator's path through the Airflow UI, in a real browser (issue 13's acceptance test).

Against Airflow as operators deploy it (conftest.py, kafkaops/testing/deployment.py: separate components, PostgreSQL,
CeleryExecutor, the installed wheel) on the deployment cluster, headless Chromium walks what an
operator does:

1. signs in as ``operator``; with four eyes on (the deployment's ``[kafkaops] four_eyes``), every approval is
   answered by a second user, ``approver``, and the operator's own approval is refused and asked again;
2. triggers kafka_scale_out from the Trigger form with its defaults plus only what an operator must
   choose (not a dry run, the topic); approval stays manual; the approver rejects it, and no broker is
   started or registered, the run is failed in Airflow and its record says rejected; then again:
3. opens Browse > Required Actions, reads the plan (moves, bytes, throttle, ETA) and who may approve it,
   approves it and is refused; the approver approves it;
4. follows the run to success, never clearing a task;
5. opens the run's Operation record tab and one gate's Data Docs from it;
6. triggers kafka_reassign to drain the new broker and stop it, and approves that;
7. triggers kafka_capacity_review and opens its report from the run's record;
8. triggers a live migration with quiesce=acl on the cluster, which has no authorizer, and reads its refusal;
9. runs a live migration (kafka_partition_increase, quiesce=manual) of a small topic with a
   consumer group while a producer still writes to it: approves the plan, reads the record's "Action
   needed" banner (stop the producers, and when the run gives up), stops the producer, reads the switch
   in Browse > Required Actions (the topics and
   the group's offsets on the target), moves "the producers" (writes to the target), approves the
   switch and reads the cut-over in the run's record.

Every check is on what the browser shows; run states come from Airflow's REST API. The screenshots
stay in the artifacts folder (listed at the end of the pytest run).
"""
from __future__ import annotations

import datetime as dt
import re
import threading
import time
from typing import Any
from urllib.parse import quote

import pytest
from selenium.webdriver.common.by import By

from kafkaops.cli import datagen
from kafkaops.platform import provision
from kafkaops.platform.kafka import metadata, offsets, records, topics
from tests.deployment.conftest import TOPIC, SpecCluster
from kafkaops.testing.deployment import Deployment
from tests.deployment.runs import RUN_TIMEOUT_S, run_path, task_states, wait_for_run, wait_for_task
from tests.deployment.ui import AirflowUI
from tests.conftest import wait_for

pytestmark = [pytest.mark.deployment, pytest.mark.slow, pytest.mark.integration, pytest.mark.timeout(1800)]

BYTES = re.compile(r"\d+(\.\d+)?\s?(B|KiB|MiB|GiB|kB|MB|GB)\b")
RATE = re.compile(r"\d+(\.\d+)?\s?MB/s")


def wait_for_approval(airflow: Deployment, dag_id: str, run_id: str) -> None:
    """Until the run's approval task waits for a person; fail early if the run ends or a task fails."""
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while time.monotonic() < deadline:
        states = task_states(airflow, dag_id, run_id)
        if states.get("approval", (None, 0))[0] == "awaiting_input":
            return
        failed = {t: s for t, s in states.items() if s[0] in ("failed", "upstream_failed", "skipped")
                  and t != "provision"}
        if failed:
            wait_for_run(airflow, dag_id, run_id, timeout=120)  # fails with the logs
            pytest.fail(f"{dag_id} run {run_id} did not reach its approval: {failed}")
        time.sleep(3)
    pytest.fail(f"{dag_id} run {run_id} not awaiting approval after {RUN_TIMEOUT_S:.0f} s: "
                f"{task_states(airflow, dag_id, run_id)}")


def assert_shows_plan(text: str, what: str) -> None:
    """An approval worth deciding on: moves, bytes, the throttle and an ETA."""
    problems = [name for name, ok in (
        ("the moves", re.search(r"\bmoves?\b", text) and TOPIC in text),
        ("bytes to copy", BYTES.search(text)),
        ("the throttle", re.search(r"(?i)throttle", text) and RATE.search(text)),
        ("an ETA", re.search(r"\bETA\b", text)),
    ) if not ok]
    assert not problems, f"the {what} approval does not show {', '.join(problems)}; it shows:\n{text}"


def test_the_operators_path(deployed: Deployment, chrome: Any, deployment_cluster: SpecCluster,
                            artifacts: Any) -> None:
    airflow = deployed
    began = time.monotonic()
    ui = AirflowUI(chrome, airflow.url, artifacts)

    # 1. sign in
    ui.login("operator", deployed.passwords["operator"])
    ui.shot("home")

    # 2. scale-out from the Trigger form: the defaults, not a dry run, the topic; rejected first
    with deployment_cluster.connect() as conn:
        brokers_before = sorted(b.id for b in metadata.describe_cluster(conn)[2])
    rejected_scale_out(airflow, ui, deployment_cluster, brokers_before)
    run = ui.trigger("kafka_scale_out", switches={"dry_run": False}, arrays={"topics": [TOPIC]}, name="scale-out")
    conf = airflow.api("GET", run_path("kafka_scale_out", run))["conf"]
    assert conf.get("dry_run") is False and conf.get("topics") == [TOPIC] and conf.get("approval") == "manual", \
        f"the form sent {conf}"

    # 3. Required Actions: read the plan, approve
    ui.park()
    wait_for_approval(airflow, "kafka_scale_out", run)
    ui.open_run_tab("kafka_scale_out", run, "Operation record")  # mid-run: a page, not an error
    ui.text_shown(run)
    waiting = ui.visible_text()
    ui.shot("scale-out-record-awaiting-approval")
    assert re.search(r"(?m)^Plan$", waiting) and not re.search(r"(?i)internal server error|traceback", waiting), \
        f"the record of a run awaiting approval should show its plan:\n{waiting}"
    chrome.switch_to.default_content()
    text = ui.open_required_action("kafka_scale_out", run, timeout=120)
    ui.shot("scale-out-approval")
    assert_shows_plan(text, "scale-out")
    assert "only another user may approve it" in text, f"the approval should say who may approve it:\n{text}"
    # four eyes (on in this deployment): the operator's own approval is refused and the question asked again
    ui.respond("Approve")
    ui.park()
    wait_for(lambda: "four eyes" in str(airflow.call("GET", f"/kafkaops/records/kafka_scale_out/{quote(run, safe='')}"
                                                            ".json").json().get("notes")),
             timeout=RUN_TIMEOUT_S, what="the refusal of the operator's own approval in the record")
    wait_for_approval(airflow, "kafka_scale_out", run)
    ui.sign_in_as("approver", deployed.passwords["approver"])
    ui.open_required_action("kafka_scale_out", run, timeout=120)
    ui.respond("Approve")
    ui.shot("scale-out-approved")
    ui.sign_in_as("operator", deployed.passwords["operator"])

    # 4. to success with no Clear
    ui.park()
    wait_for_run(airflow, "kafka_scale_out", run)
    ui.open(f"/dags/kafka_scale_out/runs/{quote(run, safe='')}")
    ui.text_shown("Success")
    ui.shot("scale-out-succeeded")
    with deployment_cluster.connect() as conn:
        brokers_after = sorted(b.id for b in metadata.describe_cluster(conn)[2])
    new = sorted(set(brokers_after) - set(brokers_before))
    assert len(new) == 1, f"the scale-out should add one broker: before {brokers_before}, after {brokers_after}"

    # 5. the Operation record, and one gate's Data Docs from it
    ui.open_run_tab("kafka_scale_out", run, "Operation record")
    ui.text_shown(run)
    record = ui.visible_text()
    ui.shot("scale-out-record")
    for heading in ("Plan", "Approval", "Gates", "Batches", "Throttles"):
        assert re.search(rf"(?m)^{heading}$", record), f"the record has no {heading!r} section:\n{record}"
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", record) and not re.search(r"\b1[78]\d{8}(\.\d+)?\b", record), \
        f"the record's times should be UTC dates, not epoch seconds:\n{record}"
    assert not re.search(r"\{[\"']|\['", record), f"the record shows raw JSON or Python reprs:\n{record}"
    ui.click(ui.wait(lambda d: next(iter(d.find_elements(By.LINK_TEXT, "Data Docs")), None),
                     "a Data Docs link in the record"))
    ui.wait(lambda d: "/kafkaops/artifacts/docs/" in d.execute_script("return location.href"), "the Data Docs page")
    results = chrome.find_elements(By.CSS_SELECTOR, "a[href*='validations/']")
    if results:  # the gate's index: open its validation result
        ui.click(results[0])
        ui.wait(lambda d: "validations/" in d.execute_script("return location.href"), "a validation result page")
    docs = ui.visible_text()
    ui.shot("scale-out-data-docs")
    elsewhere = chrome.execute_script("""
        return [...document.querySelectorAll('script[src], link[rel=stylesheet][href], img[src]')]
            .map(e => e.src || e.href).filter(u => !u.startsWith(location.origin));""")
    assert not elsewhere, f"the Data Docs page loads {elsewhere}, which an offline Airflow cannot reach"
    assert re.search(r"(?i)expect", docs) and re.search(r"(?i)(succe|passed)", docs), \
        f"the Data Docs page shows no validation result:\n{docs[:2000]}"
    chrome.switch_to.default_content()

    # 6. drain the new broker and stop it
    drained = new[0]
    drain = ui.trigger("kafka_reassign", switches={"dry_run": False, "stop_drained": True},
                       arrays={"drain_brokers": [drained]}, choices={"operation": "drain"}, name="drain")
    ui.park()
    wait_for_approval(airflow, "kafka_reassign", drain)
    text = ui.open_required_action("kafka_reassign", drain, timeout=120)
    ui.shot("drain-approval")
    assert_shows_plan(text, "drain")
    assert re.search(rf"(?i)\bstop\w*\b[^.\n]*\b{drained}\b|\b{drained}\b[^.\n]*\bstop", text), \
        f"the drain approval does not say that broker {drained} will be stopped:\n{text}"
    ui.sign_in_as("approver", deployed.passwords["approver"])
    ui.open_required_action("kafka_reassign", drain, timeout=120)
    ui.respond("Approve")
    ui.sign_in_as("operator", deployed.passwords["operator"])
    ui.park()
    wait_for_run(airflow, "kafka_reassign", drain)
    ui.open_run_tab("kafka_reassign", drain, "Operation record")
    ui.text_shown(drain)
    ui.shot("drain-record")
    chrome.switch_to.default_content()
    with deployment_cluster.connect() as conn:
        left = sorted(b.id for b in metadata.describe_cluster(conn)[2])
    assert drained not in left, f"broker {drained} still registered after its drain and stop: {left}"

    # 7. the capacity review and its report
    review = ui.trigger("kafka_capacity_review", name="capacity-review",
                        show=("prometheus_conn_id", "max_cpu_percent", "max_produce_p99_ms"))
    ui.park()
    wait_for_run(airflow, "kafka_capacity_review", review)
    runs = airflow.api("GET", "/dags/kafka_capacity_review/dagRuns")["dag_runs"]
    # manual runs besides this one are other tests' on this deployment (test_bad_input's refused payloads)
    others = [(r["dag_run_id"], r["run_type"], r["logical_date"]) for r in runs
              if r["dag_run_id"] != review and r["run_type"] != "manual"]
    # Unpausing must not run a tick that passed before the deployment began (catch-up of the latest past
    # tick). A tick that came during the session, while the DAG was paused, is the next run Airflow
    # computed when it parsed the file (once an hour here); unpausing runs it: a session that crosses
    # midnight (UTC) sees that daily run too.
    assert all(kind == "scheduled" and dt.datetime.fromisoformat(logical) > airflow.began_at for _, kind, logical in others), \
        f"triggering the review by hand started other runs too (deployment began {airflow.began_at}): {others}"
    ui.open_run_tab("kafka_capacity_review", review, "Operation record")
    ui.text_shown(review)
    ui.shot("capacity-review-record")
    plot = ui.wait(lambda d: next((i for i in d.find_elements(By.TAG_NAME, "img")
                                   if "the brokers' load" in (i.get_attribute("alt") or "")), None),
                   "the load plots on the review's record")
    ui.driver.execute_script("arguments[0].scrollIntoView({block: 'start'});", plot)
    assert ui.driver.execute_script("return arguments[0].complete && arguments[0].naturalWidth > 0;", plot), \
        f"the load plots {plot.get_attribute('src')} did not load on the review's record"
    ui.shot("capacity-review-load-plots")
    ui.click(ui.wait(lambda d: next((a for a in d.find_elements(By.TAG_NAME, "a")
                                     if re.search(r"(?i)capacity report", a.text)), None),
                     "a link to the capacity report in the review's record"))
    ui.text_shown("Recommendations")
    report = ui.visible_text()
    ui.shot("capacity-report")
    assert "Findings" in report and re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d", report), \
        f"the capacity report lacks findings or UTC times:\n{report[:3000]}"
    # the load as Prometheus saw it: the deployment's Prometheus scrapes the first brokers' exporters, not those of
    # the brokers the scale-out added, and the report says so instead of counting them idle
    ui.driver.execute_script("arguments[0].scrollIntoView({block: 'start'});", ui.text_shown("Load over the window"))
    ui.shot("capacity-report-load")
    assert "Where the load came from" in report, report[:3000]
    scraped = {n.node_id for n in deployment_cluster.spec.nodes if n.metrics_port is not None}
    with deployment_cluster.connect() as conn:
        unscraped = sorted({b.id for b in metadata.describe_cluster(conn)[2]} - scraped)
    if unscraped:  # other tests of this deployment may have added brokers
        assert re.search(r"load_unobserved\s+brokers? " + ", ".join(map(str, unscraped)), report), \
            f"brokers {unscraped} are not scraped yet the report does not name them:\n{report[:4000]}"
    chrome.switch_to.default_content()

    # 8. quiesce=acl on this cluster, which has no authorizer: refused by the preflight, before any copy
    acl_refused(airflow, ui, deployment_cluster)

    # 9. a live migration: the plan approved, the switch read in Required Actions, the producers moved
    live_migration(airflow, ui, deployment_cluster)

    took = time.monotonic() - began
    print(f"\nthe operator's path took {took:.0f} s (after {airflow.started_in:.0f} s to start the deployment); screenshots in {artifacts}")


def rejected_scale_out(airflow: Deployment, ui: AirflowUI, cluster: SpecCluster, brokers_before: list[int]) -> None:
    """Step 2, first: a scale-out the approver rejects starts no broker (none registered, none running, the
    spec unchanged), Airflow marks the run failed, and its record says it was rejected and that nothing changed."""
    nodes_before = provision.ClusterSpec.load(cluster.spec_file).nodes
    run = ui.trigger("kafka_scale_out", switches={"dry_run": False}, arrays={"topics": [TOPIC]}, name="scale-out-reject")
    ui.park()
    wait_for_approval(airflow, "kafka_scale_out", run)
    ui.sign_in_as("approver", airflow.passwords["approver"])
    text = ui.open_required_action("kafka_scale_out", run, timeout=120)
    assert "Rejecting changes nothing: no broker is started, no partition moves" in text, \
        f"the approval should say what Reject does in this run:\n{text}"
    ui.respond("Reject")
    ui.shot("scale-out-rejected")
    ui.sign_in_as("operator", airflow.passwords["operator"])
    ui.park()
    wait_for_run(airflow, "kafka_scale_out", run, expect="failed")  # a rejected run is not a green one
    ui.open_run_tab("kafka_scale_out", run, "Operation record")
    ui.text_shown("What to do now")
    record = ui.visible_text()
    ui.shot("scale-out-rejected-record")
    assert "scale_out: rejected" in record and "rejected by approver; nothing changed" in record, record
    assert re.search(r"(?m)^What to do now$", record) and "Nothing changed, and nothing needs undoing" in record, record
    ui.driver.switch_to.default_content()
    data = airflow.call("GET", f"/kafkaops/records/kafka_scale_out/{quote(run, safe='')}.json").json()
    planned = [b["id"] for b in data["plan"]["new_brokers"]]
    assert planned, data["plan"]
    with cluster.connect() as conn:
        assert sorted(b.id for b in metadata.describe_cluster(conn)[2]) == brokers_before
    assert provision.ClusterSpec.load(cluster.spec_file).nodes == nodes_before
    assert all(provision.node_pid(cluster.spec, b) is None for b in planned), f"broker(s) {planned} run"


def acl_refused(airflow: Deployment, ui: AirflowUI, cluster: SpecCluster) -> None:
    """Step 8: a live migration with ``quiesce=acl`` on a cluster without an authorizer fails at its
    preflight, naming why and the way on, with no target topic made and no plan asked for."""
    dag_id = "kafka_partition_increase"
    with cluster.connect() as conn:
        topics_before = metadata.topic_names(conn)
    run = ui.trigger(dag_id, texts={"topic": TOPIC, "quiesce_principals": "User:orders-app"},
                     choices={"quiesce": "acl"}, switches={"dry_run": False}, name="acl-refused")
    ui.park()
    wait_for_run(airflow, dag_id, run, expect="failed")
    ui.open_run_tab(dag_id, run, "Operation record")
    ui.text_shown("What to do now")
    record = ui.visible_text()
    ui.shot("acl-quiesce-refused-record")
    assert "quiesce=acl cannot stop the producers of orders" in record and "no authorizer" in record, record
    assert "trigger again with quiesce=manual" in record and "could NOT be removed" not in record, record
    ui.driver.switch_to.default_content()
    states = task_states(airflow, dag_id, run)
    assert states["preflight_gate"][0] == "failed" and states.get("plan", (None,))[0] != "success", states
    with cluster.connect() as conn:
        made = metadata.topic_names(conn) - topics_before
    assert not made, f"the refused run made topics {sorted(made)}"


class StillWriting:
    """A producer writing a few keyed records a second to ``topic`` until the block ends: the operator's
    application, which the live migration asks to stop."""

    def __init__(self, config: dict[str, str], topic: str) -> None:
        self.config, self.topic = config, topic
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._write, name=f"writes-{topic}", daemon=True)

    def _write(self) -> None:
        seed = 100
        while not self.stop.wait(0.5):
            datagen.produce(self.config, self.topic, datagen.DatagenSpec(records=5, keys=120, record_bytes=128,
                                                                       seed=seed))
            seed += 1

    def __enter__(self) -> StillWriting:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=60)
        assert not self.thread.is_alive(), f"the producer of {self.topic} did not stop"


def wait_for_stop_request(airflow: Deployment, dag_id: str, run_id: str) -> None:
    """Until the run's record asks the operator to stop the producers (the quiesce began)."""
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while time.monotonic() < deadline:
        answer = airflow.call("GET", f"/kafkaops/records/{dag_id}/{quote(run_id, safe='')}.json")
        if answer.status_code == 200 and any(n.get("action") == "stop_producers" for n in answer.json()["notes"]):
            return
        time.sleep(3)
    raise AssertionError(f"run {run_id} did not ask to stop the producers within {RUN_TIMEOUT_S} s")


def live_migration(airflow: Deployment, ui: AirflowUI, cluster: SpecCluster) -> None:
    """Step 8: ``payments`` (3 partitions, a group halfway through it) migrated live to 6 partitions."""
    dag_id, source, group = "kafka_partition_increase", "payments", "payments.readers"
    with cluster.connect() as conn:
        topics.create_topic(conn, source, 3, 3)
    datagen.produce(cluster.config, source, datagen.DatagenSpec(records=3000, keys=120, record_bytes=128, seed=18))
    ends = {p: e for p, (_, e) in records.end_offsets(cluster.config, source).items()}
    with cluster.connect() as conn:
        offsets.commit_group_offsets(conn, group, source, {p: e // 2 for p, e in ends.items()})

    run = ui.trigger(dag_id, texts={"topic": source}, choices={"quiesce": "manual"}, switches={"dry_run": False},
                     name="live-migration")
    conf = airflow.api("GET", run_path(dag_id, run))["conf"]
    assert conf.get("topic") == source and conf.get("quiesce") == "manual" and conf.get("mode") == "migrate", \
        f"the form sent {conf}"
    ui.park()
    wait_for_approval(airflow, dag_id, run)
    text = ui.open_required_action(dag_id, run, timeout=120)
    ui.shot("live-migration-approval")
    assert source in text and re.search(r"\b6\b", text) and "Live cut-over (quiesce=manual)" in text, \
        f"the plan's approval should name {source}, 6 partitions and the cut-over it will do:\n{text}"
    ui.sign_in_as("approver", airflow.passwords["approver"])  # four eyes: the operator triggered it; the approver answers
    ui.open_required_action(dag_id, run, timeout=120)
    ui.respond("Approve")

    # a producer still writes to payments: the run asks, above everything on its record, to stop it
    ui.park()
    with StillWriting(cluster.config, source):
        wait_for_stop_request(airflow, dag_id, run)
        ui.open_run_tab(dag_id, run, "Operation record")
        banner = ui.text_shown("Action needed").text
        ui.shot("live-migration-stop-the-producers")
        assert f"Action needed: Stop every producer writing to {source} now" in banner, banner
        assert re.search(r"The run gives up at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", banner), banner
        ui.driver.switch_to.default_content()
    # stopped: the source goes still, then the final pass, the gate, the groups
    ui.park()
    wait_for_task(airflow, dag_id, run, "switch", {"awaiting_input"}, timeout=RUN_TIMEOUT_S, poll_s=3)
    text = ui.open_required_action(dag_id, run, timeout=120, task_id="switch/")
    ui.shot("live-migration-switch")
    moved = re.search(rf"Move producers from {source} to (\S+) now", text)
    assert moved, f"the switch should name the source and the target topic:\n{text}"
    target = moved.group(1)
    row = re.search(rf"{re.escape(group)}\s+{re.escape(group)}\s+((?:\d+: \d+,? ?)+)", text)
    assert row, f"the switch should show {group}'s offsets on {target} as a table row:\n{text}"
    shown = dict(tuple(int(x) for x in pair.split(": ")) for pair in row.group(1).strip(" ,").split(", "))
    with cluster.connect() as conn:
        committed = {x.partition: x.committed for g in metadata.snapshot(conn, topics=[target], sizes=False).groups
                     if g.group_id == group for x in g.partitions if x.topic == target}
    assert shown == committed and len(shown) == 6 and 0 < sum(shown.values()) < sum(ends.values()), \
        f"the switch shows {shown}, the group has {committed} committed on {target}"
    assert not re.search(r"\{[\"']|\['", text), f"the switch shows raw JSON or Python reprs:\n{text}"

    datagen.produce(cluster.config, target, datagen.DatagenSpec(records=200, keys=120, record_bytes=128, seed=19))
    ui.respond("Approve")
    ui.park()
    wait_for_run(airflow, dag_id, run)

    ui.open_run_tab(dag_id, run, "Operation record")
    ui.text_shown("Live cut-over")
    record = ui.visible_text()
    ui.shot("live-migration-record")
    assert re.search(r"(?i)write window", record) and group in record and "approver" in record, \
        f"the record's cut-over should show the write window, the group and who confirmed the switch:\n{record}"
    ui.driver.switch_to.default_content()
