"""``kafkaops plan``: plan a reassignment from Kafka's JSON or a live cluster and write PLAN.json.

    kafkaops plan --current CURRENT.json --brokers 1,2,3,4,5 [--racks 1:a,2:b,...]
                  [--sizes SIZES.json] [--drain 3 [--rebalance-after]] [--exclude 6] [--topic T ...]
                  [--no-leaders]
                  --output PLAN.json
    kafkaops plan --bootstrap-server HOST:PORT [--brokers 1,2,3,4] [--topic T ...] ... --output PLAN.json

Brokers in ``--brokers`` that hold no replica are new: that is a scale-out. Live, the moved topics'
storage configs size the moves: a tiered topic's new replica copies the leader's local log only. With ``--drain`` it
is a drain, which moves only what the drained brokers hold (``--rebalance-after`` then evens out the
brokers that stay, counted apart); otherwise a rebalance. Live, brokers, racks and sizes come from ``metadata.snapshot``;
``--brokers`` may then add ids not registered yet (new brokers) and ``--topic`` restricts the plan
to those topics, balanced among themselves. Wire it up with :func:`add_arguments` and :func:`run`;
``run`` returns the exit code (:mod:`kafkaops.cli.exits`: 2 bad input, 3 infeasible) and prints one
line on stderr when it fails.
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TextIO

from kafkaops.cli.exits import EXIT_BAD_INPUT, EXIT_INFEASIBLE, EXIT_OK, fail  # noqa: F401 (the codes, for callers)
from kafkaops.cli.options import add_timeout, kafka_config
from kafkaops.errors import KafkaOpsError
from kafkaops.model import Broker, Cluster
from kafkaops.reassign.planner.errors import PlanInputError
from kafkaops.reassign.planner.goals import Goals
from kafkaops.cli.planfile import load_cluster, parse_brokers, parse_racks, read_sizes, write_plan
from kafkaops.reassign.planner.plan import ReassignmentPlan
from kafkaops.reassign.planner.planning import plan_drain, plan_rebalance, plan_scale_out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``kafkaops plan``."""
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--current", metavar="CURRENT.json",
                        help='current assignment, {"version":1,"partitions":[{"topic","partition","replicas"}]}')
    source.add_argument("--bootstrap-server", metavar="HOST:PORT",
                        help="read the current assignment, brokers, racks and sizes from this live cluster")
    add_timeout(parser)
    parser.add_argument("--brokers", metavar="IDS",
                        help="every broker id, comma separated; ids holding no replica are new brokers "
                             "(required with --current; live, default: the registered brokers)")
    parser.add_argument("--topic", action="append", metavar="TOPIC",
                        help="plan only this topic (repeatable); the topics are balanced among themselves")
    parser.add_argument("--racks", metavar="ID:RACK,...", help="rack of each broker, e.g. 1:a,2:b,3:c")
    parser.add_argument("--sizes", metavar="SIZES.json", help='{"partitions":[{"topic","partition","size"}]}')
    parser.add_argument("--drain", metavar="IDS", help="brokers to empty, comma separated: only what they hold "
                                                      "moves")
    parser.add_argument("--rebalance-after", action="store_true",
                        help="with --drain: then even out the brokers that stay (counted apart)")
    parser.add_argument("--exclude", metavar="IDS", help="brokers that receive no replica, comma separated")
    parser.add_argument("--no-leaders", dest="leaders", action="store_false",
                        help="leave preferred leaders as the moves place them: no leader-only changes")
    parser.add_argument("--output", required=True, metavar="PLAN.json",
                        help="where to write the reassignment (changed partitions, Kafka format)")


def restrict(cluster: Cluster, topics: Sequence[str] | None, source: str) -> Cluster:
    """``cluster`` with only ``topics`` (all when None); unknown topics are an error."""
    if not topics:
        return cluster
    unknown = sorted(set(topics) - set(cluster.topics))
    if unknown:
        raise PlanInputError(f"{source}: --topic {', '.join(unknown)} not found; it has {len(cluster.topics)} "
                             f"topics: {', '.join(cluster.topics[:20]) or '(none)'}")
    wanted = set(topics)
    return replace(cluster, partitions=tuple(p for p in cluster.partitions if p.topic in wanted), _index=None)


