"""The approver's role under Airflow's FAB auth manager (``apache-airflow-providers-fab``): a user with it reads
DAGs, runs, task instances, task logs and the kafkaops operation records, and answers approvals, but triggers no
DAG run, changes no run or task state, and reads no connection, variable or pool (docs/operations.md, "Roles").

:func:`apply` creates the role, or brings an existing one to exactly :func:`grants` (adding what is missing,
removing what is not listed), through FAB's own security manager: the calls ``airflow roles create``,
``airflow roles add-perms`` and ``airflow roles del-perms`` make, in one process. ``kafkaops approver-role``
runs it.

Why each permission, from the FAB auth manager's checks (``FabAuthManager.is_authorized_dag``): a read of a
DAG's runs, tasks, logs or approvals needs ``can_read`` on the entity and on the DAG; any other method on them
needs the entity's action *and* ``can_edit`` on the DAG. So answering an approval (``PUT`` on
``DagAccessEntity.HITL_DETAIL``) needs ``can_edit`` on ``HITL Detail`` and ``can_edit`` on the DAG, which also
lets the user pause and unpause that DAG: the role gets it on the DAGs that ask approvals only
(``DAG:<dag_id>``), not on ``DAGs``. Triggering needs ``can_create`` on ``DAG Runs``, which it does not get.
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from kafkaops.errors import ConfigError, KafkaOpsError, SetupError

ROLE = "kafkaops-approver"
#: The kafkaops DAGs that ask approvals (dags/): the capacity review asks none (its proposal is a
#: kafka_scale_out run, which does).
APPROVAL_DAGS = ("kafka_scale_out", "kafka_reassign", "kafka_partition_increase")
FAB_AUTH_MANAGER = "airflow.providers.fab.auth_manager.fab_auth_manager.FabAuthManager"
#: FAB's own roles, which its start-up sync rewrites: not to be made into an approver.
BUILT_IN_ROLES = ("Admin", "Op", "User", "Viewer", "Public")
DAG_PREFIX = "DAG:"  # FAB's resource of one DAG (airflow.providers.fab.www.security.permissions)


class RoleSetupError(KafkaOpsError):
    """The role cannot be set up in this Airflow: the message says what is missing and what to run."""


@dataclass(frozen=True)
class Grant:
    """One FAB permission: ``action`` on ``resource``, and why the approver needs it."""

    action: str
    resource: str
    why: str

    @property
    def pair(self) -> tuple[str, str]:
        return self.action, self.resource


#: What every approver role holds, whatever DAGs it answers (:func:`grants` adds ``can_edit`` on those).
GRANTS: tuple[Grant, ...] = (
    Grant("can_read", "DAGs", "list and read DAGs; every read of a DAG's runs, tasks, logs and approvals needs it"),
    Grant("can_read", "DAG Runs", "read runs, and the kafkaops Operation record pages and artifacts (/kafkaops/...)"),
    Grant("can_read", "Task Instances", "read task instances (with DAG Runs)"),
    Grant("can_read", "Task Logs", "read task logs"),
    Grant("can_read", "HITL Detail", "read approvals: Required Actions, the run's approval task"),
    Grant("can_edit", "HITL Detail", "answer approvals (with can_edit on the DAG)"),
    Grant("can_read", "DAG Dependencies", "the DAG's graph in the UI"),
    Grant("can_read", "DAG Versions", "the DAG's versions in the UI"),
    Grant("can_read", "DAG Code", "the DAG's code in the UI"),
    Grant("can_read", "DAG Warnings", "the DAG's warnings in the UI"),
    Grant("can_read", "Plugins", "the UI finds the Operation record tab and the kafkaops records link in "
                                 "/api/v2/plugins"),
    Grant("can_read", "Website", "FAB gives it to every role it did not make"),
    Grant("can_read", "My Profile", "their own profile"),
    Grant("can_edit", "My Profile", "their own profile"),
    Grant("can_read", "My Password", "their own password"),
    Grant("can_edit", "My Password", "change their own password"),
    Grant("menu_access", "DAGs", "the Dags menu"),
    Grant("menu_access", "HITL Detail", "the Required Actions menu"),
)


def dag_grant(dag_id: str) -> Grant:
    return Grant("can_edit", f"{DAG_PREFIX}{dag_id}",
                 "FAB asks for it with every answer to an approval of this DAG; also pauses and unpauses it")


def grants(dag_ids: Sequence[str] = APPROVAL_DAGS) -> tuple[Grant, ...]:
    """The role's permissions: :data:`GRANTS` and ``can_edit`` on each DAG of ``dag_ids``."""
    return (*GRANTS, *(dag_grant(dag_id) for dag_id in dict.fromkeys(dag_ids)))


