"""One database session that is opened on first use and reopened after it breaks.

Both in-pod loops (heartbeat, and the runner's checkpoint checks and final write) must
survive a database restart or a dropped connection: an operation that fails with a
connection-level error drops the session, the caller logs and retries later, and the next
call simply connects again. Each thread owns its own ``Session``; one is never shared.

Timeouts are short on purpose. A heartbeat stuck for minutes in a TCP connect or on a
half-open socket is worse than one that fails fast and retries: the work keeps going
either way, but only the failing one recovers by itself when the database is back.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

import psycopg

from pgsched.db import connection
from pgsched.db.connection import Connection

log = logging.getLogger(__name__)

T = TypeVar("T")

CONNECT_TIMEOUT_SECONDS = 5
# Unacknowledged data older than this breaks the connection (a half-open socket after a
# network partition would otherwise block a query for the kernel's default ~15 minutes).
TCP_USER_TIMEOUT_MS = 10_000


def describe_error(error: BaseException) -> str:
    """``Type: message`` on one line (libpq messages span several), for log lines."""
    return f"{type(error).__name__}: {' '.join(str(error).split())}"


class Session:
    def __init__(self, dsn: str, *, application_name: str) -> None:
        self._dsn = dsn
        self._application_name = application_name
        self._conn: Connection | None = None

    def run(self, operation: Callable[[Connection], T]) -> T:
        """Run ``operation`` on the session, connecting first if needed.

        A ``psycopg.OperationalError`` or ``InterfaceError`` (server gone, connection
        broken) drops the session and propagates; the next call reconnects.
        """
        try:
            return operation(self._connection())
        except (psycopg.OperationalError, psycopg.InterfaceError):
            self.close()
            raise

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:  # closing a broken connection cannot fail in a way that matters
                log.debug("closing a broken session failed", exc_info=True)
            self._conn = None

    def _connection(self) -> Connection:
        if self._conn is None or self._conn.closed or self._conn.broken:
            self.close()
            self._conn = connection.connect(
                self._dsn,
                application_name=self._application_name,
                connect_timeout=CONNECT_TIMEOUT_SECONDS,
                tcp_user_timeout=TCP_USER_TIMEOUT_MS,
                keepalives_idle=10,
                keepalives_interval=5,
                keepalives_count=3,
            )
        return self._conn
