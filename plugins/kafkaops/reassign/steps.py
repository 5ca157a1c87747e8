"""The reassignment operations' steps (scale-out, rebalance, drain) on the shared lifecycle.

    begin -> preflight gate -> plan (the receiving brokers' disk room) -> plan gate -> approval
      -> provision? (a scale-out, once approved; then the new brokers' disk room)
      -> set throttles -> cordon (a drain) -> submit batches / wait -> verify -> remove throttles, lift cordons
      (always) -> elect leaders
      -> post-move gate -> finish (always: outcome in the audit record, lock released)

begin, the preflight gate, approval and finish are :mod:`kafkaops.platform.lifecycle`'s; the rest is here.

Each step takes an :class:`OperationContext` and JSON-safe values and returns JSON-safe values,
so Airflow passes them through XCom unchanged; each appends what it did to the run's audit
record. Airflow-specific wiring lives in :mod:`kafkaops.airflow`; nothing here imports Airflow.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

from kafkaops.platform.kafka import configs, connection, metadata, reassignments, registrations
from kafkaops.reassign import approval, cordons, engine
from kafkaops.platform import lifecycle, state
from kafkaops.platform import params as form
from kafkaops.platform.lifecycle import OperationContext
from kafkaops.platform import provision
from kafkaops.reassign import records, verify
from kafkaops.reassign.records import (BatchStep, NewBroker, PlannedMoves, PlannedReassignment, Polled, Provisioned,
                                      WaitSpec)
from kafkaops.errors import ConfigError, KafkaOpsError, ProvisionError
from kafkaops.model import Broker, Cluster, TopicPartition
from kafkaops.reassign.planner import Goals, plan_drain, plan_rebalance, plan_scale_out, time_budget
from kafkaops.reassign.planner.plan import ReassignmentPlan
from kafkaops.reassign.planner.room import RoomCheck, check_room, require_room

log = logging.getLogger(__name__)

class Kind(StrEnum):
    """The reassignment operations (the value is the run's ``kind`` in the record and the DAG's ``operation``)."""

    SCALE_OUT = "scale_out"
    REBALANCE = "rebalance"
    DRAIN = "drain"


# The params every reassignment's form shows, in the form's order; each one's default is here only.
TOPICS = form.Topics(name="topics", title="Topics", description="Topics to move; empty means all topics.")
THROTTLE = form.Number(name="throttle_mb_per_s", given=10.0, above=0, title="Throttle (MB/s)",
                       description="Replication throttle on every broker and topic involved while data moves; "
                                   "removed afterwards, also on failure.")
MAX_MOVES_PER_BROKER = form.Integer(
    name="max_moves_per_broker", given=5, minimum=1, title="Concurrent moves per broker",
    description="At most this many partition moves touch one broker per batch.")
MAX_MOVES_TOTAL = form.Integer(name="max_moves_total", given=20, minimum=1, title="Concurrent moves in total",
                               description="At most this many partitions move per batch.")
MAX_BYTES = form.MaybeInteger(name="max_bytes_to_move", minimum=0, title="Byte budget",
                              description="The plan gate fails when the plan would copy more bytes than this; empty "
                                          "for no limit.")
EXCLUDE_BROKERS = form.WholeNumbers(name="exclude_brokers", title="Excluded brokers",
                                    description="Brokers that keep their replicas and receive none.")
INVENTORY = form.Text(name="inventory", title="Inventory",
                      description="A kafkaops cluster spec (.json, local clusters) or an Ansible inventory (.yml, "
                                  "real hosts) for the kafka_broker role: a file in the folders "
                                  "KAFKAOPS_INVENTORY_DIRS names, or conn:<conn_id> for one kept in an Airflow "
                                  "connection (any type; the inventory under \"inventory\" in its extra, YAML or "
                                  "JSON). Empty: the local cluster's spec that make cluster-up wrote, on the "
                                  "machine that has one.")
SSH_CONN_ID = form.Text(
    name="ssh_conn_id", title="SSH connection (remote hosts)",
    description="Id of an Airflow connection of type 'ssh' whose login, port and key (key_file or private_key in "
                "its extra; a password alone is refused) the kafka_broker role uses to reach the hosts of an "
                "Ansible inventory (.yml) when it adds or stops brokers. The inventory still gives each host's "
                "address, and its own ansible_user / ansible_port / ansible_ssh_private_key_file win. Empty: the "
                "inventory's settings only. Not used with a cluster spec (.json).")
BALANCE_LEADERS = form.Flag(name="balance_leaders", given=True, title="Balance preferred leaders",
                            description="Also reorder replica lists so each broker leads as even a share of "
                                        "partitions as its replicas allow (leader-only changes: no data moves; "
                                        "counted apart in the approval). Off: only the moved partitions' order "
                                        "follows the plan.")
DRY_RUN = form.dry_run("Plan and gate only: nothing is provisioned, moved or throttled.")
STALL_TIMEOUT = form.Number(name="stall_timeout_s", given=120, above=0, title="Stall timeout (s)",
                            description="Fail the wait when no partition or byte moved for this long.")
#: The longest planning budget a run may ask for: inside the plan task's hour (operation_dag.TASK_TIMEOUT), with
#: time left for the snapshot, the byte sizes and the plan gate.
MAX_PLAN_TIMEOUT_S = 3000
PLAN_TIMEOUT = form.Number(name="plan_timeout_s", given=300, above=0, title="Planning budget (s)",
                           description="Planning stops after this many seconds, refusing the run (nothing changed) "
                                       "with a message naming this budget; raise it (at most "
                                       f"{MAX_PLAN_TIMEOUT_S}) for a very large cluster, or narrow topics.")
PARAMS: tuple[form.Spec[Any], ...] = (
    form.KAFKA_CONN_ID, TOPICS, THROTTLE, MAX_MOVES_PER_BROKER, MAX_MOVES_TOTAL, MAX_BYTES, EXCLUDE_BROKERS,
    BALANCE_LEADERS, INVENTORY, SSH_CONN_ID, form.APPROVAL, DRY_RUN, STALL_TIMEOUT, PLAN_TIMEOUT)
"""The form of every reassignment DAG (its own params follow)."""

# The params of one reassignment DAG each: the scale-out's (dags/kafka_scale_out.py) and the rebalance or
# drain's (dags/kafka_reassign.py).
ADD_BROKERS = form.Integer(name="add_brokers", given=1, minimum=0, title="Brokers to add",
                           description="How many brokers to add (ids follow the highest); ignored when "
                                       "new_broker_ids is given.")
NEW_BROKER_IDS = form.WholeNumbers(name="new_broker_ids", title="New broker ids",
                                   description="Explicit ids of the brokers to add (hosts kafka-<id> in an Ansible "
                                               "inventory); empty: the ids after the highest.")
NEW_BROKER_RACKS = form.Texts(name="new_broker_racks", title="Racks of the new brokers",
                              description="Rack of each new broker, in order; empty: cycle the cluster's racks.")
MAX_ADD_BROKERS = form.Integer(
    name="max_add_brokers", given=16, minimum=1, title="Most brokers one scale-out adds",
    description="A bound on add_brokers (and on how many new_broker_ids): a larger count is refused before "
                "anything is planned or started. Raise it for a scale-out that really adds more brokers.")
KEEP_NEW_BROKERS = form.Flag(name="keep_new_brokers", title="Keep new brokers if the run fails",
                             description="A scale-out that fails after provisioning stops, removes and unregisters "
                                         "the new brokers that hold no replica; on: keep them running.")
SCALE_OUT_PARAMS: tuple[form.Spec[Any], ...] = (ADD_BROKERS, NEW_BROKER_IDS, NEW_BROKER_RACKS, KEEP_NEW_BROKERS,
                                                 MAX_ADD_BROKERS)
OPERATION = form.Choice(name="operation", given=Kind.REBALANCE, only=(Kind.REBALANCE, Kind.DRAIN), title="Operation",
                        description="rebalance: even out replicas and leaders over the brokers. drain: move every "
                                    "replica off drain_brokers.")
DRAIN_BROKERS = form.WholeNumbers(name="drain_brokers", title="Brokers to drain",
                                  description="With operation=drain: the brokers to empty.")
STOP_DRAINED = form.Flag(name="stop_drained", title="Stop drained brokers",
                         description="After a verified drain, stop the drained brokers through the role (needs the "
                                     "inventory).")
REBALANCE_AFTER = form.Flag(name="rebalance_after", title="Rebalance after the drain",
                            description="With operation=drain: after moving what drain_brokers hold (and nothing "
                                        "else), also even out the brokers that stay; those moves are counted apart "
                                        "in the approval.")
REASSIGN_PARAMS: tuple[form.Spec[Any], ...] = (OPERATION, DRAIN_BROKERS, REBALANCE_AFTER, STOP_DRAINED)


@dataclass(frozen=True)
class OperationParams:
    """What the operator asked for; validated before anything changes. Defaults: the specs above."""

    kind: Kind
    topics: tuple[str, ...] = TOPICS.default
    throttle_mb_per_s: float = THROTTLE.default
    max_moves_per_broker: int = MAX_MOVES_PER_BROKER.default
    max_moves_total: int = MAX_MOVES_TOTAL.default
    max_bytes_to_move: int | None = MAX_BYTES.default
    add_brokers: int = ADD_BROKERS.default  # ignored when new_broker_ids is given
    new_broker_ids: tuple[int, ...] = NEW_BROKER_IDS.default
    new_broker_racks: tuple[str, ...] = NEW_BROKER_RACKS.default
    keep_new_brokers: bool = KEEP_NEW_BROKERS.default
    drain_brokers: tuple[int, ...] = DRAIN_BROKERS.default
    rebalance_after: bool = REBALANCE_AFTER.default
    exclude_brokers: tuple[int, ...] = EXCLUDE_BROKERS.default
    balance_leaders: bool = BALANCE_LEADERS.default
    inventory: str = INVENTORY.default
    inventory_file: str = ""
    """For an ``inventory`` of ``conn:<conn_id>``: the private copy of the connection's inventory the running
    step reads (:func:`kafkaops.platform.provision.materialized_inventory`, made by the Airflow task and removed
    when it ends); "" otherwise. Never a param: the run's params name the connection only."""
    stop_drained: bool = STOP_DRAINED.default
    approval: form.Approval = form.APPROVAL.default
    dry_run: bool = DRY_RUN.default
    stall_timeout_s: float = STALL_TIMEOUT.default
    max_add_brokers: int = MAX_ADD_BROKERS.default
    plan_timeout_s: float = PLAN_TIMEOUT.default

    def __post_init__(self) -> None:
        for name, modes in (("kind", Kind), ("approval", form.Approval)):  # a mode given as its string
            object.__setattr__(self, name, form.mode_of(name, getattr(self, name), modes))

    @classmethod
    def from_params(cls, kind: str, params: Mapping[str, Any]) -> OperationParams:
        """The params of a run, however sent (:mod:`kafkaops.platform.params`: an empty field is
        its default; broker ids may be text). An empty ``inventory`` is the local cluster's spec
        (:func:`kafkaops.platform.provision.default_inventory`) when this machine has one."""
        try:
            for connection_id in (form.KAFKA_CONN_ID, SSH_CONN_ID):  # read by the tasks; checked here, with the rest
                connection_id.read(params)
            result = cls(
                kind=form.mode_of("kind", kind, Kind), topics=TOPICS.read(params),
                throttle_mb_per_s=THROTTLE.read(params),
                max_moves_per_broker=MAX_MOVES_PER_BROKER.read(params),
                max_moves_total=MAX_MOVES_TOTAL.read(params),
                max_bytes_to_move=MAX_BYTES.read(params),
                add_brokers=ADD_BROKERS.read(params),
                new_broker_ids=NEW_BROKER_IDS.read(params), new_broker_racks=NEW_BROKER_RACKS.read(params),
                keep_new_brokers=KEEP_NEW_BROKERS.read(params),
                drain_brokers=DRAIN_BROKERS.read(params), rebalance_after=REBALANCE_AFTER.read(params),
                exclude_brokers=EXCLUDE_BROKERS.read(params), balance_leaders=BALANCE_LEADERS.read(params),
                inventory=_inventory_of(INVENTORY.read(params)),
                stop_drained=STOP_DRAINED.read(params),
                approval=form.APPROVAL.read(params), dry_run=DRY_RUN.read(params),
                stall_timeout_s=STALL_TIMEOUT.read(params), max_add_brokers=MAX_ADD_BROKERS.read(params),
                plan_timeout_s=PLAN_TIMEOUT.read(params))
        except ConfigError as err:
            raise ConfigError(f"refusing the {kind} run, nothing was changed: {err}") from err
        result.validate()
        return result

    def validate(self) -> None:
        problems = []
        if self.throttle_mb_per_s <= 0:
            problems.append(f"throttle_mb_per_s is {self.throttle_mb_per_s}; give a positive rate, e.g. 10")
        if self.max_moves_per_broker < 1 or self.max_moves_total < 1:
            problems.append(f"max_moves_per_broker {self.max_moves_per_broker} / max_moves_total "
                            f"{self.max_moves_total}: give 1 or more")
        if self.kind == "scale_out" and not (self.add_brokers or self.new_broker_ids):
            problems.append("a scale-out needs add_brokers > 0 or new_broker_ids")
        if self.kind == "scale_out" and self.new_broker_ids and len(set(self.new_broker_ids)) != len(
                self.new_broker_ids):
            problems.append(f"new_broker_ids {list(self.new_broker_ids)} repeat an id")
        if self.kind == "drain" and not self.drain_brokers:
            problems.append("a drain needs drain_brokers, the ids of the brokers to empty")
        if self.stall_timeout_s <= 0:
            problems.append(f"stall_timeout_s is {self.stall_timeout_s}; give a positive number of seconds")
        problems += self._count_problems() + self._list_problems()
        if not 0 < self.plan_timeout_s <= MAX_PLAN_TIMEOUT_S:
            problems.append(f"plan_timeout_s is {self.plan_timeout_s:g}; give a number of seconds above 0 and at most "
                            f"{MAX_PLAN_TIMEOUT_S} (the plan task runs at most an hour)")
        if problems:
            raise ConfigError(f"refusing the {self.kind} run, nothing was changed: " + "; ".join(problems))

    @property
    def adding(self) -> int:
        """How many brokers a scale-out adds: ``new_broker_ids`` when given, else ``add_brokers``."""
        return len(self.new_broker_ids) or self.add_brokers

    def _count_problems(self) -> list[str]:
        """A scale-out's counts: bounded by ``max_add_brokers``, one rack per new broker when racks are given."""
        if self.kind != Kind.SCALE_OUT:
            return []
        problems = []
        if self.max_add_brokers < 1:
            problems.append(f"max_add_brokers is {self.max_add_brokers}; give 1 or more")
        elif self.adding > self.max_add_brokers:
            what = (f"new_broker_ids names {len(self.new_broker_ids):,} brokers" if self.new_broker_ids else
                    f"add_brokers is {self.add_brokers:,}")
            problems.append(f"{what}, more than max_add_brokers ({self.max_add_brokers}), the most one scale-out "
                            "adds; give fewer, or raise max_add_brokers if the cluster really grows by that many")
        if self.new_broker_racks and len(self.new_broker_racks) != self.adding:
            problems.append(f"new_broker_racks names {len(self.new_broker_racks)} rack(s) for {self.adding} new "
                            f"broker(s) ({'new_broker_ids' if self.new_broker_ids else 'add_brokers'}); give one rack "
                            "per new broker, in order, or leave it empty to cycle the cluster's racks")
        return problems

    def _list_problems(self) -> list[str]:
        """Broker lists that repeat an id or contradict each other or the operation."""
        problems = []
        for name in ("drain_brokers", "exclude_brokers"):
            repeated = form.duplicates(getattr(self, name))
            if repeated:
                problems.append(f"{name} names broker(s) {', '.join(map(str, repeated))} more than once")
        both = sorted(set(self.drain_brokers) & set(self.exclude_brokers))
        if self.kind == Kind.DRAIN and both:
            problems.append(f"broker(s) {', '.join(map(str, both))} are in drain_brokers and in exclude_brokers: a "
                            "drained broker gives its replicas away, an excluded one keeps them; name each in one")
        added = sorted(set(self.new_broker_ids) & set(self.exclude_brokers))
        if self.kind == Kind.SCALE_OUT and added:
            problems.append(f"new broker(s) {', '.join(map(str, added))} are in exclude_brokers, so they would "
                            "receive nothing; leave them out of exclude_brokers")
        if self.kind == Kind.REBALANCE:
            given = [name for name in ("drain_brokers", "stop_drained", "rebalance_after") if getattr(self, name)]
            if given:
                problems.append(f"{', '.join(given)} belong to operation=drain, and the operation is rebalance; "
                                "choose operation=drain, or leave them empty")
        return problems

    def cluster_problems(self, brokers: Iterable[int], topics: Iterable[str]) -> list[str]:
        """What the run asks of brokers and topics the cluster does not have (pure): ``brokers`` its
        registered broker ids, ``topics`` its topic names. Checked at the begin, before the lock is taken."""
        known, names = set(brokers), set(topics)
        problems = []
        for name in ("drain_brokers", "exclude_brokers"):
            unknown = sorted(set(getattr(self, name)) - known)
            if unknown and (name != "drain_brokers" or self.kind == Kind.DRAIN):
                problems.append(f"{name} names broker(s) {', '.join(map(str, unknown))}, which the cluster does not "
                                f"have (its brokers: {', '.join(map(str, sorted(known)))})")
        if self.kind == Kind.SCALE_OUT:
            taken = sorted(set(self.new_broker_ids) & known)
            if taken:
                problems.append(f"new_broker_ids names broker(s) {', '.join(map(str, taken))}, which the cluster has "
                                "already; name free ids, or leave it empty for the ids after the highest")
        left = known - set(self.exclude_brokers) - (set(self.drain_brokers) if self.kind == Kind.DRAIN else set())
        if known and not left and self.kind != Kind.SCALE_OUT:
            problems.append(f"exclude_brokers{' and drain_brokers' if self.kind == Kind.DRAIN else ''} name every "
                            f"broker of the cluster ({', '.join(map(str, sorted(known)))}), so no broker could take a "
                            "replica; exclude fewer")
        elif known and not known - set(self.exclude_brokers) and self.kind == Kind.SCALE_OUT:
            problems.append(f"exclude_brokers names every broker of the cluster ({', '.join(map(str, sorted(known)))}),"
                            " so none could give a replica to the new brokers; exclude fewer")
        unknown_topics = sorted(set(self.topics) - names)
        if unknown_topics:
            problems.append(f"topics names {', '.join(unknown_topics[:10])}"
                            f"{f' (and {len(unknown_topics) - 10} more)' if len(unknown_topics) > 10 else ''}, which "
                            "the cluster does not hold")
        return problems

    @property
    def stops_brokers(self) -> bool:
        """A drain that stops its drained brokers at its end (whatever else the form holds)."""
        return self.kind == "drain" and self.stop_drained and bool(self.drain_brokers)

    @property
    def uses_inventory(self) -> bool:
        """A run whose steps read the inventory: a scale-out (provisions through it), a drain that stops brokers."""
        return self.kind == Kind.SCALE_OUT or self.stops_brokers

    @property
    def inventory_conn_id(self) -> str | None:
        """The Airflow connection the ``inventory`` param names (``conn:<conn_id>``); None for a file."""
        return provision.inventory_conn_id(self.inventory)

    def inventory_at(self) -> Path:
        """The file the inventory is read from: the param's, or the running step's copy of its connection's
        (:attr:`inventory_file`); a ConfigError for a connection's that this step did not read."""
        if self.inventory_file:
            return Path(self.inventory_file)
        if self.inventory_conn_id is not None:
            raise ConfigError(f"param inventory {self.inventory}: the inventory of Airflow connection "
                              f"'{self.inventory_conn_id}' was not read for this step; nothing was changed")
        return Path(self.inventory)

    @property
    def throttle_bytes_per_s(self) -> int:
        return int(self.throttle_mb_per_s * 1_000_000)


