"""kafkaops.platform.gates over built snapshots and plans: each gate passes on healthy input and names the
object on each bad one. GX runs in memory; the first run pays its import (a few seconds)."""
from __future__ import annotations

import json
import os
import re
from types import SimpleNamespace
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd
import pytest

from kafkaops.platform import datadocs, gates, lifecycle
from kafkaops.reassign import frames as plan_frames
from kafkaops.platform.gates import GateError, GateFailed, GateResult
from kafkaops.model import Broker, Cluster
from kafkaops.reassign.planner import LoadStats, Move, ReassignmentPlan, plan_drain, plan_scale_out
from kafkaops.resources import suites
from tests.unit.clusters import three_brokers_one_down, three_brokers_one_topic
from tests.unit.reassign.planner.clusters import six_brokers_three_racks, skewed_four_brokers

GATES = ("preflight", "plan", "post_move")
REPO = Path(__file__).resolve().parents[3]


def failures_of(result: GateResult) -> str:
    assert not result.ok, "the gate passed but should have failed"
    return " | ".join(result.failures)


def with_partition(cluster: Cluster, topic: str, n: int, **changes: object) -> Cluster:
    parts = tuple(replace(p, **changes) if p.topic_partition == (topic, n) else p for p in cluster.partitions)
    return replace(cluster, partitions=parts, _index=None)


def hand_plan(cluster: Cluster, after: dict[tuple[str, int], Sequence[int]], *, kind: str = "rebalance",
              drained: tuple[int, ...] = ()) -> ReassignmentPlan:
    """A plan built by hand (no planner), so it can break the rules the planner keeps."""
    moves = tuple(Move(p.topic, p.partition, p.replicas, tuple(after[p.topic_partition]), p.size_bytes)
                  for p in cluster.partitions if p.topic_partition in after)
    changed = {(m.topic, m.partition): m.after for m in moves}
    ids = cluster.broker_ids

    def stats(use_after: bool) -> LoadStats:
        rows = ((p.topic, changed.get(p.topic_partition, p.replicas) if use_after else p.replicas, p.size_bytes or 0)
                for p in cluster.partitions)
        return LoadStats.measure(rows, ids, ids)

    return ReassignmentPlan(kind=kind, moves=moves, stats_before=stats(False), stats_after=stats(True),
                            lower_bound=0, drained=drained, cluster=cluster)


# -- suites ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("gate", GATES)
def test_each_suite_file_is_a_gx_suite_with_a_rule_and_a_failure_text_per_expectation(gate: str) -> None:
    import great_expectations as gx  # after kafkaops.platform.gates, which turns GX analytics off

    data = json.loads((suites() / f"{gate}.json").read_text())
    suite = gx.ExpectationSuite(**data)
    assert suite.name == gate and len(suite.expectations) == len(data["expectations"]) >= 4
    for exp in data["expectations"]:
        assert exp["notes"] and exp["meta"]["failure"], exp["type"]


def test_an_unknown_suite_names_the_suites_there_are() -> None:
    with pytest.raises(GateError, match=r"no suite 'nope'.*plan.*post_move.*preflight"):
        gates.run("nope", {})


def test_frames_that_do_not_fit_the_suite_are_refused() -> None:
    frames = gates.preflight_frames(three_brokers_one_topic())
    with pytest.raises(GateError, match=r"checks frames \['brokers', 'cluster', 'partitions'\] but got \['brokers'\]"):
        gates.run("preflight", {"brokers": frames["brokers"]})
    with pytest.raises(GateError, match="one unnamed frame"):
        gates.run("preflight", frames["brokers"])


# -- preflight ---------------------------------------------------------------------------------------
def test_preflight_passes_on_a_healthy_cluster() -> None:
    result = gates.run("preflight", gates.preflight_frames(three_brokers_one_topic()))
    assert result.ok and result.failures == ()
    assert result.statistics["evaluated_expectations"] == 5 and result.statistics["success_percent"] == 100.0
    assert gates.require(result) is result
    assert json.loads(json.dumps(result.to_dict()))["details"]["frames"]["partitions"] == {
        "rows": 3, "success": True, "suite": "preflight.partitions", "evaluated": 3, "successful": 3}


