"""``pgsched`` entry point: one sub-command per module in this package."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from pgsched import __version__
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
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    migrate_cmd.register(commands)
    operator_cmd.register(commands)
    run_cmd.register(commands)
    heartbeat_cmd.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        return int(args.handler(args) or 0)
    except CommandError as error:
        print(f"pgsched {args.command}: {error}", file=sys.stderr)
        return error.code
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
