"""``kafkaops store show|upgrade``: which kafkaops store a command uses (password hidden), its
backend and schema revision; and bringing its schema to this kafkaops' head (kafkaops' own tables
only)."""
from __future__ import annotations

import argparse

from kafkaops.cli.options import add_store, missing_file, store_target


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION", title="actions")
    show = sub.add_parser("show", help="the store's URL (password hidden), backend and schema revision",
                          description="The store's URL (password hidden), where it came from, its backend and its "
                                      "schema revision against the one this kafkaops needs. Changes nothing.")
    add_store(show)
    upgrade = sub.add_parser("upgrade", help="bring the store's schema to this kafkaops' revision",
                             description="Bring the store's schema to the revision this kafkaops needs (Alembic "
                                         "migrations of kafkaops' own tables), printing the revisions from and to.")
    add_store(upgrade)


def run(args: argparse.Namespace) -> int:
    import sqlalchemy as sa

    from kafkaops.platform import migrations
    from kafkaops.platform.store import Store

    url, source = store_target(args)
    head, parsed, missing = migrations.head(), sa.make_url(url), missing_file(url)
    shown = parsed.render_as_string(hide_password=True)
    if args.action == "show" and missing is not None:  # opening it would create it
        print(f"store:    {shown} ({source})\nbackend:  {parsed.get_backend_name()}\nrevision: none: {missing} does "
              f"not exist yet; python -m kafkaops store upgrade{' --store URL' if args.store else ''} creates it")
        return 0
    store = Store(parsed, source=source)
    before = store.revision()
    if args.action == "show":
        status = ("up to date" if before == head else
                  f"newer than this kafkaops ({head}): upgrade kafkaops on this host"
                  if before is not None and before not in migrations.known() else
                  "needs an upgrade: python -m kafkaops store upgrade" + (" --store URL" if args.store else ""))
        print(f"store:    {shown} ({source})\nbackend:  {store.backend}\n"
              f"revision: {before or 'none (no kafkaops tables yet)'}; this kafkaops needs {head}: {status}")
        return 0
    store.prepare(upgrade=True)
    after = store.revision()
    print(f"store {shown}: schema already at {after}" if before == after else
          f"store {shown}: schema upgraded from {before or 'none'} to {after}")
    return 0
