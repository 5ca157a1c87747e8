"""records.consume_ranges, the one read loop of ranges of records (records.read_ranges and the tail's
transactional copy): what it assigns, where each range stops, and its deadline. A stand-in consumer hands
over batches as librdkafka would; no broker."""
from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError

from kafkaops.errors import KafkaOpsError, KafkaUnreachable
from kafkaops.platform.kafka import records


class Msg:
    def __init__(self, topic: str, partition: int, offset: int, error: KafkaError | None = None) -> None:
        self._t, self._p, self._o, self._e = topic, partition, offset, error

    def topic(self) -> str:
        return self._t

    def partition(self) -> int:
        return self._p

    def offset(self) -> int:
        return self._o

    def error(self) -> KafkaError | None:
        return self._e

    def timestamp(self) -> tuple[int, int]:
        return (1, 1_000 + self._o)

    def key(self) -> bytes:
        return b"k"

    def value(self) -> bytes:
        return f"{self._t}-{self._p}@{self._o}".encode()

    def headers(self) -> Any:
        return None


class Consumer:
    def __init__(self, batches: list[list[Msg]]) -> None:
        self.batches, self.assigned, self.polls = batches, [], []

    def assign(self, partitions: list[Any]) -> None:
        self.assigned = [(tp.topic, tp.partition, tp.offset) for tp in partitions]

    def consume(self, n: int, timeout: float) -> list[Msg]:
        self.polls.append(timeout)
        return self.batches.pop(0) if self.batches else []


def eof(topic: str, partition: int, offset: int) -> Msg:
    return Msg(topic, partition, offset, KafkaError(KafkaError._PARTITION_EOF))


def test_each_range_is_read_to_its_end_and_no_further_across_topics() -> None:
    consumer = Consumer([[Msg("a", 0, 0), Msg("b", 1, 5)],
                         [Msg("a", 0, 1), Msg("a", 0, 2), Msg("a", 0, 3), Msg("b", 1, 6)],  # a-0@3: past its end
                         [eof("b", 1, 7)]])
    got = list(records.consume_ranges(consumer, {("a", 0): (0, 3), ("b", 1): (5, 7), ("c", 0): (4, 4)},
                                      timeout_s=5, poll_s=0.02))
    assert consumer.assigned == [("a", 0, 0), ("b", 1, 5)]  # an empty range is not asked for
    assert [(r.topic, r.partition, r.offset) for r in got] == [("a", 0, 0), ("b", 1, 5), ("a", 0, 1), ("a", 0, 2),
                                                              ("b", 1, 6)]
    assert set(consumer.polls) == {0.02} and len(consumer.polls) == 2  # both ranges ended in the second batch


def test_a_range_that_never_ends_fails_at_the_deadline_naming_it_and_a_broken_batch_is_refused() -> None:
    with pytest.raises(KafkaUnreachable, match=r"reading a: partitions did not reach their end offsets \{'a-0': 3\}"):
        list(records.consume_ranges(Consumer([[Msg("a", 0, 0)]]), {("a", 0): (0, 3)}, timeout_s=0.05, poll_s=0.01))
    refused = Msg("a", 0, 1, KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))
    with pytest.raises(KafkaOpsError, match="reading a-0"):
        list(records.consume_ranges(Consumer([[refused]]), {("a", 0): (0, 3)}, timeout_s=5, poll_s=0.01))
