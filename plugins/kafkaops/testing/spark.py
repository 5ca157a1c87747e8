"""A Spark standalone cluster for the tests: a Master and two Workers from the pip pyspark
distribution (``spark-class org.apache.spark.deploy.master.Master`` / ``...worker.Worker``) on
127.0.0.1, free ports for each RPC and web UI.

As root each Worker runs as a Unix user of its own (``kafkaops-spark1-<run>``, ``kafkaops-spark2-<run>``:
this pytest process's suffix, :func:`kafkaops.testing.users.run_suffix`, so two runs or two xdist workers never
share one; created at the start, removed at the end) in a mount namespace of its own where ``/work`` (the repositories, the
project's venv) is an empty tmpfs: only the pyspark distribution, bind-mounted read-only outside
it, is there to start the JVM. So nothing on the driver's disk reaches an executor but what Spark
ships (``--jars``, ``--py-files``, ``--files`` over the driver's file server), and the driver's private
temp files (0700) are unreadable to the executors' users anyway. Each Worker has its own work and
local dirs (``SPARK_WORKER_DIR``, ``SPARK_LOCAL_DIRS``) under a temp folder, owned by its user.
Without root the Workers run as this user, with no namespace (the cluster works; the isolation is
not there).

Spark's authentication is on (docs/security.md "Spark"): the Master, the Workers and every application
share one secret, made at the start, which each daemon reads from a Spark properties file of its own
(``--properties-file``, mode 0600, owned by the daemon's user) and the submitters from
:attr:`StandaloneSpark.secret_file` (the ``auth-secret-file`` extra of :meth:`StandaloneSpark.connection`);
RPC is encrypted (``spark.network.crypto.enabled``, no SASL fallback). The secret is on no command line.

spark-submit reads the deployment's defaults from ``SPARK_CONF_DIR``: tests point it at
:attr:`StandaloneSpark.conf_dir` (executors of two users on one host must not read each other's
shuffle files from disk). The fixture waits until both Workers registered (the Master's ``/json``), yields a
:class:`StandaloneSpark`, and at session end stops every process it started and checks that no
process of the Workers' users is left.
"""
from __future__ import annotations

import json
import os
import pwd
import re
import secrets
import shutil
import signal
import socket
import struct
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import pyspark
from kafkaops.platform import provision
from kafkaops.platform import spark as spark_platform
from kafkaops.platform.paths import private_file
from kafkaops.testing import jvm, watchdog
from kafkaops.testing.users import remove_stale_users, run_suffix

USER_PREFIX = "kafkaops-spark"
WORKER_COUNT = 2


def worker_users() -> tuple[str, ...]:
    """This run's Workers' users (at most 22 characters, within Unix's 32)."""
    return tuple(f"{USER_PREFIX}{n + 1}-{run_suffix()}" for n in range(WORKER_COUNT))

#: This venv's packages (pyarrow, ...), which the executors' Python workers need on their hosts.
SITE_PACKAGES = sysconfig.get_paths()["purelib"]
START_TIMEOUT_S = 120.0


@dataclass
class StandaloneSpark:
    master_url: str
    webui_url: str
    users: tuple[str, ...]
    isolated: bool
    folder: Path
    processes: list[subprocess.Popen] = field(default_factory=list)

    @property
    def secret_file(self) -> Path:
        """The cluster's secret as submitters read it: a Spark properties file (0600, this user's)."""
        return self.folder / "auth" / "spark-auth.properties"

    def session_conf(self) -> dict[str, str]:
        """What an in-process SparkSession on this master needs besides ``spark-defaults.conf``: Spark's
        authentication and encryption with the cluster's secret (given to the JVM through py4j, no argv)."""
        secret = spark_platform.read_auth_secret(str(self.secret_file), self.master_url, "the test cluster")
        return {**spark_platform.SECURITY_CONF, spark_platform.AUTH_SECRET: secret}

    def state(self) -> dict:
        with urllib.request.urlopen(f"{self.webui_url}/json", timeout=5) as answer:
            return json.load(answer)

    @property
    def conf_dir(self) -> Path:
        """``SPARK_CONF_DIR`` for spark-submit: its ``spark-defaults.conf`` has what a cluster whose
        executors are different users on one host needs (each reads only its own disk)."""
        return self.folder / "conf"

    def connection(self) -> dict[str, object]:
        """An Airflow ``spark`` connection to this master (for ``AIRFLOW_CONN_<ID>``)."""
        host, port = self.master_url.rsplit(":", 1)
        return {"conn_type": "spark", "host": host, "port": int(port),
                "extra": {spark_platform.AUTH_SECRET_FILE_EXTRA: str(self.secret_file)}}

    def applications(self) -> list[dict]:
        """Applications the Master has run (completed) or runs (active)."""
        state = self.state()
        return state.get("activeapps", []) + state.get("completedapps", [])


