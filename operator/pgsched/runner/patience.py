"""A pod's one-time database writes, made patiently.

A job pod writes a few things once and cannot write them later: the SDK runner's outcome,
the heartbeat sidecar's note that the workload ended. The database may be away exactly
then (a restart, a failover). Such a write is retried on a fresh connection with a growing
pause, up to a deadline; only connection-level errors are retried, since any other error
(a missing grant, say) would fail the same way every time.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

import psycopg

from pgsched.db.connection import Connection
from pgsched.db.session import Session, describe_error

log = logging.getLogger(__name__)

T = TypeVar("T")

FIRST_PAUSE_SECONDS = 0.5
LONGEST_PAUSE_SECONDS = 5.0


@dataclass(frozen=True)
class Tried(Generic[T]):
    """How a patient write went: its ``value``, or the last ``error`` (``transient``: a
    connection-level one, retried until the deadline)."""

    value: T | None
    error: psycopg.Error | None
    attempts: int
    transient: bool = False


def write(
    session: Session,
    operation: Callable[[Connection], T],
    *,
    what: str,
    run_id: int,
    timeout_seconds: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Tried[T]:
    """Run ``operation`` on ``session`` until it goes through or ``timeout_seconds`` pass;
    each retry is logged as ``run <id>: <what> failed (...)``."""
    deadline = clock() + timeout_seconds
    pause = FIRST_PAUSE_SECONDS
    attempts = 0
    while True:
        attempts += 1
        try:
            return Tried(session.run(operation), None, attempts)
        except (psycopg.OperationalError, psycopg.InterfaceError) as error:
            if clock() + pause > deadline:
                return Tried(None, error, attempts, transient=True)
            log.warning(
                "run %s: %s failed (%s), retrying in %.1fs",
                run_id,
                what,
                describe_error(error),
                pause,
            )
            sleep(pause)
            pause = min(pause * 2, LONGEST_PAUSE_SECONDS)
        except psycopg.Error as error:
            return Tried(None, error, attempts)
