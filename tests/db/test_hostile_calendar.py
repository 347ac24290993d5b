"""A tenant's Calendar cannot make shared threads slow: the status render (the publisher's
thread, which also serves every tenant's Events) pays for its rules' expansion once per
year and process, not on every render.

The calendar is as costly as the limits allow: every day of the years excluded by a range,
then 99 rules in `include` that each list eleven months' days but not December's, so that
a December day is checked against all of them (none includes it), and a daily job's
nextRuns are December days. Before, the rules' days were expanded again on every render,
and a rule whose occurrences span a year each cost 230 ms a year by itself.
"""

from __future__ import annotations

import statistics
import time
from datetime import UTC, datetime

from factories import define
from pgsched.engine import calendars, definitions
from pgsched.k8s.reporting.publisher import Publisher
from pgsched.schedule import calendars as calendar_days

T0 = datetime(2027, 12, 1, 6, 0, tzinfo=UTC)
NOT_DECEMBER = "RRULE:FREQ=DAILY;BYMONTH=1,2,3,4,5,6,7,8,9,10,11"
HOSTILE = {
    "exclude": {"ranges": [["2020-01-01", "2035-12-31"]]},
    "include": {"rules": [{"text": NOT_DECEMBER, "days": 1}] * (calendar_days.MAX_RULES - 1)},
}


def render_ms(conn, definition_id) -> float:
    definition = definitions.get(conn, definition_id)
    assert definition is not None
    publisher = Publisher(kube=None, clock=lambda: T0)  # type: ignore[arg-type]
    started = time.perf_counter()
    publisher.render_status(conn, definition, {"status": {}})
    return (time.perf_counter() - started) * 1000


def test_a_hostile_calendar_adds_at_most_10_ms_to_a_status_render_once_expanded(conn):
    with conn.transaction():
        calendars.upsert(conn, "default", "hostile", HOSTILE, now=T0)
    plain = define(conn, "plain", schedule="0 9 * * *", now=T0)
    guarded = define(
        conn, "guarded", schedule="0 9 * * *", calendars={"exclude": ["hostile"]}, now=T0
    )
    first = render_ms(conn, guarded.id)  # expands the year once, for this process
    pairs = [(render_ms(conn, plain.id), render_ms(conn, guarded.id)) for _ in range(15)]
    added = statistics.median(hostile - calm for calm, hostile in pairs)
    print(f"hostile calendar: first render {first:.1f} ms, then {added:+.2f} ms a render")
    assert added <= 10, f"a render with the hostile calendar costs {added:.1f} ms more"
    # It still does what it says: December is excluded, none of the rules includes it.
    loaded = calendars.load(conn, definitions.get(conn, guarded.id))  # type: ignore[arg-type]
    assert loaded.found and loaded.found[0].excludes(T0.date())


def test_an_edited_calendar_is_expanded_anew(conn):
    with conn.transaction():
        calendars.upsert(conn, "default", "edited", HOSTILE, now=T0)
    job = define(conn, "guarded", schedule="0 9 * * *", calendars={"exclude": ["edited"]}, now=T0)
    [before] = calendars.load(conn, job).found
    assert before.excludes(T0.date())
    with conn.transaction():
        calendars.upsert(conn, "default", "edited", {"exclude": {"dates": ["2027-01-01"]}}, now=T0)
    [after] = calendars.load(conn, job).found
    assert not after.excludes(T0.date()), "the kept expansion of the old form is not used"
