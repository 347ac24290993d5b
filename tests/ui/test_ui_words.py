"""The schedule in words, as the overview shows it (the expression when no words fit)."""

from __future__ import annotations

import pytest

from pgsched.ui import words


@pytest.mark.parametrize(
    ("kind", "text", "said"),
    [
        ("cron", "30 8 * * MON-FRI", "weekdays at 08:30"),
        ("cron", "30 8 * * 1-5", "weekdays at 08:30"),
        ("cron", "0 6 * * 0,6", "weekends at 06:00"),
        ("cron", "0 9 * * 1", "Mondays at 09:00"),
        ("cron", "0 9 * * MON,WED,FRI", "Mondays, Wednesdays, Fridays at 09:00"),
        ("cron", "0 0 * * *", "daily at 00:00"),
        ("cron", "@daily", "daily at 00:00"),
        ("cron", "@hourly", "hourly at :00"),
        ("cron", "* * * * *", "every minute"),
        ("cron", "*/5 * * * *", "every 5 minutes"),
        ("cron", "15 */2 * * *", "every 2 hours at :15"),
        ("cron", "0 3 1 * *", "monthly on day 1 at 03:00"),
        ("rrule", "FREQ=DAILY;BYHOUR=8;BYMINUTE=30", "daily at 08:30"),
        ("rrule", "FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR;BYHOUR=8;BYMINUTE=30", "weekdays at 08:30"),
        ("rrule", "FREQ=MONTHLY;BYMONTHDAY=15;BYHOUR=12", "monthly on day 15 at 12:00"),
        ("rrule", "FREQ=HOURLY;INTERVAL=3;BYMINUTE=10", "every 3 hours at :10"),
        ("once", "2026-12-24T18:00", "once at 2026-12-24 18:00"),
    ],
)
def test_common_schedules_are_said_in_words_with_their_zone(
    kind: str, text: str, said: str
) -> None:
    assert words.describe(kind, text, "Europe/Sofia") == f"{said} Europe/Sofia"


@pytest.mark.parametrize(
    ("kind", "text"),
    [
        ("cron", "H H * * *"),
        ("cron", "0 9 * 6 *"),
        ("cron", "0 8,20 * * *"),
        ("cron", "0 9 * * FRI-MON"),
        ("rrule", "FREQ=MONTHLY;BYDAY=1MO;BYHOUR=9"),
        ("rrule", "FREQ=DAILY;COUNT=3;BYHOUR=9"),
    ],
)
def test_other_schedules_fall_back_to_the_expression(kind: str, text: str) -> None:
    assert words.describe(kind, text, "UTC") == f"{text} UTC"


def test_a_job_without_a_schedule_of_its_own_says_it_runs_after_its_upstreams() -> None:
    assert words.describe("none", "", "UTC") == "only after its upstreams (spec.after)"
