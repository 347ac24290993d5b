"""Calendars (spec, iCalendar import, day membership) and unions of schedules: pure."""

from __future__ import annotations

import time
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from holidays import UK_2027, uk_2027_ics, weekdays
from pgsched import schedule, spec
from pgsched.schedule import ScheduleError, calendars, ics, zones

NOW = datetime(2026, 12, 31, 12, 0, tzinfo=UTC)
END_2027 = datetime(2028, 1, 1, 12, 0, tzinfo=UTC)
HOSTILE_TIME_BOUND = 1.0


def uk_calendar() -> calendars.Calendars:
    resolved = spec.calendar(
        {"exclude": {"ics": {"configMapRef": {"name": "uk", "key": "2027.ics"}}}},
        {"exclude": uk_2027_ics()},
    )
    return calendars.Calendars(found=(calendars.from_resolved("uk-bank-holidays", resolved),))


def local_days(occurrences: list[schedule.Occurrence], zone: str) -> list[date]:
    tz = zones.load_zone(zone)
    return [item.at.astimezone(tz).date() for item in occurrences]


def year_2027(
    stream: schedule.Stream, exclusions: calendars.Calendars | None = None
) -> list[schedule.Occurrence]:
    found = stream.upcoming(NOW, count=300, exclusions=exclusions)
    return [item for item in found if item.at < END_2027]


def test_an_ics_of_2027_bank_holidays_excludes_exactly_those_days_from_a_weekday_cron_job():
    weekday_job = schedule.build("cron", "0 9 * * 1-5", zone="Europe/London", anchor=NOW)
    holidays = uk_calendar()

    kept = local_days(year_2027(weekday_job, holidays), "Europe/London")

    assert local_days(year_2027(weekday_job), "Europe/London") == weekdays(2027)
    assert kept == [day for day in weekdays(2027) if day not in UK_2027]
    excluded = [item for item in year_2027(weekday_job) if holidays.excluding(item)]
    assert local_days(excluded, "Europe/London") == sorted(UK_2027)
    assert {holidays.excluding(item) for item in excluded} == {"uk-bank-holidays"}


def test_an_rrule_job_in_another_zone_is_excluded_by_its_own_local_day_across_dst():
    """20:30 in New York is already the next day in UTC (and in London): the calendar
    judges the New York day, before and after both zones' clock changes (14 and 28 March)."""
    evening = schedule.build(
        "rrule",
        "FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR;BYHOUR=20;BYMINUTE=30",
        zone="America/New_York",
        anchor=NOW,
    )
    holidays = uk_calendar()

    kept = year_2027(evening, holidays)

    days = [day for day in local_days(kept, "America/New_York") if day.year == 2027]
    assert days == [day for day in weekdays(2027) if day not in UK_2027]
    # Thursday 25 March 20:30 EDT runs though its UTC day is Good Friday; Good Friday's
    # own 20:30 EDT (UTC the 27th, after New York's clock change) does not.
    around_easter = [
        item.at for item in kept if date(2027, 3, 26) <= item.at.date() <= date(2027, 3, 30)
    ]
    assert (
        around_easter
        == [
            datetime(2027, 3, 26, 0, 30, tzinfo=UTC),  # Thu 25th, 20:30 EDT
            datetime(2027, 3, 31, 0, 30, tzinfo=UTC),  # Tue 30th (Mon 29th is Easter Monday)
        ][: len(around_easter)]
    )
    good_friday = next(item for item in year_2027(evening) if item.at.date() == date(2027, 3, 27))
    assert good_friday.at == datetime(2027, 3, 27, 0, 30, tzinfo=UTC)  # EDT already
    assert holidays.excluding(good_friday) == "uk-bank-holidays"


def test_included_days_carve_exceptions_out_of_excluded_ones():
    resolved = spec.calendar(
        {
            "exclude": {
                "rules": ["RRULE:FREQ=WEEKLY;BYDAY=SA"],
                "ranges": [
                    {"start": "2027-12-24", "end": "2027-12-26"},
                    {"start": "2027-12-26", "end": "2027-12-31"},  # overlapping: merged
                ],
                "dates": ["2027-06-01"],
            },
            "include": {"dates": ["2027-06-12", "2027-12-29"]},
        },
        {},
    )
    calendar = calendars.from_resolved("works", resolved)
    assert calendar.excludes(date(2027, 6, 5))  # a Saturday
    assert not calendar.excludes(date(2027, 6, 12))  # the working Saturday
    assert calendar.excludes(date(2027, 6, 1)) and not calendar.excludes(date(2027, 6, 2))
    assert [calendar.excludes(date(2027, 12, day)) for day in range(23, 32)] == [
        False, True, True, True, True, True, False, True, True,
    ]  # fmt: skip
    assert not calendar.excludes(date(2028, 1, 1)) or date(2028, 1, 1).weekday() == 5