@dataclass
class Outcome:
    """What :func:`apply` found and did: ``missing`` and ``extra`` as they were before (changed unless
    ``check``), the DAGs FAB has no resource for yet, and whether the role had to be created."""

    role: str
    wanted: tuple[Grant, ...]
    created: bool = False
    missing: list[Grant] = field(default_factory=list)
    extra: list[tuple[str, str]] = field(default_factory=list)
    unparsed_dags: list[str] = field(default_factory=list)

    @property
    def exact(self) -> bool:
        return not (self.created or self.missing or self.extra)


def check_role_name(role: str) -> str:
    if role in BUILT_IN_ROLES:
        raise ConfigError(f"role {role} is one of FAB's own roles ({', '.join(BUILT_IN_ROLES)}), which FAB "
                          f"rewrites when the api-server starts; name another, e.g. --role {ROLE}")
    if not role.strip() or len(role) > 64:
        raise ConfigError(f"role name {role!r} must have 1 to 64 characters; e.g. --role {ROLE}")
    return role


def apply(role: str = ROLE, dag_ids: Sequence[str] = APPROVAL_DAGS, *, check: bool = False) -> Outcome:
    """Create ``role`` or bring it to exactly :func:`grants` of ``dag_ids`` (``check``: only compare). Raises
    :class:`ConfigError` when Airflow does not use the FAB auth manager, :class:`SetupError` when the provider
    is missing, :class:`RoleSetupError` when FAB has not made its resources yet; nothing is changed then."""
    check_role_name(role)
    if not dag_ids or any(not d.strip() or d != d.strip() for d in dag_ids):
        raise ConfigError(f"role {role} needs the ids of the DAGs whose approvals it answers, none blank "
                          f"(got {list(dag_ids)}); e.g. --dag kafka_scale_out")
    wanted = grants(dag_ids)
    outcome = Outcome(role, wanted)
    with _security_manager() as sm:
        missing_resources = sorted({g.resource for g in GRANTS if sm.get_resource(g.resource) is None})
        if missing_resources:
            raise RoleSetupError(
                f"FAB has no resource {', '.join(repr(r) for r in missing_resources)} in Airflow's metadata database "
                "(FAB makes them wherever its app starts with [fab] update_fab_perms on, this command included): run "
                f"'airflow sync-perm', then this command again; role {role} was not changed")
        outcome.unparsed_dags = [d for d in dict.fromkeys(dag_ids) if sm.get_resource(f"{DAG_PREFIX}{d}") is None]
        existing = sm.find_role(role)
        outcome.created = existing is None
        held = {(p.action.name, p.resource.name): p for p in (existing.permissions if existing else [])
                if p.action is not None and p.resource is not None}
        wanted_pairs = {g.pair for g in wanted}
        outcome.missing = [g for g in wanted if g.pair not in held]
        outcome.extra = sorted(pair for pair in held if pair not in wanted_pairs)
        if check:
            return outcome
        target = existing if existing is not None else sm.add_role(role)
        for grant in outcome.missing:
            # a DAG not parsed yet gets its resource now, as FAB's DAG-level access_control sync makes it
            permission = sm.create_permission(grant.action, grant.resource)
            if permission is None:
                raise RoleSetupError(f"FAB could not make the permission {grant.action} on {grant.resource} for "
                                     f"role {role}; see Airflow's log, then run this command again")
            sm.add_permission_to_role(target, permission)
        for pair in outcome.extra:
            sm.remove_permission_from_role(target, held[pair])
    return outcome


@contextmanager
def _security_manager() -> Iterator[Any]:
    """FAB's security manager on Airflow's metadata database, as ``airflow roles ...`` gets it."""
    from airflow.configuration import conf

    manager = conf.get("core", "auth_manager", fallback="")
    if manager.rsplit(".", 1)[-1] != FAB_AUTH_MANAGER.rsplit(".", 1)[-1]:
        raise ConfigError(f"Airflow's auth manager is {manager or 'not set'} ([core] auth_manager), whose roles are "
                          "fixed; the approver role needs the FAB auth manager: set AIRFLOW__CORE__AUTH_MANAGER="
                          f"{FAB_AUTH_MANAGER} on every component, run 'airflow db migrate', start the api-server "
                          "once, then run this command again (docs/operations.md)")
    try:
        from airflow.providers.fab.auth_manager.cli_commands.utils import get_application_builder
    except ImportError as err:
        raise SetupError(f"the FAB auth manager is configured but its provider does not import ({err}): install "
                         "apache-airflow-providers-fab==3.10.2 (a kafkaops dependency) into Airflow's environment") from err
    from airflow.providers_manager import ProvidersManager

    # the providers' settings ([fab] ...), as the decorator of FAB's own commands loads them
    ProvidersManager().initialize_providers_configuration()
    with get_application_builder() as appbuilder:
        yield appbuilder.sm
