"""A real stateful Kafka Streams application for the tests and benchmarks: instances of ``jvm/streams-app``
(``io.kafkaops.streams.StatefulApp``) started and stopped, its input produced, its outputs read, and the
outputs it must have computed worked out in Python.

The application (its Javadoc has the details) reads a keyed input stream and a co-partitioned table topic,
both String/String, and keeps three state stores, each with a changelog ``<application.id>-<store>-changelog``
(:func:`changelog`): a count per key (``counts``), a count per key and tumbling window (``windowed-counts``)
and the table, which the stream joins (``table-store``). Its outputs: the counts (key, count as decimal
text), the windowed counts (key ``<key>@<window start ms>``), the joined records (``<value>|<table value>``).

:class:`StreamsApp` starts N instances of one application id as lean JVMs (:data:`kafkaops.testing.jvm.LEAN`),
each in its own folder (a state dir, its settings file written 0600, its log: stdout and stderr), each in a
process group of its own that the test watchdog (:mod:`kafkaops.testing.watchdog`) kills should the test's
process die before :meth:`StreamsApp.close`. An instance says ``STATE <state>`` on each state change and
``FATAL <class>: <message>`` when a stream thread dies (it then exits 1); SIGTERM closes it cleanly (exit 0).

:func:`produce` writes input records with explicit timestamps and the Java client's placement (murmur2, as
the application's own producer places its outputs and as a partition increase moves keys),
:func:`read_outputs` reads the three outputs as a ``read_committed`` consumer sees them, and
:func:`reference_outputs` (pure) computes them from the records produced; :func:`group_lag` and
:func:`wait_caught_up` say when the application has processed every input record.

Tests and benchmarks run it; no operation does (it is no part of the product: the image leaves its jars out).
"""
from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from kafkaops.errors import KafkaOpsError, SetupError
from kafkaops.platform import paths, waits
from kafkaops.testing import jvm, watchdog

log = logging.getLogger(__name__)

#: The application's main class and its folder in the jar cache (jvm/streams-app).
MAIN_CLASS = "io.kafkaops.streams.StatefulApp"
JAR_FOLDER = "streams-app"
#: The application's state stores; each has the changelog ``<application.id>-<store>-changelog``.
COUNTS_STORE = "counts"
WINDOWED_STORE = "windowed-counts"
TABLE_STORE = "table-store"
STORES = (COUNTS_STORE, WINDOWED_STORE, TABLE_STORE)
#: A window store's changelog key: the record key, then the window start (8 bytes, big-endian) and a sequence
#: number (4 bytes, big-endian; 0 unless the store keeps duplicates): Kafka Streams' WindowKeySchema.
WINDOW_KEY_SUFFIX = 12
#: A test instance's JVM: lean (quick compiler, serial collector) and small.
JVM_OPTS = f"{jvm.LEAN} -Xmx256m -Xss512k"
DEFAULT_WINDOW_MS = 60_000


class StreamsAppError(KafkaOpsError):
    """An instance of the tests' Kafka Streams application did not start, stopped, or died."""


def changelog(application_id: str, store: str) -> str:
    """The changelog topic of ``store``: ``<application.id>-<store>-changelog``."""
    return f"{application_id}-{store}-changelog"


def window_changelog_key(raw: bytes) -> tuple[bytes, int, int]:
    """A window store's changelog key split: (the record key, the window start in ms, the sequence number)."""
    if len(raw) < WINDOW_KEY_SUFFIX:
        raise ValueError(f"a window store's changelog key has at least {WINDOW_KEY_SUFFIX} bytes, this one {len(raw)}")
    body = raw[:-WINDOW_KEY_SUFFIX]
    start = int.from_bytes(raw[-WINDOW_KEY_SUFFIX:-4], "big", signed=True)
    return body, start, int.from_bytes(raw[-4:], "big", signed=True)


