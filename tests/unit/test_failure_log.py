"""Failure streaks are logged once, then as reminders, then on recovery."""

from __future__ import annotations

import logging

from pgsched.failures import FailureLog


class Clock:
    now = 0.0

    def __call__(self):
        return self.now


def test_a_streak_logs_once_reminds_and_reports_recovery(caplog):
    clock = Clock()
    failures = FailureLog(logging.getLogger("test"), "tick", every=30, clock=clock)
    with caplog.at_level(logging.WARNING):
        for second in range(100):
            clock.now = second
            failures.failed("OperationalError: connection refused")
        failures.succeeded()
    messages = [record.getMessage() for record in caplog.records]
    assert messages == [
        "tick failed, will retry: OperationalError: connection refused",
        "tick still failing after 30s (31 attempts): OperationalError: connection refused",
        "tick still failing after 60s (61 attempts): OperationalError: connection refused",
        "tick still failing after 90s (91 attempts): OperationalError: connection refused",
        "tick recovered after 99s (100 failed attempts)",
    ]


def test_success_without_a_streak_logs_nothing(caplog):
    failures = FailureLog(logging.getLogger("test"), "tick")
    with caplog.at_level(logging.DEBUG):
        failures.succeeded()
    assert caplog.records == []


def test_a_transient_failure_warns_and_is_an_error_only_when_it_lasts(caplog):
    # An API server answers 429 "storage is (re)initializing" for a moment after a CRD is
    # installed: nobody needs to look at that, unless it goes on.
    clock = Clock()
    failures = FailureLog(logging.getLogger("test"), "watching calendars", every=30, clock=clock)
    with caplog.at_level(logging.WARNING):
        failures.failed("429 TooManyRequests: storage is (re)initializing", transient=True)
        clock.now = 0.05
        failures.succeeded()
        for second in range(31):
            clock.now = 100 + second
            failures.failed("503 ServiceUnavailable", transient=True)
    levels = [(record.levelname, record.getMessage()) for record in caplog.records]
    assert levels == [
        (
            "WARNING",
            "watching calendars failed, will retry: 429 TooManyRequests: storage is (re)initializing",
        ),
        ("WARNING", "watching calendars recovered after 0s (1 failed attempts)"),
        ("WARNING", "watching calendars failed, will retry: 503 ServiceUnavailable"),
        (
            "ERROR",
            "watching calendars still failing after 30s (31 attempts): 503 ServiceUnavailable",
        ),
    ]
