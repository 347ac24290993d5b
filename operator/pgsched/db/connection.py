"""Opening connections the way every pgsched component needs them.

PostgreSQL 14 or newer is required (``client_connection_check_interval``).

Connections are autocommit; transactions are explicit (``with conn.transaction():``) so each
phase of a tick is visibly one commit. Isolation is READ COMMITTED on purpose: the dispatcher
relies on each statement taking a fresh snapshot, so counts read after acquiring an advisory
lock include every claim committed before the lock was granted.
"""

from __future__ import annotations

import os
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import DictRow, dict_row
from psycopg_pool import ConnectionPool

Connection = psycopg.Connection[DictRow]

# Without a connect timeout a host that accepts connections and never answers (a hung
# server, a half-dead proxy) holds the caller until the kernel's TCP timeouts, minutes; in
# a multi-host DSN the next host is tried only after that. The timeout applies to each
# host in turn, so one dead host costs this long. A DSN's own connect_timeout (or
# PGCONNECT_TIMEOUT) wins.
CONNECT_TIMEOUT_SECONDS = 5


def with_connect_timeout(dsn: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` plus the default connect timeout, unless one is given already."""
    if (
        "connect_timeout" in kwargs
        or "connect_timeout" in conninfo_to_dict(dsn)
        or os.environ.get("PGCONNECT_TIMEOUT")
    ):
        return kwargs
    return {**kwargs, "connect_timeout": CONNECT_TIMEOUT_SECONDS}


def connect(dsn: str, *, application_name: str = "pgsched", **kwargs: Any) -> Connection:
    """Open an autocommit connection that returns rows as dicts (with a connect timeout)."""
    conn = psycopg.connect(
        dsn,
        autocommit=True,
        row_factory=dict_row,
        application_name=application_name,
        **with_connect_timeout(dsn, kwargs),
    )
    configure(conn)
    return conn


def configure(conn: Connection) -> None:
    """Session settings every pgsched connection needs (also used by connection pools)."""
    conn.execute("SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL READ COMMITTED")
    # A backend waiting on a lock does not notice its client died (kill -9, a lost node)
    # until the wait ends, and keeps its row locks meanwhile. With this check it notices
    # within seconds and rolls back, so a dead claimer's candidates go back to the others.
    conn.execute("SET client_connection_check_interval = '2s'")


def pool(dsn: str, *, name: str, max_size: int) -> ConnectionPool[Any]:
    """An open pool of connections configured like :func:`connect`'s (``name`` is also
    their application name).

    Every connection is checked before it is handed out. After a database restart the
    pool's idle connections are dead; handed out, each would fail its caller once — and
    for a caller that gets one chance, like the handler of a Job's last watch event,
    that failure loses the outcome. Checked, a dead connection is replaced, and while
    the database is down the caller waits for one (up to the pool's timeout) instead.
    """
    return ConnectionPool(
        dsn,
        min_size=1,
        max_size=max_size,
        open=True,
        name=name,
        kwargs=with_connect_timeout(
            dsn, {"autocommit": True, "application_name": name, "row_factory": dict_row}
        ),
        configure=configure,
        check=ConnectionPool.check_connection,
    )