@dataclass(frozen=True)
class StreamsTopics:
    """The application's topics: ``input`` and ``table`` co-partitioned (same partition count, same placement)."""

    input: str
    table: str
    counts: str
    windowed: str
    joined: str

    @property
    def sources(self) -> tuple[str, str]:
        return self.input, self.table

    @property
    def outputs(self) -> tuple[str, str, str]:
        return self.counts, self.windowed, self.joined

    def settings(self) -> dict[str, str]:
        """The application's own ``app.`` keys naming them."""
        return {"app.input": self.input, "app.table": self.table, "app.output.counts": self.counts,
                "app.output.windowed": self.windowed, "app.output.joined": self.joined}


class InputRecord(NamedTuple):
    """One record produced to the input or the table topic, with the timestamp it was given."""

    key: str
    value: str
    timestamp_ms: int


@dataclass(frozen=True)
class Outputs:
    """What the application computed: the latest count per key, the latest count per (key, window start), and
    each joined record as (key, value), counted (exactly once: each input record's join appears once)."""

    counts: Mapping[str, int]
    windowed: Mapping[tuple[str, int], int]
    joined: Counter[tuple[str, str]]

    def differences(self, other: Outputs, *, examples: int = 5) -> list[str]:
        """What differs from ``other`` (the reference), in words; empty when equal."""
        said = [d for d in (_differing("counts", self.counts, other.counts, examples),
                            _differing("windowed", self.windowed, other.windowed, examples)) if d]
        extra, missing = self.joined - other.joined, other.joined - self.joined
        if extra or missing:
            said.append(f"joined: {sum(missing.values())} of {sum(other.joined.values())} missing (e.g. "
                        f"{sorted(missing)[:examples]}), {sum(extra.values())} extra (e.g. {sorted(extra)[:examples]})")
        return said


def _differing(name: str, mine: Mapping[Any, int], theirs: Mapping[Any, int], examples: int) -> str | None:
    wrong = sorted((k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k)), key=str)
    if not wrong:
        return None
    return (f"{name}: {len(wrong)} of {len(theirs)} keys differ, e.g. "
            + ", ".join(f"{k}: {mine.get(k)} not {theirs.get(k)}" for k in wrong[:examples]))


def reference_outputs(stream_records: Iterable[InputRecord], table_records: Iterable[InputRecord],
                      window_ms: int) -> Outputs:
    """The outputs the application must compute from every record produced (pure).

    Counts: records per key. Windowed: records per key and tumbling window, its start ``ts - ts % window_ms``.
    Joined: each stream record whose key has a table record with an earlier timestamp, joined with the latest
    such (``<value>|<table value>``). Kafka Streams processes a task's records in timestamp order across its
    partitions, so "earlier" is by timestamp: produce table records with timestamps before the stream records
    they are to join (equal timestamps leave the order to the application: avoid them). The windows have no
    grace: a stream record more than a window older than the latest of its partition is dropped by the
    application, so produce each key's records in timestamp order."""
    if window_ms <= 0:
        raise ValueError(f"window_ms is {window_ms}; a window lasts at least 1 ms")
    table = sorted(table_records, key=lambda r: r.timestamp_ms)
    counts: Counter[str] = Counter()
    windowed: Counter[tuple[str, int]] = Counter()
    joined: Counter[tuple[str, str]] = Counter()
    current: dict[str, str] = {}
    i = 0
    for record in sorted(stream_records, key=lambda r: r.timestamp_ms):  # stable: a key's order stays
        while i < len(table) and table[i].timestamp_ms < record.timestamp_ms:
            current[table[i].key] = table[i].value
            i += 1
        counts[record.key] += 1
        windowed[(record.key, record.timestamp_ms - record.timestamp_ms % window_ms)] += 1
        if record.key in current:
            joined[(record.key, f"{record.value}|{current[record.key]}")] += 1
    return Outputs(dict(counts), dict(windowed), joined)


# -- Kafka: input produced, outputs read, the group's lag ----------------------------------------------------

def _client_config(source: str | Mapping[str, str]) -> dict[str, str]:
    return {"bootstrap.servers": source} if isinstance(source, str) else dict(source)


