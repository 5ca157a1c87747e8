"""``kafkaops lock show|break``: who holds a cluster's lock in the kafkaops store, and freeing it
when its holder is gone for good (recorded with who and why)."""
from __future__ import annotations

import argparse
import getpass
import socket
import time

from kafkaops.cli.options import add_store, open_store, positive
from kafkaops.platform import render
from kafkaops.platform.store import Lease

HISTORY_COLUMNS = ("at", "action", "holder", "previous holder", "token", "by", "reason")


def _reason(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("is blank; say why the holder is gone, e.g. --reason 'worker lost, run "
                                         "marked failed'")
    return text.strip()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION", title="actions")
    show = sub.add_parser("show", help="who holds the cluster, since when, and the recent lock history",
                          description="Who holds CLUSTER's lock (run, fencing token, since, lease until, in UTC) "
                                      "and the recent acquires, releases, takeovers and breaks.")
    show.add_argument("cluster", metavar="CLUSTER", help="the cluster id")
    show.add_argument("--history", type=positive, default=10, metavar="N", help="the last N lock events (default 10)")
    add_store(show)
    breaking = sub.add_parser("break", help="free the cluster whoever holds it (needs --reason)",
                              description="Free CLUSTER's lock whoever holds it; the fencing token goes up, so the old "
                                          "holder cannot change the cluster any more. Only for a holder that is gone "
                                          "for good: a live run's own teardown releases the lock. Recorded with your "
                                          "user@host and the reason, in the lock history and the holder's record.")
    breaking.add_argument("cluster", metavar="CLUSTER", help="the cluster id")
    breaking.add_argument("--reason", required=True, type=_reason, metavar="TEXT", help="why the holder is gone")
    add_store(breaking)


def run(args: argparse.Namespace) -> int:
    store = open_store(args)
    if args.action == "show":
        lease = store.lease(args.cluster)
        print(describe(args.cluster, lease))
        history = store.lock_history(args.cluster, limit=args.history)
        if history:
            print("\nrecent lock history, newest first:")
            print(render.table(HISTORY_COLUMNS, [(render.utc_time(h["ts"]), h["action"], h["holder"],
                                                  h["previous_holder"], h["token"], h["by"], h["reason"])
                                                 for h in history]))
        return 0
    by = f"{getpass.getuser()}@{socket.gethostname()}"
    broken = store.break_lock(args.cluster, by=by, reason=args.reason)
    if broken is None:
        print(f"cluster {args.cluster} is not locked in the store {store.where}: nothing to break")
        return 0
    print(f"broke the lock on cluster {args.cluster}: {broken.holder} held it since "
          f"{render.utc_time(broken.acquired_at)} with token {broken.token} (lease until "
          f"{render.utc_time(broken.lease_until)}); the cluster is free and token {broken.token + 1} fences that run "
          f"off. Recorded by {by}: {args.reason}")
    return 0


def describe(cluster: str, lease: Lease | None) -> str:
    if lease is None:
        return f"cluster {cluster}: never locked"
    if lease.free:
        return f"cluster {cluster}: free (last token {lease.token})"
    text = (f"cluster {cluster}: held by {lease.holder}, token {lease.token}, "
            f"since {render.utc_time(lease.acquired_at)}, lease until {render.utc_time(lease.lease_until)}")
    if lease.lease_until is not None and lease.lease_until < time.time():
        text += " (the lease ran out: the next run to start takes the cluster over)"
    return text