def _inventory_of(given: str) -> str:
    """The ``inventory`` param as the file it names (:func:`kafkaops.platform.provision.inventory_path`: a
    ConfigError naming the param for one that is no inventory, or outside the configured folders); empty: the
    local cluster's spec (:func:`kafkaops.platform.provision.default_inventory`) when this machine has one. A
    ``conn:<conn_id>`` stays as given (its id checked): each step that needs it reads the connection."""
    if provision.inventory_conn_id(given) is not None:
        return provision.inventory_conn_ref(given)
    if given:
        return str(provision.inventory_path(given))
    return str(provision.default_inventory() or "")


def check_inventory_file(p: OperationParams) -> None:
    """At the begin, dry runs too: the inventory a scale-out provisions through (or a drain stops its brokers
    through) is readable as what its suffix says, a kafkaops cluster spec or an Ansible inventory with hosts. A
    ConfigError naming the param otherwise (whether it names the hosts the plan needs is checked with the plan)."""
    if not p.uses_inventory or not p.inventory:
        return
    path = p.inventory_at()
    try:
        if path.suffix == ".json":
            provision.ClusterSpec.load(path)
        else:
            provision.inventory_hosts(path)
    except (KafkaOpsError, KeyError, TypeError, ValueError, AttributeError) as err:
        raise ConfigError(f"param inventory {p.inventory}: {err}. Nothing was changed") from err


