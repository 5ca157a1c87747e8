"""Airflow as operators deploy it, on this machine: the harness of the deployment scenarios.

:func:`deployment` starts, and at the end stops:

- one PostgreSQL server (Debian's binaries, :mod:`kafkaops.testing.postgres`) holding two databases: ``airflow``
  (Airflow's metadata) and ``kafkaops`` (the kafkaops store);
- one Redis server (Debian's ``redis-server``), Celery's broker;
- the project built as a wheel and installed, without its dependencies, into a venv outside the
  repository (``<root>/venv``); the dependencies come from the development venv's site-packages
  through one ``.pth`` line, so nothing of the checkout (``plugins/``, ``dags/``, ``playbooks/``) is on
  any component's path: DAGs, playbooks, suites and Spark apps are read from the installed package;
- ``airflow db migrate``, then each component of :data:`COMPONENTS` as a separate process (its own
  process group, ``AIRFLOW_HOME`` and working directory under ``<root>/<component>``), each started
  the way docker-compose.yml starts it: ``python -m kafkaops check`` first, then the component.

The components share nothing but the installed code, the two databases, Redis, Kafka and Prometheus (when
the caller gives one: ``prometheus_default``, where a capacity review reads the brokers' load): one JWT
secret, one Fernet key and free loopback ports come from :func:`shared_settings`, which
``tests/deployment/test_compose.py`` also holds docker-compose.yml to. The one exception is the
Celery worker's ``$KAFKAOPS_CACHE``: the local cluster's spec (``local-cluster.json``) the ``process``
provisioner grows when it adds a broker on "this host" (brokers on other hosts over SSH: issue 16).
"""
from __future__ import annotations

import datetime as dt
import json
import logging
import os
import secrets
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import httpx
import pytest
import sqlalchemy as sa

from kafkaops.platform import provision
from kafkaops.platform.spark import AUTH_SECRET_FILE_EXTRA
from kafkaops.testing import postgres, watchdog

log = logging.getLogger(__name__)


# The components, as `airflow <args>`; docker-compose.yml has one service per component with this command.
COMPONENTS: dict[str, tuple[str, ...]] = {
    "api-server": ("api-server",),
    "scheduler": ("scheduler",),
    "dag-processor": ("dag-processor",),
    "triggerer": ("triggerer",),
    "worker": ("celery", "worker"),
}
EXECUTOR = "CeleryExecutor"
# Who may sign in (SimpleAuthManager): the operator who triggers, the approver who answers the approval.
USERS = {"operator": "admin", "approver": "user"}
STORE_CONN_ID = "kafkaops_store"
#: The connection a capacity review reads the brokers' load from (its param ``prometheus_conn_id``'s default).
PROMETHEUS_CONN_ID = "prometheus_default"
COPY_IGNORE = shutil.ignore_patterns(".git", ".venv", ".cache", "build", "*.egg-info", "__pycache__",
                                     ".pytest_cache", ".hypothesis", "target")