def produce(source: str | Mapping[str, str], topic: str, records: Iterable[InputRecord], *,
            timeout_s: float = 60.0) -> int:
    """Produce ``records`` to ``topic`` in order, each with its timestamp, placed as the Java client places
    keys (murmur2), acks=all and idempotent; returns how many. Raises when any is unacknowledged."""
    producer = _producer(source)
    try:
        return _send(producer, topic, records, timeout_s)
    finally:
        waits.close_producer(producer, waits.Deadline(timeout_s))


def _producer(source: str | Mapping[str, str]) -> Any:
    from confluent_kafka import Producer

    from kafkaops.testing.traffic import producer_config

    return Producer(producer_config(_client_config(source)))


def _send(producer: Any, topic: str, records: Iterable[InputRecord], timeout_s: float) -> int:
    """``records`` through ``producer``, every one acknowledged (flushed) before it returns; raises naming what
    failed or was left unacknowledged after ``timeout_s``."""
    failures: list[str] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            failures.append(str(err))

    sent = 0
    for record in records:
        while True:
            try:
                producer.produce(topic, key=record.key.encode(), value=record.value.encode(),
                                 timestamp=record.timestamp_ms, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.1)
        sent += 1
        producer.poll(0)
    left = waits.flush(producer, waits.Deadline(timeout_s))
    if left or failures:
        raise StreamsAppError(f"producing {sent:,} records to {topic}: {left} unacknowledged after {timeout_s:.0f} s, "
                              f"{len(failures)} failed (first: {failures[0] if failures else 'none'}); check the brokers")
    return sent


def read_outputs(source: str | Mapping[str, str], topics: StreamsTopics, *, timeout_s: float = 60.0) -> Outputs:
    """The three output topics read to their end offsets now, as a ``read_committed`` consumer sees them: the
    latest count per key (a key's updates are in one partition, in order), the latest count per (key, window
    start), every joined record. Read once the application caught up (:func:`wait_caught_up`): a transaction
    it still has open holds a ``read_committed`` read back until the timeout."""
    from kafkaops.platform.kafka import records

    config = _client_config(source)
    committed = {**config, "isolation.level": "read_committed"}

    def read(topic: str) -> Iterator[records.Record]:
        ends = records.end_offsets(config, topic)
        return records.read_ranges(committed, topic, {p: (0, e) for p, (_, e) in ends.items()}, timeout_s=timeout_s)

    counts: dict[str, int] = {}
    for r in read(topics.counts):
        counts[_text(r.key)] = int(_text(r.value))
    windowed: dict[tuple[str, int], int] = {}
    for r in read(topics.windowed):
        key, _, start = _text(r.key).rpartition("@")
        windowed[(key, int(start))] = int(_text(r.value))
    joined = Counter((_text(r.key), _text(r.value)) for r in read(topics.joined))
    return Outputs(counts, windowed, joined)


def _text(raw: bytes | None) -> str:
    if raw is None:
        raise StreamsAppError("an output record of the streams app has no key or value; it writes both always")
    return raw.decode()


def group_lag(source: str | Mapping[str, str], application_id: str, topics: Iterable[str]) -> dict[tuple[str, int], int]:
    """Per partition of ``topics``, how many records the application's group (its ``application.id``) has not
    committed yet: the end offset minus the committed offset (no commit: the whole partition)."""
    from kafkaops.platform.kafka import connection, metadata

    with connection.connect(_client_config(source)) as conn:
        snap = metadata.snapshot(conn, topics=list(topics), sizes=False, groups=True)
    group = next((g for g in snap.groups if g.group_id == application_id), None)
    committed = {(p.topic, p.partition): p.committed for p in (group.partitions if group else ())}
    return {p.topic_partition: (p.end_offset or 0) - (committed.get(p.topic_partition) or 0)
            for p in snap.partitions}


