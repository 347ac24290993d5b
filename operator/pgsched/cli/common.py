"""Options and helpers shared by sub-commands."""

from __future__ import annotations

import argparse
import os

import psycopg

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


def connect(args: argparse.Namespace, *, application_name: str) -> connection.Connection:
    if not args.dsn:
        raise CommandError("no database given: pass --dsn or set PGSCHED_DSN", code=2)
    try:
        return connection.connect(args.dsn, application_name=application_name, connect_timeout=10)
    except psycopg.OperationalError as error:
        raise CommandError(f"cannot connect to the database: {str(error).strip()}") from None
