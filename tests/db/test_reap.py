"""The reaper fails orphans in set-based updates and never touches healthy or finished runs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from factories import RecordingLauncher, define, runs_of
from pgsched.engine import dispatch, lease, reap, runs

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def start_run(conn, job, token="r1"):
    runs.run_now(conn, job.id, token=token, scheduled_for=T0)
    [run] = dispatch.run_once(conn, RecordingLauncher(), definition_ids=[job.id], now=T0).claimed
    return lease.Lease(run.id, run.lease_token)


def status(conn, run_lease):
    row = conn.execute(
        "SELECT status, reason, error FROM pgsched.job_runs WHERE id = %s", [run_lease.run_id]
    ).fetchone()
    return row["status"], row["reason"]


def test_run_that_never_heartbeats_is_reaped_orphaned_after_the_orphan_timeout(conn):
    job = define(conn, heartbeat={"orphanTimeoutSeconds": 300}, now=T0)
    run = start_run(conn, job)
    assert reap.run_once(conn, now=T0 + timedelta(seconds=299)).total == 0
    result = reap.run_once(conn, now=T0 + timedelta(seconds=301))
    assert result.run_ids["orphaned"] == [run.run_id]
    assert status(conn, run) == ("FAILED", "Orphaned")


def test_run_whose_heartbeat_is_stale_is_reaped_heartbeat_lost(conn):
    job = define(conn, heartbeat={"intervalSeconds": 5, "timeoutSeconds": 30}, now=T0)
    run = start_run(conn, job)
    assert lease.heartbeat(conn, run, now=T0 + timedelta(seconds=10)) == "active"
    assert reap.run_once(conn, now=T0 + timedelta(seconds=39)).total == 0
    assert reap.run_once(conn, now=T0 + timedelta(seconds=41)).run_ids["heartbeat_lost"] == [
        run.run_id
    ]
    assert status(conn, run) == ("FAILED", "HeartbeatLost")
    error = runs_of(conn, job)[0]["error"]
    assert "no heartbeat since" in error and "timeoutSeconds is 30" in error


def test_a_heartbeating_run_is_never_reaped(conn):
    job = define(conn, heartbeat={"intervalSeconds": 5, "timeoutSeconds": 30}, now=T0)
    run = start_run(conn, job)
    for second in range(10, 600, 10):
        lease.heartbeat(conn, run, now=T0 + timedelta(seconds=second))
        assert reap.run_once(conn, now=T0 + timedelta(seconds=second + 5)).total == 0
    assert status(conn, run) == ("RUNNING", None)


def test_finished_runs_are_left_alone(conn):
    job = define(conn, now=T0)
    run = start_run(conn, job)
    lease.finish(conn, run, "COMPLETED", now=T0 + timedelta(seconds=1))
    assert reap.run_once(conn, now=T0 + timedelta(days=1)).total == 0
    assert status(conn, run) == ("COMPLETED", None)


def test_run_that_ignores_cancellation_past_the_grace_is_stopped_as_cancelled(conn):
    job = define(conn, cancelGraceSeconds=30, now=T0)
    run = start_run(conn, job)
    lease.heartbeat(conn, run, now=T0 + timedelta(seconds=1))
    runs.cancel_run(conn, run.run_id, by=runs.BY_CLI, now=T0 + timedelta(seconds=2))
    lease.heartbeat(conn, run, now=T0 + timedelta(seconds=20))
    assert reap.run_once(conn, now=T0 + timedelta(seconds=31)).total == 0
    assert reap.run_once(conn, now=T0 + timedelta(seconds=33)).run_ids["cancel_ignored"] == [
        run.run_id
    ]
    assert status(conn, run) == ("CANCELLED", "Cancelled")


def test_a_cancelled_run_whose_workload_ended_awaits_its_verdict_not_the_grace(conn):
    """The sidecar noted the workload's end; the cancel grace passing does not make the run
    CANCELLED: its Job's outcome decides (verdicts), whatever the workload did."""
    job = define(conn, cancelGraceSeconds=30, now=T0)
    run = start_run(conn, job)
    lease.heartbeat(conn, run, now=T0 + timedelta(seconds=1))
    assert lease.workload_ended(conn, run, now=T0 + timedelta(seconds=2))
    runs.cancel_run(conn, run.run_id, by=runs.BY_CLI, now=T0 + timedelta(seconds=3))
    assert reap.run_once(conn, now=T0 + timedelta(seconds=40)).count("cancel_ignored") == 0
    assert status(conn, run) == ("RUNNING", None)


def test_a_cancelled_run_awaiting_its_verdict_is_left_to_the_verdict(conn):
    job = define(
        conn, cancelGraceSeconds=30, heartbeat={"intervalSeconds": 5, "timeoutSeconds": 30}, now=T0
    )
    run = start_run(conn, job)
    lease.heartbeat(conn, run, now=T0 + timedelta(seconds=1))
    runs.cancel_run(conn, run.run_id, by=runs.BY_CLI, now=T0 + timedelta(seconds=2))
    marked = reap.run_once(conn, now=T0 + timedelta(seconds=32), await_verdicts=True)
    assert marked.run_ids["outcome_pending"] == [run.run_id]
    later = reap.run_once(conn, now=T0 + timedelta(seconds=60), await_verdicts=True)
    assert later.count("cancel_ignored") == 0
    assert status(conn, run) == ("RUNNING", None)


def test_run_past_its_active_deadline_fails_deadline_exceeded(conn):
    job = define(conn, activeDeadlineSeconds=60, now=T0)
    run = start_run(conn, job)
    lease.heartbeat(conn, run, now=T0 + timedelta(seconds=55))
    assert reap.run_once(conn, now=T0 + timedelta(seconds=61)).run_ids["deadline_exceeded"] == [
        run.run_id
    ]
    assert status(conn, run) == ("FAILED", "DeadlineExceeded")


def test_queued_run_past_its_starting_deadline_becomes_skipped(conn):
    job = define(
        conn, schedule="0 * * * *", startingDeadlineSeconds=30, maxConcurrentRuns=1, now=T0
    )
    conn.execute(
        "INSERT INTO pgsched.job_runs (definition_id, status, trigger, scheduled_for, deadline_at)"
        " VALUES (%s, 'QUEUED', 'schedule', %s, %s)",
        [job.id, T0, T0 + timedelta(seconds=30)],
    )
    assert (
        dispatch.run_once(conn, RecordingLauncher(), now=T0 + timedelta(seconds=31)).claimed == []
    )
    assert reap.run_once(conn, now=T0 + timedelta(seconds=31)).count("deadline_missed") == 1
    row = runs_of(conn, job)[0]
    assert (row["status"], row["reason"]) == ("SKIPPED", "DeadlineMissed")


def test_reaping_a_thousand_orphans_is_one_statement_per_signature(conn):
    job = define(conn, maxConcurrentRuns=1000, now=T0)
    for index in range(1000):
        runs.run_now(conn, job.id, token=f"bulk-{index}", scheduled_for=T0)
    claimed = 0
    while result := dispatch.run_once(conn, RecordingLauncher(), batch_size=200, now=T0).claimed:
        claimed += len(result)
    assert claimed == 1000
    conn.execute("SELECT pg_stat_reset()")
    result = reap.run_once(conn, now=T0 + timedelta(hours=1))
    assert result.count("orphaned") == 1000
