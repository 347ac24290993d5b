"""The heartbeat loop: keeps a run's lease alive from a background thread, and listens.

One implementation serves both in-pod programs: the SDK runner (``pgsched run``) and the
sidecar next to arbitrary containers (``pgsched heartbeat``).

Every ``interval`` the loop heartbeats through the run API and keeps the answer, the lease
state (``active``, ``cancel_requested``, ``lost``; it only moves forward), for the work to
read. Between beats it holds the run API's cancel long poll open, so a cancel reaches the
work within a round trip, not at the next beat. A failed heartbeat is logged and retried
on a fresh connection; it never stops or fails the work (I6).

The states, the long poll and the failures: docs/architecture.md, "The heartbeat loop".
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Self

from pgsched.engine.lease import LeaseState
from pgsched.runner.runapi_client import REQUEST_TIMEOUT_SECONDS, RunApiClient, RunApiError

log = logging.getLogger(__name__)

_RANK: dict[LeaseState, int] = {"active": 0, "cancel_requested": 1, "lost": 2}
# After a failed beat, try again after at most this long (never later than the interval).
RETRY_SECONDS = 1.0
# The long poll is held open until the next beat is due, except for its last moment: a
# poll shorter than this is not worth a request (the beat is about to ask anyway).
MIN_POLL_SECONDS = 0.2
# A beat (and the long poll, on top of its wait) is given up after twice the interval,
# never less than this: the run API may hold a request 2 s for one of its namespace's call
# slots before it answers 429.
MIN_BEAT_TIMEOUT_SECONDS = 2.5


def request_timeout(interval_seconds: float) -> float:
    """How long a beat may go unanswered before it is sent again on a fresh connection.

    A replica frozen mid-request (paused, or its node stalled) holds the connection
    until this runs out, and the run is silent meanwhile: the general request timeout
    (10 s) is as long as a short heartbeat timeout (``spec.heartbeat.timeoutSeconds`` is
    at least twice the interval), so a healthy run would be reaped. Twice the interval
    leaves a fresh connection, which the Service may send to another replica, time to
    beat before three intervals have passed."""
    return min(REQUEST_TIMEOUT_SECONDS, max(MIN_BEAT_TIMEOUT_SECONDS, 2 * interval_seconds))


@dataclass(frozen=True)
class Beat:
    """The result of one heartbeat: the state the run API answered, or the error."""

    state: LeaseState | None
    error: str | None = None


class HeartbeatLoop:
    def __init__(
        self,
        client: RunApiClient,
        *,
        interval_seconds: float,
        on_change: Callable[[LeaseState], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._run_id = client.run_id
        self._interval = interval_seconds
        self._timeout = request_timeout(interval_seconds)
        self._on_change = on_change
        self._clock = clock
        self._lock = threading.Lock()
        self._state: LeaseState = "active"
        self._confirmed_at: float | None = None
        self._failures = 0
        self._poll_failures = 0
        self._stop = threading.Event()
        self._beating = threading.Lock()  # held while a beat is in flight
        self._thread: threading.Thread | None = None

    @property
    def state(self) -> LeaseState:
        with self._lock:
            return self._state

    @property
    def interval_seconds(self) -> float:
        return self._interval

    @property
    def failing(self) -> bool:
        """Whether the latest beat failed: the run API (or its database) is away."""
        return self._failures > 0

    def seconds_since_confirmed(self) -> float | None:
        """How old the latest answer from the run API is; None before the first one."""
        with self._lock:
            return None if self._confirmed_at is None else self._clock() - self._confirmed_at

    def observe(self, state: LeaseState) -> None:
        """Record a lease state the run API answered (a beat, the long poll, a checkpoint)."""
        with self._lock:
            self._confirmed_at = self._clock()
            previous = self._state
            if _RANK[state] <= _RANK[previous]:
                return
            self._state = state
        if state == "cancel_requested":  # routine: pgsched cancel, Replace, a deadline
            log.info("run %s: cancellation requested", self._run_id)
        else:
            log.warning("run %s: lease lost (the run was reaped or ended elsewhere)", self._run_id)
        if self._on_change is not None:
            try:
                self._on_change(state)
            except Exception:
                log.exception("run %s: heartbeat state observer failed", self._run_id)

    def beat_once(self) -> Beat:
        """One heartbeat. Never raises: a failure is returned (and logged)."""
        try:
            state = self._client.heartbeat(timeout=self._timeout)
        except RunApiError as error:
            self._failures += 1
            log.log(
                _sparingly(self._failures),
                "run %s: heartbeat failed (%s in a row), the work goes on; retrying: %s",
                self._run_id,
                self._failures,
                error,
            )
            return Beat(None, str(error))
        if self._failures:
            log.info(
                "run %s: heartbeat restored after %s failed attempts",
                self._run_id,
                self._failures,
            )
            self._failures = 0
        self.observe(state)
        return Beat(state)

    def start(self) -> Self:
        self._thread = threading.Thread(
            target=self._run, name=f"pgsched-heartbeat-{self._run_id}", daemon=True
        )
        self._thread.start()
        return self

    def stop(self, timeout: float | None = None) -> None:
        """Stop beating, and wait for a beat in flight (at most ``timeout`` seconds).

        A long poll in flight is not waited for: it only reads, its answer is dropped,
        and the thread ends when it returns (at the latest its wait plus a request
        timeout later)."""
        self._stop.set()
        if self._thread is None or self._thread is threading.current_thread():
            return
        if self._beating.acquire(timeout=-1 if timeout is None else timeout):
            self._beating.release()

    def _run(self) -> None:
        try:
            while True:
                with self._beating:
                    if self._stop.is_set():
                        return
                    beat = self.beat_once()
                if beat.state == "lost":
                    return
                delay = self._interval if beat.error is None else min(self._interval, RETRY_SECONDS)
                self._wait(delay)
                if self.state == "lost":  # the long poll told: nothing left to keep alive
                    return
        finally:
            self._client.close()

    def _wait(self, seconds: float) -> None:
        """Until the next beat is due, the loop is stopped, or the lease is lost; meanwhile
        the long poll brings a cancel as soon as it is asked for."""
        deadline = time.monotonic() + seconds
        while not self._stop.is_set():
            remaining = deadline - time.monotonic()
            if remaining < MIN_POLL_SECONDS:
                break
            asked, started = self.state, time.monotonic()
            try:
                answer = self._client.wait_while(asked, remaining, timeout=self._timeout)
            except RunApiError as error:
                self._poll_failures += 1
                log.log(
                    # An outage shows in the beats' own lines; a refusal is worth telling.
                    logging.DEBUG if error.transient else _sparingly(self._poll_failures),
                    "run %s: waiting for a cancel failed (%s in a row); the next beat will"
                    " tell: %s",
                    self._run_id,
                    self._poll_failures,
                    error,
                )
                if not error.transient:
                    break  # a refusal stays a refusal: the next beat will tell
                # An outage, or the namespace's budget (429): ask again after a pause
                # (Retry-After when it says), so a cancel does not wait out the interval
                # — and never sooner than RETRY_SECONDS, so the loop does not spin.
                pause = max(error.retry_after or 0.0, RETRY_SECONDS)
                self._stop.wait(min(pause, max(0.0, deadline - time.monotonic())))
                continue
            self._poll_failures = 0
            if self._stop.is_set():
                return  # the work has ended: news of the lease is no longer ours to tell
            self.observe(answer)
            if self.state == "lost":
                return
            if self.state == asked and time.monotonic() - started < min(1.0, remaining / 2):
                # Nothing new, and at once (a server that does not wait, or an answer
                # behind what we know): asking again would only repeat it. Sleep.
                break
        self._stop.wait(max(0.0, deadline - time.monotonic()))


def _sparingly(failures: int) -> int:
    """The log level of the ``failures``-th failure in a row: the 1st, 2nd, 4th, 8th...
    are warnings, so an outage is visible without flooding the log."""
    return logging.WARNING if failures & (failures - 1) == 0 else logging.DEBUG