def live_cluster(snap: Cluster, brokers: Sequence[int] | None = None, racks: Mapping[int, str] | None = None,
                 sizes: Mapping[tuple[str, int], int] | None = None, source: str = "live cluster") -> Cluster:
    """The cluster to plan on from a live snapshot: ``brokers`` (default: the snapshot's) with ids
    it lacks added as new brokers, ``racks`` and ``sizes`` overriding what the snapshot says."""
    racks = dict(racks or {})
    listed = list(brokers) if brokers is not None else list(snap.broker_ids)
    held = snap.replicas_per_broker()
    unlisted = sorted(b for b in snap.broker_ids if held.get(b) and b not in listed)
    if unlisted:
        raise PlanInputError(f"{source}: broker(s) {unlisted} hold replicas but --brokers {listed} does not list "
                             f"them; add them to --brokers (and --drain them to empty them)")
    stray = sorted(set(racks) - set(listed))
    if stray:
        raise PlanInputError(f"--racks names broker(s) {stray}, which are not among the brokers {listed}; add them "
                             "to --brokers or drop them from --racks")
    known = {b.id: b for b in snap.brokers}
    members = tuple(replace(known[b], rack=racks.get(b, known[b].rack)) if b in known else Broker(b, rack=racks.get(b))
                    for b in listed)
    partitions = snap.partitions if sizes is None else tuple(
        replace(p, size_bytes=sizes.get(p.topic_partition, p.size_bytes)) for p in snap.partitions)
    return replace(snap, brokers=members, partitions=partitions, groups=(), _index=None)


def source_cluster(args: argparse.Namespace) -> Cluster:
    """The cluster to plan on: CURRENT.json over --brokers, or a snapshot of --bootstrap-server;
    restricted to --topic when given."""
    racks = parse_racks(args.racks) if args.racks else None
    topics = getattr(args, "topic", None)
    if getattr(args, "bootstrap_server", None):
        from kafkaops.platform.kafka import connection, metadata

        brokers = parse_brokers(args.brokers) if args.brokers else None
        with connection.connect(kafka_config(args), timeout_s=args.timeout) as conn:
            snap = metadata.snapshot(conn, topics=topics, offsets=False, groups=False)
        sizes = read_sizes(args.sizes) if args.sizes else None
        return live_cluster(snap, brokers, racks, sizes, source=args.bootstrap_server)
    if not args.brokers:
        raise PlanInputError("--current needs --brokers, every broker id comma separated, e.g. --brokers 1,2,3,4")
    cluster = load_cluster(args.current, parse_brokers(args.brokers), racks, args.sizes)
    return restrict(cluster, topics, args.current)


def make_plan(cluster: Cluster, args: argparse.Namespace, goals: Goals = Goals()) -> ReassignmentPlan:
    """Scale-out, drain or rebalance, as the options say."""
    drain = parse_brokers(args.drain, "--drain") if args.drain else []
    exclude = parse_brokers(args.exclude, "--exclude") if args.exclude else []
    if drain:
        return plan_drain(cluster, drain, goals, exclude=exclude, rebalance_after=args.rebalance_after)
    held = cluster.replicas_per_broker()
    new = [b for b in cluster.broker_ids if not held.get(b) and b not in exclude]
    if new:
        return plan_scale_out(cluster, new, goals, exclude=exclude)
    return plan_rebalance(cluster, goals, exclude=exclude)


def size_moves(plan: ReassignmentPlan, args: argparse.Namespace) -> ReassignmentPlan:
    """Live (``--bootstrap-server``): ``plan`` with its moves sized by what their new replicas copy, as the
    plan step sizes them (:func:`kafkaops.reassign.steps.size_moves`: a tiered topic's copy the leader's
    local log); from JSON, as it is."""
    if not getattr(args, "bootstrap_server", None):
        return plan
    from kafkaops.platform.kafka import connection
    from kafkaops.reassign import steps

    return steps.size_moves(plan, lambda: connection.connect(kafka_config(args), timeout_s=args.timeout))


def run(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Plan, write ``--output``, print the diff and the statistics; return the exit code."""
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        cluster = source_cluster(args)
        plan = size_moves(make_plan(cluster, args, Goals(leaders=args.leaders)), args)
        if args.bootstrap_server:  # live, as the DAGs' plan step: refused when a receiving broker lacks disk room
            from kafkaops.reassign.steps import room_checked

            plan = room_checked(plan, cluster.brokers)
        write_plan(plan, args.output)
    except KafkaOpsError as error:
        return fail("plan", error, err)
    for line in plan.diff():
        print(line, file=out)
    print(file=out)
    for line in plan.table():
        print(line, file=out)
    print(plan.summary(), file=out)
    print(f"wrote {len(plan.moves)} partitions to {args.output}", file=out)
    return EXIT_OK
