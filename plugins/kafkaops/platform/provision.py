"""Provision Kafka nodes with the project's Ansible role, through ansible-runner.

The local cluster of ``make cluster-up``, the tests' clusters and broker addition in the
scale-out DAG all go through :func:`run_playbook`, so they share one code path.
"""
from __future__ import annotations

import base64
import json
import logging
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from kafkaops.errors import ConfigError, HostUnreachable, ProvisionError
from kafkaops.platform import redaction
from kafkaops.platform.paths import CACHE, jar_dir, private_file
from kafkaops.resources import playbooks

log = logging.getLogger(__name__)

KAFKA_LINES = ("3.9",)
"""Kafka lines besides the default (Kafka 4) whose broker jars ``make setup`` fetches, each into
``broker-<line>`` of the jar cache (jvm/broker-<line>/pom.xml)."""
LOCAL_INVENTORY = playbooks() / "inventory" / "local.yml"
LOCAL_BASE_DIR = CACHE / "cluster"
LOCAL_SPEC = CACHE / "local-cluster.json"
"""The cluster spec of the local cluster, written by ``make cluster-up`` (:func:`cluster_up`) and
grown by the scale-out DAG: the DAGs' inventory when their ``inventory`` param is empty and this
file exists (:func:`default_inventory`). It lives in this machine's cache (``$KAFKAOPS_CACHE``:
the checkout's ``.cache/`` under make, else ``~/.cache/kafkaops``), so only the machine that runs the local cluster finds it; elsewhere the
param must name an inventory."""


