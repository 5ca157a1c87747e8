"""A throw-away PostgreSQL server for the store tests.

:func:`temporary_postgres` runs ``initdb`` in a new temp dir (trust auth, listening on 127.0.0.1
only, its unix socket inside the temp dir), starts the server with ``pg_ctl`` on a free loopback
port, creates a database and yields its SQLAlchemy URL; afterwards it stops the server and deletes
the dir, also when the block fails (:func:`temporary_server` yields the :class:`Server` itself, which
:meth:`Server.restart` stops and starts again on its port and data: the deployment's fault scenarios). Backstops: an ``atexit`` hook, and the session's watchdog
(kafkaops.testing.watchdog), which stops the server when this process is gone however it ended (even ``kill -9``).

PostgreSQL refuses to run as root: as root, the server runs as the system user ``kafkaops-pg``
(created with ``useradd --system`` when missing), through ``runuser``.
"""
from __future__ import annotations

import atexit
import logging
import os
import pwd
import re
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.pool import NullPool

from kafkaops.platform.provision import free_ports
from kafkaops.testing import watchdog

log = logging.getLogger(__name__)

SERVER_USER = "kafkaops-pg"  # the OS user the server runs as when the tests run as root
ROLE = "kafkaops"  # the database superuser; trust auth, so no password
INSTALL_HINT = ("run 'make postgres' (as root it installs them: apt-get install -y --no-install-recommends "
                "postgresql)")
SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "max_connections": "100",
    "shared_buffers": "32MB",
    "fsync": "off",  # a throw-away cluster: durability against a machine crash buys nothing and costs seconds
    # but a commit is written (to the OS) before it is acknowledged: a server killed or stopped with -m immediate
    # (the deployment's fault scenarios) keeps every transaction it acknowledged, as a production server does
    "synchronous_commit": "on",
    "full_page_writes": "off",
    "log_min_messages": "warning",
}

class PostgresNotFound(RuntimeError):
    """No PostgreSQL server binaries (initdb, pg_ctl) on this machine."""


def find_bindir() -> Path:
    """The folder of ``initdb`` and ``pg_ctl``: the one on PATH, else the newest
    ``/usr/lib/postgresql/<version>/bin``."""
    candidates = []
    on_path = shutil.which("initdb")
    if on_path:
        candidates.append(Path(on_path).resolve().parent)
    candidates += sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=_version, reverse=True)
    for bindir in candidates:
        if all(os.access(bindir / tool, os.X_OK) for tool in ("initdb", "pg_ctl", "postgres")):
            return bindir
    raise PostgresNotFound(f"the PostgreSQL server binaries (initdb, pg_ctl, postgres) are neither on PATH nor in "
                           f"/usr/lib/postgresql/*/bin; the store tests need them: {INSTALL_HINT}")


def _version(bindir: Path) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", bindir.parent.name))


