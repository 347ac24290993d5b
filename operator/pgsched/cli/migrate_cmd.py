"""``pgsched migrate``: bring the database schema up to date (safe to run concurrently)."""

from __future__ import annotations

import argparse

from pgsched.cli import common
from pgsched.db import migrate


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Apply pending schema migrations. Several replicas may run this at once: "
        "they serialize on an advisory lock."
    )
    common.add_dsn(parser)
    parser.add_argument(
        "--check",
        action="store_true",
        help="only report the schema version; exit 1 if migrations are pending",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    with common.connect(args, application_name="pgsched-migrate") as conn:
        if args.check:
            current, latest = migrate.current_version(conn), migrate.latest_version()
            print(f"schema version {current}, latest {latest}")
            return 0 if current == latest else 1
        try:
            result = migrate.migrate(conn)
        except migrate.MigrationError as error:
            raise common.CommandError(str(error)) from None
    applied = ", ".join(str(version) for version in result.applied) or "none"
    print(f"schema at version {result.current} (applied: {applied})")
    return 0
