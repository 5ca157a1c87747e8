"""Remote hosts on this machine, reached over real SSH: Debian's sshd with a config of its own on a free
port of each host's loopback address, a generated host key and client key, and one Unix user per "host"
(``kafkaops-host2-<run>`` owns 127.0.0.2, and so on), whose home is the host's only writable folder. The
users and their group carry the suffix of this pytest process (:func:`kafkaops.testing.users.run_suffix`), so
two runs on one machine (or two xdist workers) never share a user, a key or an ``AllowGroups``.

The checkout and the controller's caches are made unreadable to those users for the session, so a role
that relied on the controller's paths fails. Everything is undone at the end: sshd stopped, every process
of those users killed, the users and their folders removed, the modes put back.

Needs root (users, ``/run/sshd``) and ``/usr/sbin/sshd`` (``make sshd`` installs openssh-server); without
them the tests that use it skip, saying which.

The session fixtures ``remote_sshd`` and ``remote_cluster`` (tests/conftest.py imports them, so one sshd and
one remote cluster serve every module that asks: tests/integration/platform/test_remote_hosts.py and
tests/dags/test_remote_scale_out.py) are at the end.
"""
from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import yaml

from kafkaops.testing import jvm, watchdog
from kafkaops.testing.users import remove_stale_users, run_suffix
from tests.sessions import stops_early

if TYPE_CHECKING:
    from kafkaops.platform import provision as provision_

SSHD = Path("/usr/sbin/sshd")
USER_PREFIX = "kafkaops-host"
GROUP_PREFIX = "kafkaops-hosts-"


def host_user(address: str) -> str:
    """This run's user of the host on ``address``: ``kafkaops-host7-<run>`` for 127.0.0.7 (at most 21
    characters, within Unix's 32)."""
    return f"{USER_PREFIX}{address.rsplit('.', 1)[1]}-{run_suffix()}"


def missing() -> str | None:
    """Why this machine cannot run the fixture, or None."""
    if os.geteuid() != 0:
        return "the remote-host tests create Unix users and run sshd: run them as root"
    if not SSHD.exists():
        return "sshd not found: install openssh-server (make sshd, or apt-get install openssh-server)"
    if not shutil.which("ssh-keygen") or not shutil.which("ssh"):
        return "ssh and ssh-keygen not found: install openssh-client"
    return None


@dataclass(frozen=True)
class RemoteHost:
    """One "remote host": a Unix user, the loopback address its broker binds, its home folder."""

    user: str
    address: str
    home: Path

    @property
    def uid(self) -> int:
        return pwd.getpwnam(self.user).pw_uid


@dataclass(frozen=True)
class Sshd:
    port: int
    client_key: Path
    hosts: tuple[RemoteHost, ...]
    base: Path

    def ssh(self, host: RemoteHost, command: str, *, key: Path | None = None, timeout: float = 30
            ) -> subprocess.CompletedProcess[str]:
        """Run ``command`` on ``host`` as its user over SSH."""
        return subprocess.run(
            ["ssh", "-p", str(self.port), "-i", str(key or self.client_key), "-o", "BatchMode=yes",
             "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
             f"{host.user}@{host.address}", command],
            capture_output=True, text=True, timeout=timeout, check=False)

    def connection_vars(self, host: RemoteHost) -> dict[str, object]:
        """Ansible's variables to reach ``host`` (its own Python, not the controller's)."""
        return {"ansible_connection": "ssh", "ansible_host": host.address, "ansible_port": self.port,
                "ansible_user": host.user, "ansible_ssh_private_key_file": str(self.client_key),
                "ansible_python_interpreter": "/usr/bin/python3",
                "ansible_ssh_common_args": "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null"}


