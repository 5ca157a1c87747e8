"""A running Kafka Streams application's partition increase: how long it is down, the live cut-over against
kafkaops' own stopped cut, measured in the same run on the same input.

Starts its own one-broker cluster, writes ``--records`` keyed records of ``--keys`` keys to a 3-partition input
(and a table of one row per key), and runs two applications of the tests' program (jvm/streams-app: a per-key
count, a windowed count, a stream-table join; exactly_once_v2) over them, each with its own application.id and
outputs, until both caught up:

- **stopped cut**, the reference: the first application is stopped, the cut of a ``streams_application_id``
  partition increase with ``quiesce=none`` (``kafkaops.rekey.streams_steps.cut``: every input and changelog copied
  by Spark and gated, offsets committed) runs, and the application starts again as ``--instances`` instances of
  its new application.id on 12 partitions. Down: from its stop to all of them RUNNING.
- **live cut** (``quiesce=manual``): a producer writes ``--rate`` records/s to the input while the second
  application keeps running through the copies and the tails' catch-up (``copy_running``, ``follow``); at the
  quiesce (``live_cut``) the producer is stopped, the application reads to the end and is stopped (what the
  record asks a person to do), and at the switch it starts as ``--instances`` instances of its new
  application.id and the producer moves to the new input. Down: from its stop to all of them RUNNING.

The live application's outputs are then compared with the reference computed from every record written: a
count short of it is state lost.
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from benchmarks.bench_backfill import brokers_up
from benchmarks.bench_streams_migration import lost
from benchmarks.results import publish
from kafkaops.airflow.spark_submit import SparkSubmitLauncher
from kafkaops.platform import lifecycle, store
from kafkaops.platform.kafka import connection, topics
from kafkaops.rekey import steps, streams_steps
from kafkaops.rekey.records import Action, ActionNote
from kafkaops.rekey.streams import StreamsCut
from kafkaops.testing import streams
from kafkaops.testing.rehearsal import RecordFollower
from kafkaops.testing.streams import Feeder, InputRecord, StreamsApp, StreamsTopics

WINDOW_MS = 60_000
OLD, NEW = 3, 12
DAG = "kafka_partition_increase"


class Person(RecordFollower):
    """Does what the live run's record asks: at the quiesce, stops the producer, lets the application read to
    the end and stops it; at the switch, starts the new application and moves the producer to its input."""

    def __init__(self, st: store.Store, run_id: str, feeder: Feeder, old: StreamsApp, new: StreamsApp) -> None:
        super().__init__(DAG, store=st, poll_s=0.05, run_id=run_id)
        self.feeder, self.old, self.new = feeder, old, new
        self.stopped_at = self.running_at = 0.0

    def act(self, note: ActionNote) -> None:
        if note.action is Action.STOP_PRODUCERS and not self.did("stopped"):
            self.feeder.pause()
            streams.wait_caught_up(self.old, 600, interval_s=0.1)
            self.old.stop()
            self.stopped_at = time.monotonic()
            self.done.append(("stopped", self.stopped_at))
        elif note.action is Action.SWITCH and not self.did("switched"):
            self.new.start()
            self.new.wait_running(600)
            self.running_at = time.monotonic()
            self.feeder.resume(self.new.topics.input)
            self.done.append(("switched", self.running_at))


@contextmanager
def operation(config: dict[str, str], given: dict[str, object], name: str) -> Iterator[lifecycle.OperationContext]:
    """A run's context as the DAG makes it, begun in the bench's store (where :class:`Person` reads it), its
    cluster lock released at the end, as the DAG's finish does."""
    params = {"topic": "in", "new_partition_count": NEW, "mode": "migrate", "dry_run": False, **given}
    ctx = steps.context(config, params, dag_id=DAG, run_id=f"bench-{name}-{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%S}",
                        triggered_by="bench")
    started = lifecycle.begin(ctx, params)
    try:
        yield ctx
    finally:
        lifecycle.finish(ctx, started.get("cluster_id"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--keys", type=int, default=2_000)
    parser.add_argument("--rate", type=int, default=1_000, help="records/s written to the input during the live run")
    parser.add_argument("--instances", type=int, default=4)
    parser.add_argument("--no-results", action="store_true")
    args = parser.parse_args(argv)
    keys = [f"k{i:05d}" for i in range(args.keys)]
    step_ms = max(1, 3 * 3_600_000 // max(args.records, 1))  # the records span the last 3 hours, and on
    base = (time.time_ns() // 1_000_000 - 3 * 3_600_000 - 60_000) // WINDOW_MS * WINDOW_MS

    def stream(start: int, count: int) -> list[InputRecord]:
        """Records from sequence ``start``: the first ``--records`` over the last 3 hours, the live ones 1 ms apart
        after them (the broker refuses timestamps more than an hour ahead: message.timestamp.after.max.ms)."""
        return [InputRecord(keys[i % len(keys)], f"v{i}", base + min(i, args.records) * step_ms
                            + max(0, i - args.records)) for i in range(start, start + count)]

    written = stream(0, args.records)
    table = [InputRecord(k, f"t-{k}", base - 1_000) for k in keys]
    ref_names = StreamsTopics("in", "table", "counts-ref", "windowed-ref", "joined-ref")
    live_names = StreamsTopics("in", "table", "counts-live", "windowed-live", "joined-live")
    with brokers_up("kafkaops-bench-streams-live-", 1) as spec, \
            tempfile.TemporaryDirectory(prefix="kafkaops-bench-") as tmp:
        bootstrap, work = spec.bootstrap, Path(tmp)
        config = {"bootstrap.servers": bootstrap}
        streams.create_topics(bootstrap, ref_names, OLD)
        with connection.connect(bootstrap, timeout_s=60) as conn:
            for name in live_names.outputs:
                topics.create_topic(conn, name, OLD, 1)
        streams.produce(bootstrap, ref_names.table, table)
        streams.produce(bootstrap, ref_names.input, written)
        st = store.open_store(f"sqlite:///{work / 'kafkaops.db'}")
        store.use(st)
        try:
            with StreamsApp(bootstrap, "bench-ref", ref_names, window_ms=WINDOW_MS, workdir=work / "ref") as ref, \
                    StreamsApp(bootstrap, "bench-live", live_names, window_ms=WINDOW_MS, workdir=work / "live") as live:
                ref.wait_running(300)
                live.wait_running(300)
                streams.wait_caught_up(ref, 1_800)
                streams.wait_caught_up(live, 1_800)
                print(f"both applications caught up on {args.records:,} records", flush=True)

                # -- the reference: kafkaops' stopped cut of the first application
                ref.stop()
                began = time.monotonic()
                with operation(config, {"streams_application_id": "bench-ref"}, "stopped") as ctx:
                    made = streams_steps.plan(ctx, "bench-ref", new_application_id="bench-ref-p12",
                                              new_partitions=NEW)
                    stopped = streams_steps.cut(ctx, made, launcher=SparkSubmitLauncher())
                ref_cut_s = time.monotonic() - began
                moved = {m.source: m.target for m in made.inputs}
                ref_new = StreamsTopics(moved["in"], moved["table"], ref_names.counts, ref_names.windowed,
                                        ref_names.joined)
                with StreamsApp(bootstrap, "bench-ref-p12", ref_new, instances=args.instances, window_ms=WINDOW_MS,
                                workdir=work / "ref-new") as again:
                    again.wait_running(600)
                    ref_down = time.monotonic() - began
                print(f"stopped cut: down {ref_down:.1f} s", flush=True)

                # -- the live cut of the second application, its producer writing all along
                policy_params = {"streams_application_id": "bench-live", "quiesce": "manual",
                                 "catch_up_lag_records": 1_000, "catch_up_budget_s": 1_800, "quiet_s": 1,
                                 "quiesce_timeout_s": 600, "switch_timeout_s": 600}
                with operation(config, policy_params, "live") as ctx, ExitStack() as stack:
                    made = streams_steps.plan(ctx, "bench-live", new_application_id="bench-live-p12",
                                              new_partitions=NEW)
                    moved = {m.source: m.target for m in made.inputs}
                    live_new_names = StreamsTopics(moved["in"], moved["table"], live_names.counts,
                                                   live_names.windowed, live_names.joined)
                    new = StreamsApp(bootstrap, "bench-live-p12", live_new_names, instances=args.instances,
                                     window_ms=WINDOW_MS, workdir=work / "live-new")
                    stack.callback(new.close)
                    feeder = stack.enter_context(Feeder(bootstrap, "in", stream, start=args.records,
                                                        per_batch=max(1, args.rate // 10), interval_s=0.1))
                    person = stack.enter_context(Person(st, ctx.run_id, feeder, live, new))
                    began = time.monotonic()
                    policy = ctx.params.policy  # type: ignore[attr-defined]
                    first = streams_steps.copy_running(ctx, made, launcher=SparkSubmitLauncher())
                    caught = streams_steps.follow(ctx, first, policy)
                    cut: StreamsCut = streams_steps.live_cut(ctx, made, first, caught, policy)
                    streams_steps.confirm(ctx, cut, policy)
                    total_s = time.monotonic() - began
                    if person.error is not None:
                        raise person.error
                    feeder.pause()
                    rate = len(feeder.sent) / max(total_s, 1e-9)
                    streams.wait_caught_up(new, 1_800)
                    new.stop()
                    live_down = person.running_at - person.stopped_at
                    sent = list(feeder.sent)
                want = streams.reference_outputs(written + sent, table, WINDOW_MS)
                got = lost(streams.read_outputs(bootstrap, live_names), want)
        finally:
            store.use(None)
    assert cut.live is not None
    rows = [
        f"The tests' Kafka Streams application (jvm/streams-app: count, windowed count, stream-table join; "
        f"exactly_once_v2) on {OLD} partitions over {args.records:,} records of {args.keys:,} keys, moved to {NEW} "
        f"partitions and restarted as {args.instances} instances. 1 broker, Spark local[*], load average "
        f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores. Down: from the application's stop to every instance "
        "of the new one RUNNING.",
        "",
        "| way | producer during the migration | migration (s) | application down (s) | of which kafkaops (s) | "
        "records copied after the stop | keys with a count short | records missing from the counts | "
        "windowed counts written wrong |",
        "|---|---|---|---|---|---|---|---|---|",
        f"| kafkaops live cut (`quiesce=manual`: {len(cut.copies)} copies, tails, last parts, gates, offsets) "
        f"| {rate:,.0f} records/s ({len(sent):,} records) | {total_s:.1f} | {live_down:.1f} | {cut.live.stopped_s:.1f} "
        f"| {cut.live.last_part_records:,} | {got[0]:,} | {got[1]:,} | {got[2]:,} |",
        f"| reference: kafkaops stopped cut (`quiesce=none`: {len(stopped.copies)} Spark copies gated, offsets) "
        f"| none (stopped) | {ref_cut_s:.1f} | {ref_down:.1f} | {ref_cut_s:.1f} | all: every copy after the stop "
        "| | | |",
    ]
    publish("A running Kafka Streams application's live partition increase", rows, save=not args.no_results)
    return 0 if got == (0, 0, 0) else 1


if __name__ == "__main__":
    sys.exit(main())