def new_cluster_id() -> str:
    """A KRaft cluster id: a random UUID in URL-safe base64 without padding (22 characters), never
    starting with "-", which kafka-storage's command line would take for an option (Kafka's own
    Uuid.randomUuid draws again in that case too)."""
    while (cluster_id := base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")).startswith("-"):
        pass
    return cluster_id


#: The lowest port :func:`free_ports` draws from.
LOWEST_FREE_PORT = 10_000


def _ephemeral_start() -> int:
    """The first port of the kernel's ephemeral range (outgoing connections' source ports)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def free_ports(count: int) -> list[int]:
    """Ports on 127.0.0.1 that nothing listens on right now, drawn at random below the kernel's ephemeral
    range: an outgoing connection takes its source port from that range, and could take a port chosen
    there in the seconds before its server (a broker's JVM) binds it. The kernel's own choice for any
    that 200 draws did not find."""
    rng, top = random.SystemRandom(), _ephemeral_start()
    sockets: list[socket.socket] = []
    ports: list[int] = []
    try:
        for _ in range(200 if top > LOWEST_FREE_PORT + count else 0):
            if len(ports) == count:
                break
            port = rng.randrange(LOWEST_FREE_PORT, top)
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                sock.close()
                continue
            sockets.append(sock)
            ports.append(port)
        while len(ports) < count:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
            ports.append(sock.getsockname()[1])
    finally:
        for sock in sockets:
            sock.close()
    return ports


@dataclass(frozen=True)
class NodeSpec:
    """One KRaft node of a cluster as the inventory describes it."""

    node_id: int
    port: int
    controller_port: int
    rack: str = ""
    roles: tuple[str, ...] = ("broker", "controller")
    host: str = "127.0.0.1"
    #: The port of the node's Prometheus JMX exporter (the role's kafka_broker_jmx_exporter_port); None: no exporter.
    metrics_port: int | None = None

    @property
    def metrics_target(self) -> str | None:
        """``host:port`` of the node's JMX exporter, for Prometheus to scrape; None without one."""
        return None if self.metrics_port is None else f"{self.host}:{self.metrics_port}"

    @property
    def hostname(self) -> str:
        return f"kafka-{self.node_id}"

    @property
    def is_controller(self) -> bool:
        return "controller" in self.roles


@dataclass(frozen=True)
class ClusterSpec:
    """A cluster the role can bring up on this machine: its id, where it lives, its nodes."""

    cluster_id: str
    base_dir: Path
    nodes: tuple[NodeSpec, ...]
    heap: str = "512m"
    extra_config: Mapping[str, Any] = field(default_factory=dict)
    #: More inventory variables of every node: the role's listeners, TLS stores and SCRAM users of a
    #: secured cluster (``kafka_broker_listeners``, ``kafka_broker_ssl_*``, ``kafka_broker_scram_users``).
    #: They hold secrets, so :meth:`save` writes the spec for its owner alone; never log them.
    inventory_vars: Mapping[str, Any] = field(default_factory=dict, repr=False)
    kafka_version: str = ""
    """The Kafka line the nodes run: "" the default jar set (``broker``, Kafka 4), else a line of
    :data:`KAFKA_LINES` such as "3.9", run from the jar set ``broker-3.9`` of the same cache."""

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{n.host}:{n.port}" for n in self.nodes if "broker" in n.roles)

    @property
    def metrics_targets(self) -> tuple[str, ...]:
        """``host:port`` of each node's JMX exporter (the nodes that have one)."""
        return tuple(n.metrics_target for n in self.nodes if n.metrics_target is not None)

    def node(self, node_id: int) -> NodeSpec:
        for node in self.nodes:
            if node.node_id == node_id:
                return node
        raise ProvisionError(f"cluster {self.cluster_id} has no node {node_id}; nodes are "
                             f"{[n.node_id for n in self.nodes]}")

    def with_node(self, node: NodeSpec) -> ClusterSpec:
        """The same cluster with one more (broker-only) node, for broker addition."""
        if any(n.node_id == node.node_id for n in self.nodes):
            raise ProvisionError(f"cannot add node {node.node_id} to cluster {self.cluster_id}: "
                                 f"the id is taken; pick an id not in {[n.node_id for n in self.nodes]}")
        return replace(self, nodes=self.nodes + (node,))

    def to_dict(self) -> dict[str, Any]:
        return {"cluster_id": self.cluster_id, "base_dir": str(self.base_dir), "heap": self.heap,
                "extra_config": dict(self.extra_config), "inventory_vars": dict(self.inventory_vars),
                **({"kafka_version": self.kafka_version} if self.kafka_version else {}),
                "nodes": [{"node_id": n.node_id, "port": n.port, "controller_port": n.controller_port, "rack": n.rack,
                           "roles": list(n.roles), "host": n.host,
                           **({"metrics_port": n.metrics_port} if n.metrics_port is not None else {})}
                          for n in self.nodes]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ClusterSpec:
        try:
            return cls(cluster_id=data["cluster_id"], base_dir=Path(data["base_dir"]), heap=data.get("heap", "512m"),
                       extra_config=dict(data.get("extra_config", {})),
                       inventory_vars=dict(data.get("inventory_vars", {})),
                       kafka_version=str(data.get("kafka_version", "")),
                       nodes=tuple(NodeSpec(node_id=int(n["node_id"]), port=int(n["port"]),
                                            controller_port=int(n["controller_port"]), rack=n.get("rack", ""),
                                            roles=tuple(n.get("roles", ("broker",))), host=n.get("host", "127.0.0.1"),
                                            metrics_port=None if n.get("metrics_port") is None else int(n["metrics_port"]))
                                   for n in data["nodes"]))
        except (KeyError, TypeError, ValueError) as err:
            raise ProvisionError(f"cannot read a cluster spec: {err!r}; expected the shape of ClusterSpec.to_dict()") \
                from err

    def save(self, path: Path) -> Path:
        """Write the spec (mode 0600: its inventory variables may hold passwords)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as out:
            out.write(json.dumps(self.to_dict(), indent=2))
        os.chmod(path, 0o600)  # a spec written before by an older kafkaops
        return path

    @classmethod
    def load(cls, path: Path) -> ClusterSpec:
        try:
            return cls.from_dict(json.loads(Path(path).read_text()))
        except (OSError, json.JSONDecodeError) as err:
            raise ProvisionError(f"cannot read cluster spec {path}: {err}; it is written by ClusterSpec.save") from err

    def with_new_brokers(self, count: int = 0, *, node_ids: Sequence[int] = (), racks: Sequence[str] = ()
                         ) -> tuple[ClusterSpec, tuple[NodeSpec, ...]]:
        """This cluster plus broker-only nodes on free loopback ports: ``node_ids`` if given, else
        ``count`` ids after the highest; racks cycle through ``racks`` or the cluster's racks."""
        ids = list(node_ids) or [max(n.node_id for n in self.nodes) + 1 + i for i in range(count)]
        if not ids:
            raise ProvisionError("no broker to add: give a count of at least 1 or explicit node ids")
        rack_cycle = list(racks) or sorted({n.rack for n in self.nodes}) or [""]
        metrics = any(n.metrics_port is not None for n in self.nodes)  # new brokers exported as the others are
        per_node = 3 if metrics else 2
        ports = free_ports(per_node * len(ids))
        spec, added = self, []
        for i, node_id in enumerate(ids):
            node = NodeSpec(node_id=node_id, port=ports[per_node * i], controller_port=ports[per_node * i + 1],
                            rack=rack_cycle[(len(self.nodes) + i) % len(rack_cycle)], roles=("broker",),
                            metrics_port=ports[per_node * i + 2] if metrics else None)
            spec = spec.with_node(node)
            added.append(node)
        return spec, tuple(added)

    def inventory(self) -> dict[str, Any]:
        """The Ansible inventory of this cluster (controllers in their own group)."""
        def host_vars(n: NodeSpec) -> dict[str, Any]:
            exporter = {} if n.metrics_port is None else {"kafka_broker_jmx_exporter": True,
                                                          "kafka_broker_jmx_exporter_port": n.metrics_port}
            return {"kafka_broker_node_id": n.node_id, "kafka_broker_port": n.port,
                    "kafka_broker_controller_port": n.controller_port, "kafka_broker_rack": n.rack,
                    "kafka_broker_process_roles": list(n.roles), "kafka_broker_host": n.host, **exporter}
        controllers = {n.hostname: host_vars(n) for n in self.nodes if n.is_controller}
        others = {n.hostname: host_vars(n) for n in self.nodes if not n.is_controller}
        return {"all": {
            "vars": {**INVENTORY_DEFAULTS,
                     "ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}",
                     "kafka_broker_classpath_dir": broker_jars(self.kafka_version),
                     "kafka_broker_provisioner": "process",
                     "kafka_broker_cluster_id": self.cluster_id,
                     "kafka_broker_base_dir": str(self.base_dir),
                     "kafka_broker_heap": self.heap,
                     "kafka_broker_default_replication_factor": min(3, len(self.nodes)),
                     "kafka_broker_offsets_topic_partitions": 6,
                     # the defaults' server settings under the spec's own
                     "kafka_broker_extra_config": {**INVENTORY_DEFAULTS.get("kafka_broker_extra_config", {}),
                                                   **self.extra_config},
                     **self.inventory_vars},
            "children": {"kafka_cluster": {
                "hosts": others,
                "children": {"kafka_controllers": {"hosts": controllers}}}}}}


def broker_jars(kafka_version: str = "") -> str:
    """The broker classpath folder of a Kafka line, as the inventory's ``kafka_broker_classpath_dir``:
    the default jar set (the ``kafkaops_broker_jars`` extra var) or ``broker-<line>`` of the jar cache."""
    if not kafka_version:
        return "{{ kafkaops_broker_jars }}"
    if kafka_version not in KAFKA_LINES:
        raise ProvisionError(f"no jar set for Kafka {kafka_version!r}: kafkaops runs the lines {sorted(KAFKA_LINES)} "
                             "(jvm/pom.xml); leave kafka_version empty for the default one")
    return str(jar_dir(f"broker-{kafka_version}"))


def local_cluster_spec(base_dir: Path, brokers: int = 3, racks: Sequence[str] = ("rack-a", "rack-b", "rack-c"),
                       controllers: int = 3, extra_config: Mapping[str, Any] | None = None,
                       heap: str = "512m", inventory_vars: Mapping[str, Any] | None = None,
                       kafka_version: str = "", metrics: bool = False) -> ClusterSpec:
    """A fresh cluster on free loopback ports; the first ``controllers`` nodes are combined nodes.
    ``inventory_vars``: the role's variables for every node (a secured cluster's listeners, TLS, SCRAM);
    ``kafka_version`` as :attr:`ClusterSpec.kafka_version`; ``metrics``: each node with the Prometheus JMX
    exporter on a free port of its own (:attr:`ClusterSpec.metrics_targets`)."""
    if controllers not in (1, 3) or controllers > brokers:
        raise ProvisionError(f"a local cluster of {brokers} nodes cannot have a quorum of {controllers} "
                             "controllers; use 1 or 3, at most the node count")
    per_node = 3 if metrics else 2
    ports = free_ports(per_node * brokers)
    nodes = tuple(
        NodeSpec(node_id=i + 1, port=ports[per_node * i], controller_port=ports[per_node * i + 1],
                 rack=racks[i % len(racks)], roles=("broker", "controller") if i < controllers else ("broker",),
                 metrics_port=ports[per_node * i + 2] if metrics else None)
        for i in range(brokers))
    return ClusterSpec(cluster_id=new_cluster_id(), base_dir=Path(base_dir), nodes=nodes, heap=heap,
                       extra_config=dict(extra_config or {}), inventory_vars=dict(inventory_vars or {}),
                       kafka_version=kafka_version)


@dataclass(frozen=True)
class SshLogin:
    """How Ansible logs in to remote hosts over SSH: what an Airflow SSH connection (the ssh provider's
    ``ssh`` type) holds. It gives Ansible's defaults (user, port, key); the inventory still names each
    host's address and may override the rest per host."""

    user: str = ""
    port: int | None = None
    key_file: str = ""
    private_key: str = field(default="", repr=False)
    name: str = ""

    @classmethod
    def from_connection(cls, conn: Any) -> SshLogin:
        """An Airflow connection (anything with ``conn_id``, ``login``, ``port``, ``password`` and
        ``extra_dejson``) as a login; Ansible's ssh takes keys only, so a password alone is refused."""
        extra = getattr(conn, "extra_dejson", None) or {}
        name = str(getattr(conn, "conn_id", "") or "")
        if getattr(conn, "password", None) and not (extra.get("key_file") or extra.get("private_key")):
            raise ProvisionError(f"SSH connection {name!r} logs in with a password; Ansible here logs in with a key: "
                                 "put key_file or private_key in the connection's extra; nothing was changed")
        return cls(user=str(getattr(conn, "login", "") or ""), port=int(conn.port) if getattr(conn, "port", None) else None,
                   key_file=str(extra.get("key_file") or ""), private_key=str(extra.get("private_key") or ""), name=name)

    def describe(self) -> str:
        """Where this login came from, for an error: the connection, user, port and key file (no secret)."""
        key = self.key_file or ("the connection's private_key" if self.private_key else "Ansible's default key")
        inventory = "the inventory's"
        return (f" (login from SSH connection {self.name!r}: user {self.user or inventory}, port "
                f"{self.port or inventory}, key {key})")

    def ansible_env(self, private_dir: Path) -> dict[str, str]:
        """Ansible's settings for this login (defaults below any inventory variable, so delegated
        controller tasks keep their local connection); an inline private key goes to a 0600 file in
        ``private_dir`` (the run's own, removed with it), never into a variable or an argv."""
        env = {}
        if self.user:
            env["ANSIBLE_REMOTE_USER"] = self.user
        if self.port:
            env["ANSIBLE_REMOTE_PORT"] = str(self.port)
        key = self.key_file
        if self.private_key:
            path = private_dir / "ssh-key"
            path.touch(mode=0o600)
            path.write_text(self.private_key.strip() + "\n")
            key = str(path)
        if key:
            env["ANSIBLE_PRIVATE_KEY_FILE"] = key
        return env


@dataclass(frozen=True)
class ProvisionResult:
    """What one playbook run did: per-host changed counts and the failures, if any."""

    ok: bool
    changed: Mapping[str, int]
    failures: tuple[str, ...]
    status: str


def _failures(events: Iterable[Mapping[str, Any]]) -> tuple[list[str], list[str]]:
    """What failed in a run's events, task by task and host by host (those not ignored), and of those
    the hosts Ansible could not reach."""
    failures, unreachable = [], []
    for event in events:
        if event.get("event") in ("runner_on_failed", "runner_on_unreachable") and \
                not event.get("event_data", {}).get("ignore_errors"):
            data = event["event_data"]
            msg = _failure_message(data.get("res", {}))
            if event["event"] == "runner_on_unreachable":
                failures.append(f"host {data.get('host')} is unreachable at task '{data.get('task')}': {msg}")
                unreachable.append(failures[-1])
            else:
                failures.append(f"task '{data.get('task')}' failed on {data.get('host')}: {msg}")
    return failures, unreachable


def run_playbook(playbook: str, inventory: Mapping[str, Any] | str | Path, *,
                 extravars: Mapping[str, Any] | None = None, limit: str | None = None,
                 check: bool = False, ssh: SshLogin | None = None) -> ProvisionResult:
    """Run ``playbooks/<playbook>`` (package data: :func:`kafkaops.resources.playbooks`) with
    ansible-runner; raise ProvisionError naming the failed task and host. ``ssh``: how to log in to
    the hosts (an Airflow SSH connection's), over what the inventory says."""
    project = playbooks()
    env = {
        # ansible-runner starts from this process' environment and writes it into its artifacts: the
        # worker's credentials (Airflow connections given by the environment, ...) reach neither.
        **{name: "" for name in redaction.secret_env_names(os.environ)},
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "ANSIBLE_ROLES_PATH": str(project / "roles"),
        "ANSIBLE_HOST_KEY_CHECKING": "False",
        "ANSIBLE_RETRY_FILES_ENABLED": "False",
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_LOCALHOST_WARNING": "False",
        "ANSIBLE_INVENTORY_UNPARSED_WARNING": "False",
        # Remote hosts: their own Python, found by Ansible; local inventories name the controller's.
        "ANSIBLE_PYTHON_INTERPRETER": "auto_silent",
        # Each module runs through one process reading it from a pipe, instead of being copied to a
        # temporary file first (fewer round trips per task, locally and over SSH).
        "ANSIBLE_PIPELINING": "True",
    }
    # Fallbacks, not role variables: the role reads them only through kafka_broker_* defaults, so an
    # inventory's own kafka_broker_jars_source / kafka_broker_classpath_dir / kafka_broker_dist_cache win.
    variables = {"kafkaops_broker_jars": str(jar_dir("broker")), "kafkaops_dist_cache": str(CACHE / "dist"),
                 "kafkaops_jmx_exporter_jars": str(jar_dir("jmx-exporter")),
                 "kafka_broker_check_python": sys.executable, **(extravars or {})}

    inv: Any = str(inventory) if isinstance(inventory, Path) else inventory
    with tempfile.TemporaryDirectory(prefix="kafkaops-ansible-") as private_dir:
        if ssh is not None:
            env.update(ssh.ansible_env(Path(private_dir)))
        # Ansible's scratch space goes with the run, not into $HOME/.ansible of whichever worker ran it.
        env["ANSIBLE_HOME"] = str(Path(private_dir) / "ansible-home")  # the role needs only ansible.builtin
        env["ANSIBLE_LOCAL_TEMP"] = str(Path(private_dir) / "local-tmp")
        # SSH connection masters (ControlPersist) are the run's own: Ansible keeps them in ~/.ansible/cp for
        # 60 s by default, where the next run to the same user@host:port would ride one, logged in with
        # whatever key opened it, not its own (a wrong key would pass a login check).
        control_dir = Path(private_dir) / "cp"
        control_dir.mkdir(mode=0o700)
        env["ANSIBLE_SSH_CONTROL_PATH_DIR"] = str(control_dir)
        if _connects_locally(inv):
            env["ANSIBLE_REMOTE_TEMP"] = str(Path(private_dir) / "remote-tmp")
        log.info("ansible: running %s (limit %s)", playbook, limit or "all")
        try:
            runner = run_ansible(private_data_dir=private_dir, project_dir=str(project),
                                 playbook=str(project / playbook), inventory=inv, extravars=variables, envvars=env,
                                 limit=limit, cmdline="--check" if check else None, timeout=900)
        finally:
            close_ssh_masters(control_dir)
        failures, unreachable = _failures(runner.events)
        stats = runner.stats or {}
        changed = dict(stats.get("changed", {}))
        ok = runner.status == "successful" and not failures
        if not ok and not failures and runner.rc == 4:  # ansible-playbook's "unreachable" exit code
            failures.append("a host is unreachable: " + runner.stdout.read()[-1500:])
        if not ok:
            detail = "; ".join(failures) or f"ansible-runner ended with status {runner.status} rc {runner.rc}: " \
                                               f"{runner.stdout.read()[-2000:]}"
            if failures and failures == unreachable:
                raise HostUnreachable(f"playbook {playbook} failed: {detail}; nothing ran on "
                                      f"{'that host' if len(failures) == 1 else 'those hosts'}"
                                      f"{ssh.describe() if ssh is not None else ''}; fix the host's address or "
                                      "login and run again")
            raise ProvisionError(f"playbook {playbook} failed: {detail}")
        log.info("ansible: %s done, changed %s", playbook, changed)
        return ProvisionResult(ok=ok, changed=changed, failures=tuple(failures), status=runner.status)


#: How often ansible-runner looks whether its run was cancelled (its ``pexpect_timeout``; 5 s by default).
_CANCEL_LOOK_S = 0.5
#: The environment variable that marks the processes of one playbook run (ansible-playbook, the workers it
#: forks into sessions of their own, their modules and commands), so an interrupted run can stop them all.
_RUN_MARK = "KAFKAOPS_ANSIBLE_RUN"


def run_ansible(**runner_args: Any) -> Any:
    """``ansible_runner.run(**runner_args)``, quiet, that stops the playbook when this call is interrupted.

    ansible-runner's own ``run`` in the main thread replaces the process's SIGINT and SIGTERM handlers for good
    (with one that only cancels its run), so a worker that ran a playbook no longer stops on either; and an
    exception raised in the middle of it (Airflow's ``execution_timeout``, SIGTERM of a killed task) left
    ansible-playbook running. Its cancel is not enough either: it kills ansible-playbook's process group, and
    Ansible's workers each run in a session of their own, with the task's command under them. Here the run goes
    on in a thread with a cancel flag, no handler is touched, and whatever interrupts the wait kills every
    process of the run (:data:`_RUN_MARK` in their environment) and cancels it before the exception goes on."""
    import ansible_runner  # heavy import, only where a playbook really runs

    mark = uuid.uuid4().hex
    runner_args["envvars"] = {**(runner_args.get("envvars") or {}), _RUN_MARK: mark}
    cancelled = threading.Event()
    settings = {"pexpect_timeout": _CANCEL_LOOK_S, **runner_args.pop("settings", {})}
    thread, runner = ansible_runner.run_async(quiet=True, settings=settings, cancel_callback=cancelled.is_set,
                                              **runner_args)
    try:
        while thread.is_alive():
            thread.join(_CANCEL_LOOK_S)
    except BaseException:
        killed = kill_marked(_RUN_MARK, mark)
        cancelled.set()
        thread.join(15)
        log.warning("ansible: run interrupted; %d of its processes killed%s", len(killed),
                    "" if not thread.is_alive() else "; ansible-runner did not end within 15 s")
        raise
    return runner


def kill_marked(name: str, value: str) -> list[int]:
    """SIGKILL every process of this machine whose environment has ``name=value`` (those this user may read),
    and wait up to 5 s for them to end; returns their pids. This process's own children are left for their
    owner to reap (ansible-runner's pexpect waits on ansible-playbook and fails when another waiter took it)."""
    import psutil

    children = {child.pid for child in psutil.Process().children()}
    marked = []
    for proc in psutil.process_iter():
        try:
            if proc.pid != os.getpid() and proc.environ().get(name) == value:
                marked.append(proc)
        except (psutil.Error, OSError):  # gone, or another user's
            continue
    for proc in marked:
        try:
            proc.kill()
        except psutil.Error:
            pass
    psutil.wait_procs([proc for proc in marked if proc.pid not in children], timeout=5)
    return [proc.pid for proc in marked]


def close_ssh_masters(control_dir: Path) -> list[Path]:
    """Stop the SSH connection masters whose sockets are in ``control_dir`` (``ssh -O exit``), so none
    outlives the run that opened it; returns the sockets found."""
    sockets = sorted(p for p in control_dir.glob("*") if p.is_socket())
    for path in sockets:
        try:
            subprocess.run(["ssh", "-o", f"ControlPath={path}", "-O", "exit", "kafkaops-control-master"],
                           capture_output=True, timeout=10, check=False)
        except (OSError, subprocess.TimeoutExpired) as err:
            log.warning("could not stop the SSH master of %s: %s", path.name, err)
    return sockets


def _connects_locally(inventory: Any) -> bool:
    """Whether an inventory given as a mapping runs every host through Ansible's local connection."""
    if not isinstance(inventory, Mapping):
        return False
    return (inventory.get("all", {}).get("vars", {}) or {}).get("ansible_connection") == "local"


def _failure_message(result: Mapping[str, Any]) -> str:
    """The reason a task failed; for a loop, the reasons of the items that failed."""
    items = [r for r in result.get("results", []) if isinstance(r, Mapping) and r.get("failed")]
    if items:
        return "; ".join(_failure_message(r) for r in items)
    text = str(result.get("msg") or result.get("stderr") or result.get("stdout") or result)[:1000].strip()
    if result.get("msg") and "rc" in result:  # a command: its exit code and the tail of what it printed
        said = (str(result.get("stderr") or "").strip() or str(result.get("stdout") or "").strip())[-1500:]
        text += f" (rc {result['rc']})" + (f": {said}" if said else "")
    return text


def cluster_up(spec: ClusterSpec | None = None, *, limit: Iterable[str] | None = None,
               client_config: Mapping[str, Any] | None = None) -> ProvisionResult:
    """Converge the cluster. ``spec`` None: the local one of ``make cluster-up``, whose spec is then
    written to :data:`LOCAL_SPEC` (:func:`save_local_spec`). ``client_config``: the Kafka connection's
    config, for the role's registration check (:func:`check_client_vars`)."""
    inventory, extravars = _inventory(spec)
    extravars.update(check_client_vars(client_config))
    result = run_playbook("cluster_up.yml", inventory, extravars=extravars,
                          limit=",".join(limit) if limit else None)
    if spec is None:
        save_local_spec()
    return result


def check_client_vars(client_config: Mapping[str, Any] | None) -> dict[str, Any]:
    """The extra vars that make the role's registration check connect as the Kafka connection does
    (its ``security.protocol``, ``sasl.*``, ``ssl.*``; the check names its own bootstrap): passed in
    ansible-runner's 0600 extravars file, never on a command line, read by a ``no_log`` parameter.
    Empty for no config, or one with nothing beside ``bootstrap.servers`` (the inventory's own then)."""
    settings = {str(k): str(v) for k, v in (client_config or {}).items() if k != "bootstrap.servers"}
    return {"kafka_broker_check_client_config": settings} if settings else {}


def cluster_down(spec: ClusterSpec | None = None, *, purge: bool = False,
                 limit: Iterable[str] | None = None) -> ProvisionResult:
    """Stop the cluster; with ``purge`` also remove what the role created for each node. ``spec``
    None: the local cluster, with the brokers its :data:`LOCAL_SPEC` lists beyond the inventory
    (added by a scale-out); a purge also removes that spec."""
    if spec is None and limit is None:
        added = _added_local_nodes()
        if added:
            cluster_down(added[0], purge=purge, limit=[n.hostname for n in added[1]])
    inventory, extravars = _inventory(spec)
    extravars["kafka_broker_down_state"] = "absent" if purge else "stopped"
    result = run_playbook("cluster_down.yml", inventory, extravars=extravars,
                          limit=",".join(limit) if limit else None)
    if spec is None and purge:
        LOCAL_SPEC.unlink(missing_ok=True)
    return result


def local_spec() -> ClusterSpec:
    """The local cluster of playbooks/inventory/local.yml as a cluster spec (a spec lets the
    scale-out DAG put new brokers on free loopback ports)."""
    import yaml

    inventory = yaml.safe_load(LOCAL_INVENTORY.read_text())["all"]
    hosts = inventory["children"]["kafka_cluster"]["children"]["kafka_controllers"]["hosts"]
    exporter = bool(inventory["vars"].get("kafka_broker_jmx_exporter", False))
    nodes = tuple(NodeSpec(node_id=int(v["kafka_broker_node_id"]), port=int(v["kafka_broker_port"]),
                           controller_port=int(v["kafka_broker_controller_port"]),
                           rack=str(v.get("kafka_broker_rack", "")),
                           metrics_port=int(v["kafka_broker_jmx_exporter_port"])
                           if exporter and "kafka_broker_jmx_exporter_port" in v else None)
                  for v in sorted(hosts.values(), key=lambda v: int(v["kafka_broker_node_id"])))
    return ClusterSpec(cluster_id=inventory["vars"]["kafka_broker_cluster_id"], base_dir=LOCAL_BASE_DIR,
                       nodes=nodes, heap=str(inventory["vars"].get("kafka_broker_heap", "512m")))


def save_local_spec(path: Path | None = None) -> Path:
    """Write the local cluster's spec: the inventory's nodes plus the brokers a scale-out added to
    the spec already there that still run (a stopped one is dropped, so its id can be reused)."""
    path = path or LOCAL_SPEC
    spec = local_spec()
    added = _added_local_nodes(path)
    if added is not None:
        saved, extra = added
        for node in extra:
            if node_pid(saved, node.node_id) is not None:
                spec = spec.with_node(node)
    return spec.save(path)


def _added_local_nodes(path: Path | None = None) -> tuple[ClusterSpec, tuple[NodeSpec, ...]] | None:
    """The local spec saved at ``path`` and its nodes beyond the inventory's, if it is the local
    cluster's spec (same cluster id and folder)."""
    path = path or LOCAL_SPEC
    if not path.is_file():
        return None
    try:
        saved = ClusterSpec.load(path)
    except ProvisionError as err:
        log.warning("ignoring the local cluster spec %s: %s", path, err)
        return None
    base = local_spec()
    if (saved.cluster_id, saved.base_dir) != (base.cluster_id, base.base_dir):
        return None
    known = {n.node_id for n in base.nodes}
    return saved, tuple(n for n in saved.nodes if n.node_id not in known)


def default_inventory() -> Path | None:
    """The inventory of an operation whose ``inventory`` param is empty: :data:`LOCAL_SPEC` when
    this machine has one (``make cluster-up`` wrote it), else None."""
    return LOCAL_SPEC if LOCAL_SPEC.is_file() else None


#: The setting naming the folders an operation's ``inventory`` param may name files in (``os.pathsep``
#: between folders). Unset: any absolute path of an inventory file (still no ``..``, and a known suffix, so
#: ``/etc/passwd`` and the like stay refused); set it on every production worker, or keep inventories in
#: Airflow connections (:data:`INVENTORY_CONN_PREFIX`), which it does not restrict.
INVENTORY_DIRS_SETTING = "KAFKAOPS_INVENTORY_DIRS"
#: The suffixes of what the ``inventory`` param names: a kafkaops cluster spec, an Ansible inventory.
INVENTORY_SUFFIXES = (".json", ".yml", ".yaml", ".ini")


def inventory_dirs() -> tuple[Path, ...]:
    """The folders of :data:`INVENTORY_DIRS_SETTING` (read when asked: a worker's environment), resolved."""
    value = os.environ.get(INVENTORY_DIRS_SETTING, "")
    return tuple(Path(d).expanduser().resolve() for d in value.split(os.pathsep) if d.strip())


def inventory_path(name: str, *, param: str = "inventory") -> Path:
    """The file the ``inventory`` param ``name`` stands for, or a ConfigError naming the param and why (pure but
    for resolving symbolic links): a kafkaops cluster spec (.json) or an Ansible inventory (.yml, .yaml, .ini),
    named by an absolute path without ``..``; where :data:`INVENTORY_DIRS_SETTING` names folders, inside one
    of them (a relative name is looked up in each in turn) or :data:`LOCAL_SPEC` (the default)."""
    dirs = inventory_dirs()
    path = Path(name)
    where = (f"the folders {INVENTORY_DIRS_SETTING} names ({os.pathsep.join(map(str, dirs))})" if dirs else
             f"an absolute path (set {INVENTORY_DIRS_SETTING} to the folders inventories are kept in)")
    if ".." in path.parts:
        raise ConfigError(f"param {param} {name!r} climbs out of its folder (..); name an inventory file in {where}")
    if path.suffix not in INVENTORY_SUFFIXES:
        raise ConfigError(f"param {param} {name!r} is no inventory: give a kafkaops cluster spec (.json) or an "
                          f"Ansible inventory ({', '.join(INVENTORY_SUFFIXES[1:])}) in {where}")
    if not path.is_absolute():
        found = [d / path for d in dirs if (d / path).is_file()] or [d / path for d in dirs[:1]]
        if not found:
            raise ConfigError(f"param {param} {name!r} is a relative path, which each worker would read from its own "
                              f"working folder; give {where}")
        path = found[0]
    resolved = path.resolve()
    if dirs and resolved != LOCAL_SPEC.resolve() and not any(resolved.is_relative_to(d) for d in dirs):
        raise ConfigError(f"param {param} {name!r} is outside {where}; put the inventory there, or add its folder "
                          f"to {INVENTORY_DIRS_SETTING} on the workers")
    return path


#: How the ``inventory`` param names an inventory kept in an Airflow connection: ``conn:<conn_id>``. The
#: connection (any type, e.g. generic) holds it in its extra under :data:`INVENTORY_EXTRA_KEY`.
INVENTORY_CONN_PREFIX = "conn:"
#: The key of a connection's extra that holds its inventory: a kafkaops cluster spec or an Ansible inventory
#: (YAML or JSON text, or the JSON object itself).
INVENTORY_EXTRA_KEY = "inventory"
_CONN_ID = re.compile(r"^[A-Za-z0-9_.-]{1,250}$")
#: Ansible's own names of secrets that :func:`kafkaops.platform.redaction.is_secret` does not know
#: (``ansible_pass``, ``ansible_ssh_pass``, ``ansible_become_pass``).
_ANSIBLE_PASS = re.compile(r"(^|_)pass$", re.IGNORECASE)


def inventory_conn_id(name: str) -> str | None:
    """The connection id of an ``inventory`` param of the form ``conn:<conn_id>``; None for a file's name."""
    return name[len(INVENTORY_CONN_PREFIX):].strip() if name.startswith(INVENTORY_CONN_PREFIX) else None


def inventory_conn_ref(name: str, *, param: str = "inventory") -> str:
    """``name``, a ``conn:<conn_id>`` param, checked (pure): a ConfigError naming the param for an id that no
    Airflow connection can have."""
    conn_id = inventory_conn_id(name) or ""
    if not _CONN_ID.match(conn_id):
        raise ConfigError(f"param {param} {name!r} names no Airflow connection id: give conn:<conn_id> (letters, "
                          "digits, _ . -), e.g. conn:kafka_inventory, or an inventory file")
    return f"{INVENTORY_CONN_PREFIX}{conn_id}"


class _TolerantLoader(yaml.SafeLoader):
    """YAML's safe loader that reads a tag it does not know (Ansible's ``!vault``, ``!unsafe``) as null: the
    inventory is only checked with it; Ansible reads the text itself."""


_TolerantLoader.add_multi_constructor("!", lambda loader, suffix, node: None)


@dataclass(frozen=True)
class ConnInventory:
    """An inventory read from an Airflow connection's extra (:func:`inventory_from_extra`): a kafkaops cluster
    spec (``is_spec``) or an Ansible inventory. Its ``text`` may hold passwords: it goes only into the
    private file of :func:`materialized_inventory`, never into a repr, a message or a log."""

    conn_id: str
    is_spec: bool
    hosts: tuple[str, ...]
    text: str = field(repr=False)

    @property
    def param(self) -> str:
        """The ``inventory`` param that names it."""
        return f"{INVENTORY_CONN_PREFIX}{self.conn_id}"

    def secret_values(self) -> list[str]:
        """Every value under a secret-named key (``ansible_password``, a SCRAM user's ``password`` ...), at any
        depth, for Airflow's secrets masker."""
        found: set[str] = set()

        def walk(value: Any) -> None:
            if isinstance(value, Mapping):
                found.update(str(v) for k, v in value.items() if v not in (None, "") and not isinstance(v, (
                    Mapping, list)) and (redaction.is_secret(str(k)) or _ANSIBLE_PASS.search(str(k))))
                for v in value.values():
                    walk(v)
            elif isinstance(value, list):
                for v in value:
                    walk(v)
        walk(_parsed(self.text))
        return sorted(found, key=len, reverse=True)


def _parsed(text: str) -> Any:
    return yaml.load(text, Loader=_TolerantLoader)  # noqa: S506 - a safe loader that tolerates unknown tags


def _ansible_hosts(groups: Mapping[str, Any]) -> set[str]:
    """The hosts a YAML inventory's groups name (``hosts`` of each group and of its ``children``, at any depth)."""
    found: set[str] = set()
    for group in groups.values():
        if not isinstance(group, Mapping):
            continue
        if isinstance(group.get("hosts"), Mapping):
            found.update(str(h) for h in group["hosts"])
        if isinstance(group.get("children"), Mapping):
            found |= _ansible_hosts(group["children"])
    return found


def inventory_from_extra(conn_id: str, extra: Mapping[str, Any] | None, *, param: str = "inventory"
                         ) -> ConnInventory:
    """The inventory an Airflow connection's extra holds under :data:`INVENTORY_EXTRA_KEY` (pure): a kafkaops
    cluster spec (what :meth:`ClusterSpec.to_dict` writes) or an Ansible inventory in YAML's format (YAML or
    JSON). A ConfigError naming the param and the connection, never a value of the inventory, when the extra has
    none, it does not parse, or it names no host."""
    ref = f"param {param} {INVENTORY_CONN_PREFIX}{conn_id}: Airflow connection {conn_id!r}"
    hint = (f"put a kafkaops cluster spec or an Ansible inventory (YAML or JSON) under \"{INVENTORY_EXTRA_KEY}\" in "
            "its extra; nothing was changed")
    given = (extra or {}).get(INVENTORY_EXTRA_KEY)
    if given in (None, "", {}):
        keys = sorted(str(k) for k in (extra or {}))
        raise ConfigError(f"{ref} has no inventory in its extra (its keys: {', '.join(keys) or 'none'}); {hint}")
    if isinstance(given, Mapping):
        text = json.dumps(given)
    elif isinstance(given, str):
        text = given
    else:
        raise ConfigError(f"{ref} holds a {type(given).__name__} under \"{INVENTORY_EXTRA_KEY}\", no inventory; {hint}")
    try:
        data = _parsed(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)  # where, never what: the text around it may be a password
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise ConfigError(f"{ref}: its inventory does not parse as YAML or JSON{where}; {hint}") from None
    if not isinstance(data, Mapping):
        raise ConfigError(f"{ref}: its inventory is a {type(data).__name__}, not a mapping of groups or a "
                          f"cluster spec; {hint}")
    if "nodes" in data and "cluster_id" in data:
        try:
            spec = ClusterSpec.from_dict(data)
        except ProvisionError as err:
            cause = err.__cause__
            what = (f"missing field {cause}" if isinstance(cause, KeyError)
                    else f"a field of the wrong type ({type(cause).__name__})")
            # from None, as for a parse error: the cause's text may quote a value (int('<a password>'))
            raise ConfigError(f"{ref}: its inventory looks like a kafkaops cluster spec but cannot be read "
                              f"({what}); {hint}") from None
        if not spec.nodes:
            raise ConfigError(f"{ref}: its cluster spec names no node; {hint}")
        return ConnInventory(conn_id, True, tuple(n.hostname for n in spec.nodes), json.dumps(spec.to_dict()))
    hosts = _ansible_hosts(data)
    if not hosts:
        raise ConfigError(f"{ref}: its inventory names no host (groups {', '.join(sorted(map(str, data))) or 'none'}; "
                          f"an Ansible inventory in YAML's format has hosts under all: hosts: or a group's children); "
                          f"{hint}")
    return ConnInventory(conn_id, False, tuple(sorted(hosts)), text)


#: The prefix of the private folders :func:`materialized_inventory` writes connections' inventories to.
MATERIALIZED_PREFIX = "kafkaops-inventory-"


@contextmanager
def materialized_inventory(inventory: ConnInventory) -> Iterator[Path]:
    """The inventory as a file for Ansible and the readers here: ``conn-<conn_id>.json`` (a cluster spec) or
    ``.yml`` (an Ansible inventory; JSON is YAML) in a new folder only this user may enter (0700), the file
    0600; the folder is removed when the block ends, also on an error. Its name carries the connection's id, so
    a message naming the file names the connection."""
    folder = Path(tempfile.mkdtemp(prefix=MATERIALIZED_PREFIX))  # mkdtemp: mode 0700
    try:
        path = folder / f"conn-{inventory.conn_id}{'.json' if inventory.is_spec else '.yml'}"
        with private_file(path) as out:
            out.write(inventory.text.encode())
        yield path
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def inventory_hosts(path: Path) -> tuple[str, ...]:
    """The hosts an Ansible inventory names, read by Ansible's own inventory parser (any format it reads);
    :class:`ProvisionError` naming the file when it is missing, unreadable or names no host."""
    return tuple(sorted(h.name for h in _inventory_manager(path).get_hosts()))


def inventory_racks(path: Path) -> dict[str, str]:
    """Each host of an Ansible inventory with its ``kafka_broker_rack`` as Ansible resolves it (the host's own
    variables over its groups', ``host_vars``/``group_vars`` beside the file included); "" where none is set.
    :class:`ProvisionError` as :func:`inventory_hosts`."""
    from ansible.vars.manager import VariableManager

    manager = _inventory_manager(path)
    variables = VariableManager(loader=manager._loader, inventory=manager)
    return {h.name: str(variables.get_vars(host=h, include_hostvars=False).get("kafka_broker_rack") or "")
            for h in manager.get_hosts()}


def _inventory_manager(path: Path) -> Any:
    """Ansible's InventoryManager of ``path``, with at least one host (see :func:`inventory_hosts`)."""
    if not path.is_file() or not os.access(path, os.R_OK):
        raise ProvisionError(f"inventory {path} is not a readable file on {socket.gethostname()}, where this task "
                             "runs; give a path that every Airflow worker can read (the package's "
                             "playbooks/inventory, or a mounted one)")
    from ansible.inventory.manager import InventoryManager  # looked up per call: Ansible's import is not cheap
    from ansible.parsing.dataloader import DataLoader

    manager = InventoryManager(loader=DataLoader(), sources=[str(path)])
    if not manager.get_hosts():
        raise ProvisionError(f"inventory {path} names no host that Ansible can read (is it an Ansible inventory, "
                             "YAML or INI?)")
    return manager


def _inventory(spec: ClusterSpec | None) -> tuple[Mapping[str, Any] | Path, dict[str, Any]]:
    if spec is None:
        return LOCAL_INVENTORY, {"kafka_broker_base_dir": str(LOCAL_BASE_DIR)}
    return spec.inventory(), {}


#: Role variables every :meth:`ClusterSpec.inventory` starts from, below everything the spec sets (their
#: ``kafka_broker_extra_config`` below the spec's extra config, key by key): empty in production; the test
#: harness gives its brokers lean JVMs and idle settings (``kafka_broker_jvm_opts``, kafkaops.testing.jvm).
INVENTORY_DEFAULTS: dict[str, Any] = {}


def node_pid(spec: ClusterSpec, node_id: int) -> int | None:
    """The pid the role recorded for a node of a process-provisioned cluster, if it runs."""
    pid_file = spec.base_dir / f"node-{node_id}" / "kafka.pid"
    try:
        pid = int(pid_file.read_text().strip())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None
    return pid
