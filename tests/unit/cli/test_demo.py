"""The demo: its view of the local cluster (the spec the scale-out DAG grows is the inventory's
cluster), and the story it tells from a run's audit events."""
from __future__ import annotations

import io
from typing import Any

import yaml

from kafkaops.cli import demo
from kafkaops.model import Broker
from kafkaops.platform import provision
from kafkaops.reassign.engine import Progress
from kafkaops.reassign.planner import plan_scale_out
from kafkaops.reassign.records import NewBroker, PlannedReassignment
from tests.unit.clusters import three_brokers_one_topic


def test_the_local_spec_is_the_local_inventory() -> None:
    spec = demo.local_spec()
    inventory = yaml.safe_load(provision.LOCAL_INVENTORY.read_text())["all"]
    assert spec.cluster_id == inventory["vars"]["kafka_broker_cluster_id"]
    assert spec.bootstrap == "127.0.0.1:19092,127.0.0.1:19094,127.0.0.1:19096"
    assert [(n.node_id, n.controller_port, n.rack, n.roles) for n in spec.nodes] == [
        (1, 19093, "rack-a", ("broker", "controller")), (2, 19095, "rack-b", ("broker", "controller")),
        (3, 19097, "rack-c", ("broker", "controller"))]
    assert spec.base_dir == provision.LOCAL_BASE_DIR
    grown, added = spec.with_new_brokers(1)
    assert [n.node_id for n in added] == [4] and added[0].roles == ("broker",) and grown.nodes[:3] == spec.nodes


def scale_out_events() -> list[tuple[str, dict[str, Any], float]]:
    """The audit events of a scale-out run onto broker 4, as the DAG's steps append them."""
    cluster = three_brokers_one_topic()
    plan = plan_scale_out(cluster, [Broker(id=4, rack="a")])
    plan_data = PlannedReassignment(plan, plan.summary(), 12.0, "", (NewBroker(4, "a"),)).to_dict()
    params = {"add_brokers": 1, "dry_run": False, "approval": "auto_approve", "throttle_mb_per_s": 2}
    stats = {"evaluated_expectations": 5, "successful_expectations": 5}
    keys = [[m.topic, m.partition] for m in plan.moves]
    return [
        ("started", {"operation": "scale_out", "run_id": "manual__1", "params": params}, 100.0),
        ("snapshot", {"stage": "before", "cluster": cluster.to_dict()}, 101.0),
        ("gate", {"gate": "preflight", "ok": True, "statistics": stats, "failures": []}, 102.0),
        ("note", {"text": "lock on cluster c1 taken by kafka_scale_out/manual__1 (fencing token 1)"}, 102.5),
        ("step", {"name": "wait_until_registered", "status": "success", "registered": [1, 2, 3, 4]}, 103.0),
        ("plan", plan_data, 104.0),
        ("gate", {"gate": "plan", "ok": True, "statistics": stats, "failures": []}, 105.0),
        ("approval", {"approved": True, "by": "param approval=auto_approve", "mode": "auto_approve"}, 106.0),
        ("throttle_set", {"brokers": [1, 2, 3, 4], "topics": ["orders"], "rate": 2_000_000}, 107.0),
        ("batch", {"index": 1, "partitions": 1, "bytes": 1000, "keys": keys[:1], "remaining": 1}, 108.0),
        ("batch", {"index": 2, "partitions": 1, "bytes": 2000, "keys": [["orders", 2]], "remaining": 0}, 111.0),
        ("throttle_removed", {"brokers": [1, 2, 3, 4], "topics": ["orders"], "left": {}}, 115.5),
        ("gate", {"gate": "post_move", "ok": False, "statistics": {**stats, "successful_expectations": 4},
                  "failures": ["post_move: orders-0 is under-replicated"]}, 116.0),
        ("outcome", {"outcome": "failed", "reason": "failed steps: post_move_gate"}, 117.0),
    ]


def told(brief: bool) -> list[str]:
    out = io.StringIO()
    story = demo.Story("kafka_scale_out", 0.0, {"bootstrap.servers": "127.0.0.1:1"}, brief=brief, out=out)
    for kind, data, ts in scale_out_events():
        story.show(kind, data, ts)
    return out.getvalue().splitlines()


def test_the_story_shows_the_approval_batches_and_gates_with_their_numbers() -> None:
    lines = told(brief=False)
    text = "\n".join(lines)
    assert "gate preflight: passed, 5/5 expectations; 3/3 brokers online, 0 under-replicated, 0 offline " \
           "partitions" in lines
    assert "the controller registered brokers [1, 2, 3, 4]" in lines
    # the approval is the approval step's own text, and who answered it
    approval = demo.approval_text(scale_out_events()[5][1], "scale_out", scale_out_events()[0][1]["params"])
    assert all(f"  {line}" in lines for line in approval.splitlines() if line.strip() not in ("", "```"))
    assert "-- approved by param approval=auto_approve --" in lines
    assert "throttle 2 MB/s on brokers [1, 2, 3, 4], topics orders" in lines
    # a batch the next event overtook is done: its last line says so, with its duration
    assert [line for line in lines if line.startswith("  batch")] == [
        "  batch 1/2: 100.0% (1000 B of 1000 B, 1/1 partitions), done in 3.00 s",
        "  batch 2/2: 100.0% (2.0 KiB of 2.0 KiB, 1/1 partitions), done in 4.50 s"]
    assert "gate post_move: FAILED, 4/5 expectations\n  post_move: orders-0 is under-replicated" in text
    assert lines[-1] == "outcome: failed (failed steps: post_move_gate)"


def test_the_brief_story_of_the_drain_is_a_few_lines() -> None:
    full, brief = told(brief=False), told(brief=True)
    assert len(brief) <= 14 < len(full)
    assert not any(line.startswith(("lock on cluster", "batch ", "  broker")) for line in brief)
    assert any(line.startswith("plan and approval: scale-out: ") and line.endswith(
        "(approved by param approval=auto_approve)") for line in brief)


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def progress(percent: float, *, done: bool = False) -> Progress:
    """``percent`` of 1,000 bytes copied at 40 B/s (so 80% has an ETA of 5 s)."""
    copied = int(percent * 10)
    return Progress(int(done), 1, 1 - int(done), copied, 1000, copied / 40)


def test_progress_is_one_line_rewritten_on_a_terminal_and_quarters_elsewhere() -> None:
    events = scale_out_events()[:10]  # up to the first batch
    for out in (Terminal(), io.StringIO()):
        story = demo.Story("kafka_scale_out", 0.0, {}, out=out)
        for kind, data, ts in events:
            story.show(kind, data, ts)
        for percent in (0.0, 10.0, 30.0, 35.0, 80.0):
            story.show_progress(progress(percent))
        story.show("note", {"text": "a note while the batch moves"}, 109.0)
        story.show_progress(progress(100.0, done=True))
        shown = out.getvalue().split("batch 1/2: orders-1\n")[1]
        if isinstance(out, Terminal):
            live, note, done, _ = shown.split("\n")
            # each rewrite returns to the line's start and covers the longer line before it
            assert live.count("\r") == 5 and live.endswith("80.0% (800 B of 1000 B, 0/1 partitions), ETA 5.00 s")
            assert note == "a note while the batch moves"  # the live line stays above, whole
            assert done.startswith("\r  batch 1/2: 100.0% (1000 B of 1000 B, 1/1 partitions), done in ")
        else:
            assert [line.split("%")[0] for line in shown.splitlines()] == [
                "  batch 1/2:   0.0", "  batch 1/2:  30.0", "  batch 1/2:  80.0", "a note while the batch moves",
                "  batch 1/2: 100.0"]
