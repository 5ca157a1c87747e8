"""Session fixtures that keep servers running (brokers, sshd): their tests run one after another, and
each stops right after its last test instead of at the end of the session, so idle brokers do not
share the machine's two cores with the rest of the run. tests/conftest.py's hooks call this module."""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

#: Session fixtures whose tests are spread over packages (tests/dags and tests/integration): their
#: tests run one after another, from where the first of them stands.
GROUPED_FIXTURES = ("secured_cluster", "tls_nodes", "remote_cluster", "remote_sshd", "spark_standalone")
#: Session fixtures stopped right after the last test that uses them.
EARLY_STOP_FIXTURES = (*GROUPED_FIXTURES, "kafka_cluster")

_stoppers: dict[str, contextlib.ExitStack] = {}
_last_user: dict[str, str] = {}


@contextlib.contextmanager
def stops_early(name: str) -> Iterator[contextlib.ExitStack]:
    """The ExitStack of session fixture ``name``: closed after its last test (:func:`stop_after`) or,
    at the latest, when the fixture ends."""
    with contextlib.ExitStack() as stack:
        _stoppers[name] = stack
        try:
            yield stack
        finally:
            _stoppers.pop(name, None)


def _uses(item: Any, name: str) -> bool:
    return name in getattr(item, "fixturenames", ())


def grouped(items: list[Any], name: str) -> list[Any]:
    """``items`` with every test that uses fixture ``name`` moved up to the first of them, in their order."""
    users = [item for item in items if _uses(item, name)]
    if not users:
        return items
    first = items.index(users[0])
    rest = [item for item in items if not _uses(item, name)]
    return rest[:first] + users + rest[first:]


def ordered(items: list[Any]) -> list[Any]:
    """The session's tests, each grouped fixture's together; remembers each fixture's last test."""
    for name in GROUPED_FIXTURES:
        items = grouped(items, name)
    _last_user.clear()
    for item in items:
        for name in EARLY_STOP_FIXTURES:
            if _uses(item, name):
                _last_user[name] = item.nodeid
    return items


def stop_after(item: Any) -> None:
    """Stop the fixtures whose last test ``item`` was (the latest started first: a cluster before its sshd)."""
    for name in reversed(list(_stoppers)):
        if _last_user.get(name) == item.nodeid:
            _stoppers.pop(name).close()
