"""Logging a failure streak without flooding the log.

A tick loop that fails every 200 ms during a ten-minute database outage would write 3,000
identical errors. ``FailureLog`` writes the first failure of a streak, then a reminder at
most every ``every`` seconds with how long it has lasted, and one line when it recovers —
so the log says why the operator waited, once, and when it stopped waiting.

A failure the server itself calls passing (``transient=True``: a 429 or 503 while an API
server's cache fills after a restart or a new CRD, a connection reset) is a WARNING when it
starts; it becomes an ERROR only when the streak outlasts ``every`` seconds. An ERROR line
means someone should look, and a watch retried once 50 ms after a CRD was installed does
not need anyone.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable


class FailureLog:
    def __init__(
        self,
        logger: logging.Logger,
        what: str,
        *,
        every: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._log = logger
        self._what = what
        self._every = every
        self._clock = clock
        self._since: float | None = None
        self._last: float = 0.0
        self._count = 0

    def failed(self, error: str, *, transient: bool = False) -> None:
        now = self._clock()
        self._count += 1
        if self._since is None:
            self._since = self._last = now
            level = logging.WARNING if transient else logging.ERROR
            self._log.log(level, "%s failed, will retry: %s", self._what, error)
        elif now - self._last >= self._every:
            self._last = now
            self._log.error(
                "%s still failing after %.0fs (%d attempts): %s",
                self._what,
                now - self._since,
                self._count,
                error,
            )

    def succeeded(self) -> None:
        if self._since is not None:
            self._log.warning(
                "%s recovered after %.0fs (%d failed attempts)",
                self._what,
                self._clock() - self._since,
                self._count,
            )
        self._since = None
        self._count = 0
