"""Materialization: due definitions become run rows, next_run_at advances in the same commit."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from factories import define, reload, runs_of
from pgsched.engine import definitions, materialize

T0 = datetime(2026, 6, 1, 12, 0, 30, tzinfo=UTC)


def statuses(conn, definition):
    return [
        (row["scheduled_for"], row["status"], row["reason"]) for row in runs_of(conn, definition)
    ]


def test_on_time_occurrence_is_queued_and_next_run_at_advances(conn):
    job = define(conn, schedule="*/5 * * * *", now=T0)
    assert job.next_run_at == datetime(2026, 6, 1, 12, 5, tzinfo=UTC)
    at = job.next_run_at + timedelta(seconds=1)

    result = materialize.run_once(conn, now=at)

    assert (result.definitions, result.queued, result.skipped) == (1, 1, 0)
    assert statuses(conn, job) == [(datetime(2026, 6, 1, 12, 5, tzinfo=UTC), "QUEUED", None)]
    assert reload(conn, job).next_run_at == datetime(2026, 6, 1, 12, 10, tzinfo=UTC)


def test_nothing_is_materialized_before_it_is_due(conn):
    job = define(conn, schedule="*/5 * * * *", now=T0)
    assert materialize.run_once(conn, now=T0 + timedelta(minutes=4)).definitions == 0
    assert statuses(conn, job) == []


def test_materializing_twice_never_duplicates_an_occurrence(conn):
    job = define(conn, schedule="* * * * *", now=T0)
    at = T0 + timedelta(minutes=1)
    materialize.run_once(conn, now=at)
    # Simulate a second leader that read the definition before the first one advanced it.
    conn.execute(
        "UPDATE pgsched.job_definitions SET next_run_at = %s WHERE id = %s",
        [datetime(2026, 6, 1, 12, 1, tzinfo=UTC), job.id],
    )
    materialize.run_once(conn, now=at)
    assert len(statuses(conn, job)) == 1


def test_catch_up_latest_runs_only_the_most_recent_missed_occurrence(conn):
    job = define(conn, schedule="0 * * * *", now=T0)
    result = materialize.run_once(conn, now=T0 + timedelta(hours=5, minutes=10))
    rows = statuses(conn, job)
    assert [status for _, status, _ in rows] == ["SKIPPED"] * 4 + ["QUEUED"]
    assert {reason for _, status, reason in rows if status == "SKIPPED"} == {"MissedDowntime"}
    assert rows[-1][0] == datetime(2026, 6, 1, 17, 0, tzinfo=UTC)
    assert (result.queued, result.skipped) == (1, 4)
    assert reload(conn, job).next_run_at == datetime(2026, 6, 1, 18, 0, tzinfo=UTC)


def test_catch_up_all_runs_every_missed_occurrence_up_to_the_limit(conn):
    job = define(conn, schedule="0 * * * *", catchUp="all", catchUpLimit=3, now=T0)
    materialize.run_once(conn, now=T0 + timedelta(hours=5, minutes=10))
    assert [status for _, status, _ in statuses(conn, job)] == ["SKIPPED", "SKIPPED"] + [
        "QUEUED"
    ] * 3


def test_catch_up_none_skips_occurrences_that_are_too_late(conn):
    job = define(conn, schedule="0 * * * *", catchUp="none", now=T0)
    materialize.run_once(conn, now=T0 + timedelta(hours=5, minutes=10))
    assert {status for _, status, _ in statuses(conn, job)} == {"SKIPPED"}
    # ... but an occurrence that is only seconds late still runs.
    materialize.run_once(conn, now=datetime(2026, 6, 1, 18, 0, 20, tzinfo=UTC))
    assert statuses(conn, job)[-1][1] == "QUEUED"


def test_long_outage_records_a_bounded_number_of_misses_and_still_runs_the_latest(conn):
    job = define(conn, schedule="* * * * *", now=T0)
    now = T0 + timedelta(days=3)  # 4320 missed minutes
    materialize.run_once(conn, now=now)
    rows = statuses(conn, job)
    # The oldest misses one by one, then the most recent catchUpLimit (100) occurrences.
    assert len(rows) == materialize.MAX_RECORDED_MISSES + 100
    assert rows[-1][1] == "QUEUED" and rows[-1][0] == now.replace(second=0)
    assert [status for _, status, _ in rows].count("QUEUED") == 1
    note = runs_of(conn, job)[materialize.MAX_RECORDED_MISSES - 1]["error"]
    assert "not recorded one by one" in note
    assert reload(conn, job).next_run_at == now.replace(second=0) + timedelta(minutes=1)


def test_suspended_definition_records_occurrences_as_skipped_and_resume_does_not_replay(conn):
    job = define(conn, schedule="0 * * * *", suspend=True, now=T0)
    materialize.run_once(conn, now=T0 + timedelta(hours=2))
    assert {(status, reason) for _, status, reason in statuses(conn, job)} == {
        ("SKIPPED", "Suspended")
    }
    definitions.set_suspended(conn, job.id, False, now=T0 + timedelta(hours=2))
    materialize.run_once(conn, now=T0 + timedelta(hours=2, minutes=1))
    assert [status for _, status, _ in statuses(conn, job)] == ["SKIPPED", "SKIPPED"]


def test_occurrence_past_its_starting_deadline_is_skipped_at_materialization(conn):
    job = define(conn, schedule="0 * * * *", startingDeadlineSeconds=60, now=T0)
    materialize.run_once(conn, now=datetime(2026, 6, 1, 13, 5, tzinfo=UTC))
    assert statuses(conn, job) == [
        (datetime(2026, 6, 1, 13, 0, tzinfo=UTC), "SKIPPED", "DeadlineMissed")
    ]


def test_queued_occurrence_carries_its_starting_deadline(conn):
    job = define(conn, schedule="0 * * * *", startingDeadlineSeconds=60, now=T0)
    materialize.run_once(conn, now=datetime(2026, 6, 1, 13, 0, 10, tzinfo=UTC))
    assert runs_of(conn, job)[0]["deadline_at"] == datetime(2026, 6, 1, 13, 1, tzinfo=UTC)


def test_dst_gap_with_skip_policy_is_recorded_as_skipped(conn):
    before = datetime(2026, 3, 7, 12, tzinfo=UTC)
    job = define(
        conn,
        schedule="30 2 * * *",
        timeZone="America/New_York",
        dstPolicy={"gap": "skip"},
        now=before,
    )
    materialize.run_once(conn, now=datetime(2026, 3, 8, 8, tzinfo=UTC))
    assert statuses(conn, job) == [(datetime(2026, 3, 8, 7, tzinfo=UTC), "SKIPPED", "DSTGap")]


@pytest.mark.parametrize(
    ("zone", "before", "after", "expected_local"),
    [
        (
            "America/New_York",
            datetime(2026, 3, 7, 12, tzinfo=UTC),
            datetime(2026, 3, 9, 12, tzinfo=UTC),
            ["03:00", "02:30"],
        ),
        (
            "America/New_York",
            datetime(2026, 10, 31, 12, tzinfo=UTC),
            datetime(2026, 11, 2, 12, tzinfo=UTC),
            ["01:30", "01:30"],
        ),
    ],
)
def test_fixed_time_job_materializes_once_per_day_across_dst(
    conn, zone, before, after, expected_local
):
    hour = "2" if before.month == 3 else "1"
    job = define(conn, schedule=f"30 {hour} * * *", timeZone=zone, catchUp="all", now=before)
    materialize.run_once(conn, now=after)
    local = [
        row["scheduled_for"].astimezone(ZoneInfo(zone)).strftime("%H:%M")
        for row in runs_of(conn, job)
    ]
    assert local == expected_local


def test_rrule_byhour_8_in_sofia_materializes_at_eight_local(conn):
    created = datetime(2026, 3, 27, 10, tzinfo=UTC)
    job = define(
        conn, rrule="FREQ=DAILY;BYHOUR=8", timeZone="Europe/Sofia", catchUp="all", now=created
    )
    materialize.run_once(conn, now=datetime(2026, 3, 31, 12, tzinfo=UTC))
    local = [
        row["scheduled_for"].astimezone(ZoneInfo("Europe/Sofia")).isoformat()
        for row in runs_of(conn, job)
    ]
    assert local == [
        "2026-03-28T08:00:00+02:00",
        "2026-03-29T08:00:00+03:00",
        "2026-03-30T08:00:00+03:00",
        "2026-03-31T08:00:00+03:00",
    ]


def test_one_shot_fires_once_and_then_has_no_next_run(conn):
    job = define(conn, runAt="2026-06-01T15:00:00", timeZone="Europe/Sofia", now=T0)
    assert job.next_run_at == datetime(2026, 6, 1, 12, tzinfo=UTC)
    materialize.run_once(conn, now=T0 + timedelta(minutes=1))
    materialize.run_once(conn, now=T0 + timedelta(days=1))
    assert [status for _, status, _ in statuses(conn, job)] == ["QUEUED"]
    assert reload(conn, job).next_run_at is None


def test_recurring_schedules_are_materialized_before_one_shots(conn):
    define(conn, "once", runAt="2026-06-01T12:00:00Z", now=T0)
    define(conn, "cron", schedule="* * * * *", now=T0)
    materialize.run_once(conn, now=T0 + timedelta(minutes=1))
    kinds = conn.execute(
        "SELECT d.schedule_kind FROM pgsched.job_runs r JOIN pgsched.job_definitions d ON d.id = r.definition_id ORDER BY r.id"
    ).fetchall()
    assert [row["schedule_kind"] for row in kinds] == ["cron", "once"]


def test_schedule_change_never_repeats_a_materialized_occurrence(conn):
    job = define(conn, schedule="0 * * * *", now=T0)
    materialize.run_once(conn, now=datetime(2026, 6, 1, 13, 0, 5, tzinfo=UTC))
    # The edit is processed with a clock that lags the materialization (another replica).
    changed = define(
        conn, schedule="*/30 * * * *", now=datetime(2026, 6, 1, 12, 59, tzinfo=UTC), generation=2
    )
    assert changed.next_run_at == datetime(2026, 6, 1, 13, 30, tzinfo=UTC)
    materialize.run_once(conn, now=datetime(2026, 6, 1, 13, 30, 5, tzinfo=UTC))
    assert [row["scheduled_for"].minute for row in runs_of(conn, job)] == [0, 30]


def test_template_only_change_keeps_next_run_at(conn):
    job = define(conn, schedule="0 9 * * *", now=T0)
    updated = define(
        conn,
        schedule="0 9 * * *",
        jobTemplate={"spec": {}},
        now=T0 + timedelta(hours=1),
        generation=2,
    )
    assert updated.next_run_at == job.next_run_at


def test_an_older_generation_never_overwrites_a_newer_one(conn):
    define(conn, schedule="0 9 * * *", now=T0, generation=5)
    stale = define(conn, schedule="0 10 * * *", now=T0, generation=4)
    assert stale.schedule == "0 9 * * *" and stale.generation == 5
