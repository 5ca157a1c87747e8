"""``kafkaops approver-role``: the FAB auth manager's role for approvers who answer approvals and read runs,
logs and records, but trigger no DAG and read no connection (:mod:`kafkaops.airflow.roles`). Run where Airflow
runs (its settings, its metadata database), after ``airflow db migrate`` with the FAB auth manager configured;
running it again changes nothing, or brings a changed role back. No password is asked or printed."""
from __future__ import annotations

import argparse
import logging

from kafkaops.airflow import roles
from kafkaops.cli import exits
from kafkaops.errors import ConfigError
from kafkaops.platform import render

COLUMNS = ("action", "resource", "why")
#: ``kafkaops --help``'s line for the command, and the command's own help.
SUMMARY = "create the FAB auth manager's role of approvers who cannot trigger DAGs"
HELP = ("Create the role kafkaops-approver (--role to name it otherwise), or bring an existing one to exactly\n"
        "its permissions, in Airflow's FAB auth manager: it reads DAGs, runs, task instances, task logs and\n"
        "the kafkaops records, and answers the approvals of the DAGs it names (--dag), but cannot trigger a DAG,\n"
        "change a run or task state, or read connections, variables or pools. Run it where Airflow runs, after\n"
        "'airflow db migrate' with the FAB auth manager configured (docs/operations.md, Roles).\n\n"
        "  python -m kafkaops approver-role\n"
        "  python -m kafkaops approver-role --check")


def _role(text: str) -> str:
    try:
        return roles.check_role_name(text)
    except ConfigError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--role", type=_role, default=roles.ROLE, metavar="NAME",
                        help=f"the role's name (default {roles.ROLE})")
    parser.add_argument("--dag", action="append", metavar="DAG_ID", dest="dags",
                        help="a DAG whose approvals the role answers: it gets can_edit on that DAG, which FAB asks "
                             "for with every answer (and which pauses and unpauses it); repeat for more. Default: "
                             f"{', '.join(roles.APPROVAL_DAGS)}")
    parser.add_argument("--check", action="store_true",
                        help="change nothing: exit 0 when the role has exactly these permissions, else 1 with "
                             "what is missing or extra")


def run(args: argparse.Namespace) -> int:
    from airflow.configuration import conf  # noqa: F401  importing Airflow sets its own log level (INFO)

    if not getattr(args, "verbose", False):  # this command's lines say what FAB's INFO lines would
        for name in ("", "airflow.providers.fab"):
            logging.getLogger(name).setLevel(logging.WARNING)
    dag_ids = tuple(args.dags or roles.APPROVAL_DAGS)
    outcome = roles.apply(args.role, dag_ids, check=args.check)
    role = outcome.role
    for dag_id in outcome.unparsed_dags:
        print(f"note: Airflow has not parsed a DAG {dag_id} yet; the role's can_edit on it applies once it does")
    if args.check:
        if outcome.exact:
            print(f"role {role} has exactly the {len(outcome.wanted)} approver permissions")
            return exits.EXIT_OK
        if outcome.created:
            print(f"role {role} does not exist; create it: kafkaops approver-role --role {role}")
            return exits.EXIT_FAILED
        for grant in outcome.missing:
            print(f"missing: {grant.action} on {grant.resource}")
        for action, resource in outcome.extra:
            print(f"extra: {action} on {resource}")
        print(f"role {role} differs from the approver's permissions; bring it back: kafkaops approver-role --role "
              f"{role}{''.join(f' --dag {d}' for d in args.dags or ())}")
        return exits.EXIT_FAILED
    print(f"created role {role}" if outcome.created else f"role {role} exists")
    for grant in outcome.missing if not outcome.created else ():
        print(f"added {grant.action} on {grant.resource}")
    for action, resource in outcome.extra:
        print(f"removed {action} on {resource} (not an approver's)")
    print(f"\nrole {role} has exactly these {len(outcome.wanted)} permissions:")
    print(render.table(COLUMNS, [(g.action, g.resource, g.why) for g in outcome.wanted]))
    print(f"\ngive it to a user: airflow users add-role -u USERNAME -r {role}, or airflow users create --role {role} "
          "--username USERNAME --firstname F --lastname L --email E (it asks for the password)")
    return exits.EXIT_OK