def _free_port(addresses: Iterable[str]) -> int:
    """A port free on every address."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        try:
            for address in addresses:
                with socket.socket() as sock:
                    sock.bind((address, port))
        except OSError:
            continue
        return port
    raise RuntimeError("no port free on every host address after 50 tries")


def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, text=True)


def _kill_user_processes(uids: set[int]) -> list[int]:
    """SIGKILL every process owned by one of ``uids`` (the fixture's users only)."""
    killed = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if proc.stat().st_uid in uids:
                os.kill(int(proc.name), signal.SIGKILL)
                killed.append(int(proc.name))
        except OSError:
            continue
    return killed


@contextmanager
def unreadable(paths: Iterable[Path]) -> Iterator[None]:
    """Take read and search permission for "others" away from ``paths`` for the block (the owner, root
    here, keeps them), then put each mode back."""
    modes = {}
    try:
        for path in dict.fromkeys(p.resolve() for p in paths if p.exists()):
            modes[path] = stat.S_IMODE(path.stat().st_mode)
            path.chmod(modes[path] & ~0o007)
        yield
    finally:
        for path, mode in modes.items():
            path.chmod(mode)


@contextmanager
def temporary_sshd(addresses: Iterable[str], *, hidden: Iterable[Path] = (),
                   no_java: Iterable[str] = ()) -> Iterator[Sshd]:
    """sshd on ``addresses`` (127.0.0.2, ...) with one user per address; ``hidden`` folders unreadable to
    them; the hosts in ``no_java`` get a PATH without java (every other command of /usr/bin is there)."""
    reason = missing()
    if reason:
        raise RuntimeError(reason)
    addresses = tuple(addresses)
    base = Path(tempfile.mkdtemp(prefix="kafkaops-sshd-"))
    base.chmod(0o755)  # the users reach their homes below it; the keys sit in a root-only folder
    etc, homes, authorized = base / "etc", base / "hosts", base / "authorized_keys"
    for folder, mode in ((etc, 0o700), (homes, 0o755), (authorized, 0o755)):
        folder.mkdir(mode=mode)
        folder.chmod(mode)
    hosts = tuple(RemoteHost(user=host_user(a), address=a, home=homes / a) for a in addresses)
    group = GROUP_PREFIX + run_suffix()
    port = _free_port(addresses)
    process: subprocess.Popen[str] | None = None
    created: list[str] = []
    modes = {path: stat.S_IMODE(path.stat().st_mode) for path in dict.fromkeys(p.resolve() for p in hidden)
             if path.exists()}
    guard = watchdog.guard(watchdog.rmtree(base), name=f"sshd {base}")

    def watch() -> None:
        """Should this process die first: sshd, then every process of the users, the users and the group, the
        modes, the folder."""
        guard.update(*([watchdog.pid(process.pid)] if process else []), *(watchdog.user(u) for u in created),
                     *(watchdog.run(["userdel", "-f", u]) for u in created), watchdog.run(["groupdel", group]),
                     *(watchdog.chmod(path, mode) for path, mode in modes.items()), watchdog.rmtree(base))

    try:
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(etc / "host_key"))
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "kafkaops-tests", "-f", str(etc / "client_key"))
        remove_stale_users(USER_PREFIX, GROUP_PREFIX)  # a crashed run's leftovers
        subprocess.run(["groupadd", "-f", group], check=True, capture_output=True)
        for host in hosts:
            _run("useradd", "-m", "-d", str(host.home), "-s", "/bin/sh", "-G", group, host.user)
            created.append(host.user)
            watch()
            _run("usermod", "-p", "*", host.user)  # no password, not locked: sshd refuses locked accounts
            host.home.chmod(0o750)
            (authorized / host.user).write_text((etc / "client_key.pub").read_text())
            (authorized / host.user).chmod(0o644)
            if host.address in no_java:
                _without_java(host)
        config = etc / "sshd_config"
        config.write_text("\n".join([
            *(f"ListenAddress {a}:{port}" for a in addresses),
            f"HostKey {etc / 'host_key'}", f"PidFile {etc / 'sshd.pid'}",
            f"AuthorizedKeysFile {authorized}/%u", f"AllowGroups {group}",
            "PubkeyAuthentication yes", "PasswordAuthentication no", "KbdInteractiveAuthentication no",
            "PermitRootLogin no", "UsePAM no", "PermitUserEnvironment PATH",
            "StrictModes no",  # its folders sit in /tmp, which is world-writable (the keys stay root-only)
            "Subsystem sftp internal-sftp", "LogLevel INFO", "MaxStartups 50", "MaxSessions 50", ""]))
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        _run(str(SSHD), "-t", "-f", str(config))
        process = subprocess.Popen([str(SSHD), "-D", "-e", "-f", str(config)], stdout=subprocess.DEVNULL,
                                   stderr=open(base / "sshd.log", "w"), text=True)
        watch()
        sshd = Sshd(port=port, client_key=etc / "client_key", hosts=hosts, base=base)
        deadline = time.monotonic() + 20
        while sshd.ssh(hosts[0], "true", timeout=10).returncode != 0:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"sshd did not accept a login on {hosts[0].address}:{port}: "
                                   f"{(base / 'sshd.log').read_text()[-1000:]}")
            time.sleep(0.3)
        with unreadable(hidden):
            yield sshd
    finally:
        uids = set()
        for user in created:
            try:
                uids.add(pwd.getpwnam(user).pw_uid)
            except KeyError:
                pass
        _kill_user_processes(uids)
        if process is not None:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
        time.sleep(0.2)
        _kill_user_processes(uids)  # a session that forked while sshd went down
        for user in created:
            subprocess.run(["userdel", "-f", user], capture_output=True)
        subprocess.run(["groupdel", group], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)
        guard.release()


