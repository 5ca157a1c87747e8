"""``kafkaops snapshot``: a live cluster as tables (brokers, partitions, hottest partitions, groups),
or as the JSON that ``verify --before`` reads."""
from __future__ import annotations

import argparse
import json

from kafkaops.cli.options import add_local_connection, kafka_config


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_local_connection(parser)
    parser.add_argument("--topic", action="append", metavar="TOPIC", help="only this topic (repeatable)")
    parser.add_argument("--json", action="store_true",
                        help="print the snapshot as JSON (save it for verify --before BEFORE.json)")


def run(args: argparse.Namespace) -> int:
    from kafkaops.platform.kafka import connection, metadata
    from kafkaops.platform.render import render_snapshot

    with connection.connect(kafka_config(args), timeout_s=args.timeout) as conn:
        cluster = metadata.snapshot(conn, topics=args.topic or None)
    print(json.dumps(cluster.to_dict(), indent=2) if args.json else render_snapshot(cluster))
    return 0
