"""``kafkaops`` (or ``python -m kafkaops``): plan, run, verify and cancel partition reassignments of a live Kafka
cluster; read the operation records and cluster locks in the kafkaops store; set up the approvers' role in
Airflow; and run the local cluster, test data and the demo.

Each command is a module of :mod:`kafkaops.cli` with ``add_arguments(parser)`` and
``run(args) -> exit code``; :func:`build_parser` gives each its subparser.

exit codes:
    0    ok: done, verified, or a dry run that changed nothing
    1    failed: the command ran and did not get there (verification found failures, a move or a
         DAG run failed, Kafka did not answer, an Ansible run failed); the message says what is left
    2    bad input: options or files that cannot work, argparse's usage errors included; nothing changed
    3    infeasible: plan found no assignment that keeps the rules (racks, replication factor)
    130  interrupted (Ctrl-C); execute first reverts the moves in flight and removes its throttles

The codes are the constants of :mod:`kafkaops.cli.exits`; an error is one line on stderr,
``kafkaops <command>: error|failed|infeasible|interrupted: <message>``.
"""
from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence
from typing import Any

from kafkaops.cli import approver_role, check, cluster, datagen, demo, exits, lock, plan, reassign, records, snapshot, store
from kafkaops.errors import KafkaOpsError

DESCRIPTION = """Scale Apache Kafka without losing data or key order: plan a partition reassignment, run it
throttled and batched, verify it, or cancel it; read the operation records and cluster locks in the
kafkaops store; set up the approvers' role in Airflow; and run the local cluster, test data and the demo."""
EXIT_CODES = "exit codes:\n" + __doc__.split("exit codes:\n", 1)[1].split("\n\n", 1)[0]
EPILOG = f"""{EXIT_CODES}

a reassignment, step by step:
  python -m kafkaops snapshot --bootstrap-server HOST:PORT --json > BEFORE.json
  python -m kafkaops plan --bootstrap-server HOST:PORT --brokers 1,2,3,4 --output PLAN.json
  python -m kafkaops execute --bootstrap-server HOST:PORT --plan PLAN.json --throttle-mb 10   (dry run)
  python -m kafkaops execute --bootstrap-server HOST:PORT --plan PLAN.json --throttle-mb 10 --execute
  python -m kafkaops verify --bootstrap-server HOST:PORT --plan PLAN.json --before BEFORE.json

'python -m kafkaops COMMAND --help' shows a command's options."""

Run = Callable[[argparse.Namespace], int]


