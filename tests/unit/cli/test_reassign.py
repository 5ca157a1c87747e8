"""``kafkaops execute | verify | cancel`` and live ``plan`` without a cluster: argument validation,
bad files, and the pure parts (plan reading, live cluster shaping, batch lines, the supervisor)."""
from __future__ import annotations

import io
import json
import re
import threading
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from kafkaops.cli import reassign as reassign_cli
from kafkaops.cli.main import build_parser, main
from kafkaops.reassign.engine import Batch, ExecutionReport, InvalidReassignment, ReassignmentCancelled
from kafkaops.model import Broker, Cluster, Move, PartitionAssignment
from kafkaops.cli.plan import live_cluster, restrict
from kafkaops.reassign.planner.errors import PlanInputError

NOWHERE = "127.0.0.1:1"  # nothing listens: a test that reaches Kafka fails loudly


def invoke(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def plan_file(tmp_path: Path) -> str:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "orders", "partition": 0, "replicas": [2, 3]},
        {"topic": "orders", "partition": 1, "replicas": [3, 1], "log_dirs": ["any", "any"]}]}))
    return str(path)


def test_read_plan_gives_desired_replicas(plan_file: str) -> None:
    assert reassign_cli.read_plan(plan_file) == {("orders", 0): (2, 3), ("orders", 1): (3, 1)}


@pytest.mark.parametrize("text, message", [
    ("{not json", r"plan\.json: not JSON \(.* at line 1 column 2\)"),
    ('{"version": 1}', r'expected an object with a "partitions" list'),
    ('{"partitions": [{"topic": "t", "partition": 0, "replicas": [1, 1]}]}', r"names a broker twice"),
    ('{"partitions": [{"topic": "t", "partition": -1, "replicas": [1]}]}', r'"partition" is -1'),
])
def test_a_bad_plan_file_is_one_line_on_stderr_before_any_connection(tmp_path: Path, text: str, message: str) -> None:
    bad = tmp_path / "plan.json"
    bad.write_text(text)
    for argv in (["execute", "--throttle-mb", "10", "--execute"], ["verify"], ["cancel"]):
        code, out, err = invoke(argv[0], "--bootstrap-server", NOWHERE, "--plan", str(bad), *argv[1:])
        assert code == reassign_cli.EXIT_BAD_INPUT and out == ""
        assert err.count("\n") == 1 and err.startswith(f"kafkaops {argv[0]}: error: ") and re.search(message, err), err


def test_a_missing_plan_file_names_it(tmp_path: Path) -> None:
    code, _, err = invoke("verify", "--bootstrap-server", NOWHERE, "--plan", str(tmp_path / "nope.json"))
    assert code == reassign_cli.EXIT_BAD_INPUT and "nope.json: cannot read it" in err


@pytest.mark.parametrize("value", ["0", "-5", "nan", "0.0000001"])
def test_a_throttle_that_is_not_a_rate_is_refused(plan_file: str, value: str) -> None:
    code, out, err = invoke("execute", "--bootstrap-server", NOWHERE, "--plan", plan_file, "--throttle-mb", value,
                            "--execute")
    assert code == reassign_cli.EXIT_BAD_INPUT and out == ""
    assert f"--throttle-mb {float(value):g} is not a rate" in err and "e.g. --throttle-mb 10" in err


def test_throttle_mb_is_in_millions_of_bytes() -> None:
    assert reassign_cli.throttle_bytes(10) == 10_000_000
    assert reassign_cli.throttle_bytes(0.05) == 50_000
    with pytest.raises(InvalidReassignment):
        reassign_cli.throttle_bytes(-1)


def test_batch_caps_below_one_are_refused_before_kafka_is_asked(plan_file: str) -> None:
    code, _, err = invoke("execute", "--bootstrap-server", NOWHERE, "--plan", plan_file, "--throttle-mb", "10",
                          "--max-moves-per-broker", "0")
    assert code == reassign_cli.EXIT_BAD_INPUT and "max_moves_per_broker is 0; give 1 or more" in err


@pytest.mark.parametrize("command", ["execute", "verify", "cancel"])
def test_plan_and_bootstrap_server_are_required(command: str) -> None:
    with pytest.raises(SystemExit) as caught, redirect_stderr(io.StringIO()):
        build_parser().parse_args([command, "--plan", "p.json"])
    assert caught.value.code == 2


