"""Consume-transform-produce in Kafka transactions, in one process: what a live migration's tail copy
reads, writes and checks.

A :class:`TransactionalCopy` holds four librdkafka handles, all closed by :meth:`TransactionalCopy.close`
in the caller's thread (never by the garbage collector): a transactional producer (one
``transactional.id``: a new copy with the same id fences an older one and aborts what it left open), a
``read_committed`` consumer of the source assigned by hand (its ``group.id`` names the group the
copied position is committed to, inside each transaction, by ``send_offsets_to_transaction``), a
``read_uncommitted`` reader of the outputs (it reads a transaction's records back *before* the commit,
so a part is committed only once it was checked), and an admin client for end offsets.

Invariant: a part's records and its source position are committed together or not at all; what an
earlier run of the same copy left open is aborted before this one writes; no record is read past the
end offsets it was given.
"""
from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from confluent_kafka import IsolationLevel, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import OffsetSpec

from kafkaops.errors import KafkaOpsError
from kafkaops.platform.kafka import connection, errors
from kafkaops.platform.kafka import records
from kafkaops.platform.kafka.records import Record

log = logging.getLogger(__name__)

TopicPartitionKey = tuple[str, int]
#: How long one fetch of records waits at most (librdkafka returns a batch only when full or at this timeout,
#: so it bounds the latency a read of a few records adds; the loop goes on until the end offsets).
POLL_S = 0.02
#: The most text a committed offset carries (the broker's ``offset.metadata.max.bytes`` is 4,096 by default).
NOTE_BYTES = 4000