def test_a_multi_day_repeating_event_covers_each_of_its_days_every_year():
    text = uk_2027_ics().replace(
        "END:VCALENDAR",
        "BEGIN:VEVENT\r\nDTSTART;VALUE=DATE:20261231\r\nDTEND;VALUE=DATE:20270103\r\n"
        "RRULE:FREQ=YEARLY;UNTIL=20301231T000000Z\r\nEXDATE;VALUE=DATE:20281231\r\n"
        "END:VEVENT\r\nEND:VCALENDAR",
    )
    resolved = spec.calendar(
        {"exclude": {"ics": {"configMapRef": {"name": "a", "key": "b"}}}}, {"exclude": text}
    )
    calendar = calendars.from_resolved("turn-of-year", resolved)
    covered = [date(2029, 12, 30) + timedelta(days=n) for n in range(6)]
    assert [calendar.excludes(day) for day in covered] == [False, True, True, True, False, False]
    assert not calendar.excludes(date(2029, 1, 1))  # the 2028 occurrence is an EXDATE
    assert not calendar.excludes(date(2031, 12, 31))  # past UNTIL


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("x" * (ics.MAX_BYTES + 1), "larger than 1048576 bytes"),
        ("BEGIN:VCALENDAR\r\nX-A:" + "\r\n a" * 100_000 + "\r\nEND:VCALENDAR", "line 2: the unfolded line is longer than 4096"),
        ("BEGIN:VCALENDAR\r\n" + "BEGIN:X\r\n" * 10 + "END:VCALENDAR", "line 5: components are nested more than 4 deep"),
        ("BEGIN:VEVENT\r\nEND:VEVENT", "line 1: expected BEGIN:VCALENDAR"),
        ("BEGIN:VCALENDAR\r\nBEGIN:VEVENT\r\nDTSTART;VALUE=DATE:20271301\r\nEND:VEVENT\r\nEND:VCALENDAR", "line 3: DTSTART is not a date like 20270101"),
        ("BEGIN:VCALENDAR\r\nBEGIN:VEVENT\r\nDTSTART:20270230T090000\r\nEND:VEVENT\r\nEND:VCALENDAR", "line 3: DTSTART is not a date like 20270101"),
        ("BEGIN:VCALENDAR\r\nBEGIN:VEVENT\r\nDTSTART:20271231T250000\r\nEND:VEVENT\r\nEND:VCALENDAR", "line 3: DTSTART is not a date like 20270101"),
        ("BEGIN:VCALENDAR\r\nBEGIN:VEVENT\r\nDTSTART:99991231\r\nEND:VEVENT\r\nEND:VCALENDAR", "line 3: DTSTART year 9999 is outside 1900..8999"),
        ("BEGIN:VCALENDAR\r\nBEGIN:VEVENT\r\nSUMMARY:x\r\nEND:VEVENT\r\nEND:VCALENDAR", "line 2: the VEVENT has no DTSTART"),
        ("BEGIN:VCALENDAR\r\nBEGIN:VEVENT\r\nDTSTART:20270102\r\nDTEND:20270101\r\nEND:VEVENT\r\nEND:VCALENDAR", "ends (2027-01-01) before it starts"),
        ("BEGIN:VCALENDAR\r\nBEGIN:VEVENT\r\nDTSTART:20270101\r\nEND:VCALENDAR", "line 4: this END does not close the open VEVENT"),
        ("BEGIN:VCALENDAR\r\nBEGIN:VEVENT\r\nDTSTART:20270101\r\nEND:VEVENT\r\n", "ends inside VCALENDAR"),
        ("BEGIN:VCALENDAR\r\nno colon here\r\nEND:VCALENDAR", "line 2 is not a content line"),
        (" folded first\r\n", "line 1: a folded continuation line has no line before it"),
        ("BEGIN:VCALENDAR\r\n" + "BEGIN:VEVENT\r\nDTSTART:20270101\r\nEND:VEVENT\r\n" * 5001 + "END:VCALENDAR", "more than 5000 events"),
        ("BEGIN:VCALENDAR\r\n" + "BEGIN:VEVENT\r\nDTSTART:20270101\r\nRRULE:FREQ=YEARLY\r\nEND:VEVENT\r\n" * 101 + "END:VCALENDAR", "more than 100 repeating events"),
    ],
    ids=["huge", "deep-folding", "deep-nesting", "no-calendar", "month-13", "february-30", "hour-25", "year-9999", "no-dtstart", "ends-first", "unclosed", "truncated", "garbage", "orphan-fold", "too-many", "too-many-rules"],
)  # fmt: skip
def test_hostile_ics_is_refused_precisely_and_quickly(text, message):
    started = time.monotonic()
    with pytest.raises(ScheduleError) as error:
        ics.read(text)
    assert message in error.value.message
    assert time.monotonic() - started < HOSTILE_TIME_BOUND


def test_an_ics_error_names_the_configmap_field_and_never_echoes_its_content():
    secret = "BEGIN:VCALENDAR\r\npassword=hunter2 no colon\r\nEND:VCALENDAR"
    with pytest.raises(spec.SpecError) as error:
        spec.calendar(
            {"exclude": {"ics": {"configMapRef": {"name": "feed", "key": "de.ics"}}}},
            {"exclude": secret},
        )
    assert str(error.value).startswith(
        "spec.exclude.ics: ConfigMap feed key de.ics: line 2 is not a content line"
    )
    assert "hunter2" not in str(error.value)