def shared_settings(*, metadata_url: str, store: Mapping[str, Any], broker_url: str, result_backend: str,
                    api_url: str, jwt_secret: str, fernet_key: str, secret_key: str, kafka_bootstrap: str,
                    dags_folder: str, users: str, spark_master: str, spark_secret_file: str | None,
                    prometheus: Mapping[str, Any] | None) -> dict[str, str]:
    """The environment every component gets: the settings docker-compose.yml's ``x-airflow`` block sets
    too (addresses differ: compose uses service names). ``spark_master`` is ``spark_default``'s master, where
    the Spark jobs (rekey backfill, key skew) run: ``local[*]`` here, the compose file's standalone Master there;
    ``spark_secret_file`` the Spark properties file with a standalone cluster's authentication secret, on the
    worker (the connection's ``auth-secret-file`` extra; None for ``local[*]``, whose applications make their own).
    ``prometheus``: the fields of :data:`PROMETHEUS_CONN_ID` (:func:`prometheus_connection`); None: no such
    connection (a capacity review then reads no load)."""
    return {
        "AIRFLOW__CORE__EXECUTOR": EXECUTOR,
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": metadata_url,
        "AIRFLOW__CELERY__BROKER_URL": broker_url,
        "AIRFLOW__CELERY__RESULT_BACKEND": result_backend,
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{api_url}/execution/",
        "AIRFLOW__API__BASE_URL": api_url,
        "AIRFLOW__API_AUTH__JWT_SECRET": jwt_secret,
        "AIRFLOW__API__SECRET_KEY": secret_key,
        "AIRFLOW__CORE__FERNET_KEY": fernet_key,
        "AIRFLOW__CORE__AUTH_MANAGER":
            "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": users,
        # four eyes: the user who triggered a run may reject it but not approve it (docs/operations.md)
        "AIRFLOW__KAFKAOPS__FOUR_EYES": "True",
        "AIRFLOW__CORE__DAGS_FOLDER": dags_folder,
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        # The scheduler declares a task whose worker died (no heartbeat) failed after 30 s, so its retry
        # runs on another worker soon; Airflow's default waits 5 min.
        "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "30",
        "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "5",
        # An idle scheduler looks again after 0.2 s, not 1 s: each hop from a finished task to its next
        # one (and each resumed deferral) waits about half of that on average.
        "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "0.2",
        # Two cores shared by every component: patience with a slow first answer, DAG files parsed once.
        "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "30",
        "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "120",
        "AIRFLOW__DAG_PROCESSOR__DAG_FILE_PROCESSOR_TIMEOUT": "180",
        "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "3600",
        "AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES": "1",
        "AIRFLOW__API__WORKERS": "1",
        "AIRFLOW__CELERY__WORKER_CONCURRENCY": "4",
        # The worker imports kafkaops, pandas and Great Expectations once, before it forks each task's
        # process (kafkaops.airflow.worker): a task no longer spends seconds importing them.
        "AIRFLOW__CELERY__EXTRA_CELERY_CONFIG": json.dumps({"imports": ["kafkaops.airflow.worker"]}),
        "AIRFLOW_CONN_KAFKA_DEFAULT": json.dumps({"conn_type": "kafka",
                                                  "extra": {"bootstrap.servers": kafka_bootstrap}}),
        f"AIRFLOW_CONN_{STORE_CONN_ID.upper()}": json.dumps(dict(store)),
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": spark_master, **(
            {} if spark_secret_file is None else {"extra": {AUTH_SECRET_FILE_EXTRA: spark_secret_file}})}),
        **({} if prometheus is None else {f"AIRFLOW_CONN_{PROMETHEUS_CONN_ID.upper()}": json.dumps(dict(prometheus))}),
        "GX_ANALYTICS_ENABLED": "false",
    }


def prometheus_connection(url: str) -> dict[str, Any]:
    """An HTTP connection's fields (Airflow's JSON form) for the Prometheus server at ``url``."""
    parts = urlsplit(url)
    if not parts.hostname or parts.port is None or parts.scheme not in ("http", "https"):
        raise ValueError(f"a Prometheus URL is http(s)://HOST:PORT, got {url!r}")
    return {"conn_type": "http", "host": parts.hostname, "port": parts.port, "schema": parts.scheme}


def _free_port() -> int:
    return provision.free_ports(1)[0]


def stop_group(process: subprocess.Popen[Any], timeout: float = 30.0, sig: int = signal.SIGTERM) -> None:
    """``sig`` to the process group ``process`` leads, then SIGKILL what is left after ``timeout`` s."""
    try:
        os.killpg(process.pid, sig)
    except ProcessLookupError:
        process.poll()
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(process.pid, 0)
        except ProcessLookupError:
            break
        process.poll()  # reap the leader, so the group can empty
        time.sleep(0.2)
    else:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    process.wait(timeout=10)


# -- servers -------------------------------------------------------------------------------------------------

#: Celery's broker keeps its queue in an append-only file, synced every second (docker-compose.yml's redis runs
#: the same): Redis writes each message to the file as it takes it, so a task queued for a worker outlives a
#: restart of Redis, even a SIGKILL (tests/deployment/test_faults.py). Without it the queue is lost with Redis,
#: and the scheduler sends such a task again only after ``[scheduler] task_queued_timeout`` (docs/operations.md).
REDIS_PERSISTENCE = ("--save", "", "--appendonly", "yes", "--appendfsync", "everysec")


