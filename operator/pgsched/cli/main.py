"""``pgsched`` entry point: one sub-command per module in this package, imported only when
its command is chosen."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pgsched import __version__, logs
from pgsched.cli.common import CommandError

if TYPE_CHECKING:
    _SubParsersAction = argparse._SubParsersAction[argparse.ArgumentParser]
else:
    _SubParsersAction = argparse._SubParsersAction

# command -> (module, one-line help). The module's configure(parser) adds the command's
# arguments and its handler; it is imported only when its command is chosen, so `pgsched
# --help`, `pgsched next --cron ...` and the like never import the Kubernetes client, the web
# server or the operator (bench/README.md, "CLI start-up"). The order is the order of --help.
COMMANDS: dict[str, tuple[str, str]] = {
    "migrate": ("migrate_cmd", "apply pending schema migrations"),
    "operator": ("operator_cmd", "run the operator (watches ScheduledJobs, runs the tick loop)"),
    "run": (
        "run_cmd",
        "run one run of a Python job kind (the container command of SDK job pods)",
    ),
    "heartbeat": (
        "heartbeat_cmd",
        "keep a run's lease alive next to a job container (native sidecar)",
    ),
    # What people run against a live installation (also `kubectl pgsched ...`).
    "runs": (
        "runs_cmd",
        "run history of a ScheduledJob (status, reason, attempt, times, duration)",
    ),
    "describe": (
        "describe_cmd",
        "everything about one run: status, reason, error, Job, requester, retry chain",
    ),
    "run-now": ("run_now_cmd", "queue a manual run of a ScheduledJob (idempotent per --token)"),
    "cancel": (
        "cancel_cmd",
        "cancel a run of a ScheduledJob, or all its queued and running runs (--all)",
    ),
    "suspend": (
        "suspend_cmd",
        "suspend a ScheduledJob (patches spec.suspend; applies at the next tick)",
    ),
    "resume": (
        "suspend_cmd",
        "resume a ScheduledJob (patches spec.suspend; applies at the next tick)",
    ),
    "next": (
        "next_cmd",
        "next occurrences of a ScheduledJob, or of a --cron/--rrule/--run-at expression",
    ),
    "backfill": (
        "backfill_cmd",
        "queue one run per past occurrence in a range (idempotent, oldest first)",
    ),
    "doctor": ("doctor_cmd", "check the database, the operator's leader, stuck runs and the CRD"),
    "ui": ("ui_cmd", "serve the read-only web UI locally (http://127.0.0.1:8090)"),
}


class _LazyCommands(_SubParsersAction):
    """The sub-commands: only the chosen one's module is imported and its arguments added,
    just before argparse parses the rest of the command line with it."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        chosen = self._name_parser_map.get(values[0])
        if chosen is not None and chosen.get_default("handler") is None:
            module = importlib.import_module(f"pgsched.cli.{COMMANDS[values[0]][0]}")
            module.configure(chosen)
        super().__call__(parser, namespace, values, option_string)


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
    commands = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", action=_LazyCommands
    )
    for name, (_module, summary) in COMMANDS.items():
        commands.add_parser(name, help=summary)
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
    except Exception as error:
        refusal = _database_refusal(error)
        if refusal is None:
            raise
        print(f"{parser.prog} {args.command}: {refusal}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def _database_refusal(error: Exception) -> str | None:
    """A database error in words (None for any other error: a bug, with its traceback).
    psycopg is imported only by the commands that use a database (start-up time), so an
    error can be one of its only once it is loaded."""
    psycopg = sys.modules.get("psycopg")
    if psycopg is None or not isinstance(error, psycopg.Error):
        return None
    code = f" (SQLSTATE {error.sqlstate})" if error.sqlstate else ""
    return f"the database refused: {str(error).strip()}{code}"


if __name__ == "__main__":
    sys.exit(main())
