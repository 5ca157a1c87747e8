"""Issue 33's proof: a real stateful Kafka Streams application (jvm/streams-app: a per-key count, a windowed
count and a stream-table join) runs on 3 partitions, is migrated by kafka_partition_increase
(``streams_application_id``) to 12, restarts as 4 instances of a new application.id on the new topics, and
its outputs then equal a reference computed from every input record: no count restarted from zero, none
counted twice, no join result missing. The old application's topics are left as they were."""
from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from kafkaops.airflow.pages import render_record
from kafkaops.platform import provision, state
from kafkaops.platform.kafka import connection, metadata, topics
from kafkaops.rekey.records import Action, ActionNote, StreamsCutNote, SwitchObservedNote
from kafkaops.testing import streams
from kafkaops.testing.rehearsal import RecordFollower
from kafkaops.testing.streams import Feeder, InputRecord, StreamsApp, StreamsTopics
from tests.dags.conftest import kafka_default_connection, run_partition_increase

pytestmark = pytest.mark.integration

OLD, NEW = 3, 12
WINDOW_MS = 10_000
STEP_MS = 20
KEYS = [f"acct-{i:03d}" for i in range(120)]


def stream_batch(base: int, start: int, count: int) -> list[InputRecord]:
    """Stream records from sequence ``start`` in timestamp order, keys round robin; every 13th key has no table
    row (never joined)."""
    return [InputRecord(f"nojoin-{seq % 3}" if seq % 13 == 0 else KEYS[seq % len(KEYS)], f"v{seq}",
                        base + seq * STEP_MS) for seq in range(start, start + count)]


