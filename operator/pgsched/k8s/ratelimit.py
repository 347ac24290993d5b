"""A client-side token bucket for API calls.

The Python Kubernetes client has no client-side rate limiter (client-go's default is
5 QPS, burst 10). Without one, a thousand runs due at the same second would become a
thousand simultaneous Job creations. Every request pgsched makes goes through one bucket
per process: ``qps`` tokens per second refill it, up to ``burst``.

Requests come in two priorities. *Urgent* ones (creating Jobs, reading the outcome of a
finished one) take a token or reserve the next one, in arrival order. *Background* ones
(Events, status patches, cleanup: what the publisher does) only take a whole token that is
there now and that no urgent request is waiting for. So when 1,000 runs fall due at once
the budget goes to creating their Jobs, and the Events and statuses about them follow as
soon as launching leaves tokens over — instead of every Job waiting behind its own
"run started" Event (bench/README.md, the burst benchmark).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class TokenBucket:
    def __init__(
        self,
        qps: float,
        burst: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError(
                f"rate limit needs qps > 0 and burst >= 1, got qps={qps} burst={burst}"
            )
        self.qps = qps
        self.burst = burst
        self._clock = clock
        self._sleep = sleep
        self._tokens = float(burst)
        self._updated = clock()
        self._lock = threading.Lock()
        self._urgent_waiting = 0  # urgent requests sleeping for a reserved token

    def acquire(self, *, urgent: bool = True) -> float:
        """Take one token, waiting if none is left; returns the seconds waited."""
        if not urgent:
            return self._acquire_spare()
        with self._lock:
            self._refill()
            self._tokens -= 1
            wait = -self._tokens / self.qps if self._tokens < 0 else 0.0
            if wait > 0:
                self._urgent_waiting += 1
        if wait > 0:
            try:
                self._sleep(wait)
            finally:
                with self._lock:
                    self._urgent_waiting -= 1
        return wait

    def _acquire_spare(self) -> float:
        """A background request: wait until a token is there that nobody urgent needs."""
        waited = 0.0
        while True:
            with self._lock:
                self._refill()
                if self._tokens >= 1 and self._urgent_waiting == 0:
                    self._tokens -= 1
                    return waited
                pause = max((1 - self._tokens) / self.qps, 0.001)
            self._sleep(pause)
            waited += pause

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._updated) * self.qps)
        self._updated = now
