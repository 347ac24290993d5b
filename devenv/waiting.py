"""Waiting for the cluster to reach a state, and saying what it looked like when it did not.

A bare ``TimeoutError`` after 30 s tells nobody anything. ``wait_for`` keeps the predicate's
last answer (or exception) and, on timeout, reports it together with a description that may
itself look at the cluster (``describe=lambda: kubectl("get", "pods", "-o", "wide")``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class WaitTimeout(AssertionError):
    """Raised by ``wait_for``; an AssertionError so pytest shows it as a test failure."""


def wait_for(
    predicate: Callable[[], T],
    timeout: float = 30.0,
    *,
    describe: str | Callable[[], str],
    interval: float = 0.2,
) -> T:
    """Call ``predicate`` until it returns something truthy, and return that.

    Exceptions from the predicate count as "not yet" (the object may not exist yet); on
    timeout the last value or exception is reported along with ``describe``.
    """
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            value = predicate()
            if value:
                return value
            last = value
        except Exception as error:  # not there yet, or not readable yet: keep waiting
            last = error
        if time.monotonic() >= deadline:
            break
        time.sleep(interval)
    what = describe() if callable(describe) else describe
    raise WaitTimeout(f"timed out after {timeout:g}s waiting for {what}\nlast observed: {last!r}")
