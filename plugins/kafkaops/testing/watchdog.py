"""Nothing a test started outlives its pytest process, however that process ends (``kill -9`` too).

One watchdog process per pytest process (started on first use, in a session of its own, so a signal to
pytest's process group does not reach it): it follows pytest through a pidfd and the pipe on its stdin,
over which fixtures register what they started, as JSON lines, right after starting it (or right before,
when the starter only names it later: a cluster's folder, a Unix user), and unregister it once their own
teardown stopped it. When pytest is gone (or closed the pipe) with entries still registered, the watchdog
carries them out, the latest first: each entry's actions in order (see the constructors below: kill a
process or process group, every process whose command line or environment names a marker or that a Unix
user runs, run a command, put a mode back, remove a folder). Kills are SIGKILL (whatever it was is thrown
away) and guarded against reused pids: a pid or group is only killed while its process has the start time
it had when registered, a marker names our temp folder. Besides the entries, it kills every process it saw
descend from pytest (it looks every :data:`SCAN_INTERVAL_S` s; same start-time guard): the Spark, Airflow
and Ansible children nobody registered.

Usage, in a fixture::

    process = subprocess.Popen(..., start_new_session=True)
    with watchdog.guarding(watchdog.group(process), watchdog.rmtree(folder), name="redis"):
        yield ...
        stop(process)   # the normal teardown; leaving the block unregisters the entry

``python <path of this file> PARENT_PID`` is the watchdog itself (standard library only).
"""
from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

#: How often the watchdog records pytest's descendants (seconds).
SCAN_INTERVAL_S = 2.0
#: How long a kill action waits for its processes to be gone before the next action (seconds).
KILL_WAIT_S = 10.0
#: The log of the watchdog's actions (appended to); set KAFKAOPS_WATCHDOG_LOG to keep one.
LOG_ENV = "KAFKAOPS_WATCHDOG_LOG"

Action = dict[str, Any]


# -- /proc ---------------------------------------------------------------------------------------------------

def start_time(pid: int) -> int | None:
    """The start time of ``pid`` (clock ticks after boot, /proc/PID/stat field 22), None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie has ended)."""
    stat = _stat(str(pid))
    return stat is not None and stat[3] not in "ZX"


def _stat(pid: str) -> tuple[int, int, int, str] | None:
    """(ppid, pgid, start time, state) of ``pid``."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[1]), int(fields[2]), int(fields[19]), fields[0].decode()


def _pids() -> list[str]:
    return [name for name in os.listdir("/proc") if name.isdigit()]


def _read(pid: str, what: str) -> bytes:
    try:
        return Path(f"/proc/{pid}/{what}").read_bytes()
    except OSError:
        return b""


# -- the actions (JSON-able dicts), made in the test process --------------------------------------------------

def pid(process_id: int) -> Action:
    """SIGKILL the process ``process_id`` (while it is the process it is now)."""
    return {"kill": "pid", "pid": process_id, "start": start_time(process_id)}


def group(process: subprocess.Popen[Any] | int) -> Action:
    """SIGKILL the process group that ``process`` leads (started with ``start_new_session=True``)."""
    leader = process if isinstance(process, int) else process.pid
    return {"kill": "group", "pgid": leader, "start": start_time(leader)}


def cmdline(*parts: str) -> Action:
    """SIGKILL every process whose command line contains all of ``parts`` (name a temp folder among them)."""
    return {"kill": "cmdline", "parts": list(parts)}


def environ(name: str, prefix: str) -> Action:
    """SIGKILL every process whose environment variable ``name`` starts with ``prefix`` (a temp folder)."""
    return {"kill": "environ", "name": name, "prefix": prefix}


def user(name: str) -> Action:
    """SIGKILL every process of the Unix user ``name`` (one the tests created for themselves)."""
    import pwd

    return {"kill": "uid", "uid": pwd.getpwnam(name).pw_uid, "user": name}


def run(argv: Iterable[str], *, if_exists: str | Path | None = None, timeout: float = 60) -> Action:
    """Run ``argv`` (only if the path ``if_exists`` exists, when given), waiting at most ``timeout`` s."""
    return {"run": [str(a) for a in argv], "if_exists": None if if_exists is None else str(if_exists),
            "timeout": timeout}


def chmod(path: str | Path, mode: int) -> Action:
    """Put ``path``'s mode back to ``mode``."""
    return {"chmod": str(path), "mode": mode}


def rmtree(path: str | Path) -> Action:
    """Remove the folder ``path``."""
    return {"rmtree": str(path)}


# -- the client -----------------------------------------------------------------------------------------------