def test_an_empty_plan_is_nothing_to_do(tmp_path: Path) -> None:
    empty = tmp_path / "plan.json"
    empty.write_text('{"version": 1, "partitions": []}')
    code, out, _ = invoke("execute", "--bootstrap-server", NOWHERE, "--plan", str(empty), "--throttle-mb", "1",
                          "--execute")
    assert code == 0 and "lists no partition; nothing to do" in out


def test_an_unreachable_cluster_is_one_line(plan_file: str) -> None:
    code, out, err = invoke("cancel", "--bootstrap-server", NOWHERE, "--plan", plan_file, "--timeout", "1")
    assert code == reassign_cli.EXIT_FAILED and out == ""
    assert err.count("\n") == 1 and "kafkaops cancel: failed: " in err and NOWHERE in err


@pytest.mark.parametrize("text, message", [
    ("[]", "expected a snapshot object"),
    ("{oops", "not JSON"),
    ('{"brokers": []}', "cannot read a cluster from this dict"),
])
def test_a_bad_before_snapshot_is_refused(plan_file: str, tmp_path: Path, text: str, message: str) -> None:
    before = tmp_path / "before.json"
    before.write_text(text)
    code, _, err = invoke("verify", "--bootstrap-server", NOWHERE, "--plan", plan_file, "--before", str(before))
    assert code == reassign_cli.EXIT_BAD_INPUT and message in err and "--before before.json" in err


def test_read_before_round_trips_a_snapshot(tmp_path: Path) -> None:
    cluster = Cluster((Broker(1), Broker(2)), (PartitionAssignment("t", 0, (1, 2), leader=1, isr=(1, 2),
                                                                   end_offset=7),))
    path = tmp_path / "before.json"
    path.write_text(json.dumps(cluster.to_dict()))
    assert reassign_cli.read_before(path) == cluster


# -- pure parts ---------------------------------------------------------------------------------------

def snap() -> Cluster:
    return Cluster(
        brokers=(Broker(1, rack="a"), Broker(2, rack="b"), Broker(3, rack="c"), Broker(5, rack="a")),
        partitions=tuple(PartitionAssignment(t, p, reps, leader=reps[0], isr=reps, size_bytes=100 * (p + 1))
                         for t, p, reps in [("orders", 0, (1, 2)), ("orders", 1, (2, 3)), ("logs", 0, (3, 1))]),
        cluster_id="abc")


def test_missing_partitions_names_them_with_the_topic_range() -> None:
    assert reassign_cli.missing_partitions(snap(), [("orders", 0), ("orders", 7), ("nope", 0)]) == [
        "orders-7 (orders has partitions 0..1)", "nope-0 (no such topic)"]


def test_plan_brokers_and_topics_cover_old_and_new_replicas() -> None:
    assert reassign_cli.plan_brokers_and_topics({("orders", 0): (3, 5)}, snap()) == ({1, 2, 3, 5}, {"orders"})


def test_batch_lines_show_each_batch_and_move() -> None:
    move = Move("orders", 0, (1, 2), (1, 3), size_bytes=2_000_000)
    report = ExecutionReport(dry_run=True, already_done=(("orders", 1),), resumed=(), batches=(Batch(1, (move,), of=1),))
    lines = reassign_cli.batch_lines(report)
    assert lines[0].startswith("1 partition(s) already as planned, 0 in flight") and "would submit 1" in lines[0]
    assert lines[1] == "batch 1/1: 1 partition(s), 2.0 MB, moves per broker {2: 1, 3: 1}"
    assert lines[2] == "  orders-0: [1, 2] -> [1, 3] (2.0 MB)"
    assert "submitting 1 in 1 batch(es)" in reassign_cli.batch_lines(report, executing=True)[0]


def test_live_cluster_adds_unregistered_brokers_as_new_and_overrides_racks_and_sizes() -> None:
    cluster = live_cluster(snap(), [1, 2, 3, 5, 6], racks={6: "b", 5: "c"}, sizes={("orders", 0): 999})
    assert cluster.broker_ids == (1, 2, 3, 5, 6)
    assert cluster.broker(6).rack == "b" and cluster.broker(5).rack == "c" and cluster.broker(1).rack == "a"
    assert cluster.partition("orders", 0).size_bytes == 999 and cluster.partition("orders", 1).size_bytes == 200
    assert cluster.partition("orders", 0).leader == 1 and cluster.cluster_id == "abc"


