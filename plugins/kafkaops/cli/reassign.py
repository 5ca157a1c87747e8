"""``kafkaops execute | verify | cancel``: run a PLAN.json (Kafka's reassignment JSON) on a live cluster.

    kafkaops execute --bootstrap-server X --plan PLAN.json --throttle-mb 10 [--max-moves-per-broker N]
                     [--max-moves-total N] [--execute]
    kafkaops verify  --bootstrap-server X --plan PLAN.json [--before BEFORE.json]
    kafkaops cancel  --bootstrap-server X --plan PLAN.json

``execute`` is a dry run unless ``--execute``: it prints the batches it would submit. With
``--execute`` it runs :class:`kafkaops.reassign.engine.Executor` (the engine's steps in a blocking loop),
printing progress; Ctrl-C reverts the moves in flight and removes the throttles (finished moves stay;
run it again to resume). A throttle rate that cannot be removed (its broker is down) stays in the
throttle ledger, for the next run to delete. ``verify`` exits 0 only when
:func:`kafkaops.reassign.verify.verify_live` finds the plan done and nothing lost. ``cancel`` reverts
the plan's moves in flight and clears the replication throttles on its brokers and topics.
Bad input prints one line on stderr and changes nothing. Exit codes (:mod:`kafkaops.cli.exits`): 0 ok,
1 not verified or the run failed, 2 bad input, 130 interrupted.
"""
from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from kafkaops.platform import store
from kafkaops.platform.kafka import connection, metadata, reassignments
from kafkaops.reassign import engine
from kafkaops.reassign import verify
from kafkaops.errors import KafkaOpsError, UnknownTopic
from kafkaops.reassign.engine import ExecutionReport, InvalidReassignment
from kafkaops.model import Cluster, TopicPartition, ModelError
from kafkaops.reassign.planner.errors import PlanInputError
from kafkaops.cli.exits import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, fail, one_line  # noqa: F401
from kafkaops.cli.options import add_store, add_timeout, kafka_config, store_target
from kafkaops.cli.planfile import read_assignment

MB = 1_000_000


# -- arguments --------------------------------------------------------------------------------------

def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT",
                        help="host:port[,host:port...] of the live cluster")
    parser.add_argument("--plan", required=True, metavar="PLAN.json",
                        help='the reassignment, {"version":1,"partitions":[{"topic","partition","replicas"}]}')
    add_timeout(parser)


def add_execute_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``kafkaops execute``."""
    _add_common(parser)
    parser.add_argument("--throttle-mb", type=float, required=True, metavar="MB/S",
                        help="replication throttle in MB/s (10^6 bytes) on every broker of a moving partition")
    parser.add_argument("--max-moves-per-broker", type=int, default=5, metavar="N",
                        help="moves of a batch that add or remove a replica on one broker (default 5)")
    parser.add_argument("--max-moves-total", type=int, default=20, metavar="N", help="moves of a batch (default 20)")
    parser.add_argument("--batch-timeout", type=float, metavar="SECONDS",
                        help="give up waiting for a batch after this long (default: 3x its bytes at the throttle "
                             "+ 60 s)")
    parser.add_argument("--poll-interval", type=float, default=2.0, metavar="SECONDS",
                        help="seconds between progress lines (default 2)")
    parser.add_argument("--execute", action="store_true", help="really move; without it a dry run")
    add_store(parser)  # whose cluster lock --execute takes


def add_verify_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``kafkaops verify``."""
    _add_common(parser)
    parser.add_argument("--before", metavar="BEFORE.json",
                        help="a snapshot taken before the move (kafkaops snapshot --json), to check that no end "
                             "offset went back; without it only the plan and the replication are checked")