class Guard:
    """A registered entry; :meth:`release` unregisters it (the fixture stopped what it names)."""

    def __init__(self, client: _Client, entry_id: str) -> None:
        self._client, self.id = client, entry_id

    def update(self, *actions: Action) -> None:
        """Replace the entry's actions (something was restarted, or added)."""
        self._client.send({"op": "add", "id": self.id, "actions": list(actions)})

    def release(self) -> None:
        if self._client is not None:
            self._client.send({"op": "remove", "id": self.id})
            self._client = None  # type: ignore[assignment]


class _Client:
    def __init__(self) -> None:
        self.owner = os.getpid()
        log = os.environ.get(LOG_ENV)
        out = open(log, "ab") if log else subprocess.DEVNULL
        try:
            self.process = subprocess.Popen([sys.executable, "-I", str(Path(__file__).resolve()), str(self.owner)],
                                            stdin=subprocess.PIPE, stdout=out, stderr=out, start_new_session=True)
        finally:
            if log:
                out.close()  # type: ignore[union-attr]
        self.lock = threading.Lock()
        self.count = 0

    def send(self, message: dict[str, Any]) -> None:
        if os.getpid() != self.owner:
            return  # a forked child: the entries are its parent's
        with self.lock:
            try:
                self.process.stdin.write((json.dumps(message) + "\n").encode())  # type: ignore[union-attr]
                self.process.stdin.flush()  # type: ignore[union-attr]
            except (BrokenPipeError, ValueError) as err:
                raise RuntimeError(f"the test watchdog (pid {self.process.pid}) is gone") from err

    def guard(self, actions: Iterable[Action], name: str) -> Guard:
        with self.lock:
            self.count += 1
            entry_id = f"{name}#{self.count}"
        guard = Guard(self, entry_id)
        guard.update(*actions)
        return guard


_client: _Client | None = None
_client_lock = threading.Lock()


def _the_client() -> _Client:
    global _client
    with _client_lock:
        if _client is None or _client.owner != os.getpid() or _client.process.poll() is not None:
            _client = _Client()
        return _client


def watchdog_pid() -> int:
    """The pid of this process's watchdog (started if need be)."""
    return _the_client().process.pid


def guard(*actions: Action, name: str = "entry") -> Guard:
    """Register ``actions``, carried out should this process die before :meth:`Guard.release`."""
    return _the_client().guard(actions, name)


@contextlib.contextmanager
def guarding(*actions: Action, name: str = "entry") -> Iterator[Guard]:
    """:func:`guard` for the block: released when it ends (however it ends: the block's own teardown ran)."""
    entry = guard(*actions, name=name)
    try:
        yield entry
    finally:
        entry.release()


@contextlib.contextmanager
def kafka_folder(base: Path) -> Iterator[Guard]:
    """Every Kafka broker whose command line names the folder ``base`` (its nodes' configs are there: nodes
    added or restarted later are covered too), then the folder: ``clusters.TEMPORARY_CLUSTER_GUARDS``'s
    entry (tests/conftest.py), and the secured nodes'."""
    with guarding(cmdline("kafka.Kafka", f"{base}/"), rmtree(base), name=f"kafka {base}") as entry:
        yield entry


# -- the watchdog process -------------------------------------------------------------------------------------

def _say(text: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} kafkaops test watchdog {os.getpid()}: {text}", file=sys.stderr, flush=True)


def _is_watchdog(pid: int) -> bool:
    """Whether ``pid`` is another pytest process's watchdog (an xdist worker's, below the controller): it is
    left to clean up after its own pytest, never killed as one of this one's descendants."""
    try:
        return Path(__file__).name.encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


