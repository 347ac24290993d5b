"""Checks that the database can run pgsched, with explanations a human can act on.

Run by the operator at start-up (it refuses to start on a failed check) and by
``pgsched doctor``. The subtle one is the session check: leader election holds a
*session* advisory lock across several transactions, which only works on a real session.
A transaction-pooling proxy (PgBouncer ``pool_mode = transaction``) hands consecutive
statements to different server connections, so the lock would be taken on one backend and
released on another: leader election silently breaks. The check takes a lock and looks
for it from the next statement.
"""

from __future__ import annotations

from dataclasses import dataclass

from pgsched.db import migrate
from pgsched.db.connection import Connection

MIN_SERVER_VERSION = 140000


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str


def run(conn: Connection) -> list[Check]:
    return [_server_version(conn), _schema(conn), _session(conn)]


def _server_version(conn: Connection) -> Check:
    version = conn.info.server_version
    ok = version >= MIN_SERVER_VERSION
    readable = f"{version // 10000}.{version % 10000}"
    detail = f"PostgreSQL {readable}" + ("" if ok else "; pgsched needs PostgreSQL 14 or newer")
    return Check("server version", ok, detail)


def _schema(conn: Connection) -> Check:
    current, latest = migrate.current_version(conn), migrate.latest_version()
    if current == latest:
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


def _session(conn: Connection) -> Check:
    key = "pgsched:preflight-session"
    first = conn.execute(
        "SELECT pg_backend_pid() AS pid, pg_try_advisory_lock(hashtextextended(%s, 0)) AS locked",
        [key],
    ).fetchone()
    assert first is not None
    try:
        second = conn.execute(
            "SELECT pg_backend_pid() AS pid, EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory'"
            " AND pid = pg_backend_pid() AND granted) AS held"
        ).fetchone()
        assert second is not None
    finally:
        conn.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", [key])
    if first["pid"] != second["pid"] or (first["locked"] and not second["held"]):
        return Check(
            "session",
            False,
            "consecutive statements ran on different server sessions, so session advisory locks "
            "(leader election) cannot work: connect pgsched directly to PostgreSQL, or through a "
            "pooler in session mode (PgBouncer pool_mode = session)",
        )
    return Check("session", True, "session advisory locks hold across statements")
