"""The run-events outbox: every status change is recorded once, whoever made it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from factories import RecordingLauncher, define
from pgsched.engine import dispatch, lease, materialize, reap, runs, settle

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def events(conn):
    return [
        (row["run_id"], row["status"], row["reason"], row["trigger"])
        for row in conn.execute("SELECT * FROM pgsched.run_events ORDER BY id")
    ]


def test_every_status_change_lands_in_the_outbox_once(conn):
    job = define(
        conn,
        schedule="* * * * *",
        heartbeat={"orphanTimeoutSeconds": 60, "timeoutSeconds": 60},
        now=T0,
    )
    materialize.run_once(conn, now=T0 + timedelta(minutes=1))
    [run] = dispatch.run_once(conn, RecordingLauncher(), now=T0 + timedelta(minutes=1)).claimed
    lease.heartbeat(
        conn, lease.Lease(run.id, run.lease_token), now=T0 + timedelta(minutes=1, seconds=5)
    )
    reap.run_once(conn, now=T0 + timedelta(minutes=3))
    settle.run_once(conn, now=T0 + timedelta(minutes=3))
    [retry_id] = [
        row["id"]
        for row in conn.execute("SELECT id FROM pgsched.job_runs WHERE retry_of = %s", [run.id])
    ]
    assert events(conn) == [
        (run.id, "QUEUED", None, "schedule"),
        (run.id, "RUNNING", None, "schedule"),
        (run.id, "FAILED", "HeartbeatLost", "schedule"),
        (retry_id, "QUEUED", None, "retry"),
    ]
    assert job.id  # the definition exists


def test_heartbeats_and_settling_add_no_events(conn):
    job = define(conn, now=T0)
    runs.run_now(conn, job.id, token="t", scheduled_for=T0)
    [run] = dispatch.run_once(conn, RecordingLauncher(), now=T0).claimed
    before = len(events(conn))
    for second in range(5):
        lease.heartbeat(
            conn, lease.Lease(run.id, run.lease_token), now=T0 + timedelta(seconds=second)
        )
    assert len(events(conn)) == before
    lease.finish(conn, lease.Lease(run.id, run.lease_token), "COMPLETED")
    settle.run_once(conn)
    assert events(conn)[-1][1] == "COMPLETED" and len(events(conn)) == before + 1