def wait_caught_up(app: StreamsApp, timeout_s: float = 60.0, *, interval_s: float = 0.5) -> None:
    """Return once ``app``'s group has committed every record of its input and table topics (so, exactly once,
    its outputs of them too); raise naming the lag and the instances' last lines after ``timeout_s``, or at
    once when an instance died."""
    deadline = waits.Deadline(timeout_s)
    lag: dict[tuple[str, int], int] = {}
    while True:
        app.check_alive()
        lag = group_lag(app.client_config, app.application_id, app.topics.sources)
        if lag and not any(lag.values()):
            return
        if deadline.expired():
            behind = {f"{t}-{p}": n for (t, p), n in sorted(lag.items()) if n}
            raise StreamsAppError(f"streams app {app.application_id} did not catch up within {timeout_s:.0f} s: "
                                  f"lag {behind or 'unknown'}; {app.describe()}")
        time.sleep(min(interval_s, deadline.remaining()))


# -- the instances -------------------------------------------------------------------------------------------

def java_properties(source: str | Mapping[str, str]) -> dict[str, str]:
    """The Java client's settings for a bootstrap string or a librdkafka client config (SASL and TLS settings
    mapped as the Spark apps map them: :func:`kafkaops.platform.spark.spark_kafka_options`)."""
    from kafkaops.platform.spark import spark_kafka_options

    return {k.removeprefix("kafka."): v for k, v in spark_kafka_options(_client_config(source)).items()}


@dataclass
class Instance:
    """One process of the application: its folder (``state/``; ``tmp/``, the JVM's temp folder, where RocksDB
    unpacks its native library, emptied at each stop; ``app.properties``; ``app.log``, its stdout and stderr)."""

    index: int
    folder: Path
    process: subprocess.Popen[bytes] | None = None
    #: where this start's output begins in ``app.log`` (earlier starts' output stays above it)
    log_offset: int = 0
    returncode: int | None = field(default=None)
    #: :meth:`StreamsApp.stop` sent it SIGTERM: an exit 0 is no failure
    stopped: bool = False

    @property
    def log(self) -> Path:
        return self.folder / "app.log"

    @property
    def settings(self) -> Path:
        return self.folder / "app.properties"

    @property
    def state_dir(self) -> Path:
        return self.folder / "state"

    def lines(self) -> list[str]:
        """What this start of the instance wrote so far (stdout and stderr)."""
        try:
            with self.log.open("rb") as f:
                f.seek(self.log_offset)
                return f.read().decode(errors="replace").splitlines()
        except OSError:
            return []

    def states(self) -> list[str]:
        return [line.split(" ", 1)[1].strip() for line in self.lines() if line.startswith("STATE ")]

    @property
    def state(self) -> str | None:
        """The latest state it said, None before the first."""
        states = self.states()
        return states[-1] if states else None

    def poll(self) -> int | None:
        if self.process is not None and self.returncode is None:
            self.returncode = self.process.poll()
        return self.returncode

    def fatal(self) -> str | None:
        """Its first ``FATAL`` line (a stream thread died), if any."""
        return next((line for line in self.lines() if line.startswith("FATAL ")), None)

    def failure(self) -> str | None:
        """Why this instance is dead or dying (a ``FATAL`` line; an exit it was not asked for, or a stop that did
        not end in exit 0), else None."""
        fatal = self.fatal()
        code = self.poll()
        if fatal is not None:
            return fatal if code is None else f"{fatal} (exited {code})"
        if code is not None and not (self.stopped and code == 0):
            return f"exited {code}" + (" when stopped" if self.stopped else "")
        return None

    def tail(self, lines: int = 15) -> str:
        return "\n".join(f"    {line}" for line in self.lines()[-lines:]) or "    (no output)"

    def describe(self) -> str:
        code = self.poll()
        status = ("not started" if self.process is None else f"pid {self.process.pid}, "
                  + ("running" if code is None else f"exited {code}"))
        return f"instance {self.index} ({status}, state {self.state}; log {self.log}), its last lines:\n{self.tail()}"


