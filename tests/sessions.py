"""Session fixtures that keep servers running (brokers, sshd): their tests run one after another, and
each stops right after its last test instead of at the end of the session, so idle brokers do not
share the machine's two cores with the rest of the run. tests/conftest.py's hooks call this module."""
from __future__ import annotations

import contextlib
import random
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


def shuffled(items: list[Any], seed: str) -> list[Any]:
    """``items`` in an order drawn from ``seed`` (every xdist worker draws the same): the modules in a new
    order, and within each module its classes and loose tests, each class's tests too. A module's (or a
    class's) tests stay together, so a fixture of that scope still starts once. A test marked
    ``last_in_module`` (it changes its module's shared cluster for good) stays after its module's others. A test that passes only
    after another one fails in some seed: ``KAFKAOPS_TEST_SHUFFLE=<seed> make test`` (tests/conftest.py)."""
    rng = random.Random(seed)
    last = [item for item in items if item.get_closest_marker("last_in_module")]
    items = [item for item in items if item not in last]
    modules: dict[str, dict[str, list[Any]]] = {}
    for item in items:
        path, _, rest = item.nodeid.partition("::")
        block = rest.split("::")[0] if "::" in rest else ""  # a class's tests, or "" for the loose ones
        modules.setdefault(path, {}).setdefault(block, []).append(item)
    order = list(modules)
    rng.shuffle(order)
    result: list[Any] = []
    for path in order:
        blocks = list(modules[path].items())
        rng.shuffle(blocks)
        for _, tests in blocks:
            tests = list(tests)
            rng.shuffle(tests)
            result += tests
        result += [item for item in last if item.nodeid.partition("::")[0] == path]
    result += [item for item in last if item.nodeid.partition("::")[0] not in modules]
    return result


def ordered(items: list[Any]) -> list[Any]:
    """The session's tests, each grouped fixture's together; remembers each fixture's last test."""
    for name in GROUPED_FIXTURES:
        items = grouped(items, name)
    _remember_last_users(items)
    return items


def stop_after(item: Any) -> None:
    """Stop the fixtures whose last test ``item`` was (the latest started first: a cluster before its sshd)."""
    for name in reversed(list(_stoppers)):
        if _last_user.get(name) == item.nodeid:
            _stoppers.pop(name).close()


# -- pytest-xdist: which tests share a worker, and in which order the work units start ----------------------
#
# Under ``--dist loadgroup`` xdist sends each xdist_group to one worker as one work unit, and every test
# without a group as a unit of its own. :func:`mark_groups` gives each test the group of everything it
# shares an expensive fixture with (union-find): the session fixtures of EARLY_STOP_FIXTURES (so each
# starts on one worker only, and its last test, which :func:`ordered` computes over the whole
# collection, is also the last that worker runs of it: :func:`stop_after` stays right), and every
# package-, module- or class-scoped fixture (own_cluster, one_broker_cluster, rekey_cluster, the Kafka
# 3.9 cluster, the deployment, a module's SparkSession: started once, not once per worker that got one
# of their tests). Cheap session fixtures (the AIRFLOW_HOME's metadata DB, the DagBag, PostgreSQL) are
# started by each worker that needs them. :func:`by_weight` then puts the heaviest units first in the
# collection, which is the order xdist hands them out in with ``--no-loadscope-reorder``
# (LoadScopeScheduling.schedule otherwise sorts them by their number of tests).

#: Where measured test durations (seconds by node id) come from: the committed table, then this
#: checkout's last runs (tests/timing.py writes it), which win.
DURATIONS_FILES = ("tests/durations.json", ".cache/test-durations.json")
#: A test without a measured duration, by the longest matching prefix of its node id: unit tests are quick,
#: the rest start or drive clusters, DAG runs and Airflow deployments.
DEFAULT_S = {"tests/unit": 0.2, "tests/deployment/test_compose.py": 0.5, "tests/deployment": 120.0,
             "tests/dags": 30.0, "tests/integration": 15.0}
DEFAULT_OTHER_S = 5.0


#: Package-scoped fixtures cheap enough to start once per test module that uses them (a one-broker cluster:
#: about 15 s of CPU with the tests' lean JVMs), so their modules need not all queue on one worker: the
#: longest of them (a live migration under traffic, the Spark backfill's) run side by side.
PER_MODULE_FIXTURES = ("one_broker_cluster", "rekey_cluster")