def test_live_cluster_defaults_to_the_registered_brokers_and_can_leave_out_empty_ones() -> None:
    assert live_cluster(snap()).broker_ids == (1, 2, 3, 5)
    assert live_cluster(snap(), [1, 2, 3]).broker_ids == (1, 2, 3)  # broker 5 holds nothing: not planned on


def test_live_cluster_refuses_to_leave_out_a_broker_holding_replicas() -> None:
    with pytest.raises(PlanInputError, match=r"broker\(s\) \[3\] hold replicas but --brokers \[1, 2, 5\]"):
        live_cluster(snap(), [1, 2, 5])
    with pytest.raises(PlanInputError, match=r"--racks names broker\(s\) \[9\]"):
        live_cluster(snap(), None, racks={9: "a"})


def test_restrict_keeps_only_the_topics_and_names_unknown_ones() -> None:
    assert restrict(snap(), ["logs"], "x").topics == ("logs",)
    assert restrict(snap(), None, "x") == snap()
    with pytest.raises(PlanInputError, match="--topic nope not found; it has 2 topics: logs, orders"):
        restrict(snap(), ["nope"], "x")


def test_plan_takes_current_or_bootstrap_server_not_both(tmp_path: Path) -> None:
    for argv in ([], ["--current", "c.json", "--bootstrap-server", NOWHERE]):
        with pytest.raises(SystemExit), redirect_stderr(io.StringIO()):
            build_parser().parse_args(["plan", "--output", "p.json", *argv])


def test_plan_offline_still_needs_brokers_and_can_restrict_topics(tmp_path: Path) -> None:
    current = tmp_path / "current.json"
    current.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": [1, 2]} for t in ("a", "b") for p in range(4)]}))
    output = tmp_path / "plan.json"
    code, _, err = invoke("plan", "--current", str(current), "--output", str(output))
    assert code == 2 and "--current needs --brokers" in err and not output.exists()
    code, out, _ = invoke("plan", "--current", str(current), "--brokers", "1,2,3", "--topic", "a", "--output",
                          str(output))
    assert code == 0 and "a-" in out and "b-" not in out
    assert {p["topic"] for p in json.loads(output.read_text())["partitions"]} == {"a"}


# -- the supervisor -------------------------------------------------------------------------------------

class FakeRun:
    """An Executor stand-in: ``execute`` blocks until cancelled (or returns at once with ``finish``)."""

    def __init__(self, finish: bool = False, fail: Exception | None = None) -> None:
        self.finish, self.fail = finish, fail
        self.cancelled = threading.Event()
        self.throttles = None

    def execute(self) -> ExecutionReport:
        if self.fail is not None:
            raise self.fail
        if not self.finish:
            self.cancelled.wait(10)
            raise ReassignmentCancelled("cancelled during batch 1/1: reverted 1 move(s) in flight (orders-0)")
        return ExecutionReport(dry_run=False, already_done=(), resumed=(), batches=(), seconds=1.0)

    def cancel(self) -> None:
        self.cancelled.set()


def test_supervise_reports_done() -> None:
    said: list[str] = []
    assert reassign_cli.supervise(FakeRun(finish=True), lambda: "p", said.append, interval_s=0.01) == 0
    assert said[-1].startswith("done: ") and "check with kafkaops verify" in said[-1]


def test_supervise_prints_progress_and_turns_ctrl_c_into_a_cancel() -> None:
    said: list[str] = []
    calls = iter(["1/1 partitions moving", KeyboardInterrupt])

    def progress() -> str:
        step = next(calls)
        if step is KeyboardInterrupt:
            raise KeyboardInterrupt
        return step

    run = FakeRun()
    assert reassign_cli.supervise(run, progress, said.append, interval_s=0.01) == reassign_cli.EXIT_INTERRUPTED
    assert run.cancelled.is_set()
    assert said[0].endswith("] 1/1 partitions moving")
    assert said[1].startswith("interrupted: reverting the moves in flight and removing the throttles")
    assert said[2] == "cancelled: cancelled during batch 1/1: reverted 1 move(s) in flight (orders-0)"


def test_supervise_raises_what_the_run_raised() -> None:
    with pytest.raises(InvalidReassignment, match="nope"):
        reassign_cli.supervise(FakeRun(fail=InvalidReassignment("nope")), lambda: "", lambda _: None,
                               interval_s=0.01)
