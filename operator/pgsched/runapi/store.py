"""The run API's database calls: the lease functions, on the API's own bounded pool.

The functions are the same ones pods of the previous release call with their job role
(``pgsched.engine.lease``): the single writer of a run's job-side facts. Each call has a
statement timeout, so a call that waits on a lock gives its connection back instead of
holding it; every failure is a :class:`StoreUnavailable` (answered 503, retried by the
pod).
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, TypeVar

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from pgsched.db import queries
from pgsched.db.connection import Connection
from pgsched.db.session import describe_error
from pgsched.engine import lease
from pgsched.engine.lease import FinalStatus, Lease, LeaseState

log = logging.getLogger(__name__)

T = TypeVar("T")

# A call waits at most this long for a connection, and its statement at most this long.
POOL_WAIT_SECONDS = 5.0
STATEMENT_TIMEOUT_MS = 5000
# Runs whose namespace is remembered (a run never changes namespace).
NAMESPACES_KEPT = 100_000


class StoreUnavailable(Exception):
    """The database did not answer in time, or failed: the pod should retry."""


class RunStore:
    def __init__(self, pool: ConnectionPool[Any]) -> None:
        self._pool = pool
        self._namespaces: OrderedDict[int, str] = OrderedDict()
        self._lock = threading.Lock()  # calls run on several threads

    def known_namespace(self, run_id: int) -> str | None:
        """The run's namespace if it was looked up before (no database work: callable on
        the event loop, where every request asks first)."""
        with self._lock:
            return self._namespaces.get(run_id)

    def namespace_of(self, run_id: int) -> str | None:
        """The run's namespace; None when the database has no such run (yet, or any more)."""
        known = self.known_namespace(run_id)
        if known is not None:
            return known
        row = self._call(
            lambda conn: conn.execute(queries.get("run_namespace"), {"run_id": run_id}).fetchone()
        )
        if row is None:
            return None
        namespace = str(row["namespace"])
        with self._lock:
            self._namespaces[run_id] = namespace
            while len(self._namespaces) > NAMESPACES_KEPT:
                self._namespaces.popitem(last=False)
        return namespace

    def heartbeat(self, run_lease: Lease) -> LeaseState:
        return self._call(lambda conn: lease.heartbeat(conn, run_lease))

    def state(self, run_lease: Lease) -> LeaseState:
        return self._call(lambda conn: lease.state(conn, run_lease))

    def workload_ended(self, run_lease: Lease) -> bool:
        return self._call(lambda conn: lease.workload_ended(conn, run_lease))

    def finish(
        self,
        run_lease: Lease,
        status: FinalStatus,
        *,
        reason: str | None,
        error: str | None,
        exit_code: int | None,
        retry_hint: Any,
    ) -> bool:
        return self._call(
            lambda conn: lease.finish(
                conn,
                run_lease,
                status,
                reason=reason,
                error=error,
                exit_code=exit_code,
                retry_hint=retry_hint,
            )
        )

    def _call(self, operation: Callable[[Connection], T]) -> T:
        try:
            # One statement, autocommitted: the call's only round trip (the pool's
            # connections carry STATEMENT_TIMEOUT_MS, see serving.py).
            with self._pool.connection(timeout=POOL_WAIT_SECONDS) as conn:
                return operation(conn)
        except PoolTimeout as error:
            raise StoreUnavailable("no database connection was free in time") from error
        except psycopg.Error as error:
            log.warning("run API: a database call failed: %s", describe_error(error))
            raise StoreUnavailable(describe_error(error)) from error
