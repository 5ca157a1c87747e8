"""``python -m kafkaops``: the command line over the library.

    cluster up|down [--purge]     the local cluster, through the kafka_broker Ansible role
    snapshot                      print a live cluster as tables (or --json)
    datagen                       produce keyed JSON records (deterministic, skewed)
    demo                          local cluster up, skewed 'orders' topic, kafka_scale_out (3 -> 4 brokers)
                                  and kafka_reassign (drain broker 4) DAG runs, cluster down
    plan                          plan a reassignment from Kafka's JSON or a live cluster
    execute                       run a PLAN.json on a live cluster (dry run unless --execute)
    verify                        check a PLAN.json is done on a live cluster and nothing was lost
    cancel                        revert a PLAN.json's moves in flight and clear the throttles
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence

from kafkaops.errors import KafkaOpsError

log = logging.getLogger("kafkaops")

LOCAL_BOOTSTRAP = "127.0.0.1:19092,127.0.0.1:19094,127.0.0.1:19096"


def _add_connection(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap-server", default=LOCAL_BOOTSTRAP,
                        help="host:port[,host:port...] (default: the local cluster)")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for Kafka (default 10)")


def _datagen_spec(args: argparse.Namespace):  # noqa: ANN202
    from kafkaops.cli.datagen import DatagenSpec

    return DatagenSpec(records=args.records, keys=args.keys, skew=args.skew, zipf_s=args.zipf_s,
                       hot_share=args.hot_share, record_bytes=args.record_bytes, seed=args.seed)


def cmd_cluster(args: argparse.Namespace) -> int:
    from kafkaops.platform import provision

    if args.action == "up":
        result = provision.cluster_up()
        print(f"cluster up: {LOCAL_BOOTSTRAP} (changed tasks per node: {dict(result.changed) or 'none'})")
    else:
        result = provision.cluster_down(purge=args.purge)
        print(f"cluster down{' and purged' if args.purge else ''} (changed tasks per node: "
              f"{dict(result.changed) or 'none'})")
    return 0


def cmd_snapshot(args: argparse.Namespace) -> int:
    from kafkaops.platform import admin
    from kafkaops.platform.render import render_snapshot

    with admin.connect(args.bootstrap_server, timeout_s=args.timeout) as conn:
        cluster = admin.snapshot(conn, topics=args.topic or None)
    print(json.dumps(cluster.to_dict(), indent=2) if args.json else render_snapshot(cluster))
    return 0


def cmd_datagen(args: argparse.Namespace) -> int:
    from kafkaops.platform import admin
    from kafkaops.cli import datagen

    spec = _datagen_spec(args)
    with admin.connect(args.bootstrap_server, timeout_s=args.timeout) as conn:
        if args.partitions:
            admin.create_topic(conn, args.topic, args.partitions, args.replication_factor)
        result = datagen.produce(conn.config, args.topic, spec)
    print(f"produced {result.records} records ({result.bytes} bytes) to {result.topic} in {result.seconds:.2f} s; "
          f"per partition {dict(result.per_partition)}; hottest keys {list(result.per_key_top)}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from kafkaops.cli import demo

    return demo.run_demo(records=args.records, keep_running=args.keep_running)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m kafkaops", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-v", "--verbose", action="store_true")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("cluster", help="bring the local cluster up or down")
    p.add_argument("action", choices=["up", "down"])
    p.add_argument("--purge", action="store_true", help="with down: remove the nodes' data, config and logs")
    p.set_defaults(func=cmd_cluster)

    p = sub.add_parser("snapshot", help="print a live cluster")
    _add_connection(p)
    p.add_argument("--topic", action="append", help="only this topic (repeatable)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_snapshot)

    for name, func in (("datagen", cmd_datagen), ("demo", cmd_demo)):
        p = sub.add_parser(name, help="produce keyed JSON records" if name == "datagen" else "the make demo job")
        p.add_argument("--records", type=int, default=100_000 if name == "demo" else 10_000)
        if name == "demo":
            p.add_argument("--keep-running", action="store_true", help="leave the cluster up afterwards")
            p.set_defaults(func=func)
            continue
        _add_connection(p)
        p.add_argument("--topic", required=True)
        p.add_argument("--partitions", type=int, help="create the topic with this many partitions first")
        p.add_argument("--replication-factor", type=int, default=3)
        p.add_argument("--keys", type=int, default=1000)
        p.add_argument("--skew", default="zipf", choices=["uniform", "zipf", "hot"])
        p.add_argument("--zipf-s", type=float, default=1.1)
        p.add_argument("--hot-share", type=float, default=0.4)
        p.add_argument("--record-bytes", type=int, default=256)
        p.add_argument("--seed", type=int, default=42)
        p.set_defaults(func=func)

    try:
        from kafkaops.cli import plan as plan_cli
    except ImportError:  # the planner is optional while it is being built
        plan_cli = None
    if plan_cli is not None:
        p = sub.add_parser("plan", help="plan a reassignment (Kafka's JSON or a live cluster)")
        plan_cli.add_arguments(p)
        p.set_defaults(func=plan_cli.run)

    from kafkaops.cli import reassign as reassign_cli

    for name, add, run, text in (
            ("execute", reassign_cli.add_execute_arguments, reassign_cli.run_execute,
             "run a PLAN.json, throttled and batched (dry run unless --execute)"),
            ("verify", reassign_cli.add_verify_arguments, reassign_cli.run_verify,
             "check that a PLAN.json is done and nothing was lost"),
            ("cancel", reassign_cli.add_cancel_arguments, reassign_cli.run_cancel,
             "revert a PLAN.json's moves in flight and clear the throttles")):
        p = sub.add_parser(name, help=text, description=text)
        add(p)
        p.set_defaults(func=run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return int(args.func(args) or 0)
    except KafkaOpsError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
