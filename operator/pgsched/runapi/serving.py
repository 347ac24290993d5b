"""Starting the run API in the operator: its pool, its server, and its presence stamps."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path

from pgsched.db import connection
from pgsched.db.session import Session
from pgsched.engine import loop
from pgsched.runapi import presence
from pgsched.runapi.leases import LeaseKey
from pgsched.runapi.limits import Budgets, Limits
from pgsched.runapi.server import RunApi, RunApiServer
from pgsched.runapi.stops import Stops
from pgsched.runapi.store import STATEMENT_TIMEOUT_MS, RunStore
from pgsched.runapi.threaded import tls_context

log = logging.getLogger(__name__)

# The files of PGSCHED_RUN_API_CERT_DIR, a Kubernetes TLS Secret's.
CERT_FILE, KEY_FILE, CA_FILE = "tls.crt", "tls.key", "ca.crt"


class NotServing(RuntimeError):
    """The replica's run API server is not running."""


class Serving:
    """The run API of this replica: serving until :meth:`stop`."""

    def __init__(
        self,
        *,
        dsn: str,
        bind: str,
        cert_dir: Path,
        limits: Limits,
        pool_size: int,
        clock: Callable[[], datetime | None] = lambda: None,
    ) -> None:
        host, _, port = bind.rpartition(":")
        self._pool = connection.pool(
            dsn,
            name="pgsched-run-api",
            max_size=pool_size,
            statement_timeout_ms=STATEMENT_TIMEOUT_MS,
        )
        with self._pool.connection() as conn:
            key = LeaseKey.load(conn)
        executor = ThreadPoolExecutor(pool_size, thread_name_prefix="pgsched-run-api-db")
        store = RunStore(self._pool)

        def build(event_loop: asyncio.AbstractEventLoop) -> tuple[RunApi, Stops]:
            stops = Stops(dsn, event_loop)
            return RunApi(store, key, Budgets(limits), stops, executor), stops

        tls = tls_context(str(cert_dir / CERT_FILE), str(cert_dir / KEY_FILE))
        self._server = RunApiServer(host.strip("[]") or "0.0.0.0", int(port), tls, build)
        self._executor = executor
        self._stop = threading.Event()
        session = Session.for_dsn(dsn, application_name="pgsched-run-api-presence")

        def stamp_while_served() -> presence.PresenceResult:
            # A stamp says pods can beat here: not while the server's thread is gone, or
            # the reaper would judge their silence as theirs (the shared loop logs this).
            if not self._server.alive():
                raise NotServing("the run API server has stopped: presence not stamped")
            return session.run(lambda conn: presence.run_once(conn, now=clock()))

        stamp = loop.Service("run-api-presence", stamp_while_served, presence.INTERVAL_SECONDS)
        self._presence = threading.Thread(
            target=loop.run,
            args=([stamp], self._stop),
            kwargs={"on_error": lambda _service, _error: session.close()},
            name="pgsched-run-api-presence",
        )

    def start(self) -> None:
        self._server.start()
        self._presence.start()

    def alive(self) -> bool:
        return self._server.alive() and self._presence.is_alive()

    def stop(self, timeout: float) -> None:
        # Stamps stop first: from here on the reaper may count silence again only after the
        # gap (another replica's stamps keep the API available).
        self._stop.set()
        self._presence.join(timeout)
        self._server.stop(timeout)
        self._executor.shutdown(wait=False, cancel_futures=True)
        self._pool.close()