@dataclass
class RedisServer:
    """Debian's ``redis-server`` on loopback ``port``, its files (log, append-only file) in ``root``, in a process
    group of its own; :meth:`restart` stops and starts it again on the same port and files."""

    root: Path
    port: int
    binary: str
    process: subprocess.Popen[bytes] | None = None
    _guard: watchdog.Guard | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def logfile(self) -> Path:
        return self.root / "redis.log"

    def start(self, timeout: float = 30.0) -> None:
        """Start the server; return once it answers a PING (fail after ``timeout`` s naming its log)."""
        self.root.mkdir(parents=True, exist_ok=True)
        with self.logfile.open("ab") as out:
            self.process = subprocess.Popen([self.binary, "--port", str(self.port), "--bind", "127.0.0.1",
                                             *REDIS_PERSISTENCE, "--dir", str(self.root), "--daemonize", "no"],
                                            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            start_new_session=True)
        if self._guard is None:  # should this process die first
            self._guard = watchdog.guard(watchdog.group(self.process), name=f"redis {self.port}")
        else:
            self._guard.update(watchdog.group(self.process))
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.ping()
                return
            except Exception as err:  # not up yet
                if self.process.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"redis-server on 127.0.0.1:{self.port} did not start within {timeout:.0f} s "
                                f"({err}); log {self.logfile}: {self.logfile.read_text(errors='replace')[-1000:]}")
                time.sleep(0.2)

    def client(self) -> Any:
        import redis

        return redis.Redis(host="127.0.0.1", port=self.port, socket_connect_timeout=1, socket_timeout=5)

    def ping(self) -> None:
        client = self.client()
        try:
            client.ping()
        finally:
            client.close()

    def queued(self, queue: str = "default") -> int:
        """How many messages wait in Celery's queue ``queue`` (its list, and the lists of its priority steps)."""
        client = self.client()
        try:
            return sum(client.llen(key) for key in client.scan_iter(match=f"{queue}*")
                       if client.type(key) == b"list")
        finally:
            client.close()

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """``sig`` to the server (SIGTERM: it writes its file and exits; SIGKILL: it dies), SIGKILL after 10 s."""
        if self.process is not None:
            stop_group(self.process, timeout=10, sig=sig)

    def restart(self, how: str = "term", *, down_s: float = 0.0) -> float:
        """Stop the server (``term``: a clean shutdown; ``kill``: SIGKILL, a crash) and start it again, ``down_s``
        s later, on the same port and files. Returns how many seconds it did not answer."""
        if how not in ("term", "kill"):
            raise ValueError(f"restart how={how!r}: give term or kill")
        began = time.monotonic()
        self.stop(signal.SIGKILL if how == "kill" else signal.SIGTERM)
        time.sleep(down_s)
        self.start()
        down = time.monotonic() - began
        log.info("redis on port %d restarted (%s): %.1f s without an answer", self.port, how, down)
        return down

    def close(self) -> None:
        try:
            self.stop()
        finally:
            if self._guard is not None:
                self._guard.release()
                self._guard = None


@contextmanager
def temporary_redis(root: Path) -> Iterator[RedisServer]:
    """Debian's ``redis-server`` on a free loopback port (:class:`RedisServer`) for the ``with`` block."""
    binary = shutil.which("redis-server") or "/usr/bin/redis-server"
    if not Path(binary).exists():
        message = ("redis-server not found: the deployment tests need Debian's redis-server "
                   "(apt-get install redis-server; make test installs it as root)")
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    server = RedisServer(root, _free_port(), binary)
    try:
        server.start()
        yield server
    finally:
        server.close()


@contextmanager
def redis_server(root: Path) -> Iterator[str]:
    """Debian's ``redis-server`` on a free loopback port (:func:`temporary_redis`); yields its URL."""
    with temporary_redis(root) as server:
        yield server.url


@contextmanager
def postgres_server(*names: str) -> Iterator[tuple[postgres.Server, dict[str, str]]]:
    """One throw-away PostgreSQL server with the databases ``names``: the server and their URLs by name."""
    with postgres.temporary_server(*names, prefix="kafkaops-pg-deploy-") as server:
        yield server, {name: server.url(name) for name in names}


@contextmanager
def postgres_databases(*names: str) -> Iterator[dict[str, str]]:
    """One throw-away PostgreSQL server with the databases ``names``; yields their URLs by name."""
    with postgres_server(*names) as (_, urls):
        yield urls


