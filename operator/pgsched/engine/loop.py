"""The one loop every periodic service runs in.

pgsched's periodic work is a set of small services, one module each, each a
``run_once(...) -> Result`` that does one round and says what it did: the tick (its phases,
``materialize``, ``reap``, ``settle``, ``dispatch``, under one leader lock), and in the
operator the outbox publisher, the gauges, the verdicts of silent runs and the resync.
``run`` drives a list of them on one thread, each on its own interval:

- the wait between rounds is ``stop.wait``, so shutdown interrupts it at once, and it
  counts from the end of a round;
- each result is logged (DEBUG), so ``--log-level DEBUG`` shows what every round did;
- it fails open: an exception is logged (once per streak, ``failures.FailureLog``), handed
  to ``on_error`` (which may drop a broken database session), and the service simply runs
  again after its interval. The loop itself never dies of a service's error (I7).

A service whose result says more is waiting (``again``) runs again at once instead of
sleeping, as the tick does after a full dispatch batch. A loop given its own ``wait`` may be
woken early: the tick's waits on a database notification (a run's end that a waiting run
needs: ``sql/functions/wake_dispatchers.sql``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pgsched.failures import FailureLog

log = logging.getLogger(__name__)


def _never(result: Any) -> bool:
    return False


@dataclass(frozen=True)
class Service:
    """``run`` one round every ``interval`` seconds (a number, or a function of nothing
    for a wait that is computed each time, such as the tick's clock-aligned one)."""

    name: str
    run: Callable[[], Any]
    interval: float | Callable[[], float]
    again: Callable[[Any], bool] = _never

    def wait(self) -> float:
        return self.interval() if callable(self.interval) else self.interval


def run(
    services: Sequence[Service],
    stop: threading.Event,
    *,
    on_error: Callable[[Service, Exception], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    wait: Callable[[float], bool] | None = None,
) -> None:
    """Run ``services`` until ``stop`` is set; never raises. ``wait(seconds)`` waits between
    rounds (default ``stop.wait``); when it says it was woken (True), every service is due."""
    failures = {service.name: FailureLog(log, service.name) for service in services}
    due = dict.fromkeys((service.name for service in services), clock())
    while not stop.is_set():
        for service in services:
            if stop.is_set():
                break
            if due[service.name] > clock():
                continue
            # The wait counts from the round's end: a computed one (the tick's, aligned to
            # whole seconds) is computed then, and counted from the round's start it would
            # come early by the round's length (seen: ticks starting just before the whole
            # second, so a run due on it waited a whole interval).
            after = _round(service, failures[service.name], on_error)
            due[service.name] = clock() + after
        pause = max(0.0, min(due.values()) - clock())
        if wait is None:
            stop.wait(pause)
            continue
        if wait(pause):
            due = dict.fromkeys(due, clock())


def _round(
    service: Service,
    failures: FailureLog,
    on_error: Callable[[Service, Exception], None] | None,
) -> float:
    """One round of ``service``; the seconds until its next."""
    try:
        result = service.run()
    except Exception as error:
        failures.failed(f"{type(error).__name__}: {error}")
        log.debug("%s failure", service.name, exc_info=True)
        if on_error is not None:
            try:
                on_error(service, error)
            except Exception:
                log.exception("%s: error handler failed", service.name)
        return service.wait()
    log.debug("%s: %s", service.name, result)
    failures.succeeded()
    return 0.0 if service.again(result) else service.wait()
