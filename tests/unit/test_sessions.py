"""The test session's own ordering (tests/sessions.py): pure functions over stand-in items."""
from __future__ import annotations

from types import SimpleNamespace

from tests import sessions


def _items(*nodeids: str) -> list[SimpleNamespace]:
    return [SimpleNamespace(nodeid=n, fixturenames=()) for n in nodeids]


ITEMS = _items(*(f"tests/a.py::test_{i}" for i in range(5)), *(f"tests/b.py::TestX::test_{i}" for i in range(4)),
               *(f"tests/b.py::test_loose_{i}" for i in range(3)), *(f"tests/c.py::test_{i}" for i in range(6)))


def _runs(order: list[str]) -> list[str]:
    """The blocks (module, or module and class) in the order they run, each once while contiguous."""
    blocks: list[str] = []
    for nodeid in order:
        path, _, rest = nodeid.partition("::")
        block = path + ("::" + rest.split("::")[0] if rest.count("::") else "")
        if not blocks or blocks[-1] != block:
            blocks.append(block)
    return blocks


def test_a_shuffle_keeps_every_test_once_and_each_module_and_class_together() -> None:
    order = [i.nodeid for i in sessions.shuffled(ITEMS, "42")]
    assert sorted(order) == sorted(i.nodeid for i in ITEMS)
    runs = _runs(order)
    assert len(runs) == len(set(runs)) == 4, runs  # a.py, b.py::TestX, b.py loose, c.py: each block once
    modules = [r.split("::")[0] for r in runs]
    at = [k for k, m in enumerate(modules) if m == "tests/b.py"]
    assert at == [at[0], at[0] + 1], modules  # b.py's two blocks one after the other


def test_a_seed_draws_one_order_and_another_seed_another() -> None:
    first = [i.nodeid for i in sessions.shuffled(ITEMS, "42")]
    assert first == [i.nodeid for i in sessions.shuffled(ITEMS, "42")]
    others = {tuple(i.nodeid for i in sessions.shuffled(ITEMS, str(seed))) for seed in range(20)}
    assert len(others) > 10 and tuple(i.nodeid for i in ITEMS) != tuple(first)