def add_cancel_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``kafkaops cancel``."""
    _add_common(parser)


# -- pure parts -----------------------------------------------------------------------------------------

def read_plan(path: str | Path) -> dict[TopicPartition, tuple[int, ...]]:
    """PLAN.json as desired replicas ``{(topic, partition): (broker, ...)}``; bad files raise PlanInputError."""
    return {(topic, partition): replicas for topic, partition, replicas in read_assignment(path)}


def throttle_bytes(throttle_mb: float) -> int:
    """``--throttle-mb`` in bytes per second; at least 1 byte/s or InvalidReassignment."""
    rate = int(throttle_mb * MB) if throttle_mb == throttle_mb else 0  # NaN -> 0
    if rate <= 0:
        raise InvalidReassignment(f"--throttle-mb {throttle_mb:g} is not a rate; give a positive number of MB/s, "
                                  "e.g. --throttle-mb 10")
    return rate


def read_before(path: str | Path) -> Cluster:
    """A snapshot saved with ``kafkaops snapshot --json``."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise PlanInputError(f"--before {path}: cannot read it ({err.strerror or err})") from err
    except json.JSONDecodeError as err:
        raise PlanInputError(f"--before {path.name}: not JSON ({err.msg} at line {err.lineno} column {err.colno}); "
                             "save one with kafkaops snapshot --json > BEFORE.json") from err
    if not isinstance(data, Mapping):
        raise PlanInputError(f"--before {path.name}: expected a snapshot object (kafkaops snapshot --json)")
    try:
        return Cluster.from_dict(data)
    except ModelError as err:
        raise PlanInputError(f"--before {path.name}: {err}") from err


def missing_partitions(cluster: Cluster, desired: Iterable[TopicPartition]) -> list[str]:
    """The partitions of ``desired`` that ``cluster`` lacks, as ``topic-N`` (with the topic's count)."""
    found = []
    for topic, partition in desired:
        try:
            cluster.partition(topic, partition)
        except KafkaOpsError:
            count = len([p for p in cluster.partitions if p.topic == topic])
            found.append(f"{topic}-{partition} ({f'{topic} has partitions 0..{count - 1}' if count else 'no such topic'})")
    return found


def batch_lines(report: ExecutionReport, *, executing: bool = False) -> list[str]:
    """What a run found and would submit (or, ``executing``, is submitting), one line per batch and
    per partition."""
    summary = report.summary()
    lines = [summary.replace("would submit", "submitting", 1) if executing else summary]
    for move in report.resumed:
        lines.append(f"  in flight: {move.name}: {list(move.before)} -> {list(move.after)}")
    for batch in report.batches:
        lines.append(f"batch {batch.index}/{len(report.batches)}: {len(batch.moves)} partition(s), "
                     f"{batch.bytes / MB:.1f} MB, moves per broker {batch.moves_per_broker()}")
        lines.extend(f"  {m.name}: {list(m.before)} -> {list(m.after)} "
                     f"({'size unknown' if m.size_bytes is None else f'{m.size_bytes / MB:.1f} MB'})"
                     for m in batch.moves)
    return lines


def plan_brokers_and_topics(desired: Mapping[TopicPartition, Sequence[int]], cluster: Cluster
                            ) -> tuple[set[int], set[str]]:
    """Brokers that hold or get a replica of a planned partition, and the planned topics."""
    brokers, topics = engine.throttle_scope(engine.moves_for(cluster, desired))
    return set(brokers), set(topics)


# -- commands -----------------------------------------------------------------------------------------

class _Runner:
    """Runs one command: its output streams, one-line errors, and the exit code of each failure."""

    def __init__(self, name: str, out: TextIO | None, err: TextIO | None) -> None:
        self.name, self.out, self.err = name, out or sys.stdout, err or sys.stderr

    def say(self, line: str) -> None:
        print(line, file=self.out, flush=True)

    def __call__(self, body: Callable[[], int]) -> int:
        try:
            return body()
        except (KafkaOpsError, KeyboardInterrupt) as error:  # Ctrl-C here: before anything was submitted
            return fail(self.name, error, self.err)


def _observed(conn: connection.KafkaConnection, desired: Mapping[TopicPartition, Sequence[int]]) -> Cluster:
    """A snapshot of the planned topics; partitions the cluster lacks raise InvalidReassignment."""
    topics = sorted({t for t, _ in desired})
    try:
        cluster = metadata.snapshot(conn, topics=topics, offsets=False, sizes=False, groups=False)
    except UnknownTopic as err:
        raise InvalidReassignment(f"nothing was changed: {err}") from err
    missing = missing_partitions(cluster, desired)
    if missing:
        raise InvalidReassignment(f"the plan names {len(missing)} partition(s) that {conn.bootstrap} does not have: "
                                  f"{', '.join(missing[:20])}; nothing was changed; plan again against this cluster")
    return cluster