def seeded(bootstrap: str, names: StreamsTopics, count: int) -> tuple[int, list[InputRecord], list[InputRecord]]:
    """The table (a row per key) and the input's first ``count`` stream records produced; returns the base
    timestamp (an hour ago, a window's start), the table and the stream records."""
    base = (time.time_ns() // 1_000_000 - 3_600_000) // WINDOW_MS * WINDOW_MS
    table = [InputRecord(k, f"t-{k}", base - 1_000) for k in KEYS]
    first = stream_batch(base, 0, count)
    streams.produce(bootstrap, names.table, table)
    streams.produce(bootstrap, names.input, first)
    return base, table, first


@pytest.fixture
def app_topics(one_broker_cluster: provision.ClusterSpec) -> Iterator[tuple[str, StreamsTopics]]:
    application_id, names = streams.named("sm")
    streams.create_topics(one_broker_cluster.bootstrap, names, OLD)
    with kafka_default_connection(one_broker_cluster.bootstrap):
        yield application_id, names
    run = application_id.rsplit("-", 1)[1]
    with connection.connect(one_broker_cluster.bootstrap) as conn:  # the shared broker keeps nothing of this test
        topics.delete_topics(conn, [t for t in metadata.topic_names(conn) if run in t])


def test_a_streams_application_keeps_its_state_across_a_partition_increase(
        dagbag, one_broker_cluster: provision.ClusterSpec, app_topics: tuple[str, StreamsTopics],
        tmp_path: Path) -> None:
    bootstrap = one_broker_cluster.bootstrap
    application_id, names = app_topics
    base, table, first = seeded(bootstrap, names, 3_000)
    with StreamsApp(bootstrap, application_id, names, window_ms=WINDOW_MS, workdir=tmp_path / "old") as app:
        app.wait_running(90)
        streams.wait_caught_up(app, 90)
        assert app.stop() == {0: 0}, app.describe()
    expected = streams.reference_outputs(first, table, WINDOW_MS)
    outputs = streams.read_outputs(bootstrap, names)
    assert outputs == expected, outputs.differences(expected)

    new_id = f"{application_id}-v2"
    dag_run, record = run_partition_increase(
        dagbag, topic=names.input, new_partition_count=NEW, mode="migrate", streams_application_id=application_id,
        streams_new_application_id=new_id, dry_run=False, approval="auto_approve")
    assert str(dag_run.state) == "success", record
    assert record["outcome"] == "success", record
    cut = next(iter(state.read_notes(record["notes"], StreamsCutNote))).value
    assert cut.ready and len(cut.copies) == 5, cut
    assert {c.key_rule for c in cut.copies} == {"record_key", "window_key"}
    assert all(c.source_records == c.target_records for c in cut.copies), cut.copies
    assert {o.source for o in cut.offsets} == set(names.sources)
    assert f"application.id={new_id}" in record["next_steps"], record["next_steps"]
    moved = {m.source: m.target for m in cut.plan.inputs}
    # the record's page shows the application: each input, store and repartition topic with what happened to it
    page = render_record(record)
    (tmp_path / "record.html").write_text(page)
    for shown in ("Kafka Streams application", "windowed-counts", "window_key", "table-store", new_id,
                  moved[names.input], "passed"):
        assert shown in page, shown

    # the old application is untouched: its changelogs and inputs keep their counts
    with connection.connect(bootstrap) as conn:
        snap = metadata.snapshot(conn, sizes=False, groups=False)
    counts = {t: len(snap.partitions_of(t)) for t in snap.topics}
    for store in streams.STORES:
        assert counts[streams.changelog(application_id, store)] == OLD
        assert counts[streams.changelog(new_id, store)] == NEW
    assert counts[moved[names.input]] == counts[moved[names.table]] == NEW

    # the new application: 4 instances, empty state dirs, restored from the copied changelogs
    new_names = StreamsTopics(input=moved[names.input], table=moved[names.table], counts=names.counts,
                              windowed=names.windowed, joined=names.joined)
    second = stream_batch(base, 3_000, 2_000)
    with StreamsApp(bootstrap, new_id, new_names, instances=4, window_ms=WINDOW_MS, workdir=tmp_path / "new") as app:
        app.wait_running(120)
        streams.produce(bootstrap, new_names.input, second)
        streams.wait_caught_up(app, 120)
        assert app.stop() == {0: 0, 1: 0, 2: 0, 3: 0}, app.describe()
    expected = streams.reference_outputs(first + second, table, WINDOW_MS)
    outputs = streams.read_outputs(bootstrap, names)
    assert outputs == expected, outputs.differences(expected)


class StreamsStandIn(RecordFollower):
    """The person of a live Streams migration, doing what the run's record asks: at the quiesce, stop the
    producers, let the application read to the end and stop it; at the switch, start the new application
    (4 instances) and move the producers to its input."""

    def __init__(self, feeder: Feeder, old: StreamsApp, new: StreamsApp) -> None:
        super().__init__("kafka_partition_increase")
        self.feeder, self.old, self.new = feeder, old, new
        self.sent_at_stop = 0

    def act(self, note: ActionNote) -> None:
        if note.action is Action.STOP_PRODUCERS and not self.did("stopped"):
            self.sent_at_stop = self.feeder.pause()
            streams.wait_caught_up(self.old, 120)
            assert self.old.stop() == {0: 0}, self.old.describe()
            self.done.append(("stopped", time.monotonic()))
        elif note.action is Action.SWITCH and not self.did("switched"):
            self.new.start()
            self.new.wait_running(120)
            self.feeder.resume(self.new.topics.input)
            self.done.append(("switched", time.monotonic()))


def test_a_running_streams_application_moves_live_and_is_stopped_only_for_the_cut(
        dagbag, one_broker_cluster: provision.ClusterSpec, app_topics: tuple[str, StreamsTopics],
        tmp_path: Path) -> None:
    """quiesce=manual: the application and its producer run through the copies and the catch-up; it is
    stopped only for the last parts, the gates and the offsets, then restarts as 4 instances on 12 partitions
    while the producer goes on there. Its outputs equal the reference of every record sent."""
    bootstrap = one_broker_cluster.bootstrap
    application_id, names = app_topics
    base, table, first = seeded(bootstrap, names, 2_000)
    new_id, target = f"{application_id}-live", f"{names.input}.p{NEW}"
    new_names = StreamsTopics(input=target, table=f"{names.table}.v2", counts=names.counts,
                              windowed=names.windowed, joined=names.joined)
    with ExitStack() as stack:
        old = stack.enter_context(StreamsApp(bootstrap, application_id, names, window_ms=WINDOW_MS,
                                             workdir=tmp_path / "old"))
        old.wait_running(90)
        new = StreamsApp(bootstrap, new_id, new_names, instances=4, window_ms=WINDOW_MS, workdir=tmp_path / "new")
        stack.callback(new.close)
        feeder = stack.enter_context(Feeder(bootstrap, names.input, lambda start, n: stream_batch(base, start, n),
                                            start=len(first), per_batch=100, interval_s=0.2))
        with StreamsStandIn(feeder, old, new) as person:
            dag_run, record = run_partition_increase(
                dagbag, topic=names.input, new_partition_count=NEW, mode="migrate",
                streams_application_id=application_id, streams_new_application_id=new_id, target_topic=target,
                dry_run=False, approval="auto_approve", quiesce="manual", catch_up_lag_records=1_000,
                catch_up_budget_s=300, quiet_s=2, quiesce_timeout_s=180, switch_timeout_s=180)
        assert person.error is None, person.error
        assert str(dag_run.state) == "success", record
        assert [a for a, _ in person.done] == ["stopped", "switched"]
        feeder.pause()
        streams.wait_caught_up(new, 120)
        assert new.stop() == {0: 0, 1: 0, 2: 0, 3: 0}, new.describe()
    assert record["outcome"] == "success", record
    cut = next(iter(state.read_notes(record["notes"], StreamsCutNote))).value
    assert cut.ready and cut.live is not None and len(cut.copies) == 5, cut
    assert all(c.source_records == c.target_records for c in cut.copies), cut.copies
    # the producer wrote through the copies: the tails copied what it wrote after each backfill
    assert cut.live.tail_records > 0, cut.live
    assert cut.live.asked_at < cut.live.stopped_at < cut.live.ready_at, cut.live
    # the copy holds every record sent before the quiesce: the input's quiesced ends count them all
    assert sum(cut.live.source_ends[names.input].values()) == len(first) + person.sent_at_stop > len(first)
    observed = state.read_notes(record["notes"], SwitchObservedNote)
    assert observed and observed[0].value.first_target_write_ms is not None, record["notes"]
    page = render_record(record)
    (tmp_path / "record.html").write_text(page)
    for shown in ("Kafka Streams application", "application down", "live (manual)", new_id, target):
        assert shown in page, shown
    expected = streams.reference_outputs(first + feeder.sent, table, WINDOW_MS)
    outputs = streams.read_outputs(bootstrap, names)
    assert outputs == expected, outputs.differences(expected)


class PausingStandIn(RecordFollower):
    """A person who stops the producers when asked but never the application."""

    def __init__(self, feeder: Feeder) -> None:
        super().__init__("kafka_partition_increase")
        self.feeder = feeder

    def act(self, note: ActionNote) -> None:
        if note.action is Action.STOP_PRODUCERS and not self.did("paused"):
            self.feeder.pause()
            self.done.append(("paused", time.monotonic()))


def test_an_application_not_stopped_at_the_live_cut_is_rolled_back_and_runs_on(
        dagbag, one_broker_cluster: provision.ClusterSpec, app_topics: tuple[str, StreamsTopics],
        tmp_path: Path) -> None:
    """The application is never stopped: at quiesce_timeout_s the migration is abandoned naming its member,
    the copies it made and the new application's offsets are deleted (delete_target_on_abandon), and the old
    application, never changed, goes on: its outputs equal the reference of every record sent."""
    bootstrap = one_broker_cluster.bootstrap
    application_id, names = app_topics
    base, table, first = seeded(bootstrap, names, 1_000)
    new_id = f"{application_id}-p{NEW}"
    with ExitStack() as stack:
        old = stack.enter_context(StreamsApp(bootstrap, application_id, names, window_ms=WINDOW_MS,
                                             workdir=tmp_path / "old"))
        old.wait_running(90)
        feeder = stack.enter_context(Feeder(bootstrap, names.input, lambda start, n: stream_batch(base, start, n),
                                            start=len(first), per_batch=50, interval_s=0.2))
        with PausingStandIn(feeder) as person:
            dag_run, record = run_partition_increase(
                dagbag, topic=names.input, new_partition_count=NEW, mode="migrate",
                streams_application_id=application_id, dry_run=False, approval="auto_approve", quiesce="manual",
                catch_up_lag_records=1_000, catch_up_budget_s=300, quiet_s=2, quiesce_timeout_s=15,
                delete_target_on_abandon=True)
        assert person.error is None, person.error
        assert str(dag_run.state) == "failed" and record["outcome"] == "abandoned", record
        reason = record["outcome_reason"]
        assert "quiesce failed" in reason and f"the application's group {application_id} still has 1 member(s)" \
            in reason, reason
        assert f"start it again with application.id={application_id}" in reason and "deleted" in reason, reason
        with connection.connect(bootstrap) as conn:
            left = [t for t in metadata.topic_names(conn) if t.startswith(new_id) or ".v2" in t or ".p12" in t]
            groups = {g.group_id for g in metadata.snapshot(conn, sizes=False).groups}
        assert left == [] and new_id not in groups, (left, groups)
        # the old application was never stopped nor changed: it goes on with what is written next
        feeder.resume()
        time.sleep(1.0)
        feeder.pause()
        streams.wait_caught_up(old, 120)
        assert old.stop() == {0: 0}, old.describe()
    expected = streams.reference_outputs(first + feeder.sent, table, WINDOW_MS)
    outputs = streams.read_outputs(bootstrap, names)
    assert outputs == expected, outputs.differences(expected)
