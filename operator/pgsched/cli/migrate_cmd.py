"""``pgsched migrate``: bring the database schema up to date (safe to run concurrently)."""

from __future__ import annotations

import argparse

from pgsched.cli import common
from pgsched.db import migrate


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Apply pending schema migrations, then the function files that are new or changed. "
        "Several replicas may run this at once: they queue on the migrations ledger's lock."
    )
    common.add_dsn(parser)
    parser.add_argument(
        "--check",
        action="store_true",
        help="only report the schema version; exit 1 if migrations or function files are pending",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    with common.connect(args, application_name="pgsched-migrate") as conn:
        if args.check:
            current, latest = migrate.current_version(conn), migrate.latest_version()
            pending = [function.name for function in migrate.changed_functions(conn)]
            print(f"schema version {current}, latest {latest}; {_functions(pending, 'to apply')}")
            return 0 if current == latest and not pending else 1
        try:
            result = migrate.migrate(conn)
        except migrate.MigrationError as error:
            raise common.CommandError(str(error)) from None
    applied = ", ".join(str(version) for version in result.applied) or "none"
    print(
        f"schema at version {result.current} (applied: {applied});"
        f" {_functions(result.functions, 'applied')}"
    )
    return 0


def _functions(names: list[str], done: str) -> str:
    return f"function files {done}: {', '.join(names) or 'none'}"