class Output(Protocol):
    """One record to write: where, its key, value, headers and timestamp (ms; None: now)."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def headers(self) -> tuple[tuple[str, bytes | None], ...]: ...
    @property
    def timestamp(self) -> int | None: ...


class TransactionFailed(KafkaOpsError):
    """A transaction was aborted (or could not be): nothing of it is visible to read_committed readers."""


def _kafka_error(err: KafkaException) -> KafkaError | None:
    return err.args[0] if err.args and isinstance(err.args[0], KafkaError) else None


class TransactionalCopy:
    """Copy records of ``source_topic`` to output topic partitions in transactions (see the module).

    ``transactional_id`` and ``group_id`` name the copy in Kafka: run it again with the same two and it
    resumes at the committed position, fencing any older process still writing."""

    def __init__(self, config: Mapping[str, str], *, source_topic: str, transactional_id: str, group_id: str,
                 timeout_s: float = 30.0, transaction_timeout_s: float = 60.0) -> None:
        from confluent_kafka import Consumer, Producer  # looked up per call: the tests' client guard replaces them

        self.source_topic = source_topic
        self.transactional_id = transactional_id
        self.group_id = group_id
        self.timeout_s = timeout_s
        self.config = connection.connection_config(config)
        base = connection.client_config(self.config)
        self._conn: connection.KafkaConnection | None = None
        self._producer: Any = None
        self._source: Any = None
        self._reader: Any = None
        try:
            self._conn = connection.connect(self.config, timeout_s=timeout_s)
            self._producer = Producer({**base, "transactional.id": transactional_id, "enable.idempotence": True,
                                       "acks": "all", "linger.ms": 5, "batch.size": 1_000_000,
                                       "transaction.timeout.ms": int(transaction_timeout_s * 1000),
                                       "message.timeout.ms": int(transaction_timeout_s * 1000)})
            self._source = Consumer({**base, "group.id": group_id, "isolation.level": "read_committed",
                                     "enable.auto.commit": False, "enable.auto.offset.store": False,
                                     "enable.partition.eof": True, "auto.offset.reset": "error",
                                     "fetch.wait.max.ms": 50})
            self._reader = Consumer({**base, "group.id": f"{group_id}-check", "isolation.level": "read_uncommitted",
                                     "enable.auto.commit": False, "enable.partition.eof": True,
                                     "auto.offset.reset": "error", "fetch.wait.max.ms": 10})
            self._call("initialising the transactions of " + transactional_id,
                       lambda: self._producer.init_transactions(timeout_s))
        except BaseException:
            self.close()
            raise

    # -- lifecycle -------------------------------------------------------------------------------------

    def close(self) -> None:
        """Release every handle here, in the caller's thread; an open transaction is abandoned (the next
        copy with the same transactional id aborts it, or the broker after its timeout). Idempotent."""
        source, reader, producer, conn = self._source, self._reader, self._producer, self._conn
        self._source = self._reader = self._producer = self._conn = None
        try:
            for consumer in (source, reader):
                if consumer is not None:
                    consumer.close()
            if producer is not None:
                try:
                    producer.close()
                except KafkaException as err:  # a producer fenced or failed fatally still released its handle
                    log.info("the producer of %s closed after an error: %s", self.transactional_id, err)
        finally:
            if conn is not None:
                conn.close()

    def __enter__(self) -> TransactionalCopy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _open(self) -> connection.KafkaConnection:
        if self._conn is None:
            raise KafkaOpsError(f"the transactional copy {self.transactional_id} is closed")
        return self._conn

    def _call(self, what: str, call: Any) -> Any:
        try:
            return call()
        except KafkaException as err:
            raise errors.classify(err, what, self._open()) from err

    # -- positions -------------------------------------------------------------------------------------

    def committed(self, partitions: Iterable[int]) -> tuple[dict[int, int | None], str]:
        """The copy's committed source position (next offset to copy) per partition (None: none yet), and
        the text committed with it (:meth:`commit`'s ``note``; empty when none)."""
        asked = [TopicPartition(self.source_topic, int(p)) for p in sorted(partitions)]
        what = f"the committed position of group {self.group_id}"
        # a coordinator still loading or moving (a fresh cluster creates __consumer_offsets on first use) is asked again
        found = errors.retrying(what, attempts=None, deadline_s=self.timeout_s, first_wait_s=0.2, max_wait_s=2.0)(
            self._call, what, lambda: self._source.committed(asked, timeout=self.timeout_s))
        note = next((tp.metadata for tp in found if tp.metadata), "") if found else ""
        return {tp.partition: (tp.offset if tp.offset >= 0 else None) for tp in found}, note or ""

    def ends(self, partitions: Iterable[TopicPartitionKey], *, committed: bool = True) -> dict[TopicPartitionKey, int]:
        """End offsets now: the last stable offset (``committed``: what read_committed readers reach) or
        the high watermark."""
        asked = [TopicPartition(t, int(p)) for t, p in partitions]
        if not asked:
            return {}
        level = IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED
        conn = self._open()
        futures = conn.admin.list_offsets({tp: OffsetSpec.latest() for tp in asked}, isolation_level=level,
                                          request_timeout=self.timeout_s)
        return {(tp.topic, tp.partition): connection.wait_for(f, conn, f"the end offset of {tp.topic}-{tp.partition}"
                                                              ).offset for tp, f in futures.items()}

    # -- reading ---------------------------------------------------------------------------------------

    def read_source(self, starts: Mapping[int, int], ends: Mapping[int, int]) -> list[Record]:
        """The source's committed records in ``[starts[p], ends[p])``, in offset order per partition."""
        return _read(self._source, {(self.source_topic, p): (s, ends[p]) for p, s in starts.items()}, self.timeout_s)

    def read_back(self, ranges: Mapping[TopicPartitionKey, tuple[int, int]]) -> list[Record]:
        """The outputs' records in ``[start, end)`` per topic partition, an open transaction's included."""
        return _read(self._reader, ranges, self.timeout_s)

    # -- writing ---------------------------------------------------------------------------------------

    def begin(self) -> None:
        self._call("beginning a transaction", self._producer.begin_transaction)

    def write(self, records: Sequence[Output]) -> None:
        """Produce ``records`` in the open transaction, in this order, and wait until each is written
        (not yet committed)."""
        failures: list[KafkaError] = []

        def delivered(err: KafkaError | None, _msg: Any) -> None:
            if err is not None:
                failures.append(err)

        for r in records:
            while True:
                try:
                    self._producer.produce(r.topic, r.value, r.key, partition=r.partition, headers=list(r.headers),
                                           timestamp=r.timestamp or 0, on_delivery=delivered)
                    break
                except BufferError:  # the local queue is full: let deliveries make room
                    self._producer.poll(0.05)
        left = self._producer.flush(self.timeout_s)
        if left or failures:
            why = f"{left} record(s) not acknowledged within {self.timeout_s:.0f} s" if left else str(failures[0])
            raise TransactionFailed(f"writing {len(records):,} record(s) in a transaction of {self.transactional_id} "
                                    f"failed: {why}")

    def commit(self, positions: Mapping[int, int], note: str = "") -> None:
        """Commit the open transaction with the source ``positions`` (partition -> next offset to copy) and
        ``note`` (at most :data:`NOTE_BYTES`, kept with the first partition's offset: what the copy counted
        up to here, for the process after this one)."""
        if len(note.encode()) > NOTE_BYTES:
            raise KafkaOpsError(f"a note of {len(note.encode())} bytes does not fit a committed offset ({NOTE_BYTES})")
        first = min(positions)
        offsets = [TopicPartition(self.source_topic, int(p), int(o), note if p == first else "")
                   for p, o in sorted(positions.items())]
        self._call(f"sending the position of group {self.group_id} to the transaction",
                   lambda: self._producer.send_offsets_to_transaction(
                       offsets, self._source.consumer_group_metadata(), self.timeout_s))
        self._call("committing the transaction", lambda: self._producer.commit_transaction(self.timeout_s))

    def abort(self) -> None:
        """Abort the open transaction (none open: nothing happens)."""
        try:
            self._producer.abort_transaction(self.timeout_s)
        except KafkaException as err:
            error = _kafka_error(err)
            if error is not None and error.code() == KafkaError._STATE:  # no transaction is open
                return
            raise errors.classify(err, "aborting the transaction", self._open()) from err


def _read(consumer: Any, ranges: Mapping[TopicPartitionKey, tuple[int, int]], timeout_s: float) -> list[Record]:
    """Records of ``ranges`` read by ``consumer`` (assigned here), in offset order per topic partition
    (:func:`kafkaops.platform.kafka.records.consume_ranges`, asking every :data:`POLL_S`)."""
    return list(records.consume_ranges(consumer, ranges, timeout_s=timeout_s, poll_s=POLL_S))
