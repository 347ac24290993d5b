"""Options and helpers shared by sub-commands."""

from __future__ import annotations

import argparse
import os
from datetime import UTC, date, datetime
from datetime import time as dt_time
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

from pgsched.db import dsn
from pgsched.validation import SettingsError

if TYPE_CHECKING:
    from pgsched.db import connection


class CommandError(Exception):
    """A user-facing failure: printed without a traceback, exit code 1 (2 for usage)."""

    def __init__(self, message: str, *, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def add_dsn(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dsn",
        default=os.environ.get("PGSCHED_DSN"),
        help="PostgreSQL connection string (env PGSCHED_DSN), e.g. "
        "'host=db.example user=pgsched dbname=pgsched'",
    )


def database(args: argparse.Namespace) -> str:
    """The connection string: ``--dsn``, else ``PGSCHED_DSN``, else the file
    ``PGSCHED_DSN_FILE`` names (how the chart passes it, see pgsched.db.dsn)."""
    try:
        return str(args.dsn or dsn.from_environment(os.environ))
    except SettingsError as error:
        if os.environ.get(dsn.FILE_VARIABLE):
            raise CommandError(str(error), code=2) from None
        raise CommandError(
            f"no database given: pass --dsn or set {dsn.VARIABLE} (or {dsn.FILE_VARIABLE})",
            code=2,
        ) from None


def has_database(args: argparse.Namespace) -> bool:
    """Whether a database is named: ``--dsn``, ``PGSCHED_DSN`` or ``PGSCHED_DSN_FILE``."""
    return bool(args.dsn or os.environ.get(dsn.VARIABLE) or os.environ.get(dsn.FILE_VARIABLE))


def connect(args: argparse.Namespace, *, application_name: str) -> connection.Connection:
    """A connection to the database ``database(args)`` names."""
    found = database(args)
    # psycopg takes a fifth of a second to import: only commands that connect pay for it.
    import psycopg

    from pgsched.db import connection

    try:
        return connection.connect(found, application_name=application_name)
    except psycopg.OperationalError as error:
        raise CommandError(f"cannot connect to the database: {str(error).strip()}") from None


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1, with a message that says so."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number (example: 10)") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1 (example: 10)")
    return value


def parse_time(text: str, zone: ZoneInfo, *, flag: str, end_of_day: bool = False) -> datetime:
    """An instant from the command line: ISO 8601 with an offset (or ``Z``) is absolute,
    without one it is local time in ``zone``; a bare date is the start of that day (the
    end of it with ``end_of_day``, for the inclusive end of a range)."""
    try:
        if len(text) == 10:
            day = date.fromisoformat(text)
            moment = datetime.combine(day, dt_time.max if end_of_day else dt_time.min)
        else:
            moment = datetime.fromisoformat(text)
    except ValueError:
        raise CommandError(
            f"{flag} {text!r} is not an ISO 8601 date or time"
            " (examples: 2026-06-01, 2026-06-01T08:00, 2026-06-01T06:00:00Z)",
            code=2,
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=zone)
    try:
        return moment.astimezone(UTC)
    except OverflowError:
        raise CommandError(f"{flag} {text!r} is outside the calendar", code=2) from None