def _group_keys(item: Any) -> list[str]:
    keys = [name for name in EARLY_STOP_FIXTURES if _uses(item, name)]
    info = getattr(item, "_fixtureinfo", None)
    module = item.nodeid.split("::", 1)[0]
    for name, defs in (info.name2fixturedefs.items() if info else ()):
        if name not in item.fixturenames or not defs:
            continue
        scope = defs[-1].scope
        if scope == "package" and name in PER_MODULE_FIXTURES:
            keys.append(f"{name}:{module}")
        elif scope == "package":
            keys.append(f"{name}:{defs[-1].baseid or '.'}")
        elif scope in ("module", "class"):
            # the fixture of this module (class): its tests together, a module's other tests free to go elsewhere
            keys.append(f"{module if scope == 'module' else item.nodeid.rsplit('::', 1)[0]}@{name}")
    return keys


def groups(items: list[Any]) -> dict[Any, str]:
    """Each test that shares an expensive fixture with another, and the name of their group."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    keys = {item: _group_keys(item) for item in items}
    for its_keys in keys.values():
        for key in its_keys[1:]:
            parent[find(key)] = find(its_keys[0])
    members: dict[str, list[str]] = {}
    for its_keys in keys.values():
        for key in its_keys:
            members.setdefault(find(key), []).append(key)
    # a readable, stable name: the first of its session fixtures, else of its other keys ('@' ends a node id's group)
    name = {root: min(ks, key=lambda k: (":" in k or "/" in k, k)).replace("@", "_") for root, ks in members.items()}
    return {item: name[find(its_keys[0])] for item, its_keys in keys.items() if its_keys}


def mark_groups(items: list[Any]) -> None:
    import pytest

    for item, name in groups(items).items():
        item.add_marker(pytest.mark.xdist_group(name))


def _durations(root: Any) -> dict[str, float]:
    import json
    from pathlib import Path

    known: dict[str, float] = {}
    for name in DURATIONS_FILES:
        try:
            known.update(json.loads((Path(root) / name).read_text()))
        except (OSError, ValueError):
            continue
    return known


def estimate(nodeid: str, known: dict[str, float]) -> float:
    """A test's expected seconds (setup, call and teardown): measured, or the default of its folder."""
    nodeid = nodeid.rsplit("@", 1)[0] if nodeid.rfind("@") > nodeid.rfind("]") else nodeid
    if nodeid in known:
        return known[nodeid]
    return next((DEFAULT_S[p] for p in sorted(DEFAULT_S, key=len, reverse=True) if nodeid.startswith(p)),
                DEFAULT_OTHER_S)


def group_of(item: Any) -> str | None:
    marks = [m.args[0] if m.args else m.kwargs.get("name", "default") for m in item.iter_markers("xdist_group")]
    return "_".join(sorted(map(str, marks))) if marks else None


def _name_group(item: Any, group: str) -> None:
    """Append ``@group`` to the test's node id, which is what xdist's LoadGroupScheduling groups by. xdist's
    worker does so itself (xdist.remote, ``item._nodeid``), but pytest 9 keeps a node id in ``item._id``, a
    NodeId, and no longer reads ``_nodeid``: without this every test would be a work unit of its own."""
    nodeid = f"{item.nodeid}@{group}"
    if hasattr(item, "_id"):
        from _pytest.nodeid import NodeId

        item._id = NodeId.parse(nodeid)
    else:
        item._nodeid = nodeid


def by_weight(items: list[Any], root: Any) -> list[Any]:
    """``items`` in work units (a group's tests, or one test), the longest expected unit first; each unit's
    tests in their order. Also remembers each early-stop fixture's last test again."""
    known = _durations(root)
    units: dict[str, list[Any]] = {}
    for item in items:
        group = group_of(item)
        if group and not item.nodeid.endswith("@" + group):
            _name_group(item, group)
        units.setdefault(group or item.nodeid, []).append(item)
    weight = {unit: sum(estimate(i.nodeid, known) for i in its) for unit, its in units.items()}
    order = sorted(units, key=lambda unit: -weight[unit])  # stable: equal weights keep the collection's order
    items = [item for unit in order for item in units[unit]]
    _remember_last_users(items)
    return items


def _remember_last_users(items: list[Any]) -> None:
    _last_user.clear()
    for item in items:
        for name in EARLY_STOP_FIXTURES:
            if _uses(item, name):
                _last_user[name] = item.nodeid


def unit_weights(items: list[Any], root: Any) -> list[tuple[str, int, float]]:
    """(unit, tests, expected seconds) of the groups, heaviest first: what ``--collect-only`` shows."""
    known = _durations(root)
    units: dict[str, list[Any]] = {}
    for item in items:
        name = group_of(item)
        if name:
            units.setdefault(name, []).append(item)
    rows = [(name, len(its), sum(estimate(i.nodeid, known) for i in its)) for name, its in units.items()]
    return sorted(rows, key=lambda row: -row[2])