def check_cluster(p: OperationParams, brokers: Sequence[int], conn: connection.KafkaConnection) -> None:
    """At the begin, before the lock: :meth:`OperationParams.cluster_problems` on the cluster's brokers and
    topics; a ConfigError naming every problem."""
    problems = p.cluster_problems(brokers, metadata.topic_names(conn) if p.topics else ())
    if problems:
        raise ConfigError(f"refusing the {p.kind} run, nothing was changed: " + "; ".join(problems))


# -- provisioning ---------------------------------------------------------------------------------------

def provision_brokers(ctx: OperationContext, ssh: provision.SshLogin | None = None,
                      planned: Sequence[NewBroker] = ()) -> Provisioned:
    """Start the new brokers with the kafka_broker role: ``planned``, the approved plan's (its ids and
    racks), else those the params name. ``inventory`` is either a kafkaops cluster spec (JSON, local
    clusters: new nodes get free loopback ports) or an Ansible inventory (YAML, real hosts: the new
    hosts must be in it; they are the play's limit).

    Resume-safe: a retry provisions the brokers an earlier try of this attempt chose (the role
    converges them again), never more. ``ssh``: the login of the run's SSH connection (the
    ``ssh_conn_id`` param), for an Ansible inventory's hosts."""
    p = ctx.params
    if not p.inventory:
        raise ConfigError("a scale-out needs the inventory param: a kafkaops cluster spec (.json) or an Ansible "
                          "inventory (.yml) that names the new hosts; for the local cluster, run make cluster-up, "
                          f"which writes {provision.LOCAL_SPEC}, the default of an empty param")
    path = p.inventory_at()
    if path.suffix == ".json":
        _spec_writable(p)
        spec = provision.ClusterSpec.load(path)
        chosen = _chosen_brokers(ctx)
        if chosen and set(chosen) <= {n.node_id for n in spec.nodes}:  # that try saved them into the spec
            grown, added = spec, tuple(spec.node(i) for i in chosen)
        elif planned:
            grown, added = _add_planned(spec, planned, path)
        else:
            grown, added = spec.with_new_brokers(p.add_brokers, node_ids=chosen or p.new_broker_ids,
                                                 racks=p.new_broker_racks)
        ctx.audit.append("note", text=f"provisioning broker(s) {', '.join(str(n.node_id) for n in added)} on "
                                      f"{', '.join(f'{n.host}:{n.port}' for n in added)}",
                         provisioning=[n.node_id for n in added])
        ctx.fence("provision brokers")
        hosts = [n.hostname for n in added]
        try:
            provision.cluster_up(grown, limit=hosts, client_config=ctx.conn_config)  # the check logs in as we do
        except KafkaOpsError as err:
            _stop_half_provisioned(ctx, grown, hosts, err)
            raise
        grown.save(path)  # the cluster now has these nodes: the spec says so for the next run
        new = [NewBroker(n.node_id, n.rack or None, host=n.host, port=n.port) for n in added]
    else:
        if not p.new_broker_ids:
            raise ConfigError("with an Ansible inventory, name the new brokers in new_broker_ids; their hosts "
                              "(kafka-<id>) must be in the inventory")
        hosts = [f"kafka-{i}" for i in p.new_broker_ids]
        ctx.audit.append("note", text=f"provisioning broker(s) {', '.join(map(str, p.new_broker_ids))} on "
                                      f"{', '.join(hosts)} of {p.inventory}" + (ssh.describe() if ssh else ""),
                         provisioning_hosts=hosts)
        ctx.fence("provision brokers")
        provision.run_playbook("cluster_up.yml", path, limit=",".join(hosts), ssh=ssh,
                               extravars=provision.check_client_vars(ctx.conn_config))
        new = [NewBroker(i, (p.new_broker_racks[k] or None) if k < len(p.new_broker_racks) else None,
                         hostname=hosts[k]) for k, i in enumerate(p.new_broker_ids)]
    where = ", ".join(f"{b.id} on {b.where}" for b in new)
    ctx.audit.append("note", text=f"broker(s) {where} provisioned", provisioned=[b.id for b in new])
    return Provisioned(tuple(new))