def test_preflight_names_the_offline_broker_and_the_partitions_it_left_under_replicated() -> None:
    text = failures_of(gates.run("preflight", gates.preflight_frames(three_brokers_one_down())))
    assert "preflight: broker 3 offline (expect_column_values_to_be_in_set online)" in text
    assert "orders-0 under-replicated (ISR [1,2] of replicas [1,2,3])" in text


def test_preflight_names_an_under_replicated_partition() -> None:
    cluster = with_partition(three_brokers_one_topic(), "orders", 2, isr=(3, 1))
    result = gates.run("preflight", gates.preflight_frames(cluster))
    assert result.failures == ("preflight: orders-2 under-replicated (ISR [3,1] of replicas [3,1,2]) "
                               "(expect_column_values_to_be_in_set under_replicated)",)
    detail = next(e for e in result.details["expectations"] if not e["success"])
    assert detail["unexpected_count"] == 1 and detail["unexpected_rows"][0]["name"] == "orders-2"


def test_preflight_names_an_offline_partition() -> None:
    cluster = with_partition(three_brokers_one_topic(), "orders", 1, leader=None)
    assert "orders-1 offline (no leader among replicas [2,3,1])" in failures_of(
        gates.run("preflight", gates.preflight_frames(cluster)))


@dataclass(frozen=True)
class InFlight:
    """Stands in for kafkaops.model.Reassignment: anything with a ``topic_partition``."""

    topic_partition: tuple[str, int]


def test_preflight_names_reassignments_in_flight_even_of_partitions_the_snapshot_lacks() -> None:
    frames = gates.preflight_frames(three_brokers_one_topic(), in_flight=[InFlight(("orders", 1)), ("payments", 0)])
    text = failures_of(gates.run("preflight", frames))
    assert "orders-1 has a reassignment in flight, payments-0 has a reassignment in flight" in text


def test_preflight_names_a_cluster_without_controller() -> None:
    cluster = replace(three_brokers_one_topic(), controller_id=None, _index=None)
    assert failures_of(gates.run("preflight", gates.preflight_frames(cluster))) == (
        "preflight: cluster c1 reports no active controller (expect_column_values_to_not_be_null controller)")


def test_require_raises_naming_every_failure() -> None:
    result = gates.run("preflight", gates.preflight_frames(three_brokers_one_down(), in_flight=[("orders", 0)]))
    with pytest.raises(GateFailed, match=r"gate preflight failed \(3 expectation\(s\)\): preflight: broker 3 "
                                         r"offline.*orders-0 has a reassignment in flight") as caught:
        gates.require(result)
    assert caught.value.result is result


# -- plan --------------------------------------------------------------------------------------------
NEW_RACKED = [Broker(7, rack="a"), Broker(8, rack="b"), Broker(9, rack="c")]


def test_plan_passes_on_a_planner_scale_out_within_the_byte_limit() -> None:
    cluster = six_brokers_three_racks(sizes=True)
    plan = plan_scale_out(cluster, NEW_RACKED)
    result = gates.run("plan", plan_frames.plan_frame(plan, cluster, max_bytes=plan.bytes_to_move))
    assert result.ok, result.failures
    assert gates.run("plan", plan_frames.plan_frame(plan, cluster)).ok  # no limit


def test_plan_passes_on_a_planner_drain() -> None:
    cluster = six_brokers_three_racks()
    assert gates.run("plan", plan_frames.plan_frame(plan_drain(cluster, [6]), cluster)).ok


