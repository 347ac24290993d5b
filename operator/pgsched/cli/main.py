"""``pgsched`` entry point: one sub-command per module in this package."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from pgsched import __version__, logs
from pgsched.cli import heartbeat_cmd, migrate_cmd, operator_cmd, run_cmd
from pgsched.cli.common import CommandError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pgsched",
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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        logs.setup(args.log_level, args.log_format)
    except ValueError as error:  # a bad PGSCHED_LOG_LEVEL/FORMAT (flags are checked by choices)
        parser.error(str(error))
    try:
        return int(args.handler(args) or 0)
    except CommandError as error:
        print(f"pgsched {args.command}: {error}", file=sys.stderr)
        return error.code
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