def _taken_ids(spec: provision.ClusterSpec, planned: Sequence[NewBroker], path: Path) -> None:
    """Refuse planned broker ids that ``spec`` (at ``path``) already has nodes for."""
    taken = sorted({b.id for b in planned} & {n.node_id for n in spec.nodes})
    if taken:
        raise ConfigError(f"the plan adds broker(s) {taken}, but {path} already has node(s) with those ids (stopped "
                          "ones are not in the cluster's metadata, so the plan did not see them); nothing was "
                          "provisioned: trigger again with new_broker_ids naming free ids")


def check_inventory(p: OperationParams, planned: Sequence[NewBroker]) -> None:
    """Before the plan is shown: the inventory a scale-out provisions through (or a drain stops its
    brokers through) can be read and names what the run will need, so a wrong one is refused before the
    approval, not after it. A cluster spec: readable, and free of the planned ids; an Ansible inventory:
    readable by Ansible, with a host ``kafka-<id>`` for every broker the run starts or stops."""
    if not (p.kind == "scale_out" or p.stops_brokers):
        return
    if not p.inventory:
        raise ConfigError(f"the {p.kind} needs the inventory param: a kafkaops cluster spec (.json) or an Ansible "
                          "inventory (.yml) that names the hosts; for the local cluster, run make cluster-up, "
                          "which writes the spec an empty inventory stands for. Nothing was changed")
    path = p.inventory_at()
    try:
        if path.suffix == ".json":
            if p.kind == "scale_out":
                _spec_writable(p)
                _taken_ids(provision.ClusterSpec.load(path), planned, path)
            return
        hosts = set(provision.inventory_hosts(path))
    except ProvisionError as err:
        raise ConfigError(f"{err}. Nothing was changed") from err
    ids = [b.id for b in planned] if p.kind == "scale_out" else list(p.drain_brokers)
    missing = [f"kafka-{i}" for i in ids if f"kafka-{i}" not in hosts]
    if missing:
        raise ConfigError(f"inventory {p.inventory} has no host {', '.join(missing)} for broker(s) "
                          f"{', '.join(m.split('-', 1)[1] for m in missing)} (its hosts: {', '.join(sorted(hosts))}); "
                          "add them, or name brokers it has hosts for. Nothing was changed")


def _spec_writable(p: OperationParams) -> None:
    """A scale-out through a kafkaops cluster spec writes the brokers it adds into the spec (a retry and the
    cleanup of a failed run find them there): a ConfigError for a spec kept in an Airflow connection, which a
    run cannot write."""
    if p.inventory_conn_id is not None:
        raise ConfigError(f"param inventory {p.inventory} holds a kafkaops cluster spec, and a scale-out writes the "
                          "brokers it adds into its spec, which a run cannot do to an Airflow connection; keep the "
                          "spec in a file (in the folders KAFKAOPS_INVENTORY_DIRS names), or put an Ansible inventory "
                          "in the connection. Nothing was changed")


def _inventory_checked(ctx: OperationContext, planned: Sequence[NewBroker]) -> str | None:
    """:func:`check_inventory` for the plan step: a real run is refused on a wrong inventory; a dry run,
    which never provisions or stops a broker, plans on and says what a real run would be refused for
    (returned, and noted in the record)."""
    try:
        check_inventory(ctx.params, planned)
    except ConfigError as err:
        if not ctx.params.dry_run:
            raise
        ctx.audit.append("note", text=f"dry run: a real run would be refused at its plan: {err}")
        log.warning("dry run: a real run would be refused at its plan: %s", err)
        return str(err)
    return None


def _add_planned(spec: provision.ClusterSpec, planned: Sequence[NewBroker], path: Path
                 ) -> tuple[provision.ClusterSpec, tuple[provision.NodeSpec, ...]]:
    """``spec`` plus the planned brokers, each with its planned id and rack (the plan was made on them)."""
    _taken_ids(spec, planned, path)
    grown, added = spec, list[provision.NodeSpec]()
    for broker in planned:
        grown, one = grown.with_new_brokers(node_ids=[broker.id], racks=[broker.rack or ""])
        added += one
    return grown, tuple(added)


def _stop_half_provisioned(ctx: OperationContext, spec: provision.ClusterSpec, hosts: list[str],
                           err: Exception) -> None:
    """A provisioning that failed must not leave a broker running that no spec lists: stop (and
    remove) what it started; a retry provisions the same ids again from the audit note."""
    try:
        provision.cluster_down(spec, limit=hosts, purge=True)
    except KafkaOpsError as cleanup:
        ctx.audit.append("note", text=f"provisioning {', '.join(hosts)} failed ({err}) and stopping them failed too "
                                      f"({cleanup}); stop them by hand before the next run")
        log.error("could not stop the half-provisioned %s: %s", ", ".join(hosts), cleanup)
    else:
        ctx.audit.append("note", text=f"provisioning {', '.join(hosts)} failed; what it started was stopped and "
                                      "removed")


def finish(ctx: OperationContext, cluster_id: str | None, *, failed_tasks: Iterable[str] = (),
           ssh: provision.SshLogin | None = None) -> dict[str, Any]:
    """:func:`kafkaops.platform.lifecycle.finish`; a scale-out that did not finish first removes the brokers
    it provisioned that hold no replica (:func:`remove_new_brokers`, unless ``keep_new_brokers``), and its
    outcome names every one that stays: running and registered, holding whatever moved onto them, with the
    run that removes them. ``ssh``: the login of the run's SSH connection, for an Ansible inventory's hosts."""
    outcome, reason = lifecycle.outcome_of(ctx.audit.summary(), dry_run=ctx.params.dry_run, failed_tasks=failed_tasks)
    left = provisioned_brokers(ctx) if outcome not in lifecycle.APPLIED else ()
    if left and not ctx.params.keep_new_brokers:
        try:
            removed = remove_new_brokers(ctx, left, ssh)
        except KafkaOpsError as err:  # the outcome is recorded whatever this says; the brokers stay, named below
            log.error("the brokers this run provisioned were not removed: %s", err)
            ctx.audit.append("note", text=f"removing broker(s) {', '.join(map(str, left))}, provisioned by this run, "
                                          f"failed: {err}")
            removed = ()
        if removed:
            reason += (f". Broker(s) {', '.join(map(str, removed))}, provisioned by this run and holding no replica, "
                       "were stopped, removed and unregistered")
        left = tuple(b for b in left if b not in removed)
    if left:
        ids = ", ".join(map(str, left))
        why = "keep_new_brokers is on" if ctx.params.keep_new_brokers else "they hold replicas or could not be removed"
        reason += (f". Broker(s) {ids}, provisioned by this run, keep running ({why}): trigger the scale-out again to "
                   f"finish it, or remove them with kafka_reassign (operation=drain, drain_brokers=[{ids}], "
                   "stop_drained=true)")
    return lifecycle.conclude(ctx, outcome, reason, cluster_id)


