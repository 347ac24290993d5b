"""A client-side token bucket for API calls.

The Python Kubernetes client has no client-side rate limiter (client-go's default is
5 QPS, burst 10). Without one, a thousand runs due at the same second would become a
thousand simultaneous Job creations. Every request pgsched makes goes through one bucket
per process: ``qps`` tokens per second refill it, up to ``burst``.
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

    def acquire(self) -> float:
        """Take one token, waiting if none is left; returns the seconds waited."""
        with self._lock:
            now = self._clock()
            self._tokens = min(self.burst, self._tokens + (now - self._updated) * self.qps)
            self._updated = now
            self._tokens -= 1
            wait = -self._tokens / self.qps if self._tokens < 0 else 0.0
        if wait > 0:
            self._sleep(wait)
        return wait
