"""The UI names the Calendar that keeps an occurrence from running: on the "why" page
(recorded and to come) and in the job page's next occurrences."""

from __future__ import annotations

from datetime import datetime, timedelta

from conftest import SOFIA, Served
from factories import define
from pgsched import spec
from pgsched.db import connection
from pgsched.engine import calendars, materialize


def test_why_and_the_job_page_name_the_calendar_that_excludes_a_day(dsn: str, ui: Served) -> None:
    with connection.connect(dsn) as conn:
        now: datetime = conn.execute("SELECT now() AS now").fetchone()["now"]  # type: ignore[index]
        today = now.astimezone(SOFIA).date()
        yesterday, tomorrow = today - timedelta(days=1), today + timedelta(days=1)
        closed = {"exclude": {"dates": [yesterday.isoformat(), tomorrow.isoformat()]}}
        with conn.transaction():
            calendars.upsert(conn, "team-a", "closures", spec.calendar(closed, {}))
        define(
            conn,
            "report",
            namespace="team-a",
            schedule="0 9 * * *",
            timeZone="Europe/Sofia",
            calendars={"exclude": ["closures"]},
            now=now - timedelta(days=3),
        )
        materialize.run_once(
            conn, now=datetime(yesterday.year, yesterday.month, yesterday.day, 9, 1, tzinfo=SOFIA)
        )

    _, recorded = ui.get(f"/ns/team-a/report/why?at={yesterday}T09:00")
    assert "data-verdict='skipped'" in recorded
    assert (
        f"SKIPPED/CalendarExcluded: Calendar closures excludes {yesterday} in Europe/Sofia"
        in recorded
    )

    _, coming = ui.get(f"/ns/team-a/report/why?at={tomorrow}T09:00")
    assert (
        "Calendar closures excludes its day, so it will be recorded SKIPPED/CalendarExcluded"
        in coming
    )

    _, page = ui.get("/ns/team-a/report")
    upcoming = page.split("occurrences</h2>")[1].split("<h2>")[0]
    assert tomorrow.strftime("%Y-%m-%d") not in upcoming
    assert (tomorrow + timedelta(days=1)).strftime("%Y-%m-%d") in upcoming