def remove_new_brokers(ctx: OperationContext, provisioned: Sequence[int], ssh: provision.SshLogin | None = None
                       ) -> tuple[int, ...]:
    """Undo a scale-out's provisioning: of ``provisioned``, the brokers that hold no replica and are the target
    of no reassignment in flight are stopped and removed through the role (taken out of a cluster spec), then
    unregistered from the controller. Returns those removed; the others (holding what moved onto them) stay."""
    with ctx.connect() as conn:  # a partition being moved lists its target and its old replicas both
        cluster = metadata.snapshot(conn, include_internal=True, offsets=False, sizes=False, groups=False)
    held = {b for x in cluster.partitions for b in x.replicas}
    empty = tuple(b for b in sorted(provisioned) if b not in held)
    if not empty:
        return ()
    ids = ", ".join(map(str, empty))
    ctx.fence(f"stop the broker(s) {ids} this run provisioned")
    path = ctx.params.inventory_at()
    if path.suffix == ".json":
        _spec_writable(ctx.params)
        spec = provision.ClusterSpec.load(path)
        nodes = [n for n in spec.nodes if n.node_id in empty]
        provision.cluster_down(spec, limit=[n.hostname for n in nodes], purge=True)
        replace(spec, nodes=tuple(n for n in spec.nodes if n.node_id not in empty)).save(path)
    else:
        provision.run_playbook("cluster_down.yml", path, limit=",".join(f"kafka-{b}" for b in empty), ssh=ssh,
                               extravars={"kafka_broker_down_state": "absent"})
    registrations.unregister_brokers(ctx.conn_config, empty)
    ctx.audit.append("note", text=f"broker(s) {ids}, provisioned by this run and holding no replica, stopped, "
                                  "removed and unregistered", removed=list(empty))
    return empty


def provisioned_brokers(ctx: OperationContext) -> tuple[int, ...]:
    """The brokers this attempt of the run provisioned and did not remove again (its audit notes)."""
    record = ctx.audit.summary()
    notes = [n for n in record["notes"] if n["ts"] >= (record["started_at"] or 0)]
    removed = {int(b) for n in notes for b in n.get("removed") or ()}
    return tuple(sorted({int(b) for n in notes for b in n.get("provisioned") or ()} - removed))


def _chosen_brokers(ctx: OperationContext) -> tuple[int, ...]:
    """The broker ids an earlier try of this attempt chose to provision (its audit note), if any."""
    record = ctx.audit.summary()
    chosen = [n["provisioning"] for n in record["notes"]
              if n.get("provisioning") and n["ts"] >= (record["started_at"] or 0)]
    return tuple(chosen[-1]) if chosen else ()


def registered_brokers(conn_config: Mapping[str, str]) -> list[int]:
    """The broker ids the controller has registered."""
    with connection.connect(conn_config, timeout_s=10.0) as conn:
        return sorted(b.id for b in metadata.describe_cluster(conn)[2])


def wait_until_registered(ctx: OperationContext, new_brokers: Sequence[NewBroker], *,
                          timeout_s: float = 300.0, poll_s: float = 1.0) -> list[int]:
    """Poll until the controller has registered ``new_brokers``; the registered ids. The role waits
    for the registration too, so the first look mostly finds them."""
    ids = sorted(b.id for b in new_brokers)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            registered, error = registered_brokers(ctx.conn_config), ""
        except KafkaOpsError as err:  # the cluster may blink while a broker joins: look again
            registered, error = [], f"; last error: {err}"
        if set(ids) <= set(registered):
            return registered
        if time.monotonic() > deadline:
            raise KafkaOpsError(f"brokers {sorted(set(ids) - set(registered))} did not register with the controller "
                                f"within {timeout_s:.0f} s (registered: {registered}{error}); check their logs and "
                                "controller.quorum.voters, then clear the provision task (it converges the same "
                                "brokers)")
        time.sleep(poll_s)


# -- planning ---------------------------------------------------------------------------------------------

def make_plan(ctx: OperationContext, before: Mapping[str, Any], new_brokers: Sequence[NewBroker] = ()
              ) -> dict[str, Any]:
    """Plan on the snapshot (plus, for a scale-out, the new brokers: ``new_brokers``, else those it will
    add, :func:`planned_brokers`), record it, return it: a :class:`~kafkaops.reassign.records.PlannedReassignment`
    as its dict (the plan task's XCom value and the ``plan`` event). A scale-out's plan carries its new brokers
    (``new_brokers``): the provision after the approval starts exactly those."""
    p = ctx.params
    cluster = Cluster.from_dict(before)
    topics = p.topics or None
    if topics:  # balance the chosen topics among themselves, as Kafka's own tool does
        for topic in topics:
            cluster.partitions_of(topic)  # an unknown topic is refused here, naming it
        cluster = replace(cluster, partitions=tuple(x for x in cluster.partitions if x.topic in topics), _index=None)
    inventory_problem = None
    goals = Goals(leaders=p.balance_leaders)
    budget = time_budget(p.plan_timeout_s, raise_it=f"Raise plan_timeout_s (this run's param, at most "
                                                      f"{MAX_PLAN_TIMEOUT_S} s) and trigger the run again")
    if p.kind == "scale_out":
        new_brokers = tuple(new_brokers) or planned_brokers(cluster, p, taken=_spec_node_ids(p),
                                                            inventory_racks=_inventory_racks(p))
        inventory_problem = _inventory_checked(ctx, new_brokers)
        with budget:
            plan = plan_scale_out(cluster, [Broker(id=b.id, rack=b.rack) for b in new_brokers], goals,
                                  topics=topics, exclude=p.exclude_brokers)
    elif p.kind == "drain":
        inventory_problem = _inventory_checked(ctx, ())
        with budget:
            plan = plan_drain(cluster, p.drain_brokers, goals, exclude=p.exclude_brokers,
                              rebalance_after=p.rebalance_after)
    else:
        with budget:
            plan = plan_rebalance(cluster, goals, exclude=p.exclude_brokers, topics=topics)
    plan = size_moves(plan, ctx.connect)
    plan = room_checked(plan, cluster.brokers)
    flows = approval.plan_traffic(plan, p)
    refused = f"A real run would be refused here: {inventory_problem}" if inventory_problem else ""
    planned = PlannedReassignment(
        plan, plan.summary() + (f". {refused}" if refused else ""), flows.eta_s,
        approval.approval_markdown(plan, p) + (f"\n\n**{refused}**" if refused else ""),
        tuple(new_brokers) if p.kind == "scale_out" else None)
    data = planned.to_dict()
    ctx.audit.append("plan", **data)
    log.info("plan: %s; ETA %s at %g MB/s", plan.summary(), engine.clock(flows.eta_s), p.throttle_mb_per_s)
    return data


