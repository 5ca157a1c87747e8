"""Waits that end: a deadline on the monotonic clock, and Kafka client calls cut into slices.

A librdkafka call (``flush``, ``poll``, ``list_topics``) blocks in C with the GIL released; Python
runs a signal handler only when that call returns. Airflow's ``execution_timeout`` is such a handler
(a SIGALRM raising ``AirflowTaskTimeout`` in the task's main thread), so a single call that may block
for a minute defers the timeout by that minute. Every wait here asks in slices of at most
:data:`SLICE_S`, checking its :class:`Deadline` in between, and ends with :class:`WaitTimedOut`
naming the object, the seconds waited of the seconds allowed, the state left behind and what to run.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kafkaops.errors import WaitTimedOut

#: The longest a wait stays in one native client call: a signal (SIGALRM) is honoured within this.
SLICE_S = 1.0


@dataclass
class Deadline:
    """``seconds`` from ``started`` (monotonic clock); ``clock`` replaceable for pure tests."""

    seconds: float
    clock: Callable[[], float] = field(default=time.monotonic, repr=False)
    started: float = field(default=-1.0)

    def __post_init__(self) -> None:
        if self.started < 0:
            self.started = self.clock()

    def elapsed(self) -> float:
        return self.clock() - self.started

    def remaining(self) -> float:
        return max(0.0, self.seconds - self.elapsed())

    def expired(self) -> bool:
        return self.elapsed() >= self.seconds

    def slice(self, most: float = SLICE_S) -> float:
        """The timeout of the next native call: what is left, at most ``most`` seconds."""
        return min(self.remaining(), most)

    def timed_out(self, what: str, *, state: str, then: str) -> WaitTimedOut:
        """The error of a wait for ``what`` that reached this deadline."""
        return WaitTimedOut(f"waited {self.elapsed():.1f} s of {self.seconds:.0f} s for {what}; {state}; {then}")


def flush(producer: Any, deadline: Deadline) -> int:
    """``producer.flush`` in slices until nothing is left or ``deadline`` passed; the records still
    unacknowledged (0 when all were). The caller words the error: it knows what they were."""
    while True:
        left = producer.flush(deadline.slice())
        if not left or deadline.expired():
            return int(left)


def list_topics(client: Any, deadline: Deadline, topic: str | None = None) -> Any:
    """A client's ``list_topics`` (cluster metadata) in slices: a call that got no answer within its
    slice is made again (the connection librdkafka set up meanwhile stays) until ``deadline``, when
    the last call's error is raised. Errors other than no answer raise at once."""
    from confluent_kafka import KafkaError, KafkaException

    unanswered = {KafkaError._TIMED_OUT, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN}
    while True:
        try:
            return client.list_topics(topic, timeout=max(deadline.slice(), 0.1))
        except KafkaException as err:
            code = err.args[0].code() if err.args and isinstance(err.args[0], KafkaError) else None
            if code not in unanswered or deadline.expired():
                raise


def close_producer(producer: Any, deadline: Deadline) -> int:
    """Flush ``producer`` until ``deadline`` (:func:`flush`), then close it; the records left unacknowledged
    (0 when all were). Whatever ends the flush (the deadline, an exception such as Airflow's timeout
    signal), what is still queued or in flight is purged first (its delivery callbacks report
    ``_PURGE_QUEUE`` or ``_PURGE_INFLIGHT``): ``close()`` flushes what it finds without a bound (up to
    ``message.timeout.ms``), so it must find nothing."""
    left = 0
    try:
        left = flush(producer, deadline)
    finally:
        if len(producer):
            producer.purge()
            producer.flush(0.5)  # serves the purged records' delivery callbacks
        producer.close()
    return left
