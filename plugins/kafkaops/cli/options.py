"""Options several commands share: where Kafka is and how long to wait for it."""
from __future__ import annotations

import argparse
from typing import Any

LOCAL_BOOTSTRAP = "127.0.0.1:19092,127.0.0.1:19094,127.0.0.1:19096"  # playbooks/inventory/local.yml


def add_timeout(parser: Any) -> None:
    """``--timeout`` on a parser or an argument group."""
    parser.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS",
                        help="seconds to wait for Kafka to answer (default 10)")


def add_local_connection(parser: argparse.ArgumentParser) -> None:
    """``--bootstrap-server`` defaulting to the local cluster of ``cluster up``, and ``--timeout``."""
    parser.add_argument("--bootstrap-server", default=LOCAL_BOOTSTRAP, metavar="HOST:PORT[,...]",
                        help="the cluster's bootstrap servers (default: the local cluster of 'cluster up')")
    add_timeout(parser)