def test_a_drain_of_only_what_the_broker_holds_may_keep_the_spread_the_others_had() -> None:
    """Brokers 1 and 2 hold 8 replicas each, 3 and 4 none: draining 1 leaves 2 at 8 (a spread of 4), which the
    gate allows for a drain that moves only what 1 holds, not for one asked to rebalance after."""
    cluster = skewed_four_brokers()
    only = plan_drain(cluster, [1])
    assert only.stats_after.replica_spread == 4
    assert gates.run("plan", plan_frames.plan_frame(only, cluster)).ok
    assert plan_frames.allowed_spread(only, cluster) == 8
    assert plan_frames.allowed_spread(plan_drain(cluster, [1], rebalance_after=True), cluster) == 1


def test_plan_names_the_partition_where_the_byte_limit_runs_out() -> None:
    cluster = six_brokers_three_racks(sizes=True)
    plan = plan_scale_out(cluster, NEW_RACKED)
    frames = plan_frames.plan_frame(plan, cluster, max_bytes=plan.bytes_to_move - 1)
    last = frames["partitions"][frames["partitions"].moved].iloc[-1]
    text = failures_of(gates.run("plan", frames))
    assert (f"plan: {last['name']} brings the bytes copied to {plan.bytes_to_move}, over the limit "
            f"{plan.bytes_to_move - 1} (expect_column_pair_values_a_to_be_greater_than_b max_bytes "
            "bytes_copied_so_far)") == text


def test_plan_names_the_overloaded_brokers_of_an_unbalanced_plan() -> None:
    cluster = skewed_four_brokers()  # 8 replicas each on brokers 1 and 2, none on 3 and 4
    text = failures_of(gates.run("plan", plan_frames.plan_frame(hand_plan(cluster, {}), cluster)))
    assert ("plan: broker 1 holds 8 replicas, over the ceiling 1 (fewest 0 + allowed spread 1), broker 2 holds 8 "
            "replicas, over the ceiling 1") in text


def test_an_explicit_spread_overrides_the_computed_one() -> None:
    cluster = skewed_four_brokers()
    assert gates.run("plan", plan_frames.plan_frame(hand_plan(cluster, {}), cluster, spread=8)).ok


def test_plan_names_a_partition_that_loses_its_rack_spread() -> None:
    cluster = six_brokers_three_racks()  # racks a,b,c,a,b,c for brokers 1..6
    first = cluster.partitions[0]
    assert first.name == "orders-0" and first.replicas == (1, 2, 3)
    text = failures_of(gates.run("plan", plan_frames.plan_frame(hand_plan(cluster, {first.topic_partition: (1, 4, 3)}), cluster)))
    assert ("plan: orders-0 replicas [1,4,3] span 2 rack(s) [a,c], need 3 "
            "(expect_column_pair_values_a_to_be_greater_than_b racks_spanned racks_required)") in text


def test_plan_names_a_partition_with_a_broker_twice() -> None:
    cluster = six_brokers_three_racks()
    text = failures_of(gates.run("plan", plan_frames.plan_frame(hand_plan(cluster, {("orders", 0): (1, 1, 3)}), cluster)))
    assert "plan: orders-0 replicas [1,1,3] name a broker twice" in text


def test_plan_names_a_drained_broker_that_keeps_replicas() -> None:
    cluster = six_brokers_three_racks()
    text = failures_of(gates.run("plan", plan_frames.plan_frame(hand_plan(cluster, {}, kind="drain", drained=(6,)), cluster)))
    assert "plan: drained broker 6 still holds 9 replicas" in text


def test_a_plan_onto_an_unknown_broker_is_refused() -> None:
    cluster = six_brokers_three_racks()
    plan = replace(hand_plan(cluster, {}), moves=(Move("orders", 0, (1, 2, 3), (1, 2, 9)),))
    with pytest.raises(GateError, match=r"plan moves orders-0 onto broker\(s\) \[9\], which the cluster lacks"):
        plan_frames.plan_frame(plan, cluster)


