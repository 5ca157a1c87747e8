"""``kafkaops cluster up|down``: the local three-node KRaft cluster (playbooks/inventory/local.yml)
through the kafka_broker Ansible role. ``up`` also writes the cluster's spec
(kafkaops.platform.provision.LOCAL_SPEC), the DAGs' inventory when their ``inventory`` param is
empty; ``down`` also stops the brokers a scale-out added to it."""
from __future__ import annotations

import argparse

from kafkaops.cli.options import LOCAL_BOOTSTRAP


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["up", "down"], help="up: start (or converge) it; down: stop it")
    parser.add_argument("--purge", action="store_true", help="with down: also remove the nodes' data, config and logs")


def run(args: argparse.Namespace) -> int:
    from kafkaops.platform import provision

    if args.action == "up":
        result = provision.cluster_up()
        print(f"cluster up: {LOCAL_BOOTSTRAP} (changed tasks per node: {dict(result.changed) or 'none'}); its spec, "
              f"the DAGs' default inventory: {provision.LOCAL_SPEC}")
    else:
        result = provision.cluster_down(purge=args.purge)
        print(f"cluster down{' and purged' if args.purge else ''} (changed tasks per node: "
              f"{dict(result.changed) or 'none'})")
    return 0
