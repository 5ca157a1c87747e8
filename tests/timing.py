"""Where a run's time goes: each top-level test folder's wall time, and every test's duration kept
for the next run's scheduling (tests/sessions.py ``by_weight``).

Registered by tests/conftest.py in the process that reports (pytest itself, or xdist's controller,
which receives every worker's reports): a folder's wall time runs from the start of its first test
phase to the end of its last, over all workers, so with xdist the folders overlap and their sum is
more than the run's wall time; "busy" adds up its tests' own durations (setup, call, teardown).
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

#: Written at the end of every run that ran tests; tests/sessions.py reads it (the committed
#: tests/durations.json is the fallback of a fresh clone: refresh it from this file now and then).
DURATIONS_FILE = ".cache/test-durations.json"


def folder(path: str) -> str:
    """The top-level folder a test file belongs to: tests/unit, tests/dags, tests/deployment, and one
    per package of tests/integration (tests/integration/platform, ...)."""
    parts = path.split("/")
    if len(parts) > 3 and parts[1] == "integration":
        return "/".join(parts[:3])
    return "/".join(parts[:2]) if len(parts) > 2 else parts[0]


def plain_nodeid(nodeid: str) -> str:
    """``nodeid`` without the ``@group`` xdist's loadgroup appends."""
    return nodeid.rsplit("@", 1)[0] if nodeid.rfind("@") > nodeid.rfind("]") else nodeid


class Timing:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.started = time.time()
        self.span: dict[str, list[float]] = {}
        self.busy: dict[str, float] = {}
        self.tests: dict[str, int] = {}
        self.durations: dict[str, float] = {}

    def pytest_runtest_logreport(self, report: Any) -> None:
        start, stop = getattr(report, "start", None), getattr(report, "stop", None)
        where = folder(report.nodeid.split("::", 1)[0])
        if start and stop:  # a crashed worker's report of its test has 0 for both
            span = self.span.setdefault(where, [start, stop])
            span[0], span[1] = min(span[0], start), max(span[1], stop)
        self.busy[where] = self.busy.get(where, 0.0) + report.duration
        nodeid = plain_nodeid(report.nodeid)
        self.durations[nodeid] = self.durations.get(nodeid, 0.0) + report.duration
        if report.when == "call" or (report.when == "setup" and report.skipped):
            self.tests[where] = self.tests.get(where, 0) + 1

    def pytest_sessionfinish(self, session: Any) -> None:
        if not self.durations:
            return
        path = self.root / DURATIONS_FILE
        try:
            known = json.loads(path.read_text())
        except (OSError, ValueError):
            known = {}
        known.update({k: round(v, 2) for k, v in self.durations.items()})
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(dict(sorted(known.items())), indent=0) + "\n")
        except OSError:
            pass

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.span:
            return
        terminalreporter.section("wall time per test folder")
        rows = sorted(self.span.items(), key=lambda kv: kv[1][0])
        width = max(len(name) for name, _ in rows)
        for name, (start, stop) in rows:
            terminalreporter.write_line(
                f"{name:<{width}}  {stop - start:7.1f} s wall  {self.busy.get(name, 0.0):7.1f} s busy  "
                f"{self.tests.get(name, 0):5d} tests  (from +{start - self.started:.0f} s)")
        terminalreporter.write_line(f"{'run':<{width}}  {time.time() - self.started:7.1f} s wall")
