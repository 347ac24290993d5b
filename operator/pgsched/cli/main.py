"""``pgsched`` entry point: one sub-command per module in this package."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from pgsched import __version__, logs
from pgsched.cli import (
    backfill_cmd,
    cancel_cmd,
    describe_cmd,
    doctor_cmd,
    heartbeat_cmd,
    migrate_cmd,
    next_cmd,
    operator_cmd,
    run_cmd,
    run_now_cmd,
    runs_cmd,
    suspend_cmd,
    ui_cmd,
)
from pgsched.cli.common import CommandError


def build_parser(prog: str = "pgsched") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Cron, RRULE and one-shot jobs on Kubernetes, scheduled through Postgres.",
    )
    parser.add_argument("--version", action="version", version=f"pgsched {__version__}")
    parser.add_argument(
        "--log-level",
        default=os.environ.get("PGSCHED_LOG_LEVEL", "INFO"),
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="log verbosity (env PGSCHED_LOG_LEVEL)",
    )
    parser.add_argument(
        "--log-format",
        default=os.environ.get("PGSCHED_LOG_FORMAT", "text"),
        choices=logs.FORMATS,
        help="text, or json: one object per line with run_id, definition and attempt on"
        " lines about a run (env PGSCHED_LOG_FORMAT)",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    migrate_cmd.register(commands)
    operator_cmd.register(commands)
    run_cmd.register(commands)
    heartbeat_cmd.register(commands)
    # What people run against a live installation (also `kubectl pgsched ...`).
    runs_cmd.register(commands)
    describe_cmd.register(commands)
    run_now_cmd.register(commands)
    cancel_cmd.register(commands)
    suspend_cmd.register(commands)
    next_cmd.register(commands)
    backfill_cmd.register(commands)
    doctor_cmd.register(commands)
    ui_cmd.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    # Installed as `kubectl-pgsched` too, so `kubectl pgsched ...` works (a kubectl plugin).
    plugin = os.path.basename(sys.argv[0]).startswith("kubectl-")
    parser = build_parser("kubectl pgsched" if plugin else "pgsched")
    args = parser.parse_args(argv)
    try:
        logs.setup(args.log_level, args.log_format)
    except ValueError as error:  # a bad PGSCHED_LOG_LEVEL/FORMAT (flags are checked by choices)
        parser.error(str(error))
    try:
        return int(args.handler(args) or 0)
    except CommandError as error:
        print(f"{parser.prog} {args.command}: {error}", file=sys.stderr)
        return error.code
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
