"""What ``ctx.checkpoint()`` asks: must the run stop now, and why?

Three signals can stop a run, in this order of precedence:

1. the lease was lost (``lease-lost``) — the run is not ours any more;
2. cancellation was requested (``cancelled``);
3. the runner received SIGTERM (``terminated``) — the pod is being stopped.

The first two come from the heartbeat loop's latest answer, so a checkpoint normally costs
a lock and a comparison and can be called once per row. When that answer is stale and the
loop does not know why (no beat yet, or one that hangs) the checkpoint asks the run API
itself, read-only (``GET .../lease``), at most once per heartbeat interval. Not while the
loop's beats fail: the run API is away, and a check would only hold the job up until it
failed too (a server whose database is away takes seconds to say so). A failed check is
logged and treated as "carry on" (I6): only an *answer* stops work, never its absence.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from pgsched.runner.heartbeat import HeartbeatLoop
from pgsched.runner.runapi_client import RunApiClient, RunApiError
from pgsched.sdk import CancelCause, Cancelled

log = logging.getLogger(__name__)


class CancellationWatch:
    def __init__(
        self,
        loop: HeartbeatLoop,
        client: RunApiClient,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._loop = loop
        self._client = client
        self._clock = clock
        # Stale: no answer for two intervals, i.e. at least one beat is overdue.
        self._stale_after = 2 * loop.interval_seconds
        self._checked_at: float | None = None
        self._terminated = threading.Event()

    def terminate(self) -> None:
        """The SIGTERM handler: stop at the next checkpoint."""
        self._terminated.set()

    def checkpoint(self) -> None:
        cause = self.cause()
        if cause is not None:
            raise Cancelled(cause)

    def cause(self) -> CancelCause | None:
        age = self._loop.seconds_since_confirmed()
        stale = age is None or age > self._stale_after
        if stale and not self._loop.failing and self._may_check():
            self.refresh()
        state = self._loop.state
        if state == "lost":
            return "lease-lost"
        if state == "cancel_requested":
            return "cancelled"
        return "terminated" if self._terminated.is_set() else None

    def refresh(self) -> None:
        """Ask the run API now (read-only); a failure is logged, never raised."""
        self._checked_at = self._clock()
        try:
            state = self._client.lease_state()
        except RunApiError as error:
            log.warning(
                "run %s: could not check the lease (%s); carrying on", self._client.run_id, error
            )
            return
        self._loop.observe(state)

    def _may_check(self) -> bool:
        return (
            self._checked_at is None
            or self._clock() - self._checked_at >= self._loop.interval_seconds
        )