class StreamsApp:
    """``instances`` processes of the application ``application_id`` on ``topics`` (create the topics first: the
    application creates only its changelogs). A context manager: :meth:`start` on entry, :meth:`close` on exit
    (always: every instance stopped, a temp folder removed).

    ``source``: a bootstrap string or a librdkafka client config (mapped to the Java client's settings);
    ``extra_config``: Kafka Streams settings set last (over this harness's and the app's defaults:
    ``processing.guarantee=exactly_once_v2``, ``commit.interval.ms=200``, one stream thread, a closed instance
    leaving its group at once: ``app.close.leave.group``). ``workdir``: the instances' folders
    (``instance-<i>``); given, it is kept, and an instance started again there finds its state dir as it left
    it; not given, a temp folder removed by :meth:`close`."""

    def __init__(self, source: str | Mapping[str, str], application_id: str, topics: StreamsTopics, *,
                 instances: int = 1, window_ms: int = DEFAULT_WINDOW_MS, extra_config: Mapping[str, str] | None = None,
                 workdir: Path | None = None, jvm_opts: str = JVM_OPTS) -> None:
        if instances < 1:
            raise ValueError(f"instances is {instances}; start at least one")
        self.client_config = _client_config(source)
        self.application_id, self.topics, self.window_ms = application_id, topics, window_ms
        self.extra_config = dict(extra_config or {})
        self.jvm_opts = jvm_opts
        self._owned = workdir is None
        self.workdir = Path(tempfile.mkdtemp(prefix=f"kafkaops-streams-{paths.safe_name(application_id, limit=40)}-")
                            if workdir is None else workdir)
        self.instances = [Instance(i, self.workdir / f"instance-{i}") for i in range(instances)]
        self._guard: watchdog.Guard | None = None

    def __enter__(self) -> StreamsApp:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc: object) -> None:
        self.close()

    def config(self, instance: Instance) -> dict[str, str]:
        """The settings file of ``instance``: the client's, the application's, the ``app.`` keys, ``extra_config``."""
        return {**java_properties(self.client_config), "application.id": self.application_id,
                "state.dir": str(instance.state_dir), **self.topics.settings(), "app.window.ms": str(self.window_ms),
                **self.extra_config}

    def write_settings(self, instance: Instance) -> Path:
        """Make ``instance``'s folder and write its settings file (:meth:`config`; 0600, never wider, written anew
        at each start)."""
        from kafkaops.platform.spark import write_kafka_properties

        for sub in (instance.folder, instance.state_dir, instance.folder / "tmp"):
            sub.mkdir(mode=0o700, parents=True, exist_ok=True)
        instance.settings.unlink(missing_ok=True)
        return write_kafka_properties(self.config(instance), instance.folder, instance.settings.name)

    def _watched(self) -> list[watchdog.Action]:
        actions = [watchdog.group(i.process) for i in self.instances if i.process is not None and i.poll() is None]
        return actions + ([watchdog.rmtree(self.workdir)] if self._owned else [])

    def start(self) -> StreamsApp:
        """Start every instance not running (a stopped one again, in its folder)."""
        java = shutil.which("java")
        if java is None:
            raise SetupError("no java on PATH: the tests' Kafka Streams app needs a JDK 17+")
        classpath = f"{paths.jar_dir(JAR_FOLDER)}/*"
        if not (paths.JARS / JAR_FOLDER / "kafkaops-streams-app.jar").is_file():
            raise SetupError(f"no kafkaops-streams-app.jar in {paths.JARS / JAR_FOLDER}: build it with 'mvn -q -B -f "
                             "jvm/pom.xml package -pl streams-app -Djars.dir=<jar cache>' (make setup does)")
        if self._guard is None:
            self._guard = watchdog.guard(*self._watched(), name=f"streams app {self.application_id}")
        for instance in self.instances:
            if instance.process is not None and instance.poll() is None:
                continue
            self.write_settings(instance)
            argv = [java, *self.jvm_opts.split(), f"-Djava.io.tmpdir={instance.folder / 'tmp'}", "-cp", classpath,
                    MAIN_CLASS, str(instance.settings)]
            with os.fdopen(os.open(instance.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "ab") as out:
                instance.log_offset = out.seek(0, os.SEEK_END)
                instance.process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out,
                                                    stderr=subprocess.STDOUT, cwd=instance.folder,
                                                    start_new_session=True)
            instance.returncode, instance.stopped = None, False
            self._guard.update(*self._watched())
            log.info("streams app %s: instance %d started (pid %d, folder %s)", self.application_id, instance.index,
                     instance.process.pid, instance.folder)
        return self

    def wait_running(self, timeout_s: float = 60.0) -> None:
        """Return once every instance's latest state is RUNNING; raise naming the instances that are not (with
        their last lines) after ``timeout_s``, or at once when one died."""
        deadline = waits.Deadline(timeout_s)
        while True:
            self.check_alive()
            waiting = [i for i in self.instances if i.state != "RUNNING"]
            if not waiting:
                return
            if deadline.expired():
                raise StreamsAppError(f"streams app {self.application_id}: {len(waiting)} of {len(self.instances)} "
                                      f"instance(s) not RUNNING after {timeout_s:.0f} s:\n"
                                      + "\n".join(i.describe() for i in waiting))
            time.sleep(min(0.2, deadline.remaining()))

    def failures(self) -> dict[int, str]:
        """The instances that died (a ``FATAL`` line or an exit), by index, and why."""
        return {i.index: why for i in self.instances if i.process is not None and (why := i.failure()) is not None}

    def check_alive(self) -> None:
        """Raise naming every instance that died, with its last lines."""
        dead = self.failures()
        if dead:
            raise StreamsAppError(f"streams app {self.application_id}: instance(s) {sorted(dead)} died: "
                                  + "; ".join(dead.values()) + "\n"
                                  + "\n".join(self.instances[i].describe() for i in sorted(dead)))

    def describe(self) -> str:
        return "\n".join(i.describe() for i in self.instances)

    def stop(self, timeout_s: float = 45.0) -> dict[int, int | None]:
        """SIGTERM every running instance (each closes its client, at most 30 s, and exits 0), wait for all until
        ``timeout_s``, SIGKILL those left. Returns each instance's exit code (None: never started); its folder
        stays (:meth:`start` starts it again there) until :meth:`close`. Safe to call again."""
        running = [i for i in self.instances if i.process is not None and i.poll() is None]
        for instance in running:
            instance.stopped = True
            _signal_group(instance, signal.SIGTERM)
        deadline = waits.Deadline(timeout_s)
        for instance in running:
            assert instance.process is not None
            try:
                instance.returncode = instance.process.wait(timeout=max(deadline.remaining(), 0.01))
            except subprocess.TimeoutExpired:
                log.warning("streams app %s: instance %d still runs %.0f s after SIGTERM; killing it\n%s",
                            self.application_id, instance.index, timeout_s, instance.tail())
                _signal_group(instance, signal.SIGKILL)
                instance.returncode = instance.process.wait(timeout=30)
            # RocksDB's native library, unpacked at each start and left there (the JVM halts: no deleteOnExit)
            shutil.rmtree(instance.folder / "tmp", ignore_errors=True)
            log.info("streams app %s: instance %d stopped (exit %s)", self.application_id, instance.index,
                     instance.returncode)
        if self._guard is not None:
            self._guard.update(*self._watched())
        return self.exit_codes()

    def close(self, timeout_s: float = 45.0) -> dict[int, int | None]:
        """:meth:`stop`, then remove a temp ``workdir`` (a given one stays, logs and state dirs in it)."""
        try:
            return self.stop(timeout_s)
        finally:
            if self._owned:
                shutil.rmtree(self.workdir, ignore_errors=True)
            if self._guard is not None:
                self._guard.release()
                self._guard = None

    def exit_codes(self) -> dict[int, int | None]:
        return {i.index: i.poll() for i in self.instances}


