"""A session-wide guard over librdkafka clients (confluent-kafka's AdminClient, Producer, Consumer).

It fails a test

* during which the cyclic garbage collector freed a client that was not closed: an AdminClient (it has
  no ``close()``; only its last reference going releases it) or a Producer/Consumer before its
  ``close()``. Such a client was in a reference cycle, and the collector runs wherever a later
  allocation triggers it, also on one of librdkafka's own threads, where destroying the client aborts
  the process (:mod:`kafkaops.platform.kafka.connection` tells how). Each client made in the test session is
  followed by a weak reference whose callback notes whether a collection is running when it fires;
  Producer and Consumer are subclassed (their C types take no weak reference) and installed on
  ``confluent_kafka`` before the test modules import them.
* after which more clients are alive than before it started, its own fixtures torn down: a client
  left open. Each live librdkafka client runs one thread named ``rdk:main`` until it is destroyed; the
  guard counts them in ``/proc/self/task/*/comm``. Fixtures of a wider scope (module, session) are set
  up before this function-scoped one, so what they hold is counted before the test. A test that asks
  for one while it runs (``getfixturevalue``) is not held to the count: that fixture may keep clients
  for the tests after it.
"""
from __future__ import annotations

import gc
import os
import threading
import time
import traceback
import weakref
from collections.abc import Iterator
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient

_TASKS = "/proc/self/task"


def _named_main() -> int:
    try:
        tids = os.listdir(_TASKS)
    except OSError:  # not Linux: nothing to count
        return 0
    count = 0
    for tid in tids:
        try:
            with open(f"{_TASKS}/{tid}/comm") as f:
                count += f.read().strip() == "rdk:main"
        except OSError:
            pass
    return count


def client_threads(*, settle_s: float = 0.02) -> int:
    """How many librdkafka clients of this process are alive: its threads named ``rdk:main``. A thread
    that ``rdk:main`` starts bears its name until it names itself (``rdk:broker1``...), so the least of
    a few counts ``settle_s`` apart is taken when they differ."""
    counts = [_named_main()]
    for _ in range(3 if counts[0] else 0):
        time.sleep(settle_s)
        counts.append(_named_main())
        if counts[-1] == counts[-2]:
            break
    return min(counts)


class _Client:
    """What the guard knows of one client: its kind, where it was made, whether it was closed."""

    __slots__ = ("kind", "made_at", "closed")

    def __init__(self, kind: str) -> None:
        self.kind = kind
        frames = [f for f in traceback.extract_stack(limit=16)[:-3]
                  if not f.filename.endswith("tests/clients.py") and "-packages/" not in f.filename
                  and not f.filename.startswith("<")]
        self.made_at = " <- ".join(f"{os.path.relpath(f.filename)}:{f.lineno}" for f in reversed(frames[-5:]))
        self.closed = False


class _Guard:
    def __init__(self) -> None:
        self.collecting: int | None = None  # the thread running a collection
        self.freed: list[str] = []
        self._refs: dict[weakref.ref[Any], _Client] = {}
        self._lock = threading.Lock()

    def on_gc(self, phase: str, info: dict[str, Any]) -> None:
        self.collecting = threading.get_ident() if phase == "start" else None

    def follow(self, client: Any, kind: str) -> _Client:
        state = _Client(kind)

        def gone(ref: weakref.ref[Any]) -> None:
            self._refs.pop(ref, None)
            if self.collecting == threading.get_ident() and not state.closed:
                with self._lock:
                    self.freed.append(f"a {state.kind} made at {state.made_at} (on thread "
                                      f"{threading.current_thread().name})")

        self._refs[weakref.ref(client, gone)] = state
        return state

    def open_clients(self) -> list[str]:
        """Where the clients still referenced and not closed were made."""
        return [f"a {state.kind} made at {state.made_at}" for ref, state in list(self._refs.items())
                if ref() is not None and not state.closed]

    def take(self) -> list[str]:
        with self._lock:
            freed, self.freed = self.freed, []
        return freed


_guard = _Guard()


class _Followed:
    """Producer and Consumer, followed by the guard: the kind named by the class, closed at ``close()``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._guarded = _guard.follow(self, type(self).__name__)

    def close(self, *args: Any, **kwargs: Any) -> Any:
        result = super().close(*args, **kwargs)  # type: ignore[misc]
        self._guarded.closed = True
        return result


class Producer(_Followed, confluent_kafka.Producer):
    """confluent-kafka's Producer, followed by the guard."""


class Consumer(_Followed, confluent_kafka.Consumer):
    """confluent-kafka's Consumer, followed by the guard."""


_admin_init = AdminClient.__init__


def _followed_admin_init(self: Any, *args: Any, **kwargs: Any) -> None:
    _admin_init(self, *args, **kwargs)
    _guard.follow(self, "AdminClient")


# Installed when tests/conftest.py loads this plugin: before any test module imports confluent_kafka's names
# (kafkaops' own modules import Producer and Consumer where they use them).
confluent_kafka.Producer = Producer  # type: ignore[misc]
confluent_kafka.Consumer = Consumer  # type: ignore[misc]
AdminClient.__init__ = _followed_admin_init  # type: ignore[method-assign]
gc.callbacks.append(_guard.on_gc)

_measuring = False
_wider_fixture_started = False


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef: Any, request: Any) -> Iterator[None]:
    global _wider_fixture_started
    if _measuring and fixturedef.scope != "function":  # a wider fixture asked for during the test
        _wider_fixture_started = True
    yield


@pytest.fixture(autouse=True)
def librdkafka_clients_released() -> Iterator[None]:
    """Fails the test when it leaves a librdkafka client alive or the garbage collector freed one (module doc)."""
    global _measuring, _wider_fixture_started
    _guard.take()
    before = client_threads()
    _measuring, _wider_fixture_started = True, False
    try:
        yield
    finally:
        _measuring = False
    # torn down after the test's other function-scoped fixtures (autouse ones are set up first)
    problems = [f"the cyclic garbage collector freed {what}: it was in a reference cycle, not closed by the code "
                "that made it" for what in _guard.take()]
    after = client_threads()
    if after > before and not _wider_fixture_started:
        problems.append(f"{after - before} librdkafka client(s) still alive after the test ({before} before, "
                        f"{after} after): close each Producer/Consumer and each KafkaConnection in the code path "
                        f"that made it; open now: {'; '.join(_guard.open_clients()) or 'none the guard followed'}")
    if problems:
        pytest.fail("; ".join(problems), pytrace=False)
