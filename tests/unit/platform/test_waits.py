"""The deadline of a wait, and the slices a wait cuts its client calls into (a clock that tests move)."""
from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from kafkaops.errors import KafkaOpsError, WaitTimedOut
from kafkaops.platform import waits


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class SlowQueue:
    """A producer's queue that acknowledges nothing: each flush uses its whole timeout."""

    def __init__(self, clock: Clock, left: int) -> None:
        self.clock, self.left, self.calls = clock, left, []

    def flush(self, timeout: float) -> int:
        self.calls.append(timeout)
        self.clock.now += timeout
        return self.left


def test_a_deadline_counts_from_its_start_and_slices_what_is_left() -> None:
    clock = Clock()
    deadline = waits.Deadline(2.5, clock=clock)
    assert (deadline.remaining(), deadline.slice(), deadline.expired()) == (2.5, 1.0, False)
    clock.now += 2.0
    assert (deadline.remaining(), deadline.slice(), deadline.expired()) == (0.5, 0.5, False)
    clock.now += 1.0
    assert (deadline.remaining(), deadline.slice(), deadline.expired()) == (0.0, 0.0, True)


def test_its_error_names_the_seconds_waited_of_the_seconds_allowed_the_state_and_what_next() -> None:
    clock = Clock()
    deadline = waits.Deadline(30, clock=clock)
    clock.now += 31.25
    err = deadline.timed_out("the end offsets of orders", state="writes stay denied", then="run quiesce again")
    assert isinstance(err, WaitTimedOut) and isinstance(err, KafkaOpsError) and not err.retriable
    assert str(err) == "waited 31.2 s of 30 s for the end offsets of orders; writes stay denied; run quiesce again"


def test_a_flush_asks_in_slices_of_a_second_until_the_deadline() -> None:
    clock = Clock()
    queue = SlowQueue(clock, left=7)
    assert waits.flush(queue, waits.Deadline(2.5, clock=clock)) == 7
    assert queue.calls == [1.0, 1.0, 0.5]


def test_a_flush_returns_as_soon_as_nothing_is_left() -> None:
    clock = Clock()
    queue = SlowQueue(clock, left=0)
    assert waits.flush(queue, waits.Deadline(120, clock=clock)) == 0
    assert queue.calls == [1.0]


class Metadata:
    """A client whose metadata request goes unanswered ``silent`` times, then is answered."""

    def __init__(self, clock: Clock, silent: int, error: int = KafkaError._TIMED_OUT) -> None:
        self.clock, self.silent, self.error, self.calls = clock, silent, error, []

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> str:
        self.calls.append((topic, timeout))
        if len(self.calls) <= self.silent:
            self.clock.now += timeout
            raise KafkaException(KafkaError(self.error))
        return "metadata"


def test_list_topics_asks_again_after_an_unanswered_slice() -> None:
    clock = Clock()
    client = Metadata(clock, silent=2)
    assert waits.list_topics(client, waits.Deadline(10, clock=clock), "orders") == "metadata"
    assert client.calls == [("orders", 1.0)] * 3


def test_list_topics_raises_the_last_error_at_the_deadline_and_others_at_once() -> None:
    clock = Clock()
    client = Metadata(clock, silent=99)
    with pytest.raises(KafkaException):
        waits.list_topics(client, waits.Deadline(2, clock=clock))
    assert len(client.calls) == 2
    refused = Metadata(clock, silent=99, error=KafkaError.TOPIC_AUTHORIZATION_FAILED)
    with pytest.raises(KafkaException):
        waits.list_topics(refused, waits.Deadline(10, clock=clock))
    assert len(refused.calls) == 1