def _command(sub: Any, name: str, add_arguments: Callable[[argparse.ArgumentParser], None],
             run: Run, summary: str, description: str) -> None:
    parser = sub.add_parser(name, help=summary, description=description,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    parser.set_defaults(func=run)


def build_parser(prog: str = "python -m kafkaops") -> argparse.ArgumentParser:
    """The parser of every command; ``prog`` is how the user called it (``kafkaops``, the console script, or
    ``python -m kafkaops``)."""
    parser = argparse.ArgumentParser(prog=prog, description=DESCRIPTION, epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-v", "--verbose", action="store_true", help="log what kafkaops does (debug) on stderr")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", title="commands")
    _command(sub, "plan", plan.add_arguments, plan.run,
             "plan a reassignment from Kafka's JSON or a live cluster; writes PLAN.json",
             "Plan a scale-out (brokers in --brokers that hold nothing are new), a drain (--drain) or a "
             "rebalance,\nbalanced and rack-aware, and write it as Kafka's reassignment JSON. Prints the moves "
             "and the load\nper broker before and after. Changes nothing on the cluster.\n\n"
             "  python -m kafkaops plan --current CURRENT.json --brokers 1,2,3,4 --output PLAN.json\n"
             "  python -m kafkaops plan --bootstrap-server HOST:PORT --drain 3 --output PLAN.json")
    _command(sub, "execute", reassign.add_execute_arguments, reassign.run_execute,
             "run a PLAN.json, throttled and batched (a dry run unless --execute)",
             "Run PLAN.json on the cluster in batches under a replication throttle, printing progress. Without\n"
             "--execute it prints the batches and changes nothing. Ctrl-C reverts the moves in flight and "
             "removes\nthe throttles; moves already finished stay, and running it again resumes.")
    _command(sub, "verify", reassign.add_verify_arguments, reassign.run_verify,
             "check that a PLAN.json is done and nothing was lost",
             "Check that every partition of PLAN.json has the planned replicas, a full ISR and no move in "
             "flight,\nthat nothing is under-replicated and (with --before) that no end offset went back. "
             "Exit 0 when all\nholds, 1 with the failures listed.")
    _command(sub, "cancel", reassign.add_cancel_arguments, reassign.run_cancel,
             "revert a PLAN.json's moves in flight and clear its throttles",
             "Revert the moves of PLAN.json that are still in flight (finished moves stay) and clear the\n"
             "replication throttles on its brokers and topics that no other reassignment uses.")
    _command(sub, "snapshot", snapshot.add_arguments, snapshot.run,
             "print a live cluster as tables (or JSON)",
             "Print brokers with their load, partitions with leaders, ISR and sizes, the hottest partitions and\n"
             "the consumer groups' lag; or, with --json, the snapshot that verify --before reads.")
    _command(sub, "records", records.add_arguments, records.run,
             "list the operation runs, or show one run's record (the kafkaops store)",
             "The operation records in the kafkaops store (--store URL, else $KAFKAOPS_STORE_URL, else\n"
             "$AIRFLOW_HOME/kafkaops.db), the same the Airflow plugin shows.\n\n"
             "  python -m kafkaops records list --dag kafka_scale_out\n"
             "  python -m kafkaops records show kafka_scale_out RUN_ID [--json]\n"
             "  python -m kafkaops records verify RUN_ID   (is its audit trail whole?)")
    _command(sub, "lock", lock.add_arguments, lock.run,
             "show who holds a cluster's lock, or break a dead holder's lock",
             "The cluster locks in the kafkaops store: who holds one with which fencing token, and the lock\n"
             "history; break frees a cluster whose holder is gone for good, recorded with who and why.\n\n"
             "  python -m kafkaops lock show CLUSTER\n"
             "  python -m kafkaops lock break CLUSTER --reason 'worker lost, run marked failed'")
    _command(sub, "store", store.add_arguments, store.run,
             "show the kafkaops store (password hidden) or upgrade its schema",
             "The kafkaops store's URL (password hidden), backend and schema revision; upgrade brings the\n"
             "schema to this kafkaops' revision.\n\n"
             "  python -m kafkaops store show --store postgresql://ops@db:5432/kafkaops\n"
             "  python -m kafkaops store upgrade --store postgresql://ops@db:5432/kafkaops")
    _command(sub, "check", check.add_arguments, check.run,
             "before an Airflow component starts: its metadata database and the kafkaops store answer",
             "Check, in order, one line each, what an Airflow component needs: Airflow's metadata database "
             "answers,\nthe kafkaops store (connection kafkaops_store, else $KAFKAOPS_STORE_URL, else "
             "$AIRFLOW_HOME/kafkaops.db)\nanswers at this kafkaops' schema revision, and (--kafka CONN_ID) Kafka "
             "answers. Stops at the first\nfailure, naming what failed and what to do; no password is printed.\n\n"
             "  python -m kafkaops check && exec airflow scheduler\n"
             "  python -m kafkaops check --upgrade        (the one-shot init step, after 'airflow db migrate')")
    _command(sub, "approver-role", approver_role.add_arguments, approver_role.run, approver_role.SUMMARY,
             approver_role.HELP)
    _command(sub, "datagen", datagen.add_arguments, datagen.run,
             "write keyed JSON test records (deterministic, optionally skewed)",
             "Write keyed JSON records to a topic with acks=all, idempotence and the Java client's murmur2\n"
             "placement. The same --seed writes the same records.")
    _command(sub, "cluster", cluster.add_arguments, cluster.run,
             "bring the local 3-broker cluster up or down (Ansible)",
             "Start or stop the local three-node KRaft cluster (playbooks/inventory/local.yml, ports 19092/94/96)"
             "\nwith the kafka_broker Ansible role.")
    _command(sub, "demo", demo.add_arguments, demo.run,
             "the demo: local cluster, skewed topic, scale-out and drain DAG runs",
             "Bring the local cluster up, write a skewed 'orders' topic, run kafka_scale_out (3 -> 4 brokers) "
             "and\nkafka_reassign (drain broker 4) with Airflow's dag.test(), print both operation records, and "
             "bring\nthe cluster down (unless --keep-running). Exit 1 when a DAG run failed.")
    return parser


def main(argv: Sequence[str] | None = None, prog: str = "python -m kafkaops") -> int:
    args = build_parser(prog).parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return int(args.func(args) or 0)
    except (KafkaOpsError, KeyboardInterrupt) as error:
        return exits.fail(args.command, error)


def script() -> None:
    """The ``kafkaops`` console script ([project.scripts] in pyproject.toml)."""
    sys.exit(main(prog="kafkaops"))
