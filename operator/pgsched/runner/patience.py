"""A pod's one-time writes, made patiently.

A job pod writes a few things once and cannot write them later: the SDK runner's outcome,
the heartbeat sidecar's note that the workload ended. The run API (or the database behind
it) may be away exactly then (an operator rollout, a failover). Such a write is retried
with a growing pause, or the server's ``Retry-After`` when that is longer, up to a deadline;
only transient errors are retried, since any other (a refused lease, say) would fail the
same way every time.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from pgsched.runner.runapi_client import RunApiError

log = logging.getLogger(__name__)

T = TypeVar("T")

FIRST_PAUSE_SECONDS = 0.5
LONGEST_PAUSE_SECONDS = 5.0


@dataclass(frozen=True)
class Tried(Generic[T]):
    """How a patient write went: its ``value``, or the last ``error`` (a transient one
    means the deadline passed)."""

    value: T | None
    error: RunApiError | None
    attempts: int


def write(
    attempt: Callable[[], T],
    *,
    what: str,
    run_id: int,
    timeout_seconds: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Tried[T]:
    """Call ``attempt`` until it goes through or ``timeout_seconds`` pass; each retry is
    logged as ``run <id>: <what> failed (...)``."""
    deadline = clock() + timeout_seconds
    pause = FIRST_PAUSE_SECONDS
    attempts = 0
    while True:
        attempts += 1
        try:
            return Tried(attempt(), None, attempts)
        except RunApiError as error:
            wait = max(pause, error.retry_after or 0.0)
            if not error.transient or clock() + wait > deadline:
                return Tried(None, error, attempts)
            log.warning("run %s: %s failed (%s), retrying in %.1fs", run_id, what, error, wait)
            sleep(wait)
            pause = min(pause * 2, LONGEST_PAUSE_SECONDS)