def _without_java(host: RemoteHost) -> None:
    """Give ``host``'s user a PATH of every /usr/bin command but java (sshd's PermitUserEnvironment)."""
    bin_dir = host.home / "bin-without-java"
    bin_dir.mkdir()
    for entry in Path("/usr/bin").iterdir():
        if not entry.name.startswith(("java", "jshell", "keytool", "jar")):
            (bin_dir / entry.name).symlink_to(entry)
    ssh_dir = host.home / ".ssh"
    ssh_dir.mkdir(mode=0o700)
    (ssh_dir / "environment").write_text(f"PATH={bin_dir}:/usr/sbin\n")
    for path in (bin_dir, ssh_dir, ssh_dir / "environment"):
        os.lchown(path, host.uid, pwd.getpwnam(host.user).pw_gid)


# -- the remote cluster of the session -------------------------------------------------------------------

REPO = Path(__file__).resolve().parents[1]
ADDRESSES = ("127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5", "127.0.0.6", "127.0.0.7")
"""kafka-1 .. kafka-6, in this order (:attr:`RemoteCluster.hosts`)."""
NO_JAVA, SPARE = "127.0.0.5", "127.0.0.6"
"""kafka-4 has no java on its PATH; kafka-5 stays empty (the unreachable and port-in-use tests)."""
BY_CONNECTION = ("kafka-3", "kafka-6")
"""Hosts the inventory names by address only: the login comes from an Airflow SSH connection (kafka-3: the
CLI scale-out of test_remote_hosts.py; kafka-6: the kafka_scale_out DAG of test_remote_scale_out.py)."""