@dataclass
class CliLock:
    """The cluster lock a CLI run holds; ``fence`` is what the executor checks before each change."""

    st: store.Store
    cluster_id: str
    run_id: str
    token: int
    outcome: str = "failed"

    def fence(self, action: str) -> int:
        return self.st.check_fence(self.cluster_id, store.CLI_DAG_ID, self.run_id, self.token, action=action)


@contextmanager
def cluster_lock(args: argparse.Namespace, cluster_id: str, say: Callable[[str], None]) -> Iterator[CliLock]:
    """Hold the cluster's lock in the kafkaops store as a CLI run (the DAGs take the same lock).
    The run and its outcome go to the store's operations; the lock is released at the end."""
    url, source = store_target(args)
    st = store.open_store(url, source=f"the kafkaops store ({source})")
    run_id = store.cli_run_id()
    st.start_operation(store.CLI_DAG_ID, run_id, kind="execute", triggered_by=run_id.split(":", 1)[0],
                       params={"plan": str(args.plan), "throttle_mb": args.throttle_mb,
                               "max_moves_per_broker": args.max_moves_per_broker,
                               "max_moves_total": args.max_moves_total})
    lease = st.acquire(cluster_id, store.CLI_DAG_ID, run_id)
    say(f"lock on cluster {cluster_id} taken as {lease.holder} (token {lease.token})")
    lock = CliLock(st, cluster_id, run_id, lease.token)
    try:
        yield lock
    finally:
        st.update_operation(store.CLI_DAG_ID, run_id, state="finished", outcome=lock.outcome, ended_at=time.time())
        st.release(cluster_id, store.CLI_DAG_ID, run_id)


