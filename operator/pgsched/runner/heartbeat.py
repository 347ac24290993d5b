"""The heartbeat loop: keeps a run's lease alive from a background thread, and listens.

One implementation serves both in-pod programs: the SDK runner (``pgsched run``) and the
sidecar next to arbitrary containers (``pgsched heartbeat``).

Every ``interval`` the loop calls ``pgsched.heartbeat(run_id, lease_token)`` on a session
of its own and keeps the answer, the lease state (``active``, ``cancel_requested``,
``lost``; it only moves forward), for the work to read. Between beats its session LISTENs
on the run's lease channel, so a cancel reaches the work within a round trip or two, not at
the next beat. A failed heartbeat is logged and retried on a fresh connection; it never
stops or fails the work (I6).

The states, the listening and the failures: docs/architecture.md, "The heartbeat loop".
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Self

import psycopg

from pgsched.db import notices
from pgsched.db.connection import Connection
from pgsched.db.session import Session, describe_error
from pgsched.engine import lease
from pgsched.engine.lease import Lease, LeaseState

log = logging.getLogger(__name__)

_RANK: dict[LeaseState, int] = {"active": 0, "cancel_requested": 1, "lost": 2}
# After a failed beat, try again after at most this long (never later than the interval).
RETRY_SECONDS = 1.0


@dataclass(frozen=True)
class Beat:
    """The result of one heartbeat: the state the database answered, or the error."""

    state: LeaseState | None
    error: str | None = None


class HeartbeatLoop:
    def __init__(
        self,
        session: Session,
        run_lease: Lease,
        *,
        interval_seconds: float,
        on_change: Callable[[LeaseState], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._session = session
        self._lease = run_lease
        self._interval = interval_seconds
        self._on_change = on_change
        self._clock = clock
        self._lock = threading.Lock()
        self._state: LeaseState = "active"
        self._confirmed_at: float | None = None
        self._failures = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._listening: Connection | None = None  # the connection subscribed to the channel

    @property
    def state(self) -> LeaseState:
        with self._lock:
            return self._state

    @property
    def interval_seconds(self) -> float:
        return self._interval

    def seconds_since_confirmed(self) -> float | None:
        """How old the latest answer from the database is; None before the first one."""
        with self._lock:
            return None if self._confirmed_at is None else self._clock() - self._confirmed_at

    def observe(self, state: LeaseState) -> None:
        """Record a lease state learnt from the database (a beat, or a checkpoint's check)."""
        with self._lock:
            self._confirmed_at = self._clock()
            previous = self._state
            if _RANK[state] <= _RANK[previous]:
                return
            self._state = state
        if state == "cancel_requested":  # routine: pgsched cancel, Replace, a deadline
            log.info("run %s: cancellation requested", self._lease.run_id)
        else:
            log.warning(
                "run %s: lease lost (the run was reaped or ended elsewhere)", self._lease.run_id
            )
        if self._on_change is not None:
            try:
                self._on_change(state)
            except Exception:
                log.exception("run %s: heartbeat state observer failed", self._lease.run_id)

    def beat_once(self) -> Beat:
        """One heartbeat. Never raises: a failure is returned (and logged)."""
        try:
            state = self._session.run(lambda conn: lease.heartbeat(conn, self._lease))
        except Exception as error:
            self._failures += 1
            message = describe_error(error)
            # 1st, 2nd, 4th, 8th... failure: an outage is visible without flooding the log.
            level = logging.WARNING if self._failures & (self._failures - 1) == 0 else logging.DEBUG
            log.log(
                level,
                "run %s: heartbeat failed (%s in a row), the work goes on; retrying: %s",
                self._lease.run_id,
                self._failures,
                message,
            )
            return Beat(None, message)
        if self._failures:
            log.info(
                "run %s: heartbeat restored after %s failed attempts",
                self._lease.run_id,
                self._failures,
            )
            self._failures = 0
        self.observe(state)
        return Beat(state)

    def start(self) -> Self:
        self._thread = threading.Thread(
            target=self._run, name=f"pgsched-heartbeat-{self._lease.run_id}", daemon=True
        )
        self._thread.start()
        return self

    def stop(self, timeout: float | None = None) -> None:
        """Stop beating and wait for an in-flight beat (at most ``timeout`` seconds)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                beat = self.beat_once()
                if self.state == "lost":
                    return
                delay = self._interval if beat.error is None else min(self._interval, RETRY_SECONDS)
                self._wait(delay)
        finally:
            self._session.close()

    def _wait(self, seconds: float) -> None:
        """Until the next beat is due, or the database notified the lease's channel."""
        deadline = time.monotonic() + seconds
        conn = self._session.connected()  # never connect just to listen: the beat does
        if conn is not None:
            try:
                if self._listening is not conn:
                    state = lease.listen(conn, self._lease)
                    self._listening = conn
                    if state != "active":
                        return  # asked to stop before we listened: beat (and tell) now
                notices.wait(conn, deadline - time.monotonic(), self._stop)
                return
            except psycopg.Error as error:
                self._listening = None
                self._session.close()
                log.debug("run %s: waiting for notifications failed: %s", self._lease.run_id, error)
        self._stop.wait(max(0.0, deadline - time.monotonic()))