def size_moves(plan: ReassignmentPlan, connect: Callable[[], connection.KafkaConnection]) -> ReassignmentPlan:
    """``plan`` with its moves sized by what their new replicas copy: the storage configs of the topics it
    copies partitions of are read (:func:`configs.describe_topic_storage`) through a connection ``connect``
    opens (and this closes), and a tiered topic's moves copy the leader's local log only
    (:meth:`ReassignmentPlan.with_storage`). A plan that copies nothing asks nothing: no connection is opened.
    The plan step's (:func:`make_plan`, ``ctx.connect``) and ``kafkaops plan``'s on a live cluster."""
    copied = {m.topic for m in plan.moves if m.adding}
    if not copied:
        return plan
    with connect() as conn:
        storage = configs.describe_topic_storage(conn, copied)
    return plan.with_storage(storage.values())


def room_checked(plan: ReassignmentPlan, brokers: Iterable[Broker]) -> ReassignmentPlan:
    """``plan`` held to the free log-dir bytes of the brokers it copies onto, as the snapshot read them
    (:func:`kafkaops.reassign.planner.room.check_room`): :class:`~kafkaops.reassign.planner.room.NotEnoughRoom`
    (final: the run is refused at its plan, dry runs too, nothing changed) when one would keep less than
    :data:`~kafkaops.reassign.planner.room.MIN_FREE_FRACTION` of its disk free; else the plan with a note of the
    room checked and of the brokers not checked (a scale-out's new ones: :func:`check_new_brokers_room`)."""
    room = require_room(check_room(plan.moves, brokers, new=plan.new_brokers), f"the {plan.kind} plan")
    note = room.note()
    if not note:
        return plan
    log.info("plan: %s", note)
    return replace(plan, notes=(*plan.notes, note))


def check_new_brokers_room(ctx: OperationContext, plan_data: Mapping[str, Any], brokers: Sequence[int]) -> RoomCheck:
    """A scale-out's new ``brokers``, registered and not yet given a replica: their log dirs, read now, must hold
    what the approved plan copies onto them (:func:`room_checked`'s rule, which could not read them at the plan).
    Recorded as a note; :class:`~kafkaops.reassign.planner.room.NotEnoughRoom` (final) when one lacks room: nothing
    moved, and the run's finish removes the new brokers, which hold no replica."""
    plan = PlannedReassignment.from_dict(plan_data).plan
    ids = sorted(set(brokers))
    with ctx.connect() as conn:
        disks = metadata.log_dirs(conn, ids)
    found = [Broker(id=b, disk_total_bytes=d.total_bytes, disk_usable_bytes=d.usable_bytes) for b, d in disks.items()]
    room = check_room(plan.moves, found)
    room = replace(room, brokers=tuple(b for b in room.brokers if b.broker in ids))
    after = ("keeps them running (keep_new_brokers is on)" if ctx.params.keep_new_brokers else
             "stops, removes and unregisters them")
    require_room(room, f"the approved {plan.kind} plan",
                 state=f"no replica moved: broker(s) {ids} were provisioned and hold none, and the run's finish "
                       f"{after}",
                 then="give the new brokers larger log dirs (or free space on them), or add more brokers "
                      "(add_brokers) so each receives less, then trigger the scale-out again")
    if room.brokers:
        ctx.audit.append("note", text=room.note())
    return room


def _inventory_racks(p: OperationParams) -> dict[int, str]:
    """The rack an Ansible inventory gives each host ``kafka-<id>``, by id; none for a cluster spec, or an
    inventory that cannot be read (the inventory check names that)."""
    try:
        if not p.inventory or p.inventory_at().suffix == ".json":
            return {}
        racks = provision.inventory_racks(p.inventory_at())
    except (KafkaOpsError, OSError, ValueError) as err:
        log.warning("the inventory %s could not be read for its racks: %s", p.inventory, err)
        return {}
    return {int(host.removeprefix("kafka-")): rack for host, rack in racks.items()
            if host.startswith("kafka-") and host.removeprefix("kafka-").isdigit()}


def _spec_node_ids(p: OperationParams) -> tuple[int, ...]:
    """The node ids of the run's kafkaops cluster spec (stopped nodes included); none for an Ansible inventory,
    or a spec that cannot be read (the inventory check names that)."""
    try:
        if not p.inventory or p.inventory_at().suffix != ".json":
            return ()
        return tuple(n.node_id for n in provision.ClusterSpec.load(p.inventory_at()).nodes)
    except (KafkaOpsError, OSError, ValueError) as err:
        log.warning("the cluster spec %s could not be read for its node ids: %s", p.inventory, err)
        return ()


def planned_brokers(cluster: Cluster, p: OperationParams, taken: Iterable[int] = (),
                    inventory_racks: Mapping[int, str] | None = None) -> tuple[NewBroker, ...]:
    """The brokers a scale-out will add (pure): ``new_broker_ids``, else ``add_brokers`` ids after the highest
    of the cluster's and ``taken`` (ids the inventory holds already, e.g. a stopped broker's, which the
    cluster's metadata does not list). Racks: ``new_broker_racks``; else, for an Ansible inventory, the rack
    its host ``kafka-<id>`` is given there (``inventory_racks``: id -> ``kafka_broker_rack``, "" for none), as
    the provision will start it; else (a kafkaops cluster spec, which the provision follows, or an inventory
    that cannot be read or has no such host, which the inventory check refuses before a real run) the
    cluster's racks in turn."""
    start = max([*cluster.broker_ids, *taken], default=0) + 1
    ids = p.new_broker_ids or tuple(range(start, start + p.add_brokers))
    racks: Sequence[str] = p.new_broker_racks or cluster.racks or ("",)
    given = {} if p.new_broker_racks else dict(inventory_racks or {})
    return tuple(NewBroker(i, (given[i] if i in given else racks[k % len(racks)]) or None)
                 for k, i in enumerate(ids))


def plan_gate(ctx: OperationContext, plan_data: Mapping[str, Any]) -> dict[str, Any]:
    from kafkaops.reassign import frames  # pandas: only the tasks that gate import it

    plan = PlannedReassignment.from_dict(plan_data).plan
    if plan.cluster is None:  # make_plan always keeps it: a value from elsewhere
        raise KafkaOpsError(f"the plan gate needs the cluster the {plan.kind} plan was made on, and the plan task's "
                            "value has none; nothing was changed: run the DAG again so its plan task plans anew")
    return lifecycle.gate(ctx, "plan", frames.plan_frame(plan, plan.cluster, ctx.params.max_bytes_to_move))


def approval_text(plan_data: Mapping[str, Any], params: OperationParams) -> str:
    """What the operator reads before approving (Markdown): :func:`kafkaops.reassign.approval.approval_markdown`
    of the plan task's value; :func:`make_plan` keeps it there as ``approval``."""
    return approval.approval_markdown(PlannedReassignment.from_dict(plan_data).plan, params)


# -- execution ---------------------------------------------------------------------------------------------

def desired_of(plan_data: Mapping[str, Any]) -> dict[TopicPartition, tuple[int, ...]]:
    """Each partition the plan task's value moves, with its replicas after the move (read on every batch pass:
    :class:`~kafkaops.reassign.records.PlannedMoves`, not the whole plan)."""
    return dict(PlannedMoves.from_dict(plan_data).desired)


def set_throttles(ctx: OperationContext, plan_data: Mapping[str, Any]) -> engine.ThrottleRecord:
    """Throttle every move of the plan with :func:`engine.plan_throttles` and
    :func:`engine.set_throttles`; the record lets the removal undo exactly this. A retry re-applies
    the record an earlier try of this attempt set (:func:`throttles_in_place`): the rates the
    brokers hold then are this run's, not the values to restore."""
    desired = desired_of(plan_data)
    if not desired:
        return engine.ThrottleRecord()
    kept = throttles_in_place(ctx)
    with ctx.connect() as conn:
        if kept is not None:
            record = engine.ThrottleRecord.from_dict(kept)
            ctx.fence("set throttles")
            ctx.audit.append("note", text=f"the throttles an earlier try set are still on brokers "
                                          f"{list(record.brokers)}: set again, to be removed as first recorded")
        else:
            cluster_id = metadata.describe_cluster(conn)[0]
            before = metadata.snapshot(conn, topics=sorted({t for t, _ in desired}), groups=False)
            record = engine.plan_throttles(conn, engine.moves_for(before, desired),
                                           ledger=ctx.store.throttle_ledger(cluster_id))
            ctx.fence("set throttles")
            ctx.audit.append("throttle_set", **records.ThrottleSet(record.brokers, record.topics,
                                                                   ctx.params.throttle_bytes_per_s,
                                                                   record.to_dict()).to_dict())
        engine.set_throttles(conn, record, ctx.params.throttle_bytes_per_s)
    return record