def test_a_bad_calendar_spec_is_refused_with_every_field_named():
    with pytest.raises(spec.SpecError) as error:
        spec.calendar(
            {
                "exclude": {
                    "dates": ["2027-02-30", "tomorrow"],
                    "ranges": [{"start": "2027-12-31", "end": "2027-12-24"}],
                    "rules": ["FREQ=HOURLY", "FREQ=YEARLY;BYMONTH=13"],
                    "ics": {"configMapRef": {"name": "x"}},
                },
                "colour": "red",
            },
            {},
        )
    lines = str(error.value).splitlines()
    assert [line.split(":")[0] for line in lines] == [
        "spec.colour",
        "spec.exclude.dates[0]",
        "spec.exclude.dates[1]",
        "spec.exclude.ranges[0].end",
        "spec.exclude.rules[0]",
        "spec.exclude.rules[1]",
        "spec.exclude.ics.configMapRef",
    ]
    assert "repeats within a day" in lines[4]
    with pytest.raises(spec.SpecError, match=r"^spec\.exclude: must be an object"):
        spec.calendar({"include": {"dates": ["2027-01-01"]}}, {})


def test_a_calendar_that_excludes_every_day_gets_a_precise_error_not_a_walk_to_9000():
    everything = calendars.Calendars(
        found=(
            calendars.from_resolved(
                "never", {"exclude": {"ranges": [["1900-01-01", "8999-12-31"]]}}
            ),
        )
    )
    minutely = schedule.build("cron", "* * * * *", zone="UTC", anchor=NOW)
    started = time.monotonic()
    with pytest.raises(ScheduleError, match=r"spec\.calendars\.exclude"):
        minutely.upcoming(NOW, count=3, exclusions=everything)
    assert time.monotonic() - started < 5.0


def test_two_schedules_are_one_union_and_a_shared_instant_runs_once():
    parsed = spec.parse(
        {
            "schedules": [
                {"schedule": "0 10 * * *"},
                {"schedule": "0 10 * * 6"},  # Saturdays at 10:00: shared with the first
                {"rrule": "FREQ=WEEKLY;BYDAY=SA;BYHOUR=9", "timeZone": "America/New_York"},
            ],
            "timeZone": "Europe/London",
        },
        anchor=NOW,
        now=NOW,
    )
    union = schedule.build(parsed.schedule_kind, parsed.schedule, zone=parsed.time_zone, anchor=NOW)
    found = [item.at for item in union.upcoming(datetime(2027, 1, 1, tzinfo=UTC), count=9)]
    expected = [(1, 10), (2, 10), (2, 14), (3, 10), (4, 10), (5, 10), (6, 10), (7, 10), (8, 10)]
    assert found == [datetime(2027, 1, day, hour, tzinfo=UTC) for day, hour in expected]


def test_a_schedules_entry_error_names_the_entry():
    with pytest.raises(spec.SpecError) as error:
        spec.parse(
            {"schedules": [{"schedule": "0 8 * * *"}, {"rrule": "FREQ=DAILY;BYHOUR=24"}]},
            anchor=NOW,
            now=NOW,
        )
    assert str(error.value).startswith("spec.schedules[1].rrule: ")
    both = {"schedule": "0 8 * * *", "schedules": [{"schedule": "0 9 * * *"}]}
    with pytest.raises(spec.SpecError, match=r"^spec.schedule: exactly one of .*schedules"):
        spec.parse(both, anchor=NOW, now=NOW)
    with pytest.raises(spec.SpecError, match=r"^spec.schedules: must be a list of 1..10 entries"):
        spec.parse({"schedules": [{"schedule": "0 8 * * *"}] * 11}, anchor=NOW, now=NOW)


def test_the_examples_are_what_the_operator_accepts():
    folder = Path(__file__).parents[2] / "examples"
    documents = list(yaml.safe_load_all((folder / "holiday-calendar.yaml").read_text()))
    kinds = {doc["kind"]: doc for doc in documents}
    feed = kinds["ConfigMap"]["data"]["england-2027.ics"]
    resolved = spec.calendar(kinds["Calendar"]["spec"], {"exclude": feed})
    calendar = calendars.from_resolved(kinds["Calendar"]["metadata"]["name"], resolved)
    assert [day for day in sorted(UK_2027) if calendar.excludes(day)] == sorted(UK_2027)
    assert calendar.excludes(date(2027, 12, 30)) and not calendar.excludes(date(2027, 12, 23))
    job = kinds["ScheduledJob"]["spec"]
    assert spec.parse(job, anchor=NOW, now=NOW).extra["calendars"] == {
        "exclude": [kinds["Calendar"]["metadata"]["name"]]
    }
    [digest] = yaml.safe_load_all((folder / "two-schedules.yaml").read_text())
    assert spec.parse(digest["spec"], anchor=NOW, now=NOW).schedule_kind == "union"
