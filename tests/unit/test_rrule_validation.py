"""RRULE text is checked against RFC 5545 part by part, and no rule can stall an expansion."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest

from hostile_specs import HOSTILE, HOSTILE_UNANCHORED
from pgsched import schedule, spec
from pgsched.engine import definitions

NOW = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)
SOFIA = "Europe/Sofia"


def rejection(text: str, zone: str = "UTC", *, now: datetime = NOW) -> str:
    with pytest.raises(spec.SpecError) as caught:
        spec.parse({"rrule": text, "timeZone": zone}, anchor=now, now=now)
    (error,) = caught.value.errors
    assert error.path == "spec.rrule" and error.example
    return str(error)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("BYHOUR=8", "spec.rrule: FREQ is required in every RRULE"),
        ("FREQ=DAILY;INTERVAL=0", "INTERVAL=0 must be an integer in 1..1000000"),
        ("FREQ=DAILY;COUNT=0", "COUNT=0 must be an integer in 1..10000"),
        # str.isdigit() accepts these; int() refuses the first, reads the second as 12.
        ("FREQ=DAILY;INTERVAL=\u00b2", "INTERVAL=\u00b2 must be an integer in 1..1000000"),
        ("FREQ=DAILY;COUNT=\u0661\u0662", "COUNT=\u0661\u0662 must be an integer in 1..10000"),
        ("FREQ=DAILY;COUNT=2;UNTIL=20271231T000000", "COUNT and UNTIL must not both be given"),
        (
            "FREQ=DAILY;BYHOUR=25",
            "spec.rrule: BYHOUR=25 is out of range 0..23 (example: FREQ=DAILY;BYHOUR=8)",
        ),
        ("FREQ=HOURLY;BYMINUTE=60", "BYMINUTE=60 is out of range 0..59"),
        ("FREQ=MINUTELY;BYSECOND=61", "BYSECOND=61 is out of range 0..60"),
        ("FREQ=MINUTELY;BYSECOND=60", "BYSECOND=60 is a leap second"),
        ("FREQ=MONTHLY;BYMONTHDAY=0", "BYMONTHDAY=0 is out of range 1..31 or -31..-1"),
        ("FREQ=MONTHLY;BYMONTHDAY=32", "BYMONTHDAY=32 is out of range"),
        ("FREQ=YEARLY;BYYEARDAY=367", "BYYEARDAY=367 is out of range 1..366 or -366..-1"),
        ("FREQ=YEARLY;BYWEEKNO=54", "BYWEEKNO=54 is out of range 1..53"),
        ("FREQ=YEARLY;BYMONTH=13", "BYMONTH=13 is out of range 1..12"),
        ("FREQ=MONTHLY;BYDAY=MO;BYSETPOS=367", "BYSETPOS=367 is out of range"),
        ("FREQ=MONTHLY;BYDAY=54MO", "the ordinal 54 is out of range 1..53"),
        ("FREQ=MONTHLY;BYDAY=8MO", "ordinals within a month are 1..5 or -5..-1"),
        ("FREQ=WEEKLY;BYDAY=XX", "BYDAY=XX is not a weekday"),
        ("FREQ=WEEKLY;WKST=XX", "WKST=XX is not a weekday"),
        ("FREQ=DAILY;BYDAY=1MO", "ordinal weekdays like 1MO are only allowed with FREQ=MONTHLY"),
        ("FREQ=YEARLY;BYWEEKNO=1;BYDAY=1MO", "must not be combined with BYWEEKNO"),
        ("FREQ=YEARLY;BYDAY=TH,21TU", "mixes plain and ordinal weekdays"),
        ("FREQ=WEEKLY;BYMONTHDAY=3", "BYMONTHDAY is not allowed with FREQ=WEEKLY"),
        ("FREQ=MONTHLY;BYYEARDAY=100", "BYYEARDAY is not allowed with FREQ=MONTHLY"),
        ("FREQ=MONTHLY;BYWEEKNO=20", "BYWEEKNO is only allowed with FREQ=YEARLY"),
        ("FREQ=MONTHLY;BYSETPOS=1", "BYSETPOS needs another BYxxx part"),
        ("FREQ=DAILY;BYEASTER=0", "BYEASTER is not an RFC 5545 rule part"),
        ("FREQ=DAILY;BYHOUR=8;BYHOUR=9", "BYHOUR is given twice"),
        ("FREQ=DAILY;BYHOUR=8,8", "lists 8 twice"),
        ("FREQ=DAILY;UNTIL=tomorrow", "UNTIL=TOMORROW is not a date-time"),
        ("RRULE:FREQ=DAILY\nEXRULE:FREQ=WEEKLY", "EXRULE is not part of RFC 5545"),
        ("RRULE:FREQ=DAILY\nEXDATE:2027-01-01", "is not a date-time like 20260105T083000"),
        ("RRULE:FREQ=DAILY\nRDATE;VALUE=PERIOD:20270101T000000/PT1H", "periods are not supported"),
        ("RRULE:FREQ=DAILY\nX-FOO:1", "X-FOO is not a property pgsched reads"),
        ("FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=30", "never produces an occurrence"),
        ("FREQ=MONTHLY;INTERVAL=12;BYMONTH=3", "never produces an occurrence"),
        (
            "FREQ=YEARLY;BYDAY=MO;"
            + ";".join(
                f"{name}={','.join(map(str, range(top)))}"
                for name, top in (("BYHOUR", 24), ("BYMINUTE", 60))
            ),
            "use a finer FREQ",
        ),
    ],
)
def test_each_rfc5545_violation_is_named_with_a_valid_example(text, message):
    assert message in rejection(text)


def test_until_in_utc_is_accepted_when_dtstart_has_a_zone():
    text = f"DTSTART;TZID={SOFIA}:20270105T093000\nRRULE:FREQ=DAILY;UNTIL=20270107T073000Z"
    parsed = spec.parse({"rrule": text, "timeZone": SOFIA}, anchor=NOW, now=NOW)
    built = definitions.build_schedule(parsed, hash_seed="", anchor=NOW)
    assert [item.at.isoformat() for item in built.upcoming(NOW, count=5)] == [
        "2027-01-05T07:30:00+00:00",
        "2027-01-06T07:30:00+00:00",
        "2027-01-07T07:30:00+00:00",
    ]


def test_a_date_until_includes_that_whole_day():
    built = schedule.build(
        "rrule", "DTSTART:20270105T093000\nRRULE:FREQ=DAILY;UNTIL=20270106", zone="UTC", anchor=NOW
    )
    assert [item.at.day for item in built.upcoming(NOW, count=5)] == [5, 6]


@pytest.mark.parametrize(
    "text",
    [
        "DTSTART:20270101T000000\nRRULE:FREQ=DAILY;INTERVAL=0",
        "FREQ=SECONDLY;INTERVAL=7;BYMONTH=12;BYMONTHDAY=31;BYHOUR=3;BYMINUTE=5;BYSECOND=9",
        "FREQ=MINUTELY;INTERVAL=7;BYMINUTE=3;BYHOUR=5;BYMONTHDAY=31;BYMONTH=4,6",
        "FREQ=SECONDLY;BYMONTH=2;BYMONTHDAY=30",
        "FREQ=YEARLY;BYWEEKNO=1;BYYEARDAY=200",
    ],
)
def test_a_hostile_rule_is_a_precise_error_within_a_second(text):
    began = time.monotonic()
    message = rejection(text)
    assert time.monotonic() - began < 2.0
    assert (
        "never produces an occurrence" in message
        or "INTERVAL=0" in message
        or ("needs more than 50000 candidate times" in message)
    )


def test_an_interval_that_never_reaches_its_by_values_is_a_precise_error():
    """Found by the schedule fuzzer in CI: every second minute from 00:01 is odd, so
    BYMINUTE=0 is never reached; dateutil raised a bare ValueError out of the parser."""
    message = rejection("DTSTART:20190101T000100\nRRULE:FREQ=MINUTELY;INTERVAL=2;BYMINUTE=0")

    assert "FREQ=MINUTELY;INTERVAL=2 counted from DTSTART 20190101T000100 never lands" in message
    assert "never produces an occurrence" in message


# Every month of a year at a different time of day, the DST days of the US and the EU, and
# the day `make test` failed on (2026-12-03): no schedule test may depend on the date.
PINNED = [
    *(
        datetime(2027, month, 1 + 2 * month, (5 * month) % 24, (7 * month) % 60, tzinfo=UTC)
        for month in range(1, 13)
    ),
    datetime(2027, 3, 14, 7, 30, tzinfo=UTC),  # US spring forward (02:00 local)
    datetime(2027, 3, 28, 1, 0, tzinfo=UTC),  # EU spring forward (01:00 UTC)
    datetime(2027, 10, 31, 0, 59, tzinfo=UTC),  # EU fall back
    datetime(2027, 11, 7, 6, 0, tzinfo=UTC),  # US fall back
    datetime(2026, 12, 3, 6, 28, 20, tzinfo=UTC),
    datetime(2027, 12, 31, 3, 5, 8, tzinfo=UTC),  # a second before the hostile instant
]


def at(now: datetime) -> str:
    return f"{now:%Y-%m-%dT%H:%M}"


@pytest.mark.parametrize("now", PINNED, ids=at)
@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_hostile_schedule_gets_the_same_verdict_whenever_it_is_applied(name, now):
    """tests/cluster/test_hostile_input.py's schedules, with the clock pinned (issue 26: the
    slow-scan rule was refused for another reason on 2026-12-03)."""
    hostile, message = HOSTILE[name]
    with pytest.raises(spec.SpecError) as caught:
        spec.parse(hostile, anchor=now, now=now)
    assert message in str(caught.value), str(caught.value)


@pytest.mark.parametrize("now", PINNED, ids=at)
def test_a_rule_without_dtstart_says_why_its_verdict_may_depend_on_the_day(now):
    """Without DTSTART the rule counts from the day it is applied: the 7-second interval's
    first Dec 31 03:05:09 is in the budget's reach on some days only."""
    message = rejection(HOSTILE_UNANCHORED, now=now)

    assert (
        f"with no DTSTART, DTSTART is midnight of the day it is applied ({now:%Y-%m-%d})" in message
        or f"(searched from {now:%Y-%m-%dT%H:%M:%SZ}, when it was applied" in message
    ), message
