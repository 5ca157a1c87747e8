"""The test watchdog (kafkaops/testing/watchdog.py) with plain ``sleep`` processes: a stand-in for pytest (a Python
process) registers them, then is SIGKILLed; what it registered dies, what it released lives, and a pid
whose start time is not the registered one (a reused pid) is left alone."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kafkaops.testing import watchdog

REPO = Path(__file__).resolve().parents[2]  # its plugins/ holds kafkaops.testing.watchdog

# The stand-in for pytest: registers the actions of argv[1] (a JSON list of [action, release?]), starts an
# unregistered child of its own, prints its watchdog's pid and its child's, then blocks (or exits, argv[2]).
PARENT = """
import json, os, subprocess, sys, time
sys.path.insert(0, {repo!r} + "/plugins")
from kafkaops.testing import watchdog
guards = [(watchdog.guard(action, name="t"), release) for action, release in json.loads(sys.argv[1])]
for guard, release in guards:
    if release:
        guard.release()
child = subprocess.Popen(["sleep", "300"])
if os.fork() == 0:  # a forked child keeps the watchdog's pipe open: the pidfd must tell the parent's death
    time.sleep(300)
    os._exit(0)
time.sleep(watchdog.SCAN_INTERVAL_S + 0.5)  # the watchdog saw the child
print(json.dumps([watchdog.watchdog_pid(), child.pid]), flush=True)
if sys.argv[2] == "block":
    time.sleep(300)
"""


def wait_gone(pids: list[int], timeout: float = 15) -> list[int]:
    deadline = time.monotonic() + timeout
    while (left := [p for p in pids if watchdog.alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


@pytest.fixture
def sleeps() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Four ``sleep 300``, each leading a process group of its own, killed afterwards if still there."""
    processes = [subprocess.Popen(["sleep", "300"], start_new_session=True) for _ in range(4)]
    yield processes
    for process in processes:
        process.kill()
        process.wait()


def _ready_then_end(process: subprocess.Popen[bytes], *, kill: bool) -> list[int]:
    """The pids the stand-in prints once it is ready; then SIGKILL it (``kill``) or let it exit. Its process
    group is killed should it still run afterwards."""
    try:
        pids = json.loads(process.stdout.readline())  # type: ignore[union-attr]
        if kill:
            os.kill(process.pid, signal.SIGKILL)
        process.wait(30)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    return pids


def parent(actions: list[tuple[dict, bool]], *, end: str = "kill") -> tuple[int, int]:
    """Run the stand-in with ``actions``; SIGKILL it once it is ready (``end="kill"``) or let it exit.
    Returns its watchdog's pid and its own child's, once the watchdog is done."""
    process = subprocess.Popen([sys.executable, "-c", PARENT.format(repo=str(REPO)), json.dumps(actions),
                                "block" if end == "kill" else "exit"], stdout=subprocess.PIPE, start_new_session=True)
    dog, child = _ready_then_end(process, kill=end == "kill")
    assert not wait_gone([dog], 20), "the watchdog did not finish"
    return dog, child


def test_what_a_killed_process_registered_dies_with_it(sleeps) -> None:
    by_pid, by_group, by_cmdline, kept = sleeps
    marker = f"/tmp/kafkaops-watchdog-test-{os.getpid()}/"
    by_cmdline.kill()
    by_cmdline.wait()
    by_cmdline = subprocess.Popen(["sh", "-c", f"sleep 300; : {marker}"], start_new_session=True)
    sleeps.append(by_cmdline)
    began = time.monotonic()
    _, child = parent([(watchdog.pid(by_pid.pid), False), (watchdog.group(by_group), False),
                       (watchdog.cmdline("sleep 300;", marker), False)])
    assert not wait_gone([by_pid.pid, by_group.pid, by_cmdline.pid, child], 1)
    assert time.monotonic() - began < 10
    assert watchdog.alive(kept.pid)


def test_released_entries_and_reused_pids_are_left_alone(sleeps) -> None:
    released, reused, *_ = sleeps
    stale = {**watchdog.pid(reused.pid), "start": watchdog.start_time(reused.pid) - 1}  # as a reused pid looks
    _, child = parent([(watchdog.group(released), True), (stale, False)])
    assert not wait_gone([child], 1), "the stand-in's own child outlived it"
    time.sleep(0.5)
    assert watchdog.alive(released.pid) and watchdog.alive(reused.pid)


def test_a_normal_exit_carries_out_what_is_still_registered(sleeps, tmp_path: Path) -> None:
    folder = tmp_path / "left"
    folder.mkdir()
    registered, released, *_ = sleeps
    parent([(watchdog.pid(registered.pid), False), (watchdog.rmtree(folder), False),
            (watchdog.pid(released.pid), True)], end="exit")
    assert not wait_gone([registered.pid], 1)
    assert not folder.exists() and watchdog.alive(released.pid)


# An xdist controller and its worker, each with a watchdog: the worker (argv[1] == "worker") registers the pid
# argv[2]; the controller starts the worker and waits until its watchdog has seen the worker's tree.
NESTED = """
import json, os, subprocess, sys, time
sys.path.insert(0, {repo!r} + "/plugins")
from kafkaops.testing import watchdog
if sys.argv[1] == "worker":
    watchdog.guard(watchdog.pid(int(sys.argv[2])), name="worker's")
    print(json.dumps([watchdog.watchdog_pid()]), flush=True)
    time.sleep(300)
watchdog.guard(watchdog.rmtree(sys.argv[3]), name="controller's")
worker = subprocess.Popen([sys.executable, "-c", sys.argv[4], "worker", sys.argv[2]], stdout=subprocess.PIPE)
inner = json.loads(worker.stdout.readline())[0]
time.sleep(watchdog.SCAN_INTERVAL_S + 0.5)  # the controller's watchdog saw the worker and the worker's watchdog
print(json.dumps([watchdog.watchdog_pid(), worker.pid, inner]), flush=True)
time.sleep(300)
"""


def test_a_killed_controller_leaves_its_workers_watchdogs_to_clean_up(sleeps, tmp_path: Path) -> None:
    """SIGKILL to an xdist controller: its watchdog kills the workers (its descendants) but not their watchdogs,
    which then stop what each worker registered (the worker's session cluster, in a real run)."""
    registered = sleeps[0]
    folder = tmp_path / "controller"
    folder.mkdir()
    script = NESTED.format(repo=str(REPO))
    process = subprocess.Popen([sys.executable, "-c", script, "controller", str(registered.pid), str(folder), script],
                               stdout=subprocess.PIPE, start_new_session=True)
    outer, worker, inner = _ready_then_end(process, kill=True)
    assert not wait_gone([outer, worker, inner], 30), "a watchdog or the worker did not finish"
    assert not watchdog.alive(registered.pid), "the worker's watchdog was killed before it cleaned up"
    assert not folder.exists()
