"""What producers see while a write fence stands on their topic (the live migration's ``quiesce=acl``,
docs/live-migration.md): two real producers write numbered, keyed records at a steady rate while the fence
goes up and comes down, and every send's outcome is kept, as its application would see it.

* **Java**: Kafka's own ``VerifiableProducer`` (the tools jars, ``kafka-verifiable-producer.sh``), which
  prints one JSON line per send (acknowledged with its offset, or the exception its callback got). The tool
  sets ``retries=0``; its properties file puts the Java client's defaults back (``retries`` unbounded
  within ``delivery.timeout.ms``), so it is a producer with the defaults: acks=all, idempotent.
* **librdkafka**: confluent-kafka's ``Producer`` with acks=all and idempotence, as the traffic check's (or
  with acks=0, whose "delivered" only means sent).

:func:`topic_values` reads what the topic holds, so a test can hold the fence to its promise: every
acknowledged record is in the topic, and every refused one is not (none accepted and left behind).
"""
from __future__ import annotations

import json
import logging
import subprocess
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kafkaops.platform import waits
from kafkaops.platform.kafka import records
from kafkaops.platform.paths import jar_dir
from kafkaops.testing import watchdog

log = logging.getLogger(__name__)

#: ``kafka-verifiable-producer.sh`` runs this class.
VERIFIABLE_PRODUCER = "org.apache.kafka.tools.VerifiableProducer"


