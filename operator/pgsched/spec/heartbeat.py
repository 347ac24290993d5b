"""``spec.heartbeat``: the interval and the two timeouts after which a silent run is lost.

They are checked against each other, not only each alone, because timeouts that do not
fit the interval reap healthy jobs.
"""

from __future__ import annotations

from pgsched.engine.definitions import DefinitionSpec
from pgsched.spec.checker import Checker

_DEFAULTS = DefinitionSpec  # every default of a spec field is stated once, there


def timeouts(check: Checker) -> tuple[int, int, int]:
    section = check.section("heartbeat")
    check.unknown(
        section, {"intervalSeconds", "timeoutSeconds", "orphanTimeoutSeconds"}, "heartbeat."
    )
    interval = check.integer(
        section,
        "intervalSeconds",
        path="heartbeat.intervalSeconds",
        default=_DEFAULTS.heartbeat_interval_seconds,
        minimum=1,
        example="intervalSeconds: 10",
    )
    interval = interval or _DEFAULTS.heartbeat_interval_seconds
    timeout = check.integer(
        section,
        "timeoutSeconds",
        path="heartbeat.timeoutSeconds",
        default=max(_DEFAULTS.heartbeat_timeout_seconds, 3 * interval),
        minimum=1,
        example=f"timeoutSeconds: {3 * interval}",
    )
    timeout = timeout or 60
    # A timeout shorter than two intervals reaps a healthy job after one slow heartbeat.
    if timeout < 2 * interval:
        check.fail(
            "heartbeat.timeoutSeconds",
            f"{timeout} must be at least twice intervalSeconds ({interval})",
            f"timeoutSeconds: {3 * interval}",
        )
    orphan = check.integer(
        section,
        "orphanTimeoutSeconds",
        path="heartbeat.orphanTimeoutSeconds",
        default=max(_DEFAULTS.orphan_timeout_seconds, timeout),
        minimum=1,
        example="orphanTimeoutSeconds: 300",
    )
    orphan = orphan or 300
    if orphan < timeout:
        check.fail(
            "heartbeat.orphanTimeoutSeconds",
            f"{orphan} must be at least timeoutSeconds ({timeout}): a job's first heartbeat"
            " can come later than its next ones (image pull, start-up)",
            f"orphanTimeoutSeconds: {max(300, timeout)}",
        )
    return interval, timeout, orphan
