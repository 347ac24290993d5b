"""Opening connections the way every pgsched component needs them.

PostgreSQL 14 or newer is required (``client_connection_check_interval``).

Connections are autocommit; transactions are explicit (``with conn.transaction():``) so each
phase of a tick is visibly one commit. Isolation is READ COMMITTED on purpose: the dispatcher
relies on each statement taking a fresh snapshot, so counts read after acquiring an advisory
lock include every claim committed before the lock was granted.
"""

from __future__ import annotations

import heapq
import itertools
import os
import select
import socket
import threading
import time
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg.abc import RV, PQGen
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import DictRow, dict_row

if TYPE_CHECKING:
    from psycopg_pool import ConnectionPool


class BoundedConnection(psycopg.Connection[DictRow]):
    """A connection that gives up on a server that stops answering.

    A server process that is frozen (SIGSTOP, a stalled VM, a hung storage layer) keeps
    its TCP connections: the kernel still acknowledges every byte and every keepalive, so
    neither ``tcp_user_timeout`` nor keepalives fire, and ``statement_timeout`` is the
    frozen server's own to enforce. The client would wait as long as the freeze lasts.
    With ``answer_timeout`` set, every wait for the server (a statement, its rows, a
    commit) that takes longer has the socket shut down under it: the wait ends with an
    ``OperationalError`` naming the server and the bound, the connection is broken, and
    the caller's session reconnects — to the next host of a multi-host DSN if this one
    still does not answer (the connect timeout bounds that).
    """

    answer_timeout: float | None = None

    def wait(self, gen: PQGen[RV], interval: float = 0.1, timeout: float | None = None) -> RV:
        limit = self.answer_timeout
        if limit is None:
            return super().wait(gen, interval, timeout)
        alarm = _WATCHDOG.arm(self.pgconn.socket, limit)
        try:
            return super().wait(gen, interval, timeout)
        except psycopg.OperationalError as error:
            if alarm.fired:
                raise psycopg.OperationalError(
                    f"the database at {self.info.host}:{self.info.port} did not answer within"
                    f" {limit:g}s (a frozen server?); connection closed"
                ) from error
            raise
        finally:
            _WATCHDOG.disarm(alarm)


class _Alarm:
    def __init__(self, fd: int, at: float) -> None:
        self.fd = fd
        self.at = at
        self.armed = True
        self.fired = False


class _Watchdog:
    """One thread for every bounded connection: shuts down the socket of a wait that
    outlived its deadline (a shutdown, unlike a close, is safe while libpq uses the fd)."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._heap: list[tuple[float, int, _Alarm]] = []
        self._order = itertools.count()
        self._thread: threading.Thread | None = None

    def arm(self, fd: int, seconds: float) -> _Alarm:
        alarm = _Alarm(fd, time.monotonic() + seconds)
        with self._lock:
            heapq.heappush(self._heap, (alarm.at, next(self._order), alarm))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="pgsched-db-watchdog", daemon=True
                )
                self._thread.start()
            self._lock.notify()
        return alarm

    def disarm(self, alarm: _Alarm) -> None:
        with self._lock:
            alarm.armed = False

    def _run(self) -> None:
        while True:
            with self._lock:
                while self._heap and not self._heap[0][2].armed:
                    heapq.heappop(self._heap)
                if not self._heap:
                    self._lock.wait()
                    continue
                at, _, alarm = self._heap[0]
                left = at - time.monotonic()
                if left > 0:
                    self._lock.wait(left)
                    continue
                heapq.heappop(self._heap)
                alarm.fired = True
                alarm.armed = False
                _shut_down(alarm.fd)  # under the lock: the wait cannot end and reuse the fd


def _shut_down(fd: int) -> None:
    try:
        severed = socket.socket(fileno=os.dup(fd))
    except OSError:
        return
    try:
        severed.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already closed
    finally:
        severed.close()


_WATCHDOG = _Watchdog()

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


def connect(
    dsn: str,
    *,
    application_name: str = "pgsched",
    answer_timeout: float | None = None,
    **kwargs: Any,
) -> Connection:
    """Open an autocommit connection that returns rows as dicts (with a connect timeout;
    ``answer_timeout``: see :class:`BoundedConnection` and :func:`bound_answers`)."""
    conn = BoundedConnection.connect(
        dsn,
        autocommit=True,
        row_factory=dict_row,
        application_name=application_name,
        **with_connect_timeout(dsn, kwargs),
    )
    conn.answer_timeout = answer_timeout
    configure(conn)
    return conn


def bound_answers(conn: Connection, seconds: float | None) -> None:
    """Give up on the server after ``seconds`` without an answer (None: wait forever);
    for connections opened by :func:`connect`."""
    if isinstance(conn, BoundedConnection):
        conn.answer_timeout = seconds


def configure(conn: Connection) -> None:
    """Session settings every pgsched connection needs (also used by connection pools)."""
    # Names resolve in pg_catalog, then pgsched, never in a schema others may create in
    # (``public`` is writable by everyone on PostgreSQL 14 and databases upgraded from
    # it): a function planted there, say ``public.hashtextextended(text, integer)``, would
    # otherwise win over the built-in and run with this session's privileges. Temporary
    # objects come last. A SET, not a startup option: PgBouncer drops startup ``options``.
    conn.execute("SET search_path = pg_catalog, pgsched, pg_temp")
    conn.execute("SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL READ COMMITTED")
    # A backend waiting on a lock does not notice its client died (kill -9, a lost node)
    # until the wait ends, and keeps its row locks meanwhile. With this check it notices
    # within seconds and rolls back, so a dead claimer's candidates go back to the others.
    conn.execute("SET client_connection_check_interval = '2s'")


def pool(
    dsn: str, *, name: str, max_size: int, statement_timeout_ms: int | None = None
) -> ConnectionPool[Any]:
    """An open pool of connections configured like :func:`connect`'s (``name`` is also
    their application name; ``statement_timeout_ms``, when given, bounds every statement
    on them).

    A connection is checked before it is handed out when the server has said something
    on it while it sat idle (:func:`check_when_spoken_to`). After a database restart the
    pool's idle connections are dead; handed out, each would fail its caller once — and
    for a caller that gets one chance, like the handler of a Job's last watch event,
    that failure loses the outcome. Checked, a dead connection is replaced, and while
    the database is down the caller waits for one (up to the pool's timeout) instead.
    """
    # Imported here: the operator and the UI pool connections, the CLI never does.
    from psycopg_pool import ConnectionPool

    def configure_pooled(conn: Connection) -> None:
        configure(conn)
        if statement_timeout_ms is not None:
            conn.execute(f"SET statement_timeout = {int(statement_timeout_ms)}")

    return ConnectionPool(
        dsn,
        min_size=1,
        max_size=max_size,
        open=True,
        name=name,
        kwargs=with_connect_timeout(
            dsn, {"autocommit": True, "application_name": name, "row_factory": dict_row}
        ),
        configure=configure_pooled,
        check=check_when_spoken_to,
    )


def check_when_spoken_to(conn: Connection) -> None:
    """The pool's check: a round trip to the server only when the connection's socket has
    something to read while idle. A server that shuts down or ends the session says so
    (an error message, then end of file) on every idle connection, so a dead one is always
    readable; a healthy idle one has nothing to say, and is handed out without the round
    trip (a run API heartbeat is one statement: the check doubled its round trips)."""
    from psycopg_pool import ConnectionPool

    poller = select.poll()
    poller.register(conn.fileno(), select.POLLIN | select.POLLPRI)
    if poller.poll(0):
        ConnectionPool.check_connection(conn)