def server_user() -> str | None:
    """None when not root; as root, :data:`SERVER_USER` (created when missing)."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(SERVER_USER)
    except KeyError:
        done = subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin",
                               SERVER_USER], capture_output=True, text=True)
        try:
            pwd.getpwnam(SERVER_USER)  # also fine when a concurrent session created it first
        except KeyError:
            raise RuntimeError(f"PostgreSQL does not run as root and creating the user {SERVER_USER} failed "
                               f"({done.stderr.strip() or done.returncode}); create it: useradd --system "
                               f"{SERVER_USER}") from None
    return SERVER_USER


class Server:
    """One throw-away cluster in ``root``: ``root/data``, its socket in ``root/sock``, log in
    ``root/postgres.log``."""

    def __init__(self, root: Path, bindir: Path | None = None, user: str | None = None) -> None:
        self.root, self.bindir, self.user = root, bindir or find_bindir(), user
        self.data, self.sock, self.logfile = root / "data", root / "sock", root / "postgres.log"
        self.port: int | None = None
        self._guard: watchdog.Guard | None = None

    def _cmd(self, tool: str, *args: str) -> list[str]:
        cmd = [str(self.bindir / tool), *args]
        return ["runuser", "-u", self.user, "--", *cmd] if self.user else cmd

    def _run(self, cmd: Sequence[str], what: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(cmd, cwd=self.root, capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise RuntimeError(f"{what} of the test PostgreSQL in {self.root} failed (exit {done.returncode}): "
                               f"{(done.stderr or done.stdout).strip()[-2000:]}\nserver log: {self._log_tail()}")
        return done

    def _log_tail(self) -> str:
        try:
            return self.logfile.read_text(errors="replace")[-2000:] or "(empty)"
        except OSError:
            return "(none)"

    def start(self) -> None:
        self.sock.mkdir()
        if self.user:
            shutil.chown(self.root, self.user)
            shutil.chown(self.sock, self.user)
        self._watch()
        self._run(self._cmd("initdb", "-D", str(self.data), "-U", ROLE, "--auth=trust", "-E", "UTF8",
                            "--no-locale", "--no-sync"), "initdb")
        settings = {**SETTINGS, "unix_socket_directories": f"'{self.sock}'"}
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write("".join(f"{key} = {value}\n" for key, value in settings.items()))
        for attempt in range(3):  # a free port may be taken before the server binds it
            self.port = free_ports(1)[0]
            try:
                self._start_server()
                return
            except RuntimeError:
                if attempt == 2 or "could not bind" not in self._log_tail():
                    raise

    def _start_server(self) -> None:
        self._run(self._cmd("pg_ctl", "start", "-w", "-t", "60", "-D", str(self.data), "-l",
                            str(self.logfile), "-o", f"-p {self.port}"), f"pg_ctl start on port {self.port}")

    def postmaster_pid(self) -> int | None:
        """The running server's postmaster (the first line of ``postmaster.pid``), None when it is not running."""
        try:
            pid = int((self.data / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return None
        return pid if watchdog.alive(pid) else None

    def restart(self, how: str = "fast", *, down_s: float = 0.0, timeout: float = 60.0) -> float:
        """Stop the server and start it again on the same port and data: ``how`` is ``fast`` (``pg_ctl stop -m
        fast``: clients disconnected, a clean shutdown), ``immediate`` (``-m immediate``: every process quits
        at once, crash recovery at the start) or ``kill`` (SIGKILL to the postmaster, as the OOM killer would;
        its backends notice and quit, crash recovery at the start). The server stays down ``down_s`` s more.
        Returns how many seconds it did not answer (stop to ready)."""
        if how not in ("fast", "immediate", "kill"):
            raise ValueError(f"restart how={how!r}: give fast, immediate or kill")
        pid = self.postmaster_pid()
        if pid is None or self.port is None:
            raise RuntimeError(f"the test PostgreSQL in {self.root} is not running (no live postmaster in "
                               f"{self.data / 'postmaster.pid'}): nothing to restart")
        began = time.monotonic()
        if how == "kill":
            os.kill(pid, signal.SIGKILL)
            self._wait_gone(pid, timeout)
        else:
            self._run(self._cmd("pg_ctl", "stop", "-D", str(self.data), "-m", how, "-w", "-t", str(int(timeout))),
                      f"pg_ctl stop -m {how}", timeout=timeout + 30)
        log.info("test PostgreSQL on port %s stopped (%s) in %.1f s", self.port, how, time.monotonic() - began)
        time.sleep(down_s)
        self._start_server()
        down = time.monotonic() - began
        log.info("test PostgreSQL on port %s answers again, %.1f s after it was stopped", self.port, down)
        return down

    def _wait_gone(self, postmaster: int, timeout: float) -> None:
        """Until no process of this server is left (a killed postmaster's backends quit once they notice), SIGKILL
        for those still there after ``timeout`` s; then until the killed ``postmaster`` is reaped: a new postmaster
        refuses to start while the pid in ``postmaster.pid`` exists, and a zombie does. Its reaper is whoever
        adopted it (init); should it not reap it within 10 s, the lock file goes, as nothing of the server runs."""
        deadline = time.monotonic() + timeout
        while self._processes() and time.monotonic() < deadline:
            time.sleep(0.2)
        for pid in self._processes():
            log.warning("test PostgreSQL process %d of %s still up %.0f s after its postmaster was killed: killing "
                        "it", pid, self.data, timeout)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 10
        while self._processes() or _exists(postmaster):
            if time.monotonic() > deadline:
                if self._processes():
                    raise RuntimeError(f"processes {self._processes()} of the test PostgreSQL in {self.data} outlived "
                                       f"SIGKILL; kill them, then remove {self.root}")
                log.warning("the killed postmaster %d of %s is not reaped after 10 s: removing its postmaster.pid",
                            postmaster, self.data)
                (self.data / "postmaster.pid").unlink(missing_ok=True)
                return
            time.sleep(0.2)

    def _processes(self) -> list[int]:
        """The live processes of this server: those working in its data dir (the postmaster changes into it, and
        every process it starts inherits that)."""
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                if os.readlink(entry / "cwd") == str(self.data) and watchdog.alive(int(entry.name)):
                    found.append(int(entry.name))
            except OSError:
                continue
        return found

    def _watch(self) -> None:
        """Should this process die first: the server stopped (then killed, should pg_ctl fail), the dir removed."""
        stop = self._cmd("pg_ctl", "stop", "-D", str(self.data), "-m", "immediate", "-w", "-t", "30")
        self._guard = watchdog.guard(watchdog.run(stop, if_exists=self.data / "postmaster.pid"),
                                     watchdog.cmdline("postgres", f"-D {self.data}"), watchdog.rmtree(self.root),
                                     name=f"postgres {self.root}")

    def stop(self) -> None:
        """Stop the server (immediate: the data is thrown away) and remove the dir. Idempotent."""
        try:
            if (self.data / "postmaster.pid").exists():
                done = subprocess.run(self._cmd("pg_ctl", "stop", "-D", str(self.data), "-m", "immediate", "-w",
                                                "-t", "30"), capture_output=True, text=True, timeout=60)
                if done.returncode != 0:
                    log.warning("pg_ctl stop of %s failed (%s); killing the server", self.data, done.stderr.strip())
                    self._kill()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
            if self._guard is not None:
                self._guard.release()
                self._guard = None

    def _kill(self) -> None:
        try:
            pid = int((self.data / "postmaster.pid").read_text().split("\n", 1)[0])
            os.kill(pid, signal.SIGKILL)
        except (OSError, ValueError) as err:
            log.warning("cannot kill the test PostgreSQL of %s: %s", self.data, err)

    def url(self, database: str = "postgres") -> str:
        return sa.URL.create("postgresql+psycopg2", username=ROLE, host="127.0.0.1", port=self.port,
                             database=database).render_as_string(hide_password=False)


def _exists(pid: int) -> bool:
    """Whether ``pid`` is a process, a zombie included."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def execute(url: str, *statements: str) -> None:
    """Run statements outside a transaction (CREATE/DROP DATABASE need that)."""
    engine = sa.create_engine(url, poolclass=NullPool, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            for statement in statements:
                conn.execute(sa.text(statement))
    finally:
        engine.dispose()


@contextmanager
def temporary_server(*databases: str, prefix: str = "kafkaops-pg-") -> Iterator[Server]:
    """A throw-away server for the ``with`` block, with the (empty) ``databases``; yields the :class:`Server`
    (its URLs: :meth:`Server.url`; :meth:`Server.restart` restarts it)."""
    bindir, user = find_bindir(), server_user()
    server = Server(Path(tempfile.mkdtemp(prefix=prefix)), bindir, user)
    atexit.register(server.stop)
    try:
        server.start()
        if databases:
            execute(server.url(), *(f'CREATE DATABASE "{name}"' for name in databases))
        log.info("test PostgreSQL up in %s on 127.0.0.1:%s", server.root, server.port)
        yield server
    finally:
        server.stop()
        atexit.unregister(server.stop)


@contextmanager
def temporary_postgres(database: str = "kafkaops", prefix: str = "kafkaops-pg-") -> Iterator[str]:
    """A throw-away server for the ``with`` block; yields the URL of its (empty) ``database``."""
    with temporary_server(database, prefix=prefix) as server:
        yield server.url(database)


@contextmanager
def scratch_database(server_url: str, prefix: str = "kafkaops_t_") -> Iterator[str]:
    """A new, uniquely named empty database on the server of ``server_url``, dropped afterwards
    (with the connections still open to it)."""
    name = f"{prefix}{uuid.uuid4().hex[:12]}"
    admin = sa.make_url(server_url).set(database="postgres").render_as_string(hide_password=False)
    execute(admin, f'CREATE DATABASE "{name}"')
    try:
        yield sa.make_url(server_url).set(database=name).render_as_string(hide_password=False)
    finally:
        execute(admin, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