# -- the installed project -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Installation:
    """The project installed from its wheel into ``venv`` (outside the repository)."""

    venv: Path
    wheel: Path

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    def resource(self, expression: str) -> str:
        """Evaluate ``expression`` (after ``import kafkaops.resources as r``) in the installed package."""
        done = subprocess.run([str(self.python), "-c", f"import kafkaops.resources as r; print({expression})"],
                              cwd=self.venv, env=clean_env(self.venv), capture_output=True, text=True, timeout=120)
        if done.returncode:
            pytest.fail(f"the installed kafkaops cannot evaluate {expression}: {done.stderr[-2000:]}")
        return done.stdout.strip()


def clean_env(venv: Path) -> dict[str, str]:
    """This process's environment without anything that would point a component at the checkout."""
    keep = {k: v for k, v in os.environ.items()
            if not k.startswith(("AIRFLOW_", "AIRFLOW__", "PYTEST_", "KAFKAOPS_", "VIRTUAL_ENV", "PYTHON"))}
    dev_bin = Path(sys.executable).parent  # ansible-playbook & co.; their python never imports kafkaops
    keep["PATH"] = os.pathsep.join([str(venv / "bin"), str(dev_bin), keep.get("PATH", "/usr/bin:/bin")])
    return keep


def build_wheel(root: Path, checkout: Path) -> Path:
    """The wheel of the working tree ``checkout``, built from a copy of it (nothing is written into it)."""
    source, wheels = root / "source", root / "wheels"
    shutil.copytree(checkout, source, symlinks=True, ignore=COPY_IGNORE)
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(wheels),
                            str(source)], capture_output=True, text=True, timeout=600)
    if built.returncode:
        pytest.fail(f"building the kafkaops wheel failed: {built.stdout[-2000:]}{built.stderr[-3000:]}")
    shutil.rmtree(source)
    return next(wheels.glob("kafkaops-*.whl"))


def install_wheel(root: Path, checkout: Path) -> Installation:
    """Install the wheel ``$KAFKAOPS_WHEEL`` names (a release's), else the working tree ``checkout``'s, into
    ``root/venv``."""
    venv = root / "venv"
    wheel = Path(os.environ["KAFKAOPS_WHEEL"]) if os.environ.get("KAFKAOPS_WHEEL") else build_wheel(root, checkout)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site = Path(subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "kafkaops-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    installed = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install",
                                "--quiet", "--no-deps", "--no-index", "--ignore-installed", str(wheel)],
                               capture_output=True, text=True, timeout=600)
    if installed.returncode:
        pytest.fail(f"installing {wheel.name} into {venv} failed: {installed.stderr[-3000:]}")
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import kafkaops; print(kafkaops.__file__)"],
                           cwd=root, env=clean_env(venv), capture_output=True, text=True, timeout=120)
    if where.returncode or not where.stdout.strip().startswith(str(venv)):
        pytest.fail(f"the venv {venv} does not import kafkaops from its wheel: {where.stdout}{where.stderr[-2000:]}")
    return Installation(venv=venv, wheel=wheel)


# -- the components ------------------------------------------------------------------------------------------

@dataclass
class Component:
    name: str
    home: Path
    env: dict[str, str]
    argv: list[str]
    log: Path
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0
    #: Stopped or killed on purpose (:meth:`Deployment.stop`, :meth:`Deployment.kill`) and not started since:
    #: :meth:`Deployment.supervised` leaves it down.
    held: bool = False

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_tail(self, lines: int = 60) -> str:
        try:
            kept = [line for line in self.log.read_text(errors="replace").splitlines() if "[http.access]" not in line
                    and "GET /" not in line]
            return "\n".join(kept[-lines:])
        except OSError as err:
            return f"(no log at {self.log}: {err})"


@dataclass(frozen=True)
class Restart:
    """A component :meth:`Deployment.supervised` started again: its name, its exit code, when (monotonic)."""

    component: str
    exit_code: int | None
    at: float


