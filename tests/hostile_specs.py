"""Hostile schedules and the exact refusal each must get, whenever it is applied.

Shared by the cluster test that applies them next to a normal ScheduledJob
(tests/cluster/test_hostile_input.py) and the unit test that validates them with the
clock pinned across a year (tests/unit/test_rrule_validation.py).
"""

from __future__ import annotations

INTERVAL_0 = "DTSTART:20270101T000000\nRRULE:FREQ=DAILY;INTERVAL=0"
HOSTILE = {
    # The CRD's pattern refuses INTERVAL=0 at apply; a space gets the same rule past it.
    "rrule-interval-0": (
        {"rrule": INTERVAL_0.replace("INTERVAL=0", "INTERVAL= 0")},
        "spec.rrule: INTERVAL=0 must be an integer in 1..1000000 (example: FREQ=WEEKLY;INTERVAL=2)",
    ),
    "rrule-slow-scan": (
        {
            # DTSTART pinned, so the verdict is the same on every day. Without it the rule
            # counts from the day it is applied, and a 7-second interval's first Dec 31
            # 03:05:09 is in the budget's reach on some days only: the refusal then says
            # so (HOSTILE_UNANCHORED, tests/unit/test_rrule_validation.py).
            "rrule": "DTSTART:20260101T000000\n"
            "RRULE:FREQ=SECONDLY;INTERVAL=7;BYMONTH=12;BYMONTHDAY=31;BYHOUR=3;BYMINUTE=5;BYSECOND=9"
        },
        "never produces an occurrence",
    ),
    "cron-never": (
        {"schedule": "0 0 30 2 *"},
        "spec.schedule: '0 0 30 2 *' never fires",
    ),
    "run-at-year-9999": (
        {"runAt": "9999-12-31T23:59:59", "timeZone": "America/New_York"},
        "spec.runAt: '9999-12-31T23:59:59': year 9999 is outside 1901..8999",
    ),
}

# The same rule without DTSTART: refused on every day, with a message that names what the
# verdict depended on (the day it was applied, or the moment the search started).
HOSTILE_UNANCHORED = (
    "FREQ=SECONDLY;INTERVAL=7;BYMONTH=12;BYMONTHDAY=31;BYHOUR=3;BYMINUTE=5;BYSECOND=9"
)
