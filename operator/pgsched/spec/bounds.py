"""The fields that leave occurrences out without changing the schedule's rule.

``activeFrom``/``activeUntil`` bound when the schedule runs at all, and
``calendars.exclude`` names the Calendars whose days it skips. Both apply to every
schedule kind alike, so they are checked apart from the schedule itself.
"""

from __future__ import annotations

from datetime import datetime

from pgsched import names
from pgsched.schedule import timeline
from pgsched.schedule import window as windows
from pgsched.spec.checker import Checker, describe


def window(check: Checker) -> windows.Window | None:
    bounds: dict[str, datetime] = {}
    for key in (windows.FROM, windows.UNTIL):
        if check.spec.get(key) is None:
            continue
        value = check.spec[key]
        try:
            if not isinstance(value, str):
                raise ValueError(f"must be an RFC 3339 timestamp string, got {describe(value)}")
            bounds[key] = timeline.utc(windows.parse_instant(value))
        except ValueError as error:
            check.fail(key, str(error), f"{key}: '2027-01-01T00:00:00Z'")
    start, end = bounds.get(windows.FROM), bounds.get(windows.UNTIL)
    if start is not None and end is not None and end < start:
        check.fail(
            windows.UNTIL,
            f"{check.spec[windows.UNTIL]!r} is before activeFrom {check.spec[windows.FROM]!r}",
            "activeUntil: '2027-12-31T23:59:59Z'",
        )
    if start is None and end is None:
        return None
    return windows.Window(start, end)


MAX_CALENDARS = 10


def calendars(check: Checker) -> None:
    section = check.section("calendars")
    check.unknown(section, {"exclude"}, "calendars.")
    value = section.get("exclude", [])
    example = "calendars: {exclude: [bank-holidays]}"
    if not isinstance(value, list) or len(value) > MAX_CALENDARS:
        check.fail(
            "calendars.exclude",
            f"must be a list of at most {MAX_CALENDARS} Calendar names",
            example,
        )
        return
    for index, name in enumerate(value):
        if not isinstance(name, str) or not names.OBJECT_NAME.match(name):
            check.fail(f"calendars.exclude[{index}]", f"{name!r} is not a Calendar name", example)
        elif value.index(name) != index:
            check.fail(f"calendars.exclude[{index}]", f"{name!r} is named twice", example)
