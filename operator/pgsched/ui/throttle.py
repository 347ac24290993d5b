"""Failed sign-ins, counted per client address and overall, so guessing costs time.

Every token the UI has not seen costs a TokenReview on the API server. Without a limit a
visitor could make the UI send them as fast as it can post (a load on the API server, and
an oracle for guessed tokens). Failures are counted in fixed windows of ``window``
seconds: after ``per_client`` failures from one address, or ``overall`` from all of them,
every request that presents a token from that address (or any, for the overall limit) is
answered 429 with Retry-After until the window ends, without a TokenReview. A visitor
already signed in keeps their session: only presenting a token is limited.

Memory is bounded: at most ``clients`` addresses are remembered; past that, the address
that failed least recently is forgotten (the overall limit still holds). Behind a proxy, or through ``kubectl
port-forward``, every visitor has the proxy's address, so they share one per-client limit.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

PER_CLIENT = 10
OVERALL = 100
WINDOW_SECONDS = 60.0
CLIENTS = 10_000


class FailedLogins:
    def __init__(
        self,
        *,
        per_client: int = PER_CLIENT,
        overall: int = OVERALL,
        window: float = WINDOW_SECONDS,
        clients: int = CLIENTS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._per_client = per_client
        self._overall = overall
        self._window = window
        self._clients = clients
        self._clock = clock
        self._lock = threading.Lock()
        # address -> (window start, failures), least recently failed first
        self._counts: OrderedDict[str, tuple[float, int]] = OrderedDict()
        self._all: tuple[float, int] = (0.0, 0)

    def retry_after(self, client: str) -> int | None:
        """Whole seconds until ``client`` may present a token again, or None: go ahead."""
        now = self._clock()
        with self._lock:
            waits = [
                start + self._window - now
                for start, failures, limit in (
                    (*self._all, self._overall),
                    (*self._counts.get(client, (0.0, 0)), self._per_client),
                )
                if failures >= limit and now < start + self._window
            ]
        return max(1, math.ceil(max(waits))) if waits else None

    def failed(self, client: str) -> None:
        now = self._clock()
        with self._lock:
            self._all = self._counted(self._all, now)
            counted = self._counted(self._counts.pop(client, (0.0, 0)), now)
            while len(self._counts) >= self._clients:
                self._counts.popitem(last=False)
            self._counts[client] = counted

    def _counted(self, window: tuple[float, int], now: float) -> tuple[float, int]:
        start, failures = window
        if now >= start + self._window:
            return now, 1
        return start, failures + 1
