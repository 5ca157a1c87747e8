"""A throw-away PostgreSQL server for the store tests.

:func:`temporary_postgres` runs ``initdb`` in a new temp dir (trust auth, listening on 127.0.0.1
only, its unix socket inside the temp dir), starts the server with ``pg_ctl`` on a free loopback
port, creates a database and yields its SQLAlchemy URL; afterwards it stops the server and deletes
the dir, also when the block fails. Backstops: an ``atexit`` hook, and the session's watchdog
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
    "fsync": "off",  # a throw-away cluster: durability buys nothing and costs seconds
    "synchronous_commit": "off",
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
                self._run(self._cmd("pg_ctl", "start", "-w", "-t", "60", "-D", str(self.data), "-l",
                                    str(self.logfile), "-o", f"-p {self.port}"), f"pg_ctl start on port {self.port}")
                return
            except RuntimeError:
                if attempt == 2 or "could not bind" not in self._log_tail():
                    raise

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
def temporary_postgres(database: str = "kafkaops", prefix: str = "kafkaops-pg-") -> Iterator[str]:
    """A throw-away server for the ``with`` block; yields the URL of its (empty) ``database``."""
    bindir, user = find_bindir(), server_user()
    server = Server(Path(tempfile.mkdtemp(prefix=prefix)), bindir, user)
    atexit.register(server.stop)
    try:
        server.start()
        execute(server.url(), f'CREATE DATABASE "{database}"')
        log.info("test PostgreSQL up in %s on 127.0.0.1:%s", server.root, server.port)
        yield server.url(database)
    finally:
        server.stop()
        atexit.unregister(server.stop)


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
