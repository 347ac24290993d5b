"""Re-anchoring RRULEs near the requested instant changes no occurrence, only the cost."""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from itertools import islice

from dateutil import rrule as du_rrule
from hypothesis import given, settings
from hypothesis import strategies as st

from pgsched.schedule import budget, rrule

RULES = [
    "FREQ=DAILY;BYHOUR=8",
    "FREQ=DAILY;INTERVAL=3;BYHOUR=8,20;BYMINUTE=15",
    "FREQ=WEEKLY;BYDAY=MO,FR;BYHOUR=9",
    "FREQ=WEEKLY;INTERVAL=2;BYDAY=TU,TH",
    "FREQ=WEEKLY;INTERVAL=3;WKST=SU;BYDAY=SU,SA",
    "FREQ=HOURLY;INTERVAL=5",
    "FREQ=MINUTELY;INTERVAL=7",
    "FREQ=MINUTELY;INTERVAL=13;BYHOUR=9,10,17",
    "FREQ=SECONDLY;INTERVAL=90",
    "FREQ=MONTHLY;BYMONTHDAY=31",
    "FREQ=MONTHLY;INTERVAL=2;BYDAY=1MO",
    "FREQ=MONTHLY;BYDAY=MO,TU,WE,TH,FR;BYSETPOS=-1",
    "FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=29",
    "FREQ=YEARLY;INTERVAL=2;BYWEEKNO=20;BYDAY=MO",
    "FREQ=DAILY;UNTIL=20301231T000000",
    "FREQ=DAILY;COUNT=500",
]

anchors = st.datetimes(min_value=datetime(2020, 1, 1), max_value=datetime(2026, 12, 31)).map(
    lambda moment: moment.replace(microsecond=0)
)


@settings(max_examples=300, deadline=None)
@given(
    text=st.sampled_from(RULES),
    dtstart=anchors,
    later=st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=900)),
)
def test_reanchored_expansion_equals_expansion_from_dtstart(text, dtstart, later):
    start = dtstart + later
    parsed = rrule.parse(
        f"DTSTART:{dtstart:%Y%m%dT%H%M%S}\nRRULE:{text}", zone_name="UTC", anchor=dtstart
    )
    reference = du_rrule.rrulestr(f"RRULE:{text}", dtstart=dtstart, forceset=True)
    assert list(islice(parsed.wall_times(start, budget.Budget("test")), 12)) == list(
        islice(reference.xafter(start, inc=True), 12)
    )


def test_exdate_and_rdate_survive_reanchoring():
    text = (
        "DTSTART:20200106T090000\nRRULE:FREQ=WEEKLY;BYDAY=MO\n"
        "EXDATE:20261207T090000\nRDATE:20261209T120000"
    )
    parsed = rrule.parse(text, zone_name="UTC", anchor=datetime(2020, 1, 1))
    assert list(islice(parsed.wall_times(datetime(2026, 12, 1), budget.Budget("test")), 3)) == [
        datetime(2026, 12, 9, 12, 0),
        datetime(2026, 12, 14, 9, 0),
        datetime(2026, 12, 21, 9, 0),
    ]


def test_the_next_occurrence_costs_the_same_for_an_old_rule_as_for_a_new_one():
    def cost(age_days):
        start = datetime(2026, 6, 1)
        parsed = rrule.parse(
            "FREQ=MINUTELY", zone_name="UTC", anchor=start - timedelta(days=age_days)
        )
        began = time.perf_counter()
        for _ in range(20):
            next(parsed.wall_times(start, budget.Budget("test")))
        return time.perf_counter() - began

    fresh, old = cost(1), cost(365)
    assert old < fresh * 5 + 0.01  # constant, not a year of minutes per call