class RemoteCluster:
    """An Ansible inventory of remote hosts (a YAML file, as operators write it): kafka-1 the controller
    and a broker on 127.0.0.2, kafka-2 a broker on 127.0.0.3; kafka-3 (127.0.0.4) and kafka-6 (127.0.0.7)
    for scale-outs, whose login comes from an SSH connection (:meth:`connection`)."""

    def __init__(self, server: Sshd, folder: Path) -> None:
        from kafkaops.platform import provision
        from kafkaops.testing.clusters import TEST_BROKER_CONFIG

        self.server = server
        self.port, self.controller_port = provision.free_ports(2)
        self.hosts = {f"kafka-{i + 1}": host for i, host in enumerate(server.hosts)}
        self.cluster_id = provision.new_cluster_id()
        self.broker_config = TEST_BROKER_CONFIG
        self.path = folder / "inventory.yml"
        self.write()

    def host_vars(self, name: str, **more: object) -> dict[str, object]:
        host = self.hosts[name]
        return {**self.server.connection_vars(host), "kafka_broker_node_id": int(name.split("-")[1]),
                "kafka_broker_rack": f"rack-{name[-1]}", "kafka_broker_base_dir": str(host.home / "kafka"), **more}

    def scale_out_vars(self, name: str, *, with_login: bool = False) -> dict[str, object]:
        """A broker-only host named by its address only, unless ``with_login``."""
        login_vars = () if with_login else ("ansible_user", "ansible_port", "ansible_ssh_private_key_file")
        return {k: v for k, v in self.host_vars(name, kafka_broker_process_roles=["broker"]).items()
                if k not in login_vars}

    def connection(self, name: str = "kafka-3", *, key: Path | None = None, port: int | None = None
                   ) -> dict[str, object]:
        """An Airflow SSH connection (as JSON for ``AIRFLOW_CONN_<ID>``) that logs in to ``name``: its
        user, sshd's port (or ``port``), the client key (or ``key``) by file."""
        return {"conn_type": "ssh", "login": self.hosts[name].user, "port": port or self.server.port,
                "extra": {"key_file": str(key or self.server.client_key)}}

    def login(self, name: str = "kafka-3") -> provision_.SshLogin:
        from airflow.sdk import Connection

        from kafkaops.platform import provision

        conn = self.connection(name)
        return provision.SshLogin.from_connection(Connection(
            conn_id="kafka_hosts", conn_type="ssh", login=str(conn["login"]), port=int(str(conn["port"])),
            extra=json.dumps(conn["extra"])))

    def write(self, *, with_logins: bool = False, **extra_hosts: dict[str, object]) -> None:
        inventory = {"all": {
            "vars": {"kafka_broker_cluster_id": self.cluster_id, "kafka_broker_heap": "256m",
                     "kafka_broker_port": self.port, "kafka_broker_controller_port": self.controller_port,
                     "kafka_broker_default_replication_factor": 2, "kafka_broker_offsets_topic_partitions": 3,
                     "kafka_broker_extra_config": self.broker_config,
                     # lean, without the archive: the hosts' brokers run their own copy of the jars
                     **jvm.broker_vars(archive=False)},
            "children": {"kafka_cluster": {"children": {
                "kafka_controllers": {"hosts": {"kafka-1": self.host_vars("kafka-1")}},
                "kafka_brokers": {"hosts": {"kafka-2": self.host_vars("kafka-2", kafka_broker_process_roles=["broker"]),
                                            **{n: self.scale_out_vars(n, with_login=with_logins)
                                               for n in BY_CONNECTION},
                                            **extra_hosts}}}}}}}
        self.path.write_text(yaml.safe_dump(inventory))

    def up(self) -> None:
        """The controller kafka-1 and the broker kafka-2 running (the role converges: no change if they run)."""
        from kafkaops.platform import provision

        provision.run_playbook("cluster_up.yml", self.path, limit="kafka-1,kafka-2")

    @property
    def bootstrap(self) -> str:
        return f"{self.hosts['kafka-1'].address}:{self.port},{self.hosts['kafka-2'].address}:{self.port}"

    def pid(self, name: str) -> int | None:
        node = name.split("-")[1]
        try:
            return int((self.hosts[name].home / "kafka" / f"node-{node}" / "kafka.pid").read_text())
        except (OSError, ValueError):
            return None

    def assert_runs_there(self, name: str) -> None:
        """``name``'s broker runs as its host's user, from the distribution and config in its host's folders,
        and listens only on its host's address (kafka-1 also on the controller port)."""
        import psutil

        host, pid = self.hosts[name], self.pid(name)
        assert pid is not None, f"{name} wrote no pid file in {host.home}"
        process = psutil.Process(pid)
        assert process.uids().real == host.uid, f"{name}'s broker runs as uid {process.uids().real}, not {host.user}"
        argv = process.cmdline()
        assert argv[argv.index("-cp") + 1].startswith(str(host.home / "kafka" / "dist" / "kafka-")), argv
        node_dir = str(host.home / "kafka" / f"node-{name.split('-')[1]}")
        configs = [a for a in argv if a.endswith(".properties")]
        assert configs and all(c.startswith(node_dir) for c in configs), argv
        controller = {(host.address, self.controller_port)} if name == "kafka-1" else set()
        assert listening_addresses(pid) == {(host.address, self.port)} | controller

    def down(self) -> None:
        """Stop every broker the inventory names, each host logged in to with its own user."""
        from kafkaops.errors import ProvisionError
        from kafkaops.platform import provision

        self.write(with_logins=True)
        try:
            provision.run_playbook("cluster_down.yml", self.path,
                                   limit=",".join(["kafka-1", "kafka-2", *BY_CONNECTION]))
        except ProvisionError:
            pass  # the sshd fixture kills whatever the users still run


def listening_addresses(pid: int) -> set[tuple[str, int]]:
    """Where ``pid`` listens (Java binds IPv4-mapped IPv6 sockets: ::ffff:127.0.0.2 is 127.0.0.2)."""
    import psutil

    return {(c.laddr.ip.removeprefix("::ffff:"), c.laddr.port) for c in psutil.Process(pid).net_connections(kind="tcp")
            if c.status == psutil.CONN_LISTEN}


@pytest.fixture(scope="session")
def remote_sshd() -> Iterator[Sshd]:
    """The session's sshd and its host users (:data:`ADDRESSES`); the checkout and the controller's caches
    unreadable to them."""
    from kafkaops.platform import paths

    reason = missing()
    if reason:
        pytest.skip(reason)
    hidden = (REPO, paths.CACHE, paths.jar_dir("broker").parent)
    with stops_early("remote_sshd") as stack:
        yield stack.enter_context(temporary_sshd(ADDRESSES, hidden=hidden, no_java=(NO_JAVA,)))


@pytest.fixture(scope="session")
def remote_cluster(remote_sshd: Sshd, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RemoteCluster]:
    """The session's remote cluster (its inventory; nothing started: :meth:`RemoteCluster.up`), its brokers
    stopped at the end."""
    cluster = RemoteCluster(remote_sshd, tmp_path_factory.mktemp("remote"))
    with stops_early("remote_cluster") as stack:
        stack.callback(cluster.down)
        yield cluster
