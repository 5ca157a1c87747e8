"""Nothing outlives a killed session: a child pytest (tests/integration/watchdog_child.py) starts a Kafka
broker through ``clusters.temporary_cluster``, a throw-away PostgreSQL and a redis-server as the suite's
fixtures do, and is then killed with SIGKILL (no teardown, no atexit): its watchdog (kafkaops.testing.watchdog)
stops all of them, frees their ports and removes their folders."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kafkaops.testing import watchdog

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
CHILD = Path(__file__).with_name("watchdog_child.py")
#: The child's start: pytest with the suite's conftests, a broker through the role, PostgreSQL, Redis.
START_TIMEOUT_S = 180
#: How long everything may take to be gone. The broker and Redis are SIGKILLed (nothing to save: no stop
#: grace applies), PostgreSQL gets ``pg_ctl stop -m immediate -t 30`` (under a second here; its 30 s are the
#: bound), then each kill waits at most KILL_WAIT_S for its processes.
GONE_TIMEOUT_S = 30 + 3 * watchdog.KILL_WAIT_S


def port_free(port: int) -> bool:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def test_a_session_killed_with_sigkill_leaves_nothing_running(tmp_path: Path) -> None:
    out, log = tmp_path / "running.json", tmp_path / "watchdog.log"
    env = {**os.environ, "KAFKAOPS_WATCHDOG_CHILD_OUT": str(out), watchdog.LOG_ENV: str(log)}
    child = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                              str(CHILD)], cwd=REPO, env=env, stdout=(tmp_path / "child.log").open("wb"),
                             stderr=subprocess.STDOUT, start_new_session=True)
    running: dict = {}
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not out.exists():
            assert child.poll() is None, f"the child pytest ended first:\n{(tmp_path / 'child.log').read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"the child did not start its servers in {START_TIMEOUT_S} s"
            time.sleep(0.5)
        time.sleep(0.2)  # written whole (one write_text), but be sure
        running = json.loads(out.read_text())
        assert running["pids"] and all(watchdog.alive(p) for p in running["pids"]), running
        assert all(Path(f).is_dir() for f in running["folders"]), running

        os.kill(child.pid, signal.SIGKILL)  # pytest only: its process group (and everything else) lives on
        killed = time.monotonic()
        child.wait(10)
        while time.monotonic() - killed < GONE_TIMEOUT_S and (
                [p for p in running["pids"] if watchdog.alive(p)] or not all(map(port_free, running["ports"]))
                or any(Path(f).exists() for f in running["folders"])):
            time.sleep(0.1)
        took = time.monotonic() - killed
        left = [p for p in running["pids"] if watchdog.alive(p)]
        taken = [p for p in running["ports"] if not port_free(p)]
        folders = [f for f in running["folders"] if Path(f).exists()]
        what = log.read_text() if log.exists() else "(no watchdog log)"
        assert not (left or taken or folders), (f"{took:.1f} s after the SIGKILL: alive {left}, ports in use {taken}, "
                                                f"folders {folders}; the watchdog's log:\n{what}")
        # the entries did it (the broker and PostgreSQL daemonized: no longer the child's descendants)
        assert "kafka /" in what and "postgres /" in what and "redis " in what, what
        print(f"everything gone {took:.1f} s after the SIGKILL; the watchdog's log:\n{what}")
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
        for pid in running.get("pids", ()):  # a failed test leaves nothing either
            if watchdog.alive(pid):
                os.kill(pid, signal.SIGKILL)