def run_execute(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Dry run (default) or run the plan; print the batches and, when running, progress lines."""
    runner = _Runner("execute", out, err)

    def body() -> int:
        desired = read_plan(args.plan)
        rate = throttle_bytes(args.throttle_mb)
        if not desired:
            runner.say(f"{args.plan} lists no partition; nothing to do")
            return EXIT_OK
        with connection.connect(kafka_config(args), timeout_s=args.timeout) as conn:
            run = engine.Executor(conn, desired, throttle_bytes_per_s=rate,
                                    max_moves_per_broker=args.max_moves_per_broker,
                                    max_moves_total=args.max_moves_total, dry_run=not args.execute,
                                    batch_timeout_s=args.batch_timeout, poll_interval_s=args.poll_interval)
            report = run.plan()
            for line in batch_lines(report, executing=args.execute):
                runner.say(line)
            if not args.execute:
                runner.say("dry run: nothing changed; add --execute to move")
                return EXIT_OK
            before = report.before
            if before is None:  # plan() always snapshots the cluster first
                raise KafkaOpsError("the plan came without the cluster it was made on; nothing changed; run again")
            moves = engine.moves_for(before, desired)
            with cluster_lock(args, before.cluster_id or "unknown", runner.say) as lock:
                run.fence = lock.fence
                with connection.connect(kafka_config(args), timeout_s=args.timeout) as monitor:
                    code = supervise(run, lambda: str(engine.progress(monitor, moves)), runner.say,
                                     interval_s=args.poll_interval, conn=monitor)
                lock.outcome = "success" if code == EXIT_OK else "failed"
                return code

    return runner(body)


def supervise(run: engine.Executor, progress: Callable[[], str], say: Callable[[str], None], *,
              interval_s: float = 2.0, conn: connection.KafkaConnection | None = None) -> int:
    """Run ``run.execute()`` in a worker thread, printing ``progress()`` every ``interval_s``.
    Ctrl-C cancels the run (the executor reverts the moves in flight and removes its throttles);
    a second Ctrl-C stops waiting for that and removes the recorded throttles through ``conn``."""
    outcome: list[BaseException | ExecutionReport] = []
    finished = threading.Event()  # not Thread.join: a join that Ctrl-C interrupts can report a live thread dead

    def target() -> None:
        try:
            outcome.append(run.execute())
        except BaseException as error:  # noqa: BLE001 - handed to the main thread
            outcome.append(error)
        finally:
            finished.set()

    started = time.monotonic()
    threading.Thread(target=target, name="kafkaops-execute", daemon=True).start()
    try:
        while not finished.wait(interval_s):
            say(f"[{time.monotonic() - started:5.0f} s] {_progress_text(progress)}")
    except KeyboardInterrupt:
        say("interrupted: reverting the moves in flight and removing the throttles (Ctrl-C again to stop waiting)")
        run.cancel()
        try:
            done = finished.wait(300)
        except KeyboardInterrupt:
            done = False
        if not done:
            if conn is not None:
                engine.remove_throttles(conn, run.throttles)
            say("stopped waiting; the throttles this run recorded were removed; moves may still be in flight: "
                "check with kafkaops cancel")
            return EXIT_INTERRUPTED
        result = outcome[0]
        say(f"cancelled: {one_line(result) if isinstance(result, BaseException) else 'the run had finished'}")
        return EXIT_INTERRUPTED
    result = outcome[0]
    if isinstance(result, BaseException):
        raise result
    say(f"done: {result.progress} in {result.seconds:.0f} s; throttles removed; check with kafkaops verify")
    return EXIT_OK


def _progress_text(progress: Callable[[], str]) -> str:
    try:
        return progress()
    except KafkaOpsError as error:  # a progress line is not worth failing the run
        return f"(progress unavailable: {one_line(error)})"


def run_verify(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Verify the plan on the live cluster: 0 when done and healthy, 1 with the failures printed."""
    runner = _Runner("verify", out, err)

    def body() -> int:
        desired = read_plan(args.plan)
        before = read_before(args.before) if args.before else None
        with connection.connect(kafka_config(args), timeout_s=args.timeout) as conn:
            _observed(conn, desired)
            if before is None:  # nothing to compare offsets with: the current picture stands in
                before = metadata.snapshot(conn, include_internal=True, offsets=True, sizes=False, groups=False)
            result = verify.verify_live(conn, desired, before)
        if result.ok:
            runner.say(f"{len(desired)} partition(s): {result}")
            return EXIT_OK
        runner.say(f"{len(desired)} partition(s): reassignment not verified, {len(result.failures)} failure(s):")
        for failure in result.failures:
            runner.say(f"  {failure}")
        return EXIT_FAILED

    return runner(body)


def run_cancel(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Revert the plan's moves in flight and clear the throttles on its brokers and topics (those
    that no other reassignment in flight uses)."""
    runner = _Runner("cancel", out, err)

    def body() -> int:
        desired = read_plan(args.plan)
        with connection.connect(kafka_config(args), timeout_s=args.timeout) as conn:
            cluster = _observed(conn, desired)
            in_flight = reassignments.list_partition_reassignments(conn, list(desired))
            brokers, topics = plan_brokers_and_topics(desired, cluster)
            for moving in in_flight.values():
                brokers.update(moving.replicas)
            reverted = engine.cancel(conn, list(desired))
            others = reassignments.list_partition_reassignments(conn)
            busy = {b for r in others.values() for b in r.replicas}
            clear_brokers = sorted(brokers - busy)
            clear_topics = sorted(topics - {t for t, _ in others})
            engine.remove_throttles(conn, None, brokers=clear_brokers, topics=clear_topics)
        runner.say(f"reverted {len(reverted)} move(s) in flight"
                   + (f": {', '.join(f'{t}-{p}' for t, p in reverted)}" if reverted else "")
                   + "; moves already finished stay")
        runner.say(f"replication throttles cleared on brokers {clear_brokers} and topics {clear_topics}")
        kept = sorted(brokers & busy)
        if kept:
            runner.say(f"left the throttles on brokers {kept}: {len(others)} other reassignment(s) in flight "
                       "use them")
        return EXIT_OK

    return runner(body)