class _Watchdog:
    def __init__(self, parent: int) -> None:
        self.parent = parent
        self.entries: dict[str, list[Action]] = {}
        self.seen: dict[int, int] = {}  # pytest's descendants: pid -> start time
        self.buffer = b""

    def handle(self, data: bytes) -> None:
        self.buffer += data
        *lines, self.buffer = self.buffer.split(b"\n")
        for line in lines:
            if not line.strip():
                continue
            message = json.loads(line)
            if message["op"] == "add":
                self.entries.pop(message["id"], None)  # an update goes last, as a new entry would
                self.entries[message["id"]] = message["actions"]
            elif message["op"] == "remove":
                self.entries.pop(message["id"], None)

    def scan(self) -> None:
        """Record the parent's live descendants (not this watchdog), also those an ended process of
        them left behind (reparented to init: found through the ones recorded before)."""
        children: dict[int, list[tuple[int, int]]] = {}
        table: dict[int, int] = {}
        for name in _pids():
            stat = _stat(name)
            if stat and stat[3] not in "ZX":
                children.setdefault(stat[0], []).append((int(name), stat[2]))
                table[int(name)] = stat[2]
        # a watchdog found before its exec (between fork and exec it still has its pytest's command line) is
        # dropped once it shows what it is: another pytest's watchdog, left to clean up after its own pytest
        seen = {p: s for p, s in self.seen.items() if table.get(p) == s and not _is_watchdog(p)}
        todo = [self.parent, *seen]
        while todo:
            for child, started in children.get(todo.pop(), ()):
                if child != os.getpid() and child not in seen and not _is_watchdog(child):
                    seen[child] = started
                    todo.append(child)
        self.seen = seen

    def follow(self) -> None:
        try:
            pidfd = os.pidfd_open(self.parent)
        except OSError:
            pidfd = None  # already gone (or no pidfd): the scan below notices
        stdin = sys.stdin.buffer.raw.fileno()  # type: ignore[attr-defined,union-attr]
        watched = [stdin] + ([pidfd] if pidfd is not None else [])
        while True:
            self.scan()
            ready, _, _ = select.select(watched, [], [], SCAN_INTERVAL_S)
            if stdin in ready:
                data = os.read(stdin, 65536)
                if not data:
                    return  # the parent closed the pipe (exit), or died with nobody else holding it
                self.handle(data)
            if (pidfd is not None and pidfd in ready) or not Path(f"/proc/{self.parent}").exists():
                # the parent died; a forked child of it may still hold the pipe: take what is there, no more
                os.set_blocking(stdin, False)
                with contextlib.suppress(BlockingIOError):
                    while data := os.read(stdin, 65536):
                        self.handle(data)
                return

    def clean_up(self) -> None:
        if self.entries:
            _say(f"pytest process {self.parent} is gone; cleaning up after {list(self.entries)}")
        for entry_id, actions in reversed(list(self.entries.items())):
            for action in actions:
                try:
                    self.act(action)
                except Exception as err:  # the next action matters more
                    _say(f"{entry_id}: {action}: {err!r}")
        self.scan()  # the last look at what the parent left running, then kill it
        strays = {p: s for p, s in self.seen.items() if start_time(p) == s and not _is_watchdog(p)}
        if strays:
            _say(f"killing {len(strays)} process(es) left by pytest process {self.parent}: {sorted(strays)}")
            self.kill(strays)

    def act(self, action: Action) -> None:
        if "kill" in action:
            self.kill(self.targets(action))
        elif "run" in action:
            if action["if_exists"] is None or os.path.exists(action["if_exists"]):
                subprocess.run(action["run"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, timeout=action["timeout"], check=False)
        elif "chmod" in action:
            os.chmod(action["chmod"], action["mode"])
        elif "rmtree" in action:
            shutil.rmtree(action["rmtree"], ignore_errors=True)

    def targets(self, action: Action) -> dict[int, int]:
        """pid -> start time of the live processes ``action`` names."""
        kind, found = action["kill"], {}
        if kind == "pid":
            return {action["pid"]: action["start"]} if start_time(action["pid"]) == action["start"] else {}
        leader = start_time(action["pgid"]) if kind == "group" else None
        if kind == "group" and leader is not None and leader != action["start"]:
            return {}  # the number went to another process: while our group lived, it could not have
        for name in _pids():
            stat = _stat(name)
            if stat is None or stat[3] == "Z" or int(name) == os.getpid():
                continue
            if kind == "group":
                hit = stat[1] == action["pgid"]
            elif kind == "cmdline":
                line = _read(name, "cmdline").replace(b"\0", b" ").decode(errors="replace")
                hit = all(part in line for part in action["parts"])
            elif kind == "environ":
                entries = _read(name, "environ").split(b"\0")
                hit = any(e.startswith(f"{action['name']}={action['prefix']}".encode()) for e in entries)
            elif kind == "uid":
                try:
                    hit = os.stat(f"/proc/{name}").st_uid == action["uid"]
                except OSError:
                    hit = False
            else:
                raise ValueError(f"unknown kill {kind!r}")
            if hit:
                found[int(name)] = stat[2]
        return found

    @staticmethod
    def kill(targets: dict[int, int]) -> None:
        for target, started in targets.items():
            if start_time(target) == started:
                with contextlib.suppress(OSError):
                    os.kill(target, signal.SIGKILL)
        deadline = time.monotonic() + KILL_WAIT_S
        while time.monotonic() < deadline:
            left = [p for p, s in targets.items() if start_time(p) == s and alive(p)]
            if not left:
                return
            time.sleep(0.05)
        _say(f"still alive {KILL_WAIT_S:.0f} s after SIGKILL: {left}")


def main(argv: list[str]) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C to the terminal is pytest's, not ours
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    watchdog = _Watchdog(int(argv[1]))
    watchdog.follow()
    watchdog.clean_up()


if __name__ == "__main__":
    main(sys.argv)