def test_allowed_spread_widens_where_racks_cannot_split_evenly() -> None:
    cluster = six_brokers_three_racks()
    plan = plan_scale_out(cluster, [Broker(7, rack="a")])  # rack a: 3 brokers share a third of the replicas
    assert plan_frames.allowed_spread(plan, cluster) == 3 == plan.stats_after.replica_spread


# -- post_move ---------------------------------------------------------------------------------------
BEFORE = three_brokers_one_topic()
SCALE_OUT = plan_scale_out(BEFORE, [Broker(4, rack="a")])  # orders-1: [2,3,1] -> [2,3,4]
DONE = SCALE_OUT.after


def test_post_move_passes_when_the_cluster_matches_the_plan() -> None:
    assert SCALE_OUT.diff() == ("orders-1: [2,3,1] -> [2,3,4]",)
    result = gates.run("post_move", plan_frames.post_move_frame(BEFORE, DONE, SCALE_OUT))
    assert result.ok, result.failures
    desired = {("orders", 1): (2, 3, 4)}
    assert gates.run("post_move", plan_frames.post_move_frame(BEFORE, DONE, desired)).ok


def test_post_move_names_replicas_other_than_the_plan_order_included() -> None:
    after = with_partition(DONE, "orders", 1, replicas=(4, 3, 2), leader=4, isr=(4, 3, 2))
    assert failures_of(gates.run("post_move", plan_frames.post_move_frame(BEFORE, after, SCALE_OUT))) == (
        "post_move: orders-1 replicas [4,3,2], plan [2,3,4] (expect_column_pair_values_to_be_equal replicas desired)")


def test_post_move_names_a_replica_missing_from_the_isr() -> None:
    after = with_partition(DONE, "orders", 1, isr=(2, 3))
    text = failures_of(gates.run("post_move", plan_frames.post_move_frame(BEFORE, after, SCALE_OUT)))
    assert "post_move: orders-1 replicas [4] not in ISR [2,3] (expect_column_values_to_be_null isr_missing)" in text
    assert "orders-1 under-replicated (ISR [2,3] of replicas [2,3,4])" in text


def test_post_move_names_an_end_offset_that_went_backwards() -> None:
    after = with_partition(DONE, "orders", 2, end_offset=250)
    assert failures_of(gates.run("post_move", plan_frames.post_move_frame(BEFORE, after, SCALE_OUT))) == (
        "post_move: orders-2 end offset went back from 300 to 250 "
        "(expect_column_pair_values_a_to_be_greater_than_b end_offset_after end_offset_before)")


def test_post_move_names_a_vanished_partition_and_a_reassignment_still_in_flight() -> None:
    after = replace(DONE, partitions=DONE.partitions[:2], _index=None)
    text = failures_of(gates.run("post_move", plan_frames.post_move_frame(BEFORE, after, SCALE_OUT,
                                                                    in_flight=[("orders", 1)])))
    assert "orders-2 missing after the move (end offset before 300)" in text
    assert "orders-1 still has a reassignment in flight" in text


