"""``kafkaops plan`` end to end through run(parser.parse_args([...]))."""
from __future__ import annotations

import argparse
import io
import json

import pytest

from kafkaops.cli.plan import EXIT_BAD_INPUT, EXIT_INFEASIBLE, EXIT_OK, add_arguments, run


def invoke(*argv: str) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    out, err = io.StringIO(), io.StringIO()
    code = run(parser.parse_args(list(argv)), out, err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def current(tmp_path):
    path = tmp_path / "current.json"
    path.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "orders", "partition": p, "replicas": [1 + p % 3, 1 + (p + 1) % 3, 1 + (p + 2) % 3]}
        for p in range(6)]}))
    return str(path)


def test_scale_out(current, tmp_path):
    output = tmp_path / "plan.json"
    code, out, err = invoke("--current", current, "--brokers", "1,2,3,4,5", "--output", str(output))
    assert code == EXIT_OK and err == ""
    plan = json.loads(output.read_text())
    assert plan["version"] == 1 and plan["partitions"]
    assert sum(len(set(p["replicas"]) - {1, 2, 3}) for p in plan["partitions"]) == 6  # 18 over 5: new take 3+3
    assert "orders-" in out and " -> " in out and "scale-out:" in out and "4 (new)" in out


def test_drain_with_racks_and_sizes(current, tmp_path):
    sizes = tmp_path / "sizes.json"
    sizes.write_text(json.dumps({"partitions": [{"topic": "orders", "partition": p, "size": 10 * p} for p in range(6)]}))
    output = tmp_path / "plan.json"
    code, out, _ = invoke("--current", current, "--brokers", "1,2,3,4", "--racks", "1:a,2:b,3:c,4:c",
                          "--sizes", str(sizes), "--drain", "3", "--output", str(output))
    assert code == EXIT_OK
    assert all(3 not in p["replicas"] and 4 in p["replicas"] for p in json.loads(output.read_text())["partitions"])
    assert "drain:" in out


def test_rebalance_of_a_balanced_cluster_writes_no_partitions(current, tmp_path):
    output = tmp_path / "plan.json"
    assert invoke("--current", current, "--brokers", "1,2,3", "--output", str(output))[0] == EXIT_OK
    assert json.loads(output.read_text()) == {"version": 1, "partitions": []}


def test_leaders_are_evened_by_reordering_unless_no_leaders(tmp_path):
    current = tmp_path / "current.json"  # broker 1 leads all six partitions
    current.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "orders", "partition": p, "replicas": [1, 2, 3]} for p in range(6)]}))
    output = tmp_path / "plan.json"
    code, out, _ = invoke("--current", str(current), "--brokers", "1,2,3", "--output", str(output))
    assert code == EXIT_OK and "4 leader changes (4 of them leader-only, no data)" in out
    assert sorted(p["replicas"][0] for p in json.loads(output.read_text())["partitions"]) == [2, 2, 3, 3]
    code, out, _ = invoke("--current", str(current), "--brokers", "1,2,3", "--no-leaders", "--output", str(output))
    assert code == EXIT_OK and json.loads(output.read_text()) == {"version": 1, "partitions": []}


@pytest.mark.parametrize("extra, code, message", [
    (["--brokers", "1,2"], EXIT_BAD_INPUT, r"has replicas on broker\(s\) \[3\], which --brokers does not list"),
    (["--brokers", "1,2,x"], EXIT_BAD_INPUT, "expected broker ids"),
    (["--brokers", "1,2,3", "--drain", "7"], EXIT_BAD_INPUT, r"cannot drain broker\(s\) \[7\]"),
    (["--brokers", "1,2,3", "--exclude", "9"], EXIT_BAD_INPUT, r"cannot exclude broker\(s\) \[9\]"),
    (["--brokers", "1,2,3,4", "--racks", "1:a,2:b"], EXIT_BAD_INPUT, "give every broker a rack"),
    (["--brokers", "1,2,3,4", "--racks", "1:a,2:b,3:c,4:a", "--drain", "3"], EXIT_INFEASIBLE,
     "2 racks alive, replication factor 3 needs 3"),
    (["--brokers", "1,2,3", "--drain", "3"], EXIT_INFEASIBLE, "replication factor 3 needs 3 brokers"),
    (["--brokers", "1,2,3", "--sizes", "/nonexistent/sizes.json"], EXIT_BAD_INPUT, "cannot read it"),
])
def test_bad_input_exits_non_zero_with_one_line(current, tmp_path, extra, code, message):
    got, out, err = invoke("--current", current, "--output", str(tmp_path / "plan.json"), *extra)
    assert got == code and out == ""
    assert err.count("\n") == 1 and err.startswith("kafkaops plan: ")
    assert pytest.importorskip("re").search(message, err), err
    assert not (tmp_path / "plan.json").exists()


def test_malformed_current(tmp_path):
    bad = tmp_path / "current.json"
    bad.write_text('{"version":1,"partitions":[{"topic":"t","partition":0}]}')
    code, _, err = invoke("--current", str(bad), "--brokers", "1", "--output", str(tmp_path / "p.json"))
    assert code == EXIT_BAD_INPUT
    assert 'current.json: partitions[0] has no "replicas"' in err


def test_live_moves_are_sized_as_the_plan_step_sizes_them(monkeypatch, tmp_path):
    """Live, the moved topics' storage configs size the moves (kafkaops.reassign.steps.size_moves, the plan
    step's sizing): a tiered topic's move is counted apart. Measured on a real broker in
    tests/integration/reassign/test_tiered.py."""
    from tests.unit.reassign.fake_kafka import FakeKafka

    FakeKafka(replicas={("logs", 0): (1, 2), ("orders", 0): (1, 2)}, online={1, 2, 3},
              sizes={("logs", 0): 4096, ("orders", 0): 2048},
              configs={("topic", "logs"): {"remote.storage.enable": "true"}}).install(monkeypatch)
    output = tmp_path / "plan.json"
    code, out, err = invoke("--bootstrap-server", "fake:9092", "--drain", "1", "--output", str(output))
    assert code == EXIT_OK and err == "", err
    assert "1 of 2 moving partitions tiered (remote storage on)" in out
    assert {p["topic"] for p in json.loads(output.read_text())["partitions"]} == {"logs", "orders"}


def test_a_live_plan_onto_a_broker_without_disk_room_is_refused_and_writes_nothing(monkeypatch, tmp_path):
    """Live, the plan is held to the receiving brokers' free log-dir bytes as the DAGs' plan step holds it
    (kafkaops.reassign.planner.room): broker 3 has 1 MB free of 10 MB and would receive 2 MB."""
    from tests.unit.reassign.fake_kafka import FakeKafka

    MB = 1_000_000
    FakeKafka(replicas={("orders", 0): (1, 2), ("orders", 1): (2, 1)}, online={1, 2, 3},
              sizes={("orders", 0): 2 * MB, ("orders", 1): 2 * MB},
              disks={1: (10 * MB, 8 * MB), 2: (10 * MB, 8 * MB), 3: (10 * MB, 1 * MB)}).install(monkeypatch)
    output = tmp_path / "plan.json"
    code, out, err = invoke("--bootstrap-server", "fake:9092", "--drain", "1", "--output", str(output))
    assert code != EXIT_OK and not output.exists(), (code, out)
    assert "not enough room on the log dirs of broker(s) [3] for the drain plan; nothing was changed" in err, err
    assert "broker 3: 976.6 KiB free of 9.5 MiB, would receive 3.8 MiB" in err, err