def throttles_in_place(ctx: OperationContext) -> dict[str, Any] | None:
    """The throttle record this attempt of the run set and has not removed since (from the audit),
    else None: what a removal must undo, whichever task or try set it."""
    events = ctx.audit.events()
    in_place = records.fold(events).throttles_in_place(state.summarize(events)["started_at"] or 0)
    return None if in_place is None else dict(in_place.record) or None


def remove_throttles(ctx: OperationContext, record: Mapping[str, Any] | None, plan_data: Mapping[str, Any] | None
                     ) -> records.ThrottleRemoved:
    """Undo the throttles (teardown) with :func:`engine.remove_throttles`: exactly the record's,
    or, without one, every throttle on the plan's brokers and topics. A broker that is down keeps
    its rate until it is back: it is named in the error and in the throttle ledger, and the next
    run on the cluster removes it."""
    rec = engine.ThrottleRecord.from_dict(record) if record else None
    plan = PlannedReassignment.from_dict(plan_data).plan if plan_data and rec is None else None
    brokers, topics = engine.throttle_scope(plan.moves) if plan else ((), ())
    removal = None
    ctx.fence("remove throttles")  # a run that lost the cluster must not undo the new holder's throttles
    try:
        with ctx.connect() as conn:
            removal = engine.remove_throttles(conn, rec, brokers=brokers, topics=topics)
    except engine.ThrottlesLeft as err:
        removal = err.removal
        raise
    finally:
        if removal is not None:
            ctx.audit.append("throttle_removed", **records.ThrottleRemoved(removal.brokers, removal.topics,
                                                                           removal.left).to_dict())
    return records.ThrottleRemoved(removal.brokers, removal.topics, removal.left)


def set_cordons(ctx: OperationContext) -> records.CordonSet | None:
    """A drain cordons its drained brokers' log dirs for the run (Kafka 4.3+, :mod:`kafkaops.reassign.cordons`):
    Kafka places no new partition there meanwhile. The record says which brokers, which an operator had
    cordoned already (left alone), or why none was set (older brokers). A retry sets again the cordons an
    earlier try of this attempt set, to be lifted to the values first recorded. None for any other run."""
    p = ctx.params
    if p.kind != Kind.DRAIN or not p.drain_brokers or p.dry_run:
        return None
    kept = cordons_in_place(ctx)
    with ctx.connect() as conn:
        if kept is not None:
            record = cordons.CordonRecord.from_dict(kept.record)
            ctx.fence("cordon the drained brokers' log dirs")
            ctx.audit.append("note", text=f"the cordons an earlier try set are still on brokers {list(record.brokers)}: "
                                          "set again, to be lifted as first recorded")
            cordons.set_cordons(conn, record)
            return kept
        record = cordons.plan_cordons(conn, p.drain_brokers)
        event = records.CordonSet(record.brokers, record.kept, record.skipped, record.to_dict())
        if record.skipped is not None:
            ctx.audit.append("cordon_set", **event.to_dict())
            ctx.audit.append("note", text=record.skipped)
            return event
        ctx.fence("cordon the drained brokers' log dirs")
        ctx.audit.append("cordon_set", **event.to_dict())
        if record.kept:
            ctx.audit.append("note", text=f"broker(s) {list(record.kept)} were cordoned whole before the run "
                                          f"({cordons.CORDON_KEY}={cordons.ALL_DIRS}): left as they are")
        if record.down:
            ctx.audit.append("note", text=f"broker(s) {list(record.down)} are not registered (down): not cordoned; a "
                                          "broker that is down takes no new partition")
        cordons.set_cordons(conn, record)
    if record.brokers:
        ctx.audit.append("note", text=f"log dirs of broker(s) {list(record.brokers)} cordoned for the drain "
                                      f"({cordons.CORDON_KEY}={cordons.ALL_DIRS}): Kafka places no new partition there "
                                      "until the run lifts it")
    return event


def cordons_in_place(ctx: OperationContext) -> records.CordonSet | None:
    """The cordons this attempt of the run set and has not lifted since (from the audit), else None."""
    events = ctx.audit.events()
    return records.fold(events).cordons_in_place(state.summarize(events)["started_at"] or 0)


def lift_cordons(ctx: OperationContext, cordoned: records.CordonSet) -> records.CordonLifted:
    """Lift the cordons of ``cordoned`` (teardown): each broker gets back the value it had before the run. A
    broker that does not answer keeps its cordon: named in the error and the record, with the command that
    lifts it."""
    record = cordons.CordonRecord.from_dict(cordoned.record)
    ctx.fence("lift the drained brokers' cordons")  # a run that lost the cluster must not undo the new holder's
    try:
        with ctx.connect() as conn:
            lift = cordons.lift_cordons(conn, record)
    except cordons.CordonsLeft as err:
        lift = err.lift
        raise
    except KafkaOpsError:
        bootstrap = str(ctx.conn_config.get("bootstrap.servers") or "HOST:PORT")
        lift = cordons.CordonLift(left=record.brokers, failures=("the cluster did not answer",), commands=tuple(
            cordons.lift_command(bootstrap, b, prior) for b, prior in record.prior))
        raise
    finally:
        done = records.CordonLifted(lift.brokers, lift.left, lift.commands)
        ctx.audit.append("cordon_lifted", **done.to_dict())
        if lift.left:
            ctx.audit.append("note", text=f"the cordons of broker(s) {list(lift.left)} stay; lift them with: "
                                          + "; ".join(lift.commands))
        else:
            ctx.audit.append("note", text=f"cordons lifted from broker(s) {list(lift.brokers)}")
    return done


def next_batch(ctx: OperationContext, plan_data: Mapping[str, Any]) -> BatchStep:
    """Resume-safe batching over the engine: wait for the plan's moves in flight, else observe and
    submit :func:`engine.next_batch`. Returns what to wait for."""
    desired = desired_of(plan_data)
    p = ctx.params
    batch = None
    with ctx.connect() as conn:
        # a move in flight is waited for whatever its target: e.g. on a retry after a broker died
        # mid-move, which observing would refuse as a broker that is not registered
        waiting = sorted(reassignments.list_partition_reassignments(conn, list(desired)))
        if not waiting:
            submitted = len(records.fold(ctx.audit.events()).batches)
            seen = engine.observe(conn, desired, submitted=submitted)
            waiting = sorted(m.topic_partition for m in seen.resumed)
            batch = None if waiting else engine.next_batch(seen, max_moves_per_broker=p.max_moves_per_broker,
                                                           max_moves_total=p.max_moves_total, submitted=submitted)
            if batch is not None:
                ctx.fence(f"submit batch {batch.index}/{batch.of}")
                engine.submit(conn, batch)
    if waiting:
        ctx.audit.append("note", text=f"{len(waiting)} move(s) already in flight: waiting, not resubmitting")
        return BatchStep(wait_for=tuple(waiting), remaining_batches=None)
    if batch is None:
        return BatchStep()
    keys = tuple((str(t), int(p)) for t, p in batch.keys)
    ctx.audit.append("batch", **records.BatchSubmitted(batch.index, len(keys), batch.bytes, keys,
                                                       batch.of - batch.index).to_dict())
    return BatchStep(wait_for=keys, submitted=keys, remaining_batches=batch.of - batch.index)


