"""Answering cancel long polls from one LISTEN.

A pod asks "tell me when my run's lease stops being <state>" and the request waits here,
holding no database connection. One thread listens on the channel the ``job_runs``
trigger notifies with the run id (``sql/functions/notify_lease_holder.sql``) and wakes
that run's waiters; each then reads the state again. After its connection broke, the
thread wakes every waiter: notifications sent meanwhile are lost, and a read is cheap.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import defaultdict
from contextlib import closing

import psycopg

from pgsched.db import connection, queries
from pgsched.db.session import describe_error

log = logging.getLogger(__name__)

RECONNECT_SECONDS = 1.0
STOP_CHECK_SECONDS = 0.5


class Stops:
    def __init__(self, dsn: str, loop: asyncio.AbstractEventLoop) -> None:
        self._dsn = dsn
        self._loop = loop
        self._waiters: defaultdict[int, set[asyncio.Future[None]]] = defaultdict(set)
        self._stop = threading.Event()
        self._listening = threading.Event()
        self._thread = threading.Thread(target=self._listen, name="pgsched-run-api-stops")

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float) -> None:
        self._stop.set()
        self._thread.join(timeout)

    def alive(self) -> bool:
        return self._thread.is_alive()

    def listening(self) -> bool:
        return self._listening.is_set()

    def register(self, run_id: int) -> asyncio.Future[None]:
        """A future that completes when ``run_id`` may have changed (event loop only)."""
        future: asyncio.Future[None] = self._loop.create_future()
        self._waiters[run_id].add(future)
        return future

    def unregister(self, run_id: int, future: asyncio.Future[None]) -> None:
        waiters = self._waiters.get(run_id)
        if waiters is not None:
            waiters.discard(future)
            if not waiters:
                del self._waiters[run_id]

    def wake_all(self) -> None:
        """Wake every waiter (event loop only): the server is stopping."""
        self._wake(None)

    def _wake(self, run_id: int | None) -> None:
        chosen = list(self._waiters.values()) if run_id is None else [self._waiters.get(run_id)]
        for waiters in chosen:
            for future in waiters or ():
                if not future.done():
                    future.set_result(None)

    def _listen(self) -> None:
        while not self._stop.is_set():
            try:
                with connection.connect(
                    self._dsn, application_name="pgsched-run-api-stops"
                ) as conn:
                    conn.execute(queries.get("listen_for_stopping_runs"))
                    self._listening.set()
                    self._loop.call_soon_threadsafe(self._wake, None)
                    while not self._stop.is_set():
                        with closing(conn.notifies(timeout=STOP_CHECK_SECONDS)) as notes:
                            for note in notes:
                                run_id = _run_id(note.payload)
                                if run_id is not None:
                                    self._loop.call_soon_threadsafe(self._wake, run_id)
            except psycopg.Error as error:
                log.warning(
                    "run API: listening for cancellations failed (%s); cancel long polls"
                    " are answered at their timeout until it is back",
                    describe_error(error),
                )
            except RuntimeError:  # the event loop closed under us: shutting down
                return
            finally:
                self._listening.clear()
            self._stop.wait(RECONNECT_SECONDS)


def _run_id(payload: str) -> int | None:
    try:
        return int(payload)
    except ValueError:
        return None
