"""A client-side token bucket for API calls.

The Python Kubernetes client has no client-side rate limiter (client-go's default is
5 QPS, burst 10). Without one, a thousand runs due at the same second would become a
thousand simultaneous Job creations. Every request pgsched makes goes through one bucket
per process: ``qps`` tokens per second refill it, up to ``burst``.

Requests come in three priorities: *urgent* ones (creating Jobs, reading a finished Job's
outcome) take tokens in arrival order; the others get spare tokens above half the burst and
a guaranteed share (``background_share``), so statuses keep moving during a stampede at a
small cost to the Job creation rate. Of those, what people read (*visible*: statuses and
Events) goes before *housekeeping* (handing a lease Secret to its Job, on a thread of its
own), which gets one token in ``HOUSEKEEPING_EVERY`` while both wait: a stampede's
thousands of hand-overs never hold up another job's status, and are never starved either.

How the tokens are shared: docs/architecture.md, "The API budget: urgent and background
requests".
"""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Callable

DEFAULT_BACKGROUND_SHARE = 1 / 40
# While visible and housekeeping requests both wait, one token in this many goes to
# housekeeping.
HOUSEKEEPING_EVERY = 4


class Priority(enum.IntEnum):
    URGENT = 0  # Job creations, a finished Job's outcome: in arrival order
    VISIBLE = 1  # statuses and Events: what `kubectl get sj` and `describe` show
    HOUSEKEEPING = 2  # lease hand-overs: can wait


class TokenBucket:
    def __init__(
        self,
        qps: float,
        burst: int,
        *,
        background_share: float = DEFAULT_BACKGROUND_SHARE,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError(
                f"rate limit needs qps > 0 and burst >= 1, got qps={qps} burst={burst}"
            )
        if not 0 < background_share < 1:
            raise ValueError(f"background_share must be between 0 and 1, got {background_share}")
        self.qps = qps
        self.burst = burst
        self.background_share = background_share
        self._reserve = burst // 2  # tokens background requests leave to urgent ones
        self._clock = clock
        self._sleep = sleep
        self._tokens = float(burst)
        self._share = 0.0  # background tokens due under contention (at most one)
        self._updated = clock()
        self._lock = threading.Lock()
        self._urgent_waiting = 0  # urgent requests sleeping for a reserved token
        self._waiting = {Priority.VISIBLE: 0, Priority.HOUSEKEEPING: 0}
        self._visible_in_a_row = 0  # background tokens since housekeeping last had one

    def acquire(self, priority: Priority = Priority.URGENT) -> float:
        """Take one token, waiting if none is left; returns the seconds waited."""
        if priority is not Priority.URGENT:
            with self._lock:
                self._waiting[priority] += 1
            try:
                return self._acquire_background(priority)
            finally:
                with self._lock:
                    self._waiting[priority] -= 1
        with self._lock:
            wait = self._reserve_token()
            if wait > 0:
                self._urgent_waiting += 1
        if wait > 0:
            try:
                self._sleep(wait)
            finally:
                with self._lock:
                    self._urgent_waiting -= 1
        return wait

    def _acquire_background(self, priority: Priority) -> float:
        """A spare token, or the background's share: whichever comes first, when it is
        this priority's turn."""
        waited = 0.0
        while True:
            with self._lock:
                self._refill()
                turn = self._turn(priority)
                if turn and self._tokens >= 1 + self._reserve and self._urgent_waiting == 0:
                    self._tokens -= 1
                    self._took(priority)
                    return waited
                if turn and self._share >= 1:
                    self._share -= 1
                    self._took(priority)
                    wait = self._reserve_token()
                    break
                until_share = (1 - self._share) / (self.qps * self.background_share)
                until_spare = (1 + self._reserve - self._tokens) / self.qps
                pause = max(min(until_share, until_spare) if turn else 1 / self.qps, 0.001)
            self._sleep(pause)
            waited += pause
        if wait > 0:
            self._sleep(wait)
        return waited + wait

    def _turn(self, priority: Priority) -> bool:
        """Whether a background request of ``priority`` may take the next token: visible
        ones first, but housekeeping gets one in HOUSEKEEPING_EVERY. Lock held."""
        owed = self._visible_in_a_row >= HOUSEKEEPING_EVERY - 1
        if priority is Priority.VISIBLE:
            return not (owed and self._waiting[Priority.HOUSEKEEPING])
        return owed or not self._waiting[Priority.VISIBLE]

    def _took(self, priority: Priority) -> None:
        if priority is Priority.VISIBLE:
            self._visible_in_a_row += 1
        else:
            self._visible_in_a_row = 0

    def _reserve_token(self) -> float:
        """Take the next token (the bucket may go into debt); the seconds until it is due.
        Call with the lock held."""
        self._refill()
        self._tokens -= 1
        return -self._tokens / self.qps if self._tokens < 0 else 0.0

    def _refill(self) -> None:
        now = self._clock()
        elapsed = now - self._updated
        self._tokens = min(self.burst, self._tokens + elapsed * self.qps)
        self._share = min(1.0, self._share + elapsed * self.qps * self.background_share)
        self._updated = now
