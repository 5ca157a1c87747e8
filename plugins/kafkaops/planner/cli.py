"""``kafkaops plan``: plan a reassignment offline from Kafka's JSON and write PLAN.json.

    kafkaops plan --current CURRENT.json --brokers 1,2,3,4,5 [--racks 1:a,2:b,...]
                  [--sizes SIZES.json] [--drain 3] [--exclude 6] --output PLAN.json

Brokers in ``--brokers`` that hold no replica in CURRENT are new: that is a scale-out. With
``--drain`` it is a drain; otherwise a rebalance. Wire it up with :func:`add_arguments` and
:func:`run`; ``run`` returns the exit code and prints one line on stderr for bad input.
"""
from __future__ import annotations

import argparse
import sys
from typing import TextIO

from kafkaops.errors import KafkaOpsError
from kafkaops.model import Cluster
from kafkaops.planner.errors import PlanInfeasible
from kafkaops.planner.goals import Goals
from kafkaops.planner.io import load_cluster, parse_brokers, parse_racks, write_plan
from kafkaops.planner.plan import ReassignmentPlan
from kafkaops.planner.planning import plan_drain, plan_rebalance, plan_scale_out

EXIT_OK = 0
EXIT_BAD_INPUT = 2
EXIT_INFEASIBLE = 3


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``kafkaops plan``."""
    parser.add_argument("--current", required=True, metavar="CURRENT.json",
                        help='current assignment, {"version":1,"partitions":[{"topic","partition","replicas"}]}')
    parser.add_argument("--brokers", required=True, metavar="IDS",
                        help="every broker id, comma separated; ids holding no replica are new brokers")
    parser.add_argument("--racks", metavar="ID:RACK,...", help="rack of each broker, e.g. 1:a,2:b,3:c")
    parser.add_argument("--sizes", metavar="SIZES.json", help='{"partitions":[{"topic","partition","size"}]}')
    parser.add_argument("--drain", metavar="IDS", help="brokers to empty, comma separated")
    parser.add_argument("--exclude", metavar="IDS", help="brokers that receive no replica, comma separated")
    parser.add_argument("--output", required=True, metavar="PLAN.json",
                        help="where to write the reassignment (changed partitions, Kafka format)")


def source_cluster(args: argparse.Namespace) -> Cluster:
    """The cluster to plan on. Offline: CURRENT.json over --brokers. (A live variant reading
    --bootstrap-server through kafkaops.admin.snapshot plugs in here.)"""
    brokers = parse_brokers(args.brokers)
    racks = parse_racks(args.racks) if args.racks else None
    return load_cluster(args.current, brokers, racks, args.sizes)


def make_plan(cluster: Cluster, args: argparse.Namespace, goals: Goals = Goals()) -> ReassignmentPlan:
    """Scale-out, drain or rebalance, as the options say."""
    drain = parse_brokers(args.drain, "--drain") if args.drain else []
    exclude = parse_brokers(args.exclude, "--exclude") if args.exclude else []
    if drain:
        return plan_drain(cluster, drain, goals, exclude=exclude)
    held = cluster.replicas_per_broker()
    new = [b for b in cluster.broker_ids if not held.get(b) and b not in exclude]
    if new:
        return plan_scale_out(cluster, new, goals, exclude=exclude)
    return plan_rebalance(cluster, goals, exclude=exclude)


def run(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Plan, write ``--output``, print the diff and the statistics; return the exit code."""
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        plan = make_plan(source_cluster(args), args)
        write_plan(plan, args.output)
    except PlanInfeasible as error:
        print(f"kafkaops plan: infeasible: {error}", file=err)
        return EXIT_INFEASIBLE
    except KafkaOpsError as error:
        print(f"kafkaops plan: error: {error}", file=err)
        return EXIT_BAD_INPUT
    for line in plan.diff():
        print(line, file=out)
    print(file=out)
    for line in plan.table():
        print(line, file=out)
    print(plan.summary(), file=out)
    print(f"wrote {len(plan.moves)} partitions to {args.output}", file=out)
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kafkaops plan", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
