"""Messages count and date the way people read them, whoever wrote them (issue 26 #5):
"1 consecutive run failed", "1 run was already queued", instants in ISO 8601 UTC
("2026-06-01T12:01:00Z", not the session's "2026-06-01 15:01:00+03"). The database's
messages use pgsched.plural and pgsched.iso_utc (migration 0028), Python's pgsched.wording:
both say the same."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

from factories import RecordingLauncher, define, reload, runs_of
from pgsched.engine import dispatch, lease, materialize, reap, settle

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def test_the_databases_words_are_pythons_in_any_session_time_zone(conn):
    from pgsched import wording  # here: the other tests run against releases without it

    conn.execute("SET TimeZone = 'Europe/Sofia'")
    moments = [T0, datetime(2026, 12, 3, 6, 28, 20, 123456, tzinfo=UTC)]
    for moment in moments:
        row = conn.execute("SELECT pgsched.iso_utc(%s) AS text", [moment]).fetchone()
        assert row["text"] == wording.instant(moment) == moment.strftime("%Y-%m-%dT%H:%M:%SZ")
    for count in (0, 1, 2, 11):
        row = conn.execute(
            "SELECT pgsched.plural(%s, 'run was', 'runs were') AS text", [count]
        ).fetchone()
        assert row["text"] == wording.plural(count, "run was", "runs were")
    assert wording.plural(1, "run was", "runs were") == "1 run was"


def test_one_failure_that_suspends_a_job_is_one_consecutive_run(conn):
    job = define(
        conn,
        "fragile",
        schedule="* * * * *",
        failureSuspendThreshold=1,
        retryPolicy={"maxAttempts": 1},
        now=T0,
    )
    at = T0 + timedelta(minutes=1, seconds=1)
    materialize.run_once(conn, now=at)
    [run] = dispatch.run_once(conn, RecordingLauncher(), definition_ids=[job.id], now=at).claimed
    assert run.lease_token is not None
    lease.finish(
        conn,
        lease.Lease(run.id, run.lease_token),
        "FAILED",
        reason="NonZeroExit",
        error="boom",
        now=at + timedelta(seconds=1),
    )
    settle.run_once(conn, now=at + timedelta(seconds=2), rng=random.Random(3))
    assert reload(conn, job).auto_suspend_reason == (
        "1 consecutive run failed (failureSuspendThreshold is 1)"
    )


def test_a_full_queue_of_one_says_one_run_was_queued(conn):
    job = define(conn, "backlog", schedule="* * * * *", maxQueuedRuns=1, now=T0)
    for minute in (1, 2, 3):
        at = T0 + timedelta(minutes=minute)
        materialize.run_once(conn, now=at)
        dispatch.run_once(conn, RecordingLauncher(), now=at)
    skipped = [row for row in runs_of(conn, job) if row["reason"] == "QueueFull"]
    assert skipped[0]["error"] == "1 run was already queued, the most maxQueuedRuns (1) allows"


def test_a_run_skipped_at_its_starting_deadline_names_it_in_iso_8601(conn):
    conn.execute("SET TimeZone = 'Europe/Sofia'")  # a session's zone does not leak in
    job = define(conn, "late", schedule="0 0 1 1 *", now=T0)
    conn.execute(
        "INSERT INTO pgsched.job_runs (definition_id, status, trigger, scheduled_for,"
        " deadline_at) VALUES (%s, 'QUEUED', 'schedule', %s, %s)",
        [job.id, T0, T0 + timedelta(minutes=1)],
    )
    reap.run_once(conn, now=T0 + timedelta(minutes=2))
    [row] = runs_of(conn, job)
    assert (row["status"], row["error"]) == (
        "SKIPPED",
        "not started by its starting deadline 2026-06-01T12:01:00Z",
    )


def test_a_job_materialized_late_says_how_late_in_words(conn):
    job = define(conn, "tardy", schedule="0 12 * * *", startingDeadlineSeconds=60, now=T0)
    materialize.run_once(conn, now=T0 + timedelta(hours=24, minutes=5))
    [row] = [row for row in runs_of(conn, job) if row["reason"] == "DeadlineMissed"]
    assert row["error"].startswith("materialized 5 min late, past startingDeadlineSeconds (60)")