@dataclass
class Sends:
    """One producer's sends: ``acked`` values (with the time of their acknowledgement, epoch seconds) and
    ``refused`` ones (with the time and the error its application saw)."""

    client: str
    acked: list[tuple[float, str]] = field(default_factory=list)
    refused: list[tuple[float, str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def ack(self, value: str, at: float | None = None) -> None:
        with self.lock:
            self.acked.append((time.time() if at is None else at, value))

    def refuse(self, value: str, error: str, at: float | None = None) -> None:
        with self.lock:
            self.refused.append((time.time() if at is None else at, value, error))

    def errors(self) -> Counter[str]:
        """How often each error was seen."""
        with self.lock:
            return Counter(e for _, _, e in self.refused)

    def acked_after(self, at: float) -> int:
        with self.lock:
            return sum(1 for t, _ in self.acked if t > at)

    def values(self) -> tuple[set[str], set[str]]:
        """(acknowledged, refused) values."""
        with self.lock:
            return {v for _, v in self.acked}, {v for _, v, _ in self.refused}


class JavaProducer:
    """``VerifiableProducer`` writing ``<prefix>.<n>`` values (the tool takes a number as the prefix) with ``keys`` repeating keys at ``rate_per_s``
    to ``topic`` as the login in ``config`` (a librdkafka config: its settings go to a properties file of
    this user's only, never in argv). Its process group is guarded: a test process that dies takes it along."""

    def __init__(self, config: Mapping[str, str], topic: str, *, rate_per_s: int = 200, keys: int = 50,
                 prefix: int = 1) -> None:
        self.config, self.topic, self.rate_per_s, self.keys, self.prefix = dict(config), topic, rate_per_s, keys, prefix
        self.sends = Sends("java (kafka-clients, defaults)")
        self.other: list[str] = []  # lines that are not a send's outcome (startup, shutdown, warnings)
        self._folder: tempfile.TemporaryDirectory[str] | None = None
        self._process: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None
        self._guard: watchdog.Guard | None = None

    def __enter__(self) -> JavaProducer:
        from kafkaops.platform.spark import spark_kafka_options, write_kafka_properties

        self._folder = tempfile.TemporaryDirectory(prefix="kafkaops-java-producer-")
        props = {k.removeprefix("kafka."): v for k, v in spark_kafka_options(self.config).items()}
        props.pop("bootstrap.servers", None)
        props["retries"] = "2147483647"  # the Java client's default, which the tool overrides with 0
        path = write_kafka_properties(props, Path(self._folder.name), "producer.properties")
        argv = ["java", "-Xmx128m", "-XX:TieredStopAtLevel=1", "-cp", f"{jar_dir('tools')}/*", VERIFIABLE_PRODUCER,
                "--topic", self.topic, "--bootstrap-server", self.config["bootstrap.servers"],
                "--throughput", str(self.rate_per_s), "--repeating-keys", str(self.keys),
                "--value-prefix", str(self.prefix), "--acks", "-1", "--command-config", str(path)]
        self._process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        self._guard = watchdog.guard(watchdog.group(self._process), watchdog.rmtree(self._folder.name),
                                     name=f"java producer of {self.topic}")
        self._reader = threading.Thread(target=self._read, name=f"java-producer-{self.topic}", daemon=True)
        self._reader.start()
        return self

    def _read(self) -> None:
        assert self._process is not None and self._process.stdout is not None
        for line in self._process.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                self.other.append(line.rstrip())
                continue
            at = event.get("timestamp", time.time() * 1000) / 1000.0
            if event.get("name") == "producer_send_success":
                self.sends.ack(str(event["value"]), at)
            elif event.get("name") == "producer_send_error":
                self.sends.refuse(str(event["value"]), str(event.get("exception", "")).removeprefix("class ")
                                  .rsplit(".", 1)[-1], at)
            else:
                self.other.append(line.rstrip())

    def alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def __exit__(self, *exc: object) -> None:
        """SIGTERM (the tool's shutdown hook closes its producer, which sends what it holds), then the rest
        of its output; killed after 30 s."""
        try:
            if self._process is not None:
                if self._process.poll() is None:
                    self._process.terminate()
                try:
                    self._process.wait(30)
                except subprocess.TimeoutExpired:
                    self._process.kill()
                    self._process.wait(10)
            if self._reader is not None:
                self._reader.join(30)
        finally:
            if self._process is not None and self._process.stdout is not None:
                self._process.stdout.close()
            if self._folder is not None:
                self._folder.cleanup()
            if self._guard is not None:
                self._guard.release()


class LibrdkafkaProducer:
    """confluent-kafka's producer (acks=all, idempotent) writing ``<prefix>.<n>`` values with ``keys``
    repeating keys at ``rate_per_s`` to ``topic``, in a thread of its own, until the block ends."""

    def __init__(self, config: Mapping[str, str], topic: str, *, rate_per_s: int = 200, keys: int = 50,
                 prefix: str = "librdkafka", acks: str = "all") -> None:
        self.config, self.topic, self.rate_per_s, self.keys, self.prefix = dict(config), topic, rate_per_s, keys, prefix
        self.acks = acks
        self.sends = Sends("librdkafka (confluent-kafka, acks=all, idempotent)" if acks == "all" else
                           f"librdkafka (confluent-kafka, acks={acks})")
        self.left = 0  # records still unacknowledged when it closed
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._write, name=f"librdkafka-producer-{topic}", daemon=True)

    def _write(self) -> None:
        from confluent_kafka import KafkaException, Producer

        from kafkaops.testing.traffic import producer_config

        settings = producer_config(self.config)
        if self.acks != "all":  # acks=0/1 cannot be idempotent
            settings.update({"acks": self.acks, "enable.idempotence": False})
        producer = Producer(settings)

        def delivered(err: Any, msg: Any) -> None:
            value = msg.value().decode()
            if err is None:
                self.sends.ack(value)
            else:
                self.sends.refuse(value, err.name())

        sent, began = 0, time.monotonic()
        try:
            while not self._stop.is_set():
                value = f"{self.prefix}.{sent}"
                try:
                    producer.produce(self.topic, key=str(sent % self.keys).encode(), value=value.encode(),
                                     on_delivery=delivered)
                except BufferError:
                    producer.poll(0.05)
                    continue
                except KafkaException as err:  # refused at the call: librdkafka knows the topic is not writable
                    self.sends.refuse(value, f"{err.args[0].name()} (raised by produce)")
                sent += 1
                producer.poll(0)
                ahead = sent / self.rate_per_s - (time.monotonic() - began)
                if ahead > 0.05:
                    time.sleep(ahead)
        finally:
            self.left = waits.close_producer(producer, waits.Deadline(60))

    def __enter__(self) -> LibrdkafkaProducer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(90)


def can_write(config: Mapping[str, str], topic: str) -> bool:
    """Whether one record (value ``probe``) written to ``topic`` with ``config``'s login is acknowledged."""
    from confluent_kafka import KafkaException, Producer

    from kafkaops.testing.traffic import producer_config

    outcome: list[Any] = []
    producer = Producer(producer_config(config))
    try:
        producer.produce(topic, value=b"probe", on_delivery=lambda err, msg: outcome.append(err))
    except KafkaException:
        return False
    finally:
        waits.close_producer(producer, waits.Deadline(30))
    return acknowledged(outcome)


def acknowledged(outcome: list[Any]) -> bool:
    """Whether the delivery callbacks' errors in ``outcome`` are exactly one ``None`` (one record acknowledged).

    Never ``outcome == [None]``: confluent-kafka's ``KafkaError == None`` converts ``None`` to an int, gets a
    ``TypeError``, and returns a result with that exception still set, so the next native call raises
    ``SystemError: ... returned a result with an exception set`` (the error at f69339e's run)."""
    return len(outcome) == 1 and outcome[0] is None


def topic_values(config: Mapping[str, str], topic: str) -> Counter[str]:
    """Every value ``topic`` holds (read_committed), with how often each is there."""
    ends = {p: e for p, (_, e) in records.end_offsets(config, topic).items()}
    return Counter(r.value.decode() for r in records.read_ranges(config, topic, {p: (0, e) for p, e in ends.items()})
                   if r.value is not None)