def _java_home() -> str:
    if os.environ.get("JAVA_HOME"):
        return os.environ["JAVA_HOME"]
    java = shutil.which("java")
    if java is None:
        pytest.skip("no java on PATH: the Spark standalone cluster needs a JDK 17+")
    return str(Path(os.path.realpath(java)).parent.parent)


#: What the Master and the Workers run with besides the secret (kafkaops.platform.spark.SECURITY_CONF's
#: network part: the applications' settings must match them).
DAEMON_SECURITY = {k: v for k, v in spark_platform.SECURITY_CONF.items() if k.startswith(("spark.authenticate",
                                                                                          "spark.network."))}


def write_auth_properties(path: Path, secret: str, owner: pwd.struct_passwd | None = None) -> Path:
    """A Spark properties file with :data:`DAEMON_SECURITY` and the cluster's ``secret``, created 0600 (then
    given to ``owner`` when set): what a daemon starts with (``--properties-file``) and submitters read."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [f"{k} {v}" for k, v in DAEMON_SECURITY.items()] + [f"{spark_platform.AUTH_SECRET} {secret}"]
    with private_file(path) as out:
        out.write(("\n".join(lines) + "\n").encode())
    if owner is not None:
        os.chown(path, owner.pw_uid, owner.pw_gid)
    return path


def _ensure_user(name: str) -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name], check=True)
        return pwd.getpwnam(name)


def _wait_for_workers(spark: StandaloneSpark, count: int) -> None:
    deadline, last = time.monotonic() + START_TIMEOUT_S, "no answer"
    while time.monotonic() < deadline:
        dead = [p.args for p in spark.processes if p.poll() is not None]
        if dead:
            raise RuntimeError(f"a Spark standalone process ended at start: {dead}; logs in {spark.folder}")
        try:
            state = spark.state()
            alive = [w for w in state.get("workers", []) if w.get("state") == "ALIVE"]
            if len(alive) >= count:
                return
            last = f"{len(alive)} worker(s) alive"
        except OSError as err:
            last = str(err)
        time.sleep(1)
    raise RuntimeError(f"the Spark standalone cluster did not register {count} workers in {START_TIMEOUT_S:.0f} s "
                       f"({last}); logs in {spark.folder}")


def _stop(processes: list[subprocess.Popen]) -> None:
    for process in processes:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
    for process in processes:
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


def left_processes(users: tuple[str, ...]) -> dict[str, list[str]]:
    """The live processes each of ``users`` still runs (``pid state command``), by user; zombies (ended,
    waiting for PID 1 to reap them: an executor's shell whose Worker was stopped) are not counted."""
    left = {}
    for user in users:
        found = subprocess.run(["ps", "-o", "pid=,stat=,args=", "-u", user], capture_output=True, text=True,
                               check=False).stdout.splitlines()
        alive = [line.strip() for line in found if line.split() and not line.split()[1].startswith("Z")]
        if alive:
            left[user] = alive
    return left


def _worker_command(spark: StandaloneSpark, n: int, ports: tuple[int, int], base_env: Mapping[str, str],
                    spark_home: Path, checkout: Path, secret: str) -> tuple[list[str], dict[str, str]]:
    """Worker ``n``'s command and environment, its folders made. Isolated (root with ``unshare``): run as its own
    user in a mount namespace that shows the Spark distribution and the venv's packages read-only outside the
    checkout, and hides the checkout; else as this user, from the distribution."""
    own = spark.folder / f"worker{n + 1}"
    (own / "work").mkdir(parents=True)
    (own / "local").mkdir()
    env = {**base_env, "HOME": str(own), "SPARK_WORKER_DIR": str(own / "work"), "SPARK_LOCAL_DIRS": str(own / "local")}
    user = pwd.getpwnam(spark.users[n]) if spark.isolated else None
    auth = write_auth_properties(own / "auth.properties", secret, user)
    worker = ["bin/spark-class", "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
              "--port", str(ports[0]), "--webui-port", str(ports[1]), "--properties-file", str(auth),
              "--cores", "1", "--memory", "1g", "--work-dir", str(own / "work"), spark.master_url]
    if user is None:
        return [str(spark_home / worker[0]), *worker[1:]], {**env, "SPARK_HOME": str(spark_home),
                                                            "PYTHONPATH": SITE_PACKAGES}
    for path in (own, own / "work", own / "local"):
        os.chown(path, user.pw_uid, user.pw_gid)
    own.chmod(0o700)
    visible_home = spark.folder / f"spark-home{n + 1}"
    visible_home.mkdir()
    # The Python packages the executors' Python workers import (pyarrow for the verify's Arrow pass), as an
    # operator installs them on each Spark host: this venv's, read-only, outside the checkout. The project's own
    # code still comes only through --py-files.
    visible_site = spark.folder / f"site-packages{n + 1}"
    visible_site.mkdir()
    # the distribution bind-mounted outside the checkout, then the checkout hidden, then this user only
    script = (f'mount --bind -o ro "{spark_home}" "{visible_home}" && '
              f'mount --bind -o remount,ro,bind "{visible_home}" && '
              f'mount --bind -o ro "{SITE_PACKAGES}" "{visible_site}" && '
              f'mount --bind -o remount,ro,bind "{visible_site}" && '
              f'mount -t tmpfs -o mode=0755,size=1m kafkaops-hidden {checkout} && '
              f'cd "{visible_home}" && exec setpriv --reuid={user.pw_uid} --regid={user.pw_gid} '
              f'--init-groups "$@"')
    command = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "worker", *worker]
    return command, {**env, "SPARK_HOME": str(visible_home), "PYTHONPATH": str(visible_site)}


