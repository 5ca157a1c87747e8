"""The test session's own ordering (tests/sessions.py): pure functions over stand-in items."""
from __future__ import annotations

from types import SimpleNamespace

from tests import sessions


def _items(*nodeids: str, last: tuple[str, ...] = ()) -> list[SimpleNamespace]:
    """Stand-in test items; those in ``last`` carry the ``last_in_module`` marker."""
    return [SimpleNamespace(nodeid=n, fixturenames=(),
                            get_closest_marker=lambda name, n=n: (name == "last_in_module" and n in last) or None)
            for n in nodeids]


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


def test_a_test_marked_last_in_module_stays_after_its_modules_other_tests_in_every_seed() -> None:
    last = "tests/b.py::test_loose_1"
    items = _items(*(i.nodeid for i in ITEMS), last=(last,))
    for seed in range(20):
        order = [i.nodeid for i in sessions.shuffled(items, str(seed))]
        assert sorted(order) == sorted(i.nodeid for i in ITEMS)
        b = [k for k, n in enumerate(order) if n.startswith("tests/b.py")]
        assert order[b[-1]] == last and b == list(range(b[0], b[0] + len(b))), order


def test_a_seed_draws_one_order_and_another_seed_another() -> None:
    first = [i.nodeid for i in sessions.shuffled(ITEMS, "42")]
    assert first == [i.nodeid for i in sessions.shuffled(ITEMS, "42")]
    others = {tuple(i.nodeid for i in sessions.shuffled(ITEMS, str(seed))) for seed in range(20)}
    assert len(others) > 10 and tuple(i.nodeid for i in ITEMS) != tuple(first)


class _Item(SimpleNamespace):
    __hash__ = object.__hash__  # a test item is a dict key of sessions.groups


def _item(nodeid: str, **fixtures: str) -> _Item:
    """A stand-in test using ``fixtures`` (name -> scope), each defined in tests/dags/conftest.py."""
    defs = {name: [SimpleNamespace(scope=scope, baseid="tests/dags")] for name, scope in fixtures.items()}
    return _Item(nodeid=nodeid, fixturenames=tuple(fixtures), _fixtureinfo=SimpleNamespace(name2fixturedefs=defs))


def test_groups_follow_the_fixtures_tests_share() -> None:
    live = "tests/dags/test_live.py"
    items = [
        # one module: two tests on its cluster fixture, one on another module fixture of its own
        a := _item(f"{live}::test_a", cluster="module", one_broker_cluster="package"),
        b := _item(f"{live}::test_b", cluster="module", one_broker_cluster="package"),
        acl := _item(f"{live}::test_acl", acl_cluster="module"),
        # another module on the same per-module package fixture, and one on the session's Spark cluster
        pi := _item("tests/dags/test_pi.py::test_x", one_broker_cluster="package"),
        s1 := _item("tests/dags/test_submit.py::test_1", one_broker_cluster="package", spark_standalone="session"),
        s2 := _item("tests/integration/test_spark.py::test_2", spark_standalone="session", kafka_cluster="session"),
        k := _item("tests/integration/test_k.py::test_3", kafka_cluster="session"),
        # a package fixture not in PER_MODULE_FIXTURES: every module that uses it together
        d1 := _item("tests/dags/test_d1.py::test_1", deployed="package"),
        d2 := _item("tests/dags/test_d2.py::test_1", deployed="package"),
        free := _item("tests/unit/test_free.py::test_1"),
    ]
    group = sessions.groups(items)
    assert group[a] == group[b] != group[acl]
    assert len({group[a], group[acl], group[pi], group[s1], group[d1]}) == 5
    assert group[s1] == group[s2] == group[k] == "kafka_cluster"
    assert group[d1] == group[d2]
    assert free not in group
