"""spec.activeFrom / activeUntil: no occurrence outside the window, for every schedule
kind; status and `pgsched next` say which side of the window a job is on."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from cli_runner import pgsched
from factories import define, reload, runs_of
from pgsched.engine import materialize
from pgsched.k8s.reporting import status
from pgsched.spec import SpecError

T0 = datetime(2027, 3, 1, 12, 0, tzinfo=UTC)
FROM = "2027-03-10T00:00:00Z"
UNTIL = "2027-03-12T23:59:59Z"
WINDOW = {"activeFrom": FROM, "activeUntil": UNTIL}
START = datetime(2027, 3, 10, tzinfo=UTC)
END = datetime(2027, 3, 12, 23, 59, 59, tzinfo=UTC)


def materialize_until(conn, end):
    at = T0
    while at <= end:
        materialize.run_once(conn, now=at)
        at += timedelta(hours=6)


def ready(definition, now):
    rendered = status.render(definition, last_run=None, active=0, now=now)
    [condition] = [item for item in rendered["conditions"] if item["type"] == "Ready"]
    return rendered, condition


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ({"schedule": "0 8 * * *"}, ["2027-03-10", "2027-03-11", "2027-03-12"]),
        (
            {"rrule": "FREQ=DAILY;BYHOUR=8;BYMINUTE=0", "timeZone": "Europe/Sofia"},
            ["2027-03-10", "2027-03-11", "2027-03-12"],
        ),
        ({"runAt": "2027-03-11T08:00:00Z"}, ["2027-03-11"]),
    ],
)
def test_no_occurrence_is_materialized_outside_the_window(conn, kind, expected):
    job = define(conn, **kind, **WINDOW, now=T0)
    materialize_until(conn, T0 + timedelta(days=20))
    days = [row["scheduled_for"].date().isoformat() for row in runs_of(conn, job)]
    assert days == expected
    assert all(START <= row["scheduled_for"] <= END for row in runs_of(conn, job))
    assert reload(conn, job).next_run_at is None


def test_a_run_at_outside_the_window_never_runs(conn):
    job = define(conn, runAt="2027-03-20T08:00:00Z", **WINDOW, now=T0)
    assert job.next_run_at is None
    materialize_until(conn, T0 + timedelta(days=25))
    assert runs_of(conn, job) == []


def test_status_says_not_active_until_the_window_opens_and_lists_its_first_runs(conn):
    job = define(conn, schedule="0 8 * * *", **WINDOW, now=T0)
    rendered, condition = ready(job, T0)
    assert condition["reason"] == "NotYetActive"
    assert f"not active until {FROM} (spec.activeFrom)" in condition["message"]
    [suspended] = [item for item in rendered["conditions"] if item["type"] == "Suspended"]
    assert (
        suspended["message"]
        == f"runs are scheduled once it is active: not active until {FROM} (spec.activeFrom)"
    )
    assert rendered["nextRuns"][0] == "2027-03-10T08:00:00Z"


def test_status_says_the_window_ended_with_no_next_runs(conn):
    job = define(conn, schedule="0 8 * * *", **WINDOW, now=T0)
    materialize_until(conn, END + timedelta(days=1))
    rendered, condition = ready(reload(conn, job), END + timedelta(days=1))
    assert condition["reason"] == "ActiveWindowEnded"
    assert f"ended at {UNTIL} (spec.activeUntil): no more runs" in condition["message"]
    assert rendered["nextRuns"] == [] and rendered["nextRunAt"] is None
    # Not suspended, and nothing runs: the Suspended condition does not say otherwise.
    [suspended] = [item for item in rendered["conditions"] if item["type"] == "Suspended"]
    assert suspended["status"] == "False" and "runs are scheduled" not in suspended["message"]
    assert f"its active window ended at {UNTIL}" in suspended["message"], suspended


def test_pgsched_next_agrees_with_the_status(dsn, conn):
    define(conn, "campaign", schedule="0 8 * * *", **WINDOW, now=T0)
    before = pgsched("next", "campaign", "-n", "5", "-o", "json", dsn=dsn).json()
    assert [item["at"][:10] for item in before["occurrences"]] == [
        "2027-03-10",
        "2027-03-11",
        "2027-03-12",
    ]
    after = pgsched("next", "campaign", "--after", "2027-03-13T00:00:00Z", dsn=dsn)
    assert f"note: ended at {UNTIL} (spec.activeUntil): no more runs" in after.out
    assert "no occurrence after" in after.out


def test_moving_the_window_replans_the_next_run(conn):
    job = define(conn, schedule="0 8 * * *", **WINDOW, now=T0)
    assert job.next_run_at == datetime(2027, 3, 10, 8, tzinfo=UTC)
    moved = define(
        conn, schedule="0 8 * * *", activeFrom="2027-03-05T00:00:00Z", generation=2, now=T0
    )
    assert moved.next_run_at == datetime(2027, 3, 5, 8, tzinfo=UTC)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            {"activeFrom": "2027-03-10"},
            'spec.activeFrom: "2027-03-10" has no offset (add Z for UTC)',
        ),
        (
            {"activeUntil": "next week"},
            'spec.activeUntil: "next week" is not an RFC 3339 instant',
        ),
        (
            {"activeFrom": 5},
            "spec.activeFrom: must be an RFC 3339 timestamp string, got number 5",
        ),
        (
            {"activeFrom": UNTIL, "activeUntil": FROM},
            f"spec.activeUntil: '{FROM}' is before activeFrom '{UNTIL}'",
        ),
    ],
)
def test_a_bad_window_is_refused_naming_the_field(conn, spec, message):
    with pytest.raises(SpecError) as refused:
        define(conn, schedule="0 8 * * *", **spec, now=T0)
    assert message in str(refused.value)
    assert "example: " in str(refused.value)