def wait_spec(plan_data: Mapping[str, Any], keys: Iterable[Sequence[Any]], before: Mapping[str, Any]) -> WaitSpec:
    """What a progress trigger needs to follow the moves of ``keys``: their targets in the plan and the
    snapshot ``before``, cut to those partitions, their topics' storage as the plan read it (a tiered
    partition's copy is the leader's local log)."""
    wanted = {(str(k[0]), int(k[1])) for k in keys}
    planned = PlannedMoves.from_dict(plan_data)
    return WaitSpec.cut({k: r for k, r in planned.desired.items() if k in wanted}, Cluster.from_dict(before),
                        planned.storage)


def progress_of(conn_config: Mapping[str, str], spec: WaitSpec, started_at: float) -> Polled:
    """One progress poll of the moves of ``spec`` (the polling trigger's, and the demo's)."""
    moves = engine.moves_for(spec.before, spec.targets)
    with connection.connect(conn_config, timeout_s=10.0) as conn:
        prog = engine.progress(conn, moves, elapsed_s=max(time.time() - started_at, 0.0))
        in_flight = reassignments.list_partition_reassignments(conn, list(spec.targets)) if not prog.done else {}
    return Polled(prog, tuple(f"{t}-{p}" for t, p in sorted(in_flight)))


def verify_moves(ctx: OperationContext, plan_data: Mapping[str, Any], before: Mapping[str, Any]
                 ) -> verify.VerificationResult:
    """Check the cluster against the plan (replicas, ISR, data kept); the result, recorded; raises
    :class:`engine.ReassignmentError` naming what failed."""
    with ctx.connect() as conn:
        result = verify.verify_live(conn, desired_of(plan_data), Cluster.from_dict(before))
    ctx.audit.append("note", text=str(result))
    if not result.ok:
        raise engine.ReassignmentError(str(result))
    return result


def elect_leaders(ctx: OperationContext, plan_data: Mapping[str, Any]) -> records.LeadersElected:
    """Move leadership to each moved partition's first replica. The record says how many were asked and how
    many changed leader (one already led by its first replica needs no election)."""
    keys = sorted(desired_of(plan_data))
    changed: tuple[TopicPartition, ...] = ()
    with ctx.connect() as conn:
        if keys:
            ctx.fence("elect preferred leaders")
            changed = reassignments.elect_preferred_leaders(conn, keys)
    kept = len(keys) - len(changed)
    ctx.audit.append("note", text=f"preferred leader election on {len(keys):,} moved partition(s): {len(changed):,} "
                                  "changed leader" + (f", {kept:,} already led by their first replica" if kept else ""),
                     leaders_asked=len(keys), leaders_changed=len(changed))
    return records.LeadersElected(len(keys), len(changed))


def moves_finished(ctx: OperationContext) -> records.LeadersElected | None:
    """What the moves ended with when this attempt of the run has finished them (its ``elect_leaders`` step
    succeeded: verified, throttles removed, leaders elected), else None. A resumed or retried
    ``execute_batches`` (the deferred-task race, docs/operations.md) returns this instead of doing it again."""
    record = state.summarize(ctx.audit.events())
    if not any(s["name"] == "elect_leaders" and s.get("status") == "success" for s in record["steps"]):
        return None
    since = record["started_at"] or 0
    elected = [n for n in record["notes"] if "leaders_asked" in n and n.get("ts", 0) >= since]
    last = elected[-1] if elected else {}
    return records.LeadersElected(int(last.get("leaders_asked") or 0), int(last.get("leaders_changed") or 0))


def moves_done(conn_config: Mapping[str, str], spec: WaitSpec) -> bool:
    """Whether the moves of ``spec`` are done already (one :func:`progress_of` poll): then nothing is to wait for.
    A cluster that does not answer counts as not done (the trigger's wait then polls on)."""
    try:
        return progress_of(conn_config, spec, time.time()).done
    except KafkaOpsError as err:
        log.warning("could not tell whether the moves are done before waiting: %s", err)
        return False


def post_move_gate(ctx: OperationContext, plan_data: Mapping[str, Any], before: Mapping[str, Any]
                   ) -> dict[str, Any]:
    """The cluster after the moves: snapshot it, record it, and gate it against the plan and ``before``.
    A step that changes the cluster later (:func:`stop_drained`) records it again."""
    from kafkaops.reassign import frames  # pandas: only the tasks that gate import it

    with ctx.connect() as conn:
        after = metadata.snapshot(conn, include_internal=True)
        in_flight = reassignments.list_partition_reassignments(conn)
    ctx.audit.append("snapshot", stage="after", cluster=after.to_dict())
    return lifecycle.gate(ctx, "post_move", frames.post_move_frame(Cluster.from_dict(before), after, desired_of(plan_data),
                                                        in_flight=in_flight))


def record_after(ctx: OperationContext, why: str) -> None:
    """Snapshot the cluster again as the record's "after", since ``why`` changed it after the post-move gate's
    snapshot. A cluster that cannot be read leaves that earlier snapshot in place, and the record says so."""
    try:
        with ctx.connect() as conn:
            after = metadata.snapshot(conn, include_internal=True)
    except KafkaOpsError as err:
        ctx.audit.append("note", text=f"the cluster after {why} could not be read ({err}); \"cluster after\" "
                                      "shows it as the post-move gate saw it, before that")
        log.warning("cluster after %s not recorded: %s", why, err)
        return
    ctx.audit.append("snapshot", stage="after", cluster=after.to_dict())


def stop_drained(ctx: OperationContext, ssh: provision.SshLogin | None = None) -> records.BrokersStopped:
    """After a drain, stop the drained brokers through the role, then record the cluster after that:
    the last step that changes it. ``ssh``: the login of the run's SSH connection, for an Ansible
    inventory's hosts."""
    p = ctx.params
    if not p.stops_brokers:
        return records.BrokersStopped()
    path = p.inventory_at() if p.inventory else Path()
    if path.suffix == ".json":
        spec = provision.ClusterSpec.load(path)
        hosts = [spec.node(b).hostname for b in p.drain_brokers]
        ctx.fence("stop the drained brokers")
        provision.cluster_down(spec, limit=hosts)
    elif p.inventory:
        ctx.fence("stop the drained brokers")
        provision.run_playbook("cluster_down.yml", path, limit=",".join(f"kafka-{b}" for b in p.drain_brokers),
                               ssh=ssh)
    else:
        raise ConfigError("stop_drained needs the inventory param to reach the drained brokers")
    stopped = ", ".join(map(str, p.drain_brokers))
    ctx.audit.append("note", text=f"drained broker(s) {stopped} stopped")
    record_after(ctx, f"stopping broker(s) {stopped}")
    return records.BrokersStopped(tuple(p.drain_brokers))


def login_hosts(p: OperationParams) -> tuple[str, ...]:
    """The hosts of an Ansible inventory a run logs in to at its end (a drain that stops its brokers
    there), whose login ``begin`` checks before anything changes (:func:`check_login`); empty for any
    other run. A scale-out logs in first thing in its provision step, before it changes anything."""
    if not p.stops_brokers or p.dry_run or not p.inventory or p.inventory_at().suffix == ".json":
        return ()
    return tuple(f"kafka-{b}" for b in p.drain_brokers)


def check_login(p: OperationParams, ssh: provision.SshLogin | None) -> None:
    """Log in to the :func:`login_hosts` of the run now, not only after the replicas moved:
    :class:`kafkaops.errors.HostUnreachable` naming the host, the task and that nothing moved."""
    hosts = login_hosts(p)
    if not hosts:
        return
    try:
        provision.run_playbook("hosts_login.yml", p.inventory_at(), limit=",".join(hosts), ssh=ssh)
    except ProvisionError as err:
        ids = ", ".join(map(str, p.drain_brokers))
        raise type(err)(f"the drain stops broker(s) {ids} on {','.join(hosts)} through {p.inventory} at its end, "
                        f"and their login failed at its start: {err}; nothing was changed (no replica moved)") from err
