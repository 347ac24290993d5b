"""Calendars and unions of schedules against the real database: what the tick
materializes, what ``pgsched next`` predicts and what status.nextRuns shows agree."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from cli_runner import pgsched
from factories import define, reload, runs_of
from holidays import UK_2027, uk_2027_ics
from pgsched import spec
from pgsched.engine import calendars, materialize
from pgsched.k8s.reporting import status

T0 = datetime(2027, 3, 24, 12, 0, tzinfo=UTC)  # Wednesday before Good Friday


def store_uk(conn, namespace: str = "default", name: str = "uk-bank-holidays") -> bool:
    resolved = spec.calendar(
        {"exclude": {"ics": {"configMapRef": {"name": "feeds", "key": "uk-2027.ics"}}}},
        {"exclude": uk_2027_ics()},
    )
    with conn.transaction():
        return calendars.upsert(conn, namespace, name, resolved, now=T0)


def rendered(conn, job, *, now=T0):
    return status.render(job, last_run=None, active=0, now=now, calendars=calendars.load(conn, job))


def test_a_bank_holiday_is_materialized_skipped_naming_the_calendar(dsn, conn):
    store_uk(conn)
    job = define(
        conn,
        "payments",
        schedule="0 9 * * 1-5",
        timeZone="Europe/London",
        calendars={"exclude": ["uk-bank-holidays"]},
        now=T0,
    )
    for day in (25, 26, 29, 30):
        materialize.run_once(conn, now=datetime(2027, 3, day, 12, tzinfo=UTC))

    rows = [(row["scheduled_for"], row["status"], row["reason"]) for row in runs_of(conn, job)]
    assert rows == [
        (datetime(2027, 3, 25, 9, tzinfo=UTC), "QUEUED", None),
        (datetime(2027, 3, 26, 9, tzinfo=UTC), "SKIPPED", "CalendarExcluded"),
        (datetime(2027, 3, 29, 8, tzinfo=UTC), "SKIPPED", "CalendarExcluded"),  # BST now
        (datetime(2027, 3, 30, 8, tzinfo=UTC), "QUEUED", None),
    ]
    assert runs_of(conn, job)[1]["error"] == (
        "Calendar uk-bank-holidays excludes 2027-03-26 in Europe/London (spec.calendars.exclude)"
    )
    described = pgsched("describe", str(runs_of(conn, job)[1]["id"]), dsn=dsn)
    assert described.code == 0, described.err
    assert "CalendarExcluded" in described.out
    assert "Calendar uk-bank-holidays excludes 2027-03-26" in described.out


def test_next_and_status_next_runs_agree_and_leave_out_the_holidays(dsn, conn):
    store_uk(conn)
    job = define(
        conn,
        "evening",
        rrule="FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR;BYHOUR=20;BYMINUTE=30",
        timeZone="America/New_York",
        calendars={"exclude": ["uk-bank-holidays"]},
        now=T0,
    )
    predicted = pgsched("next", "evening", "-n", str(status.NEXT_RUNS), "-o", "json", dsn=dsn)
    assert predicted.code == 0, predicted.err

    listed = [item["at"] for item in predicted.json()["occurrences"]]
    shown = rendered(conn, job)["nextRuns"]

    assert [datetime.fromisoformat(at) for at in listed] == [
        datetime.fromisoformat(at.replace("Z", "+00:00")) for at in shown
    ]
    local = [item["local"][:10] for item in predicted.json()["occurrences"]]
    assert local == ["2027-03-24", "2027-03-25", "2027-03-30"]  # not Good Friday, Easter Monday
    assert any("uk-bank-holidays" in note for note in predicted.json()["notes"])
    [condition] = [c for c in rendered(conn, job)["conditions"] if c["type"] == "CalendarsReady"]
    assert (condition["status"], condition["reason"]) == ("True", "CalendarsFound")


def test_a_missing_calendar_is_a_condition_and_excludes_nothing(dsn, conn):
    job = define(
        conn,
        "typo",
        schedule="0 9 * * *",
        timeZone="Europe/London",
        calendars={"exclude": ["uk-bank-holiday"]},
        now=datetime(2027, 3, 25, 12, tzinfo=UTC),
    )
    [condition] = [c for c in rendered(conn, job)["conditions"] if c["type"] == "CalendarsReady"]
    assert condition["status"] == "False"
    assert condition["reason"] == "CalendarNotFound"
    assert condition["message"].startswith(
        "Calendar uk-bank-holiday (spec.calendars.exclude) does not exist in namespace default"
    )
    materialize.run_once(conn, now=datetime(2027, 3, 26, 12, tzinfo=UTC))  # Good Friday
    assert [row["status"] for row in runs_of(conn, job)] == ["QUEUED"]
    notes = pgsched("next", "typo", "-o", "json", dsn=dsn).json()["notes"]
    assert any("uk-bank-holiday (spec.calendars.exclude) does not exist" in n for n in notes)


def test_a_calendar_change_applies_to_the_next_materialization_and_names_its_jobs(conn):
    job = define(
        conn,
        "daily",
        schedule="0 9 * * *",
        calendars={"exclude": ["closures"]},
        now=T0,
    )
    define(conn, "other", schedule="0 9 * * *", now=T0)
    closed = {"exclude": {"dates": ["2027-03-25"]}}
    with conn.transaction():
        assert calendars.upsert(conn, "default", "closures", spec.calendar(closed, {}))
        assert not calendars.upsert(conn, "default", "closures", spec.calendar(closed, {}))
    assert calendars.members(conn, "default", "closures") == [job.id]
    before = rendered(conn, job)["nextRuns"]
    assert before == ["2027-03-26T09:00:00Z", "2027-03-27T09:00:00Z", "2027-03-28T09:00:00Z"]

    with conn.transaction():
        assert calendars.upsert(
            conn, "default", "closures", spec.calendar({"exclude": {"dates": ["2027-03-26"]}}, {})
        )
    after = rendered(conn, job)["nextRuns"]
    assert after == ["2027-03-25T09:00:00Z", "2027-03-27T09:00:00Z", "2027-03-28T09:00:00Z"]
    for day in (25, 26):
        materialize.run_once(conn, now=datetime(2027, 3, day, 12, tzinfo=UTC))
    assert [row["reason"] for row in runs_of(conn, job)] == [None, "CalendarExcluded"]
    with conn.transaction():
        assert calendars.delete(conn, "default", "closures")
    assert rendered(conn, reload(conn, job))["nextRuns"][0] == "2027-03-27T09:00:00Z"


def test_a_two_schedule_job_runs_once_at_an_instant_both_share(dsn, conn):
    saturday = datetime(2027, 3, 27, tzinfo=UTC)
    entries = [{"schedule": "0 10 * * *"}, {"schedule": "0 10 * * 6"}, {"schedule": "0 7 * * 6"}]
    job = define(conn, "twice", schedules=entries, now=saturday)
    for hour in range(0, 24):
        materialize.run_once(conn, now=saturday + timedelta(hours=hour, minutes=1))

    rows = [row["scheduled_for"] for row in runs_of(conn, job)]
    assert rows == [saturday + timedelta(hours=7), saturday + timedelta(hours=10)]
    listed = pgsched("next", "twice", "-n", "3", "-o", "json", dsn=dsn).json()
    assert listed["kind"] == "union"
    assert [item["at"][:16] for item in listed["occurrences"]] == [
        "2027-03-28T10:00",
        "2027-03-29T10:00",
        "2027-03-30T10:00",
    ]
    assert status.render(job, last_run=None, active=0, now=T0)["schedule"] == (
        "0 10 * * * | 0 10 * * 6 | 0 7 * * 6"
    )


def test_every_2027_holiday_of_the_feed_is_a_skipped_row_of_a_weekday_job(conn):
    """A year of materialization in one go (the scheduler was down): each bank holiday is
    a SKIPPED/CalendarExcluded row, every other weekday a row of its own."""
    store_uk(conn)
    job = define(
        conn,
        "yearly-audit",
        schedule="0 9 * * 1-5",
        timeZone="Europe/London",
        calendars={"exclude": ["uk-bank-holidays"]},
        catchUp="all",
        catchUpLimit=1000,
        now=datetime(2027, 1, 1, tzinfo=UTC),
    )
    materialize.run_once(conn, now=datetime(2027, 12, 31, 23, tzinfo=UTC))
    rows = runs_of(conn, job)
    skipped = {row["scheduled_for"].date() for row in rows if row["reason"] == "CalendarExcluded"}
    assert skipped == set(UK_2027)
    assert len(rows) == 261 and sum(row["status"] == "QUEUED" for row in rows) == 261 - 8
