"""Checks that the database can run pgsched, with explanations a human can act on.

Run by the operator at start-up (it refuses to start on a failed check) and by
``pgsched doctor``. The subtle one is the session check: leader election holds a
*session* advisory lock across several transactions, which only works on a real session.
A transaction-pooling proxy (PgBouncer ``pool_mode = transaction``) hands each transaction
to whichever server connection is free, so the lock is taken on one backend and the next
statement may run on another, or another client may be handed the backend that holds it:
leader election silently breaks.

A single connection cannot see this reliably: PgBouncer reuses the most recently freed
server connection, so a lone client gets the same backend every time and the lock seems to
hold. The check therefore uses a second client connection, as the operator's other
components would: it takes a lock on the first, opens a transaction on the second, and
looks whether the second was handed the first one's backend (a pooler) and whether the
first still has its backend and lock while the second holds a server connection.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass

import psycopg

from pgsched.db import migrate
from pgsched.db.connection import Connection

MIN_SERVER_VERSION = 140000


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str


def run(conn: Connection, *, connect: Callable[[], Connection] | None = None) -> list[Check]:
    """All checks. ``connect`` opens a second client connection (same DSN) for the pooler
    check; without it only what one connection can see is checked."""
    return [_server_version(conn), _schema(conn), _session(conn, connect)]


def _server_version(conn: Connection) -> Check:
    version = conn.info.server_version
    ok = version >= MIN_SERVER_VERSION
    readable = f"{version // 10000}.{version % 10000}"
    detail = f"PostgreSQL {readable}" + ("" if ok else "; pgsched needs PostgreSQL 14 or newer")
    return Check("server version", ok, detail)


def _schema(conn: Connection) -> Check:
    current, latest = migrate.current_version(conn), migrate.latest_version()
    if current == latest:
        # A release may change only functions (sql/functions, their own ledger): code that
        # calls a function the database lacks would fail every call, forever.
        differ = [function.name for function in migrate.changed_functions(conn)]
        if differ:
            shown = ", ".join(differ[:5]) + (
                f" and {len(differ) - 5} more" if len(differ) > 5 else ""
            )
            return Check(
                "schema",
                False,
                f"version {current}, but {len(differ)} of its SQL functions are not this"
                f" pgsched's ({shown}): run `pgsched migrate` of this version",
            )
        return Check("schema", True, f"version {current} (up to date)")
    if current < latest:
        return Check(
            "schema",
            False,
            f"version {current}, this pgsched needs {latest}: run `pgsched migrate`",
        )
    return Check(
        "schema", False, f"version {current} is newer than this pgsched ({latest}): upgrade pgsched"
    )


_NOT_A_SESSION = (
    "session advisory locks (leader election) cannot work: connect pgsched directly to "
    "PostgreSQL, or through a pooler in session mode (PgBouncer pool_mode = session); "
    "transaction and statement pooling are not supported"
)


def _session(conn: Connection, connect: Callable[[], Connection] | None) -> Check:
    # A random key per check: replicas starting together never contend for it.
    key = secrets.randbits(62)
    try:
        first = conn.execute(_TAKE, {"key": key}).fetchone()
    except psycopg.errors.InsufficientPrivilege as error:
        # pgsched's migrations revoke the advisory lock functions from PUBLIC where they
        # can (docs/security-database.md): only the role that ran them may take one.
        return Check(
            "session",
            False,
            f"cannot check: {error.diag.message_primary or error}; this role"
            f" ({conn.info.user}) is not pgsched's operator role: connect as the role that"
            " ran `pgsched migrate`",
        )
    assert first is not None
    try:
        problem = _same_session(conn, first["pid"], key)
        if problem is None and connect is not None:
            problem = _second_client(conn, connect, first["pid"], key)
    finally:
        conn.execute("SELECT pg_advisory_unlock(%(key)s)", {"key": key})
    if problem is not None:
        return Check("session", False, f"{problem}, so {_NOT_A_SESSION}")
    if connect is None:
        return Check(
            "session",
            True,
            "session advisory locks hold across statements (single-connection check)",
        )
    return Check(
        "session",
        True,
        "session advisory locks hold across statements and other clients get their own sessions",
    )


_TAKE = "SELECT pg_backend_pid() AS pid, pg_try_advisory_lock(%(key)s) AS locked"
_HELD = (
    "SELECT pg_backend_pid() AS pid, EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory'"
    " AND pid = pg_backend_pid() AND granted AND objsubid = 1"
    " AND classid::bigint = (%(key)s::bigint >> 32) AND objid::bigint = (%(key)s::bigint & 4294967295)"
    ") AS held"
)


def _same_session(conn: Connection, pid: int, key: int) -> str | None:
    row = conn.execute(_HELD, {"key": key}).fetchone()
    assert row is not None
    if row["pid"] != pid:
        return "consecutive statements ran on different server sessions"
    if not row["held"]:
        return "an advisory lock taken by one statement was gone at the next"
    return None


def _second_client(
    conn: Connection, connect: Callable[[], Connection], pid: int, key: int
) -> str | None:
    try:
        with connect() as other:
            try:
                with other.transaction():
                    row = other.execute("SELECT pg_backend_pid() AS pid").fetchone()
                    assert row is not None
                    if row["pid"] == pid:
                        # Checked before the first connection speaks again: with a pool of
                        # one server, its next statement would wait for this transaction.
                        return "another client connection was handed this session's server backend"
                    return _same_session(conn, pid, key)
            except psycopg.Error as error:
                return (
                    "a second connection could not run a two-statement transaction"
                    f" ({str(error).strip()}; statement pooling?)"
                )
    except psycopg.OperationalError as error:
        raise PreflightError(f"cannot open a second connection: {str(error).strip()}") from None


class PreflightError(RuntimeError):
    """A check could not be carried out at all (not the same as a failed check)."""
