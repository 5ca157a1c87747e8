"""A stateful Kafka Streams application's partition increase, kafkaops against the reset tool: the time from the
stopped application to its outputs being right again, and the state each way keeps.

Starts its own one-broker cluster and runs the tests' application (jvm/streams-app: a per-key count, a windowed
count, a stream-table join; kafkaops.testing.streams) on 3 partitions over ``--records`` keyed records of
``--keys`` keys, stops it, and lets retention drop the oldest ``--dropped`` share of its input (DeleteRecords).
Then, from the same stopped application:

- **kafkaops** (``kafkaops.rekey.streams_steps``: the cut of a ``streams_application_id`` partition increase):
  inputs and changelogs copied to 12 partitions and gated, offsets committed for a new application.id; the new
  application starts as ``--instances`` instances on the new topics;
- **reset tool**, the reference: ``kafka-streams-application-reset`` (org.apache.kafka.tools.StreamsResetter) deletes
  the application's internal topics and offsets, and the application starts as many instances on the same
  12-partition copies of its inputs (the copies kafkaops made: the reference is not charged for a copy of its
  own) and reprocesses them from the earliest record retention left.

Each then receives one more record per key, and its per-key counts and windowed counts are compared with the
counts of every record ever written: a count short of it is state lost.
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.bench_backfill import brokers_up
from benchmarks.results import publish
from kafkaops.airflow.spark_submit import SparkSubmitLauncher
from kafkaops.platform import lifecycle, store
from kafkaops.platform.paths import jar_dir
from kafkaops.platform.kafka import connection, records, topics
from kafkaops.rekey import steps, streams_steps
from kafkaops.testing import streams
from kafkaops.testing.streams import InputRecord, Outputs, StreamsApp, StreamsTopics

WINDOW_MS = 60_000
OLD, NEW = 3, 12


def lost(got: Outputs, want: Outputs) -> tuple[int, int, int]:
    """State short of the reference: keys whose count is short, records missing from the counts, and windowed
    counts the restarted application wrote that differ from the reference (it writes the windows it updates: the
    probe's, where the last records of the stream also fall, and, reprocessing, every window it reads again)."""
    short = {k: want.counts[k] - got.counts.get(k, 0) for k in want.counts if got.counts.get(k, 0) != want.counts[k]}
    windows = sum(1 for k, n in got.windowed.items() if want.windowed.get(k) != n)
    return len(short), sum(short.values()), windows


def restarted(bootstrap: str, application_id: str, names: StreamsTopics, instances: int, probe: list[InputRecord],
              workdir: Path, want: Outputs) -> tuple[float, tuple[int, int, int]]:
    """``instances`` instances of the application on ``names`` started, ``probe`` written once they run: the
    seconds until they caught up, and the state lost (:func:`lost`)."""
    began = time.monotonic()
    with StreamsApp(bootstrap, application_id, names, instances=instances, window_ms=WINDOW_MS,
                    workdir=workdir) as app:
        app.wait_running(300)
        streams.produce(bootstrap, names.input, probe)
        streams.wait_caught_up(app, 1_800)
        took = time.monotonic() - began
        app.stop()
    return took, lost(streams.read_outputs(bootstrap, names), want)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--keys", type=int, default=2_000)
    parser.add_argument("--dropped", type=float, default=0.5, help="share of the oldest input retention drops")
    parser.add_argument("--instances", type=int, default=4)
    parser.add_argument("--no-results", action="store_true")
    args = parser.parse_args(argv)
    keys = [f"k{i:05d}" for i in range(args.keys)]
    step_ms = max(1, 3 * 3_600_000 // max(args.records, 1))  # the records span the last 3 hours
    base = (time.time_ns() // 1_000_000 - 3 * 3_600_000 - 60_000) // WINDOW_MS * WINDOW_MS
    written = [InputRecord(keys[i % len(keys)], f"v{i}", base + i * step_ms) for i in range(args.records)]
    table = [InputRecord(k, f"t-{k}", base - 1_000) for k in keys]
    probe_ms = base + args.records * step_ms + 1
    probe = [InputRecord(k, f"probe-{k}", probe_ms + i) for i, k in enumerate(keys)]
    want = streams.reference_outputs(written + probe, table, WINDOW_MS)
    old_app, new_app = "bench-streams", "bench-streams-p12"
    old = StreamsTopics("in", "table", "counts", "windowed", "joined")
    with brokers_up("kafkaops-bench-streams-", 1) as spec, tempfile.TemporaryDirectory(prefix="kafkaops-bench-") as tmp:
        bootstrap, work = spec.bootstrap, Path(tmp)
        config = {"bootstrap.servers": bootstrap}
        streams.create_topics(bootstrap, old, OLD)
        with connection.connect(bootstrap, timeout_s=60) as conn:
            for way in ("a", "b"):
                for name in old.outputs:
                    topics.create_topic(conn, f"{name}-{way}", NEW, 1)
        streams.produce(bootstrap, old.table, table)
        streams.produce(bootstrap, old.input, written)
        began = time.monotonic()
        with StreamsApp(bootstrap, old_app, old, window_ms=WINDOW_MS, workdir=work / "old") as app:
            app.wait_running(120)
            streams.wait_caught_up(app, 1_800)
            first_s = time.monotonic() - began
            app.stop()
        print(f"the application on {OLD} partitions: {args.records:,} records in {first_s:.1f} s", flush=True)
        ends = records.end_offsets(config, old.input)
        drop = {(old.input, p): int(e * args.dropped) for p, (_, e) in ends.items()}
        with connection.connect(bootstrap, timeout_s=60) as conn:
            topics.delete_records_before(conn, drop)
        dropped = sum(drop.values())

        # -- kafkaops: the cut, then the new application on the new topics
        st = store.open_store(f"sqlite:///{work / 'kafkaops.db'}")
        store.use(st)
        params = {"topic": old.input, "new_partition_count": NEW, "mode": "migrate", "dry_run": False,
                  "streams_application_id": old_app, "streams_new_application_id": new_app}
        ctx = steps.context(config, params, dag_id="kafka_partition_increase",
                            run_id=f"bench-{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%S}", triggered_by="bench")
        lifecycle.begin(ctx, params)
        began = time.monotonic()
        made = streams_steps.plan(ctx, old_app, new_application_id=new_app, new_partitions=NEW)
        cut = streams_steps.cut(ctx, made, launcher=SparkSubmitLauncher())
        cut_s = time.monotonic() - began
        moved = {m.source: m.target for m in made.inputs}
        new_a = StreamsTopics(moved[old.input], moved[old.table], "counts-a", "windowed-a", "joined-a")
        start_a, got_a = restarted(bootstrap, new_app, new_a, args.instances, probe, work / "a", want)
        store.use(None)
        input_copies = sum(c.seconds for c in cut.copies if c.source in moved)

        # -- the reset tool on the old application, then the same application on the copies, from the earliest
        began = time.monotonic()
        reset = subprocess.run(["java", "-Xmx256m", "-cp", f"{jar_dir('tools')}/*", "org.apache.kafka.tools.StreamsResetter",
                                "--bootstrap-server", bootstrap, "--application-id", old_app,
                                "--input-topics", ",".join(old.sources), "--to-earliest", "--force"],
                               capture_output=True, text=True, timeout=300)
        reset_s = time.monotonic() - began
        if reset.returncode != 0:
            raise SystemExit(f"the reset tool failed ({reset.returncode}): {reset.stdout[-2000:]} {reset.stderr[-2000:]}")
        new_b = StreamsTopics(new_a.input, new_a.table, "counts-b", "windowed-b", "joined-b")
        # the copies hold kafkaops' probe too: what the reset tool's way reads has it twice, so its reference does
        start_b, got_b = restarted(bootstrap, old_app, new_b, args.instances, probe, work / "b",
                                   streams.reference_outputs(written + probe + probe, table, WINDOW_MS))
    copies = ", ".join(f"{c.source} {c.seconds:.1f} s" for c in cut.copies)
    rows = [
        f"The tests' Kafka Streams application (jvm/streams-app: count, windowed count, stream-table join; "
        f"exactly_once_v2) on {OLD} partitions over {args.records:,} records of {args.keys:,} keys, stopped; "
        f"retention then dropped the oldest {dropped:,} input records ({args.dropped:.0%}); each way restarts it "
        f"on {NEW} partitions as {args.instances} instances, then one more record per key. 1 broker, Spark local[*], "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores. First run on {OLD} partitions: "
        f"{first_s:.1f} s.",
        "",
        "| way | stopped to restarted (s) | restart to caught up (s) | total (s) | keys with a count short | "
        "records missing from the counts | windowed counts written wrong |",
        "|---|---|---|---|---|---|---|",
        f"| kafkaops (`streams_application_id`: {len(cut.copies)} copies gated: {copies}; offsets committed) "
        f"| {cut_s:.1f} | {start_a:.1f} | {cut_s + start_a:.1f} | {got_a[0]:,} | {got_a[1]:,} | {got_a[2]:,} |",
        f"| reference: kafka-streams-application-reset, then reprocessing the same 12-partition input copies "
        f"(their copy {input_copies:.1f} s, counted) | {input_copies + reset_s:.1f} | {start_b:.1f} "
        f"| {input_copies + reset_s + start_b:.1f} | {got_b[0]:,} | {got_b[1]:,} | {got_b[2]:,} |",
    ]
    publish("A Kafka Streams application's partition increase", rows, save=not args.no_results)
    return 0 if got_a == (0, 0, 0) else 1


if __name__ == "__main__":
    sys.exit(main())