def _signal_group(instance: Instance, sig: int) -> None:
    if instance.process is None:
        return
    try:
        os.killpg(instance.process.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def named(prefix: str) -> tuple[str, StreamsTopics]:
    """An application id and topic names of its own: ``<prefix>-app-<run>``, ``<prefix>-in-<run>``, ... (``run``
    random), so tests on a shared broker never meet."""
    run = uuid.uuid4().hex[:8]
    return f"{prefix}-app-{run}", StreamsTopics(*(f"{prefix}-{part}-{run}"
                                                for part in ("in", "table", "counts", "windowed", "joined")))


def create_topics(source: str | Mapping[str, str], topics: StreamsTopics, partitions: int) -> None:
    """The application's sources and outputs, ``partitions`` each, replication factor 1."""
    from kafkaops.platform.kafka import connection
    from kafkaops.platform.kafka import topics as topic_admin

    with connection.connect(_client_config(source)) as conn:
        for name in (*topics.sources, *topics.outputs):
            topic_admin.create_topic(conn, name, partitions, 1)


def topic_set(topics: StreamsTopics, application_id: str) -> Sequence[str]:
    """Every topic of the application: sources, outputs, changelogs."""
    return (*topics.sources, *topics.outputs, *(changelog(application_id, s) for s in STORES))


def delete_application(source: str | Mapping[str, str], application_id: str, topics: StreamsTopics) -> None:
    """Leave nothing of the application on the cluster: its topics (:func:`topic_set`; missing ones skipped) and
    its consumer group (best effort: a group never made, or still leaving, is only logged). Stop it first."""
    from kafkaops.platform.kafka import connection, offsets
    from kafkaops.platform.kafka import topics as topic_admin

    with connection.connect(_client_config(source)) as conn:
        topic_admin.delete_topics(conn, topic_set(topics, application_id))
        try:
            offsets.delete_consumer_group(conn, application_id, attempts=3)
        except KafkaOpsError as err:
            log.info("streams app %s: its consumer group was not deleted: %s", application_id, err)


# -- live traffic --------------------------------------------------------------------------------------------

class Feeder:
    """Keyed traffic for a live migration: a thread producing ``make(start, count)`` (records from sequence
    ``start`` on) to ``topic``, ``per_batch`` records every ``interval_s``, each batch acknowledged before the
    next, until :meth:`pause`; :meth:`resume` goes on from the next sequence, to another topic if given.
    :attr:`sent` holds every acknowledged record in order; :attr:`error` what failed (raised by
    :meth:`pause`). A context manager: the thread is stopped and joined on exit."""

    def __init__(self, source: str | Mapping[str, str], topic: str, make: Callable[[int, int], list[InputRecord]],
                 *, start: int = 0, per_batch: int = 100, interval_s: float = 0.2) -> None:
        self.source, self.topic, self.make = source, topic, make
        self.next, self.per_batch, self.interval_s = start, per_batch, interval_s
        self.sent: list[InputRecord] = []
        self.error: BaseException | None = None
        self._running = threading.Event()
        self._closed = threading.Event()
        self._idle = threading.Event()
        self._idle.set()
        self._thread = threading.Thread(target=self._feed, name="kafkaops-streams-feeder", daemon=True)

    def __enter__(self) -> Feeder:
        self._thread.start()
        self.resume()
        return self

    def __exit__(self, *exc: object) -> None:
        self._closed.set()
        self._running.set()
        self._thread.join(60)

    def resume(self, topic: str | None = None) -> None:
        self.topic = topic or self.topic
        self._idle.clear()
        self._running.set()

    def pause(self, timeout_s: float = 60.0) -> int:
        """Stop producing after the batch under way is acknowledged; returns the records sent so far."""
        self._running.clear()
        if not self._idle.wait(timeout_s):
            raise StreamsAppError(f"the feeder of {self.topic} did not pause within {timeout_s:.0f} s")
        if self.error is not None:
            raise self.error
        return len(self.sent)

    def _feed(self) -> None:
        producer = _producer(self.source)  # one for the feeder's life, closed by it
        try:
            while not self._closed.is_set():
                if not self._running.is_set():
                    self._idle.set()
                    self._running.wait()
                    continue
                began = time.monotonic()
                batch = self.make(self.next, self.per_batch)
                try:
                    _send(producer, self.topic, batch, 60.0)
                except BaseException as err:  # the test raises it
                    log.exception("feeder of %s failed", self.topic)
                    self.error = err
                    self._running.clear()
                    continue
                self.sent += batch
                self.next += len(batch)
                self._closed.wait(max(0.0, self.interval_s - (time.monotonic() - began)))
        finally:
            waits.close_producer(producer, waits.Deadline(60.0))
            self._idle.set()
