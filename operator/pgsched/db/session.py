"""One database session that is opened on first use and reopened after it breaks.

Every long-lived loop in pgsched — the tick, the publisher, the in-pod heartbeat and the
SDK runner's checkpoint checks — must survive a database restart or a dropped connection:
an operation that fails with a connection-level error drops the session, the caller logs
and retries later, and the next call simply connects again. Each thread owns its own
``Session``; one is never shared.

``Session.for_dsn`` uses short timeouts on purpose (the in-pod side): a heartbeat stuck for
minutes in a TCP connect or on a half-open socket is worse than one that fails fast and
retries — the work keeps going either way, but only the failing one recovers by itself.
(The connect timeout is every connection's, ``connection.CONNECT_TIMEOUT_SECONDS``.)
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

import psycopg

from pgsched.db import primaries
from pgsched.db.connection import Connection

log = logging.getLogger(__name__)

T = TypeVar("T")

# Unacknowledged data older than this breaks the connection (a half-open socket after a
# network partition would otherwise block a query for the kernel's default ~15 minutes).
TCP_USER_TIMEOUT_MS = 10_000


def describe_error(error: BaseException) -> str:
    """``Type: message`` on one line (libpq messages span several), for log lines."""
    return f"{type(error).__name__}: {' '.join(str(error).split())}"


class Session:
    def __init__(self, connect: Callable[[], Connection]) -> None:
        self._connect = connect
        self._conn: Connection | None = None

    @classmethod
    def for_dsn(cls, dsn: str, *, application_name: str) -> Session:
        """A session with short TCP timeouts and keepalives (and the connect timeout),
        never on a former primary of a multi-host DSN (``primaries``)."""
        return cls(
            lambda: primaries.connect(
                dsn,
                application_name=application_name,
                tcp_user_timeout=TCP_USER_TIMEOUT_MS,
                keepalives_idle=10,
                keepalives_interval=5,
                keepalives_count=3,
            )
        )

    def run(self, operation: Callable[[Connection], T]) -> T:
        """Run ``operation`` on the session, connecting first if needed.

        A ``psycopg.OperationalError`` or ``InterfaceError`` (server gone, connection
        broken) drops the session and propagates; the next call reconnects.
        """
        try:
            return operation(self.connection())
        except (psycopg.OperationalError, psycopg.InterfaceError):
            self.close()
            raise

    def connection(self) -> Connection:
        """The open connection, reconnecting if it was closed or broke."""
        if self._conn is None or self._conn.closed or self._conn.broken:
            self.close()
            self._conn = self._connect()
        return self._conn

    def connected(self) -> Connection | None:
        """The open connection, or None: never connects (for waiting on notifications)."""
        if self._conn is None or self._conn.closed or self._conn.broken:
            return None
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:  # closing a broken connection cannot fail in a way that matters
                log.debug("closing a broken session failed", exc_info=True)
            self._conn = None