# -- Data Docs ---------------------------------------------------------------------------------------
def test_data_docs_are_kept_in_the_folder_given(tmp_path) -> None:
    result = gates.run("preflight", gates.preflight_frames(three_brokers_one_down()), docs_dir=tmp_path)
    assert result.docs_path == str(tmp_path / "preflight" / "index.html")
    index = (tmp_path / "preflight" / "index.html").read_text()
    assert index.lstrip().lower().startswith("<!doctype html") and "preflight" in index
    assert "broker 3 offline" in index  # the failures in words, on a static index
    pages = result.details["docs_pages"]
    assert len(pages) == 3 and all(p.startswith(str(tmp_path)) and p.endswith(".html") for p in pages)
    for page in pages:
        assert os.path.relpath(page, tmp_path / "preflight") in index
    broker_page = next(p for p in pages if "/brokers/" in p)
    with open(broker_page) as page:
        assert "preflight.brokers" in page.read()
    assert "Data Docs: " + result.docs_path in str(pytest.raises(GateFailed, gates.require, result).value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["preflight"]
    assert not (REPO / "gx").exists()
    # GX's 4 MB of fonts and animations are gone; what the pages link to is there
    static = sorted(p.relative_to(tmp_path / "preflight").as_posix() for p in (tmp_path / "preflight").rglob("*")
                    if p.is_file() and "static" in p.parts)
    assert static == ["static/images/favicon.ico"]
    assert all(p.is_file() for p in datadocs.linked_files(tmp_path / "preflight") if p.suffix == ".html")


def test_no_docs_without_a_folder() -> None:
    result = gates.run("preflight", gates.preflight_frames(three_brokers_one_topic()))
    assert result.docs_path is None and "docs_pages" not in result.details


def test_frames_keep_their_columns_when_empty() -> None:
    empty = Cluster(brokers=(Broker(1),), partitions=(), controller_id=1)
    frames = gates.preflight_frames(empty)
    assert len(frames["partitions"]) == 0 and "under_replicated" in frames["partitions"].columns
    assert gates.run("preflight", frames).ok


def test_offline_partition_row_has_no_leader_value() -> None:
    cluster = with_partition(three_brokers_one_topic(), "orders", 0, leader=-1)
    row = gates.preflight_frames(cluster)["partitions"].iloc[0]
    assert row["offline"] and row["leader"] is pd.NA


def test_a_gate_runs_to_the_end_under_python_c() -> None:
    """``python -c`` has a ``__main__`` without a file: pyspark.sql.connect, imported by GX, takes
    that for a doctest run and exits 0 unless every Spark Connect dependency is installed. The gate
    must run and its caller go on."""
    import os
    import subprocess
    import sys

    script = ("from kafkaops.platform import gates\n"
              "from tests.unit.clusters import three_brokers_one_down\n"
              "result = gates.run('preflight', gates.preflight_frames(three_brokers_one_down()))\n"
              "print('gate ran:', result.ok)\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "plugins"), str(REPO)])}
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0 and "gate ran: False" in done.stdout, done.stderr[-2000:]


def test_stored_data_docs_read_offline(local_store) -> None:
    """The pages a gate stores load nothing from the network (GX's own pull jQuery, Bootstrap and Font
    Awesome from CDNs) and still show the results: the index lists them, each page states them."""
    local_store.start_operation("kafka_scale_out", "r1", kind="scale_out", triggered_by="t", params={})
    ctx = lifecycle.OperationContext("kafka_scale_out", "r1", {}, SimpleNamespace(kind="scale_out", dry_run=True))
    index_path = lifecycle.gate(ctx, "preflight", gates.preflight_frames(three_brokers_one_topic()))["docs_path"]
    assert index_path == "docs/kafka_scale_out/r1/preflight/index.html"
    pages = [p for p in local_store.artifact_paths("docs/kafka_scale_out/r1/preflight/") if p.endswith(".html")]
    assert len(pages) == 7  # the index, 3 validation results, 3 suites
    for path in pages:
        html = local_store.artifact(path).body.decode()
        tags = re.findall(r"<(?:script|link|img)\b[^>]*>", html, flags=re.I)
        assert not [t for t in tags if re.search(r"(?:src|href)\s*=\s*[\"']?(?:https?:)?//", t, flags=re.I)], path
        assert "<script" not in html.lower() and "stylesheet" not in html.lower(), path
        assert "<style>" in html, path  # ours, inline
    index = local_store.artifact(index_path).body.decode()
    assert "Outcome: <span class=\"ok\">passed</span>" in index
    results = re.findall(r'href="(validations/[^"]+)"', index)
    assert len(results) == 3
    page = local_store.artifact(f"docs/kafka_scale_out/r1/preflight/{results[0]}").body.decode()
    assert "Evaluated Expectations" in page and "values must belong to this set" in page
    assert 'class="fas fa-check-circle text-success"' in page  # the status icon, drawn by our stylesheet
