"""The ``local_store`` fixture: a fresh SQLite kafkaops store per test (the embedded default backend),
made this process' store (:func:`kafkaops.platform.store.use`) for the test."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kafkaops.platform import store


@pytest.fixture
def local_store(tmp_path: Path) -> Iterator[store.Store]:
    st = store.open_store(f"sqlite:///{tmp_path / 'kafkaops.db'}")
    store.use(st)
    try:
        yield st
    finally:
        store.use(None)