@contextmanager
def standalone_cluster(checkout: Path) -> Iterator[StandaloneSpark]:
    """A Master and two Workers on 127.0.0.1 (module docstring), stopped when the block ends (the
    session fixture ``spark_standalone`` of tests/conftest.py: after its last test). ``checkout``, the
    repository the caller runs from (its venv, jars and caches with it), is not visible to the Workers."""
    java_home = _java_home()
    spark_home = Path(pyspark.__file__).parent
    isolated = os.geteuid() == 0 and shutil.which("unshare") is not None
    if isolated:
        remove_stale_users(USER_PREFIX)  # a crashed run's leftovers
    users = tuple(_ensure_user(u).pw_name for u in worker_users()) if isolated else ()
    folder = Path(tempfile.mkdtemp(prefix="kafkaops-spark-standalone-"))
    folder.chmod(0o755)
    guard = watchdog.guard(watchdog.rmtree(folder), name=f"spark {folder}")

    def watch() -> None:
        """Should this process die first: the Master's and Workers' process groups, whatever the Workers' users
        run (their executors), the users themselves (this run's names), the folder."""
        guard.update(*(watchdog.group(p) for p in spark.processes), *(watchdog.user(u) for u in users),
                     *(watchdog.run(["userdel", "-f", u]) for u in users), watchdog.rmtree(folder))

    master_port, master_ui, *worker_ports = provision.free_ports(2 + 2 * WORKER_COUNT)
    base_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "JAVA_HOME": java_home, "SPARK_LOCAL_IP": "127.0.0.1",
                "SPARK_NO_DAEMONIZE": "1", "LANG": "C.UTF-8",
                # the Master's and Workers' JVMs lean, as the executors' below (kafkaops.testing.jvm)
                "SPARK_DAEMON_JAVA_OPTS": jvm.LEAN}
    spark = StandaloneSpark(f"spark://127.0.0.1:{master_port}", f"http://127.0.0.1:{master_ui}", users, isolated,
                            folder)
    secret = secrets.token_hex(32)  # this cluster's: its daemons' files and spark.secret_file, nowhere else
    write_auth_properties(spark.secret_file, secret)
    (folder / "conf").mkdir()
    # executors on one host read each other's shuffle files from disk unless told not to; here each
    # is another user, so they fetch them from each other's block manager as on separate hosts
    (folder / "conf" / "spark-defaults.conf").write_text("spark.shuffle.readHostLocalDisk false\n"
                                                         "spark.driver.host 127.0.0.1\n"
                                                         f"spark.executor.extraJavaOptions {jvm.LEAN}\n")
    try:
        with (folder / "master.log").open("w") as master_log:  # the process writes its own copy of the file
            spark.processes.append(subprocess.Popen(
                [str(spark_home / "bin" / "spark-class"), "org.apache.spark.deploy.master.Master", "--host",
                 "127.0.0.1", "--port", str(master_port), "--webui-port", str(master_ui), "--properties-file",
                 str(write_auth_properties(folder / "master-auth.properties", secret))],
                env={**base_env, "SPARK_HOME": str(spark_home), "HOME": str(folder)}, cwd=folder,
                stdout=master_log, stderr=subprocess.STDOUT, start_new_session=True))
        watch()
        for n in range(WORKER_COUNT):
            command, env = _worker_command(spark, n, (worker_ports[2 * n], worker_ports[2 * n + 1]), base_env,
                                           spark_home, checkout, secret)
            with (folder / f"worker{n + 1}.log").open("w") as log:
                spark.processes.append(subprocess.Popen(command, env=env, cwd="/" if isolated else folder,
                                                        stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
            watch()
        _wait_for_workers(spark, WORKER_COUNT)
        yield spark
    finally:
        _stop(spark.processes)
        left = left_processes(users)
        for lines in left.values():  # the Workers' users run nothing but what this fixture started
            for line in lines:
                os.kill(int(line.split()[0]), signal.SIGKILL)
        shutil.rmtree(folder, ignore_errors=True)
        if left:
            time.sleep(0.5)  # userdel refuses a user whose killed processes are still going
        for name in users:
            subprocess.run(["userdel", "-f", name], capture_output=True)
        guard.release()
        assert not left, f"processes left after the Spark standalone cluster stopped: {left}"


def stop_local_gateway(timeout_s: float = 30.0) -> None:
    """Stop the JVM that this process's in-process Spark sessions shared (pyspark's py4j gateway), and
    close its connections. ``SparkSession.stop()`` leaves both to the end of the interpreter, where py4j's
    finalizers log into closed streams ("I/O operation on closed file"). Nothing to do when no session was
    made here. The JVM ends when its standard input closes (pyspark's contract); killed after ``timeout_s``."""
    if "pyspark" not in sys.modules:
        return
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    if gateway is None:
        return
    if SparkContext._active_spark_context is not None:
        SparkContext._active_spark_context.stop()
    proc = getattr(gateway, "proc", None)
    gateway.shutdown()
    SparkContext._gateway = None
    SparkContext._jvm = None
    if proc is not None:
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=timeout_s)


# -- what a stranger reaches of a running driver --------------------------------------------------------------

#: The driver's ports as its log names them: its RPC (which also serves ``--files`` and ``--jars``) and its
#: block manager's.
DRIVER_PORT = re.compile(r"Successfully started service '(sparkDriver|org\.apache\.spark\.network\.netty\."
                         r"NettyBlockTransferService)' on port (\d+)")
#: Spark's transport frames (org.apache.spark.network.protocol): an RpcRequest, a StreamRequest and their answers.
RPC_REQUEST, RPC_RESPONSE, RPC_FAILURE, STREAM_REQUEST, STREAM_RESPONSE, STREAM_FAILURE = 3, 4, 5, 6, 7, 8


def driver_ports(log: str) -> dict[str, int]:
    """``{"rpc": port, "blocks": port}`` of the driver whose output is ``log`` (those started so far)."""
    return {("rpc" if name == "sparkDriver" else "blocks"): int(port) for name, port in DRIVER_PORT.findall(log)}


def listening_addresses(port: int) -> set[str]:
    """The local addresses a socket listens on ``port`` at (``/proc/net/tcp`` and ``tcp6``), as text."""
    found = set()
    for table, size in (("/proc/net/tcp", 4), ("/proc/net/tcp6", 16)):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            local, state = row.split()[1], row.split()[3]
            address, _, hex_port = local.partition(":")
            if state != "0A" or int(hex_port, 16) != port:  # 0A: LISTEN
                continue
            raw = bytes.fromhex(address)
            # the kernel writes each 32-bit word in host order (little-endian here)
            host = b"".join(raw[i:i + 4][::-1] for i in range(0, size, 4))
            text = socket.inet_ntop(socket.AF_INET if size == 4 else socket.AF_INET6, host)
            found.add(text.removeprefix("::ffff:"))
    return found


def _exchange(host: str, port: int, frame: bytes, timeout_s: float) -> tuple[int | str, bytes]:
    """Send one transport frame, without any authentication handshake; the answer's type and its bytes after the
    frame's header (a stream's data included), or ``"closed"``/``"timeout"`` with what came before."""
    with socket.create_connection((host, port), timeout=timeout_s) as conn:
        conn.sendall(frame)
        data = b""
        while True:
            try:
                chunk = conn.recv(65536)
            except TimeoutError:
                return "timeout", data
            if not chunk:
                return "closed", data
            data += chunk
            if len(data) < 9:
                continue
            length, kind = struct.unpack(">qb", data[:9])
            if kind == STREAM_RESPONSE and len(data) >= length:
                (name_size,) = struct.unpack(">i", data[9:13])
                (size,) = struct.unpack(">q", data[13 + name_size:21 + name_size])
                if len(data) >= length + size:
                    return kind, data[9:length + size]
            elif len(data) >= length:
                return kind, data[9:length]


def fetch_file(host: str, port: int, name: str, *, timeout_s: float = 5.0) -> tuple[int | str, bytes]:
    """Ask a driver's RPC port for ``/files/<name>`` (what ``--files`` ships to the executors) as a client that
    knows no secret: a StreamRequest; :data:`STREAM_RESPONSE` and the file's bytes when it is served."""
    stream = f"/files/{name}".encode()
    body = struct.pack(">i", len(stream)) + stream
    return _exchange(host, port, struct.pack(">qb", 9 + len(body), STREAM_REQUEST) + body, timeout_s)


def unauthenticated_rpc(host: str, port: int, *, timeout_s: float = 5.0) -> tuple[int | str, bytes]:
    """An RPC to ``host:port`` without the authentication handshake (16 zero bytes); a Spark RPC server without
    authentication hands it to its endpoints' deserializer, one with authentication to its handshake."""
    payload = bytes(16)
    return _exchange(host, port, struct.pack(">qbqi", 21 + len(payload), RPC_REQUEST, 1, len(payload)) + payload,
                     timeout_s)


@dataclass
class DriverProbe:
    """While a job runs: once its driver's ports are in ``log_file``, what a stranger gets from them (the
    addresses they listen on; each of ``files`` asked for from ``host``; an RPC without the handshake)."""

    log_file: Path
    files: tuple[str, ...]
    host: str = "127.0.0.1"
    timeout_s: float = 300.0
    ports: dict[str, int] = field(default_factory=dict)
    listening: dict[str, set[str]] = field(default_factory=dict)
    fetched: dict[str, tuple[int | str, bytes]] = field(default_factory=dict)
    rpc: tuple[int | str, bytes] | None = None
    error: str | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def _run(self) -> None:
        deadline = time.monotonic() + self.timeout_s
        while not self._stop.is_set() and time.monotonic() < deadline:
            try:
                ports = driver_ports(self.log_file.read_text(errors="replace"))
            except OSError:
                ports = {}
            if len(ports) == 2:
                try:
                    self.ports = ports
                    self.listening = {k: listening_addresses(p) for k, p in ports.items()}
                    self.fetched = {name: fetch_file(self.host, ports["rpc"], name) for name in self.files}
                    self.rpc = unauthenticated_rpc(self.host, ports["rpc"])
                except OSError as err:
                    self.error = f"{type(err).__name__}: {err}"
                return
            self._stop.wait(0.1)

    def __enter__(self) -> DriverProbe:
        self._thread = threading.Thread(target=self._run, name="kafkaops-driver-probe", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)

