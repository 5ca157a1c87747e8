"""Every test: warn, naming it, when a test leaves this process's SIGINT ignored or blocked in its main thread.

A child process inherits both (an ignored signal and the thread's signal mask survive ``exec``), and Python
turns SIGINT into KeyboardInterrupt only when it starts with the default disposition: a ``kafkaops execute``
that a test starts after such a test no longer stops on Ctrl-C (seen twice in CI runs: the CLI finished its
move and exited 0). A warning rather than a failure: the test that changed it is named in the run's summary."""
from __future__ import annotations

import signal
import warnings
from collections.abc import Iterator

import pytest


def sigint_state() -> tuple[str, bool]:
    """This process's SIGINT disposition (``ignored``, ``default`` or ``handled``) and whether the calling thread
    blocks it."""
    handler = signal.getsignal(signal.SIGINT)
    kind = "ignored" if handler == signal.SIG_IGN else "default" if handler in (signal.SIG_DFL, None) else "handled"
    return kind, signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, set())


@pytest.fixture(autouse=True)
def sigint_left_as_found() -> Iterator[None]:
    before = sigint_state()
    yield
    after = sigint_state()
    if after != before and (after[0] == "ignored" or after[1]):
        warnings.warn(f"this test left SIGINT {after[0]}{' and blocked' if after[1] else ''} in the pytest process "
                      f"(before it: {before[0]}{' and blocked' if before[1] else ''}): the processes later tests start "
                      "inherit it and ignore Ctrl-C", stacklevel=1)