@dataclass
class Deployment:
    """The running deployment: ``url`` is the api-server's; :meth:`api` calls its REST API as a user."""

    root: Path
    url: str
    installation: Installation
    components: dict[str, Component]
    databases: dict[str, str]
    redis_url: str
    passwords: dict[str, str] = field(repr=False)
    #: One HTTP client for every call (opened and closed by :func:`deployment`): a client per call built an
    #: SSL context each time, loading the CA bundle (46 s of the suite's CPU), for plain-HTTP loopback calls.
    http: httpx.Client = field(repr=False)
    started_in: float = 0.0
    #: The Prometheus server ``prometheus_default`` names, if the deployment was given one.
    prometheus_url: str | None = None
    #: The PostgreSQL server of :attr:`databases` and Celery's Redis (the fault scenarios restart them).
    postgres: postgres.Server | None = None
    redis: RedisServer | None = None
    began_at: dt.datetime = field(default_factory=lambda: dt.datetime.now(dt.timezone.utc))
    _tokens: dict[str, str] = field(default_factory=dict, repr=False)
    #: Held while a component is started or stopped: :meth:`supervised`'s thread and the caller take turns.
    _lifecycle: threading.RLock = field(default_factory=threading.RLock, repr=False)

    # -- REST API
    def token(self, user: str) -> str:
        if user not in self._tokens:
            answer = self.http.post(f"{self.url}/auth/token", json={"username": user, "password": self.passwords[user]},
                                timeout=60)
            answer.raise_for_status()
            self._tokens[user] = answer.json()["access_token"]
        return self._tokens[user]

    def call(self, method: str, path: str, *, user: str = "operator", **kwargs: Any) -> httpx.Response:
        return self.http.request(method, f"{self.url}{path}", timeout=60,
                             headers={"Authorization": f"Bearer {self.token(user)}"}, **kwargs)

    def api(self, method: str, path: str, *, user: str = "operator", **kwargs: Any) -> Any:
        """Call ``/api/v2{path}``; fail naming the call and Airflow's answer unless it is a success."""
        for attempt in range(3):  # an api-server being restarted by a scenario answers again within seconds
            try:
                answer = self.call(method, f"/api/v2{path}", user=user, **kwargs)
                break
            except httpx.TransportError:
                if attempt == 2:
                    raise
                time.sleep(5)
        if answer.status_code >= 400:
            pytest.fail(f"{method} /api/v2{path} as {user} answered {answer.status_code}: {answer.text[:1000]}")
        return answer.json() if answer.content else None

    # -- DAG runs, as people start and answer them
    @staticmethod
    def run_path(dag_id: str, run_id: str) -> str:
        """The REST path of one DAG run (``/dags/<dag>/dagRuns/<run>``, the run id quoted)."""
        return f"/dags/{dag_id}/dagRuns/{quote(run_id, safe='')}"

    def trigger(self, dag_id: str, conf: Mapping[str, Any], *, user: str = "operator") -> str:
        """Unpause ``dag_id`` and trigger it with ``conf`` as ``user``; the new run's id."""
        self.api("PATCH", f"/dags/{dag_id}", json={"is_paused": False}, user=user)
        run = self.api("POST", f"/dags/{dag_id}/dagRuns", json={"logical_date": None, "conf": dict(conf)}, user=user)
        return str(run["dag_run_id"])

    def approve(self, dag_id: str, run_id: str, *, task_id: str = "approval", user: str = "approver") -> Any:
        """Answer the run's human-in-the-loop question ``task_id`` (the approval, the switch) with Approve, as
        ``user``."""
        return self.api("PATCH", f"{self.run_path(dag_id, run_id)}/taskInstances/{task_id}/-1/hitlDetails",
                        user=user, json={"chosen_options": ["Approve"], "params_input": {}})

    # -- components
    def start(self, name: str, *, check: bool = True) -> Component:
        with self._lifecycle:
            component = self.components[name]
            assert not component.alive(), f"{name} is already running"
            if check:
                self.check(component)
            self._spawn(component)
            return component

    def _spawn(self, component: Component) -> None:
        with component.log.open("ab") as out:
            out.write(f"\n===== start {component.starts + 1} of {component.name} =====\n".encode())
            out.flush()
            component.process = subprocess.Popen(component.argv, cwd=component.home, env=component.env,
                                                 stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                                 start_new_session=True)
        component.starts += 1
        component.held = False

    def run_check(self, component: Component, env: Mapping[str, str] | None = None
                  ) -> subprocess.CompletedProcess[str]:
        """``python -m kafkaops check`` as ``component`` runs it before it starts (``env`` overrides)."""
        return subprocess.run([str(self.installation.python), "-m", "kafkaops", "check"], cwd=component.home,
                              env={**component.env, **(env or {})}, capture_output=True, text=True, timeout=180)

    def check(self, component: Component) -> None:
        """``python -m kafkaops check``: the store and the metadata database answer, schemas match."""
        done = self.run_check(component)
        if done.returncode:
            pytest.fail(f"`kafkaops check` refused to start {component.name}:\n{done.stdout}{done.stderr[-2000:]}")

    def stop(self, name: str) -> None:
        with self._lifecycle:
            component = self.components[name]
            component.held = True
            if component.process is not None:
                stop_group(component.process)

    def kill(self, name: str) -> None:
        """``kill -9`` the component's whole process group (its host died)."""
        with self._lifecycle:
            component = self.components[name]
            component.held = True
            if component.process is not None:
                stop_group(component.process, timeout=10, sig=signal.SIGKILL)

    def restart(self, name: str) -> None:
        self.stop(name)
        self.start(name)

    # -- the servers the components share
    def restart_postgres(self, how: str = "fast", *, down_s: float = 0.0) -> float:
        """Restart the PostgreSQL server of both databases (:meth:`kafkaops.testing.postgres.Server.restart`:
        ``fast``, ``immediate`` or ``kill``); the seconds it did not answer."""
        if self.postgres is None:
            raise RuntimeError("this deployment was not given its PostgreSQL server: nothing to restart")
        return self.postgres.restart(how, down_s=down_s)

    def restart_redis(self, how: str = "term", *, down_s: float = 0.0) -> float:
        """Restart Celery's Redis (:meth:`RedisServer.restart`: ``term`` or ``kill``); the seconds it did not
        answer."""
        if self.redis is None:
            raise RuntimeError("this deployment was not given its Redis server: nothing to restart")
        return self.redis.restart(how, down_s=down_s)

    @contextmanager
    def supervised(self, poll_s: float = 1.0) -> Iterator[list[Restart]]:
        """For the ``with`` block, start again each component that exits (but those :meth:`stop` or :meth:`kill`
        stopped), after ``kafkaops check`` passes, as docker-compose.yml's ``restart: unless-stopped`` does
        (its command runs the check first; a check that fails is tried again every ``poll_s`` s). Yields the
        list of those restarts, filled as they happen; the block's end stops the watching thread (joined
        within 60 s)."""
        restarts: list[Restart] = []
        done = threading.Event()

        def revive(component: Component) -> None:
            with self._lifecycle:
                if component.held or component.process is None or component.alive():
                    return
                code = component.process.returncode
                checked = self.run_check(component)
                if checked.returncode:
                    log.info("%s exited (%s); its kafkaops check fails yet: %s", component.name, code,
                             checked.stdout.strip().splitlines()[-1:] or checked.stderr[-300:])
                    return
                log.warning("%s exited (%s): starting it again, as its restart policy would", component.name, code)
                self._spawn(component)
                restarts.append(Restart(component.name, code, time.monotonic()))

        def watch() -> None:
            while not done.wait(poll_s):
                for component in self.components.values():
                    if component.name == "migrate" or done.is_set():
                        continue
                    try:
                        revive(component)
                    except Exception as err:  # the check timed out, a start failed: tried again next round
                        log.error("could not start %s again: %s", component.name, err)

        thread = threading.Thread(target=watch, name="deployment-supervisor", daemon=True)
        thread.start()
        try:
            yield restarts
        finally:
            done.set()
            thread.join(timeout=60)
            if thread.is_alive():
                log.error("the deployment's supervisor thread did not end within 60 s")

    def log_tails(self, lines: int = 40) -> str:
        return "\n".join(f"----- {c.name} ({'up' if c.alive() else 'down'}; log {c.log}):\n{c.log_tail(lines)}"
                         for c in self.components.values())

    # -- waiting
    def wait_until_healthy(self, timeout: float = 300, *, restarting: bool = False) -> None:
        """Until every component is up and healthy; fail at once when one exits, unless ``restarting`` (inside
        :meth:`supervised`, which starts it again: then it is waited for like the others)."""
        deadline, last = time.monotonic() + timeout, None
        while time.monotonic() < deadline:
            dead = [c.name for c in self.components.values() if c.process is not None and not c.alive()]
            if dead and not restarting:
                pytest.fail(f"{', '.join(dead)} exited before the deployment was healthy:\n{self.log_tails()}")
            try:
                last = self.http.get(f"{self.url}/api/v2/monitor/health", timeout=5).json()
                if all((last.get(part) or {}).get("status") == "healthy"
                       for part in ("metadatabase", "scheduler", "triggerer", "dag_processor")) \
                        and self.worker_ready() and self.execution_api_ready():
                    return
            except (httpx.HTTPError, ValueError) as err:
                last = repr(err)
            time.sleep(1.0)
        pytest.fail(f"the deployment at {self.url} is not healthy after {timeout:.0f} s (last: {last}):\n"
                    f"{self.log_tails()}")

    def execution_api_ready(self) -> bool:
        """Whether the execution API (the workers' and the triggerer's) answers. Its first request builds
        the API's versioned routes (Cadwyn), seconds in which the api-server answers nothing: asking here
        makes that part of the start, as docker-compose.yml's health check does, not of the first task."""
        try:
            return self.http.get(f"{self.url}/execution/health", timeout=120).status_code == 200
        except httpx.HTTPError:
            return False

    def worker_ready(self) -> bool:
        worker = self.components["worker"]
        text = worker.log.read_text(errors="replace") if worker.log.exists() else ""
        last_start = text.rsplit("===== start", 1)[-1]
        return worker.alive() and " ready." in last_start

    def wait_for_worker(self, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while not self.worker_ready():
            if time.monotonic() > deadline or not self.components["worker"].alive():
                pytest.fail(f"the Celery worker is not ready after {timeout:.0f} s:\n"
                            f"{self.components['worker'].log_tail()}")
            time.sleep(0.5)

    def wait_for_dags(self, dag_ids: set[str], timeout: float = 300) -> None:
        deadline, found = time.monotonic() + timeout, set()
        while time.monotonic() < deadline:
            errors = self.api("GET", "/importErrors")["import_errors"]
            if errors:
                pytest.fail("the DAG processor could not import: " +
                            "; ".join(f"{e['filename']}: {e['stack_trace'][-800:]}" for e in errors))
            found = {d["dag_id"] for d in self.api("GET", "/dags", params={"limit": 100})["dags"]}
            if dag_ids <= found:
                return
            time.sleep(1.0)
        pytest.fail(f"DAGs {sorted(dag_ids - found)} not parsed after {timeout:.0f} s:\n{self.log_tails()}")


@contextmanager
def deployment(*, checkout: Path, kafka_bootstrap: str, worker_cache: Path, jars: Path, dag_ids: set[str],
               logs: Path | None = None, kafka_login: Mapping[str, str] | None = None,
               spark_master: str = "local[*]", spark_secret_file: Path | None = None,
               worker_env: Mapping[str, str] | None = None,
               prometheus_url: str | None = None) -> Iterator[Deployment]:
    """Everything of the module docstring, up and healthy, for the ``with`` block; all of it stopped after.
    The wheel is the working tree ``checkout``'s (unless ``$KAFKAOPS_WHEEL`` names one). Each component's
    output goes to ``<logs>/<component>.log`` (default: a folder removed at the end). ``kafka_login``: the
    client settings ``kafka_default`` adds to the bootstrap (a SASL login); ``spark_master``: ``spark_default``'s
    master (a standalone Master's URL: its ``SPARK_CONF_DIR`` in ``worker_env``, the worker's extra environment,
    and ``spark_secret_file`` its authentication secret: :attr:`kafkaops.testing.spark.StandaloneSpark.secret_file`);
    ``prometheus_url``: the Prometheus server ``prometheus_default`` names (e.g. a
    :func:`kafkaops.testing.prometheus.temporary_prometheus` scraping the cluster's exporters), None: no such
    connection."""
    root = Path(tempfile.mkdtemp(prefix="kafkaops-deploy-"))
    logs = logs or root / "logs"
    began = time.monotonic()
    with ExitStack() as stack:
        # should this process die first: every process of the components (by their AIRFLOW_HOME), the folder
        stack.enter_context(watchdog.guarding(watchdog.environ("AIRFLOW_HOME", f"{root}/"), watchdog.rmtree(root),
                                              name=f"deployment {root}"))
        stack.callback(shutil.rmtree, root, ignore_errors=True)
        pg, databases = stack.enter_context(postgres_server("airflow", "kafkaops"))
        broker = stack.enter_context(temporary_redis(root / "redis"))
        redis_url = broker.url
        installation = install_wheel(root, checkout)
        port = _free_port()
        url = f"http://127.0.0.1:{port}"
        passwords = {user: secrets.token_urlsafe(12) for user in USERS}
        metadata = sa.make_url(databases["airflow"])
        store = sa.make_url(databases["kafkaops"])
        from cryptography.fernet import Fernet

        settings = shared_settings(
            metadata_url=metadata.render_as_string(hide_password=False),
            store={"conn_type": "postgres", "host": store.host, "port": store.port, "login": store.username,
                   "schema": store.database},
            broker_url=redis_url,
            result_backend="db+" + metadata.render_as_string(hide_password=False),
            api_url=url, jwt_secret=secrets.token_urlsafe(32), fernet_key=Fernet.generate_key().decode(),
            secret_key=secrets.token_urlsafe(32), kafka_bootstrap=kafka_bootstrap,
            dags_folder=installation.resource("r.dags_folder()"),
            users=",".join(f"{user}:{role}" for user, role in USERS.items()), spark_master=spark_master,
            spark_secret_file=None if spark_secret_file is None else str(spark_secret_file),
            prometheus=None if prometheus_url is None else prometheus_connection(prometheus_url))
        if kafka_login:
            settings["AIRFLOW_CONN_KAFKA_DEFAULT"] = json.dumps({"conn_type": "kafka", "extra": {
                "bootstrap.servers": kafka_bootstrap, **kafka_login}})
        # Task logs stay on the worker (and the triggerer) that wrote them; the api-server reads them
        # from their log servers, on ports every component knows.
        worker_logs, trigger_logs = provision.free_ports(2)
        settings.update({"AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(worker_logs),
                         "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(trigger_logs)})
        components: dict[str, Component] = {}
        for name, args in {"migrate": ("db", "migrate"), **COMPONENTS}.items():
            home = root / name
            (home / "kafkaops-cache").mkdir(parents=True)
            env = {**clean_env(installation.venv), **settings, "AIRFLOW_HOME": str(home),
                   "KAFKAOPS_CACHE": str(worker_cache if name == "worker" else home / "kafkaops-cache"),
                   "KAFKAOPS_JARS": str(jars), **((worker_env or {}) if name == "worker" else {})}
            if name == "api-server":
                (home / "passwords.json").write_text(json.dumps(passwords))
                env.update({"AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / "passwords.json"),
                            "AIRFLOW__API__HOST": "127.0.0.1", "AIRFLOW__API__PORT": str(port)})
            components[name] = Component(name, home, env, [str(installation.python), "-m", "airflow", *args],
                                         logs / f"{name}.log")
        logs.mkdir(parents=True, exist_ok=True)
        # no kept-alive connections: a scenario restarts the api-server, whose old connections would then fail
        http = stack.enter_context(httpx.Client(limits=httpx.Limits(max_keepalive_connections=0)))
        result = Deployment(root=root, url=url, installation=installation, components=components,
                            databases=databases, redis_url=redis_url, passwords=passwords, http=http,
                            prometheus_url=prometheus_url, postgres=pg, redis=broker)
        for component in components.values():  # stopped in reverse order of start, also on failure
            stack.callback(_stop_quietly, component)
        # The one-shot init (docker-compose.yml's airflow-init): the store's schema, then Airflow's.
        migrate = components["migrate"]
        for argv in ([str(installation.python), "-m", "kafkaops", "check", "--upgrade"], migrate.argv):
            done = subprocess.run(argv, cwd=migrate.home, env=migrate.env, capture_output=True, text=True,
                                  timeout=600)
            if done.returncode:
                pytest.fail(f"{' '.join(argv[2:])} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
        for name in COMPONENTS:
            result.start(name)
        result.wait_until_healthy()
        result.wait_for_dags(dag_ids)
        result.started_in = time.monotonic() - began
        log.info("deployment up in %.0f s at %s", result.started_in, url)
        yield result


def _stop_quietly(component: Component) -> None:
    if component.process is not None:
        try:
            stop_group(component.process)
        except Exception as err:  # stopping the rest matters more
            log.warning("stopping %s: %s", component.name, err)
