"""``spec.deadline``: the finish-by deadline, a duration or a wall-clock time of day.

The database reads the value as is: ``pgsched.finish_by`` casts it to an interval or a
time of day in the schedule's zone whenever the deadline service or ``pgsched describe``
asks. A value that does not cast would fail there, on every pass, long after the apply
that could have refused it; so only the forms that cast are admitted here (``2h``,
``90m``, ``1h30m``, ``45s``, or ``'06:00'``), and a duration only between a second and a
week. What a deadline means is ``engine.deadlines``'s.
"""

from __future__ import annotations

import re

from pgsched.spec.checker import Checker

MAX_SECONDS = 7 * 86400
# Forms Postgres reads as an interval and as a time of day (the finish_by function casts).
_DURATION = re.compile(r"^(?:(\d{1,3})h)?(?:(\d{1,5})m)?(?:(\d{1,6})s)?$")
_WALL_CLOCK = re.compile(r"^([01]\d|2[0-3]):[0-5]\d$")
_EXAMPLE = "deadline: 2h (or '06:00', a wall-clock time in the schedule's zone)"


def validate(check: Checker) -> None:
    value = check.spec.get("deadline")
    if value is None:
        return
    if not isinstance(value, str):
        check.fail("deadline", f"must be a string, got {value!r}", _EXAMPLE)
        return
    if _WALL_CLOCK.match(value):
        return
    found = _DURATION.match(value)
    if not value or found is None:
        check.fail(
            "deadline",
            f"{value!r} is neither a duration (2h, 90m, 1h30m) nor a time of day (HH:MM)",
            _EXAMPLE,
        )
        return
    hours, minutes, seconds = (int(part or 0) for part in found.groups())
    total = hours * 3600 + minutes * 60 + seconds
    if not 1 <= total <= MAX_SECONDS:
        check.fail("deadline", f"{value!r} must be between 1s and 7 days", _EXAMPLE)
