"""The job side: heartbeats, cancellation and finish are fenced by the lease token (I4, I6)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from factories import RecordingLauncher, define, runs_of
from pgsched.engine import definitions, dispatch, lease, reap, runs, settle

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def start(conn, job, token="t"):
    runs.run_now(conn, job.id, token=token, scheduled_for=T0)
    [run] = dispatch.run_once(conn, RecordingLauncher(), definition_ids=[job.id], now=T0).claimed
    return lease.Lease(run.id, run.lease_token)


def test_heartbeat_reports_active_then_cancel_requested(conn):
    job = define(conn, now=T0)
    run = start(conn, job)
    assert lease.heartbeat(conn, run, now=T0 + timedelta(seconds=1)) == "active"
    runs.cancel_run(conn, run.run_id, by=runs.BY_CLI)
    assert lease.heartbeat(conn, run, now=T0 + timedelta(seconds=2)) == "cancel_requested"
    assert lease.state(conn, run) == "cancel_requested"


def test_wrong_token_or_wrong_run_changes_nothing(conn):
    job = define(conn, now=T0)
    run = start(conn, job)
    forged = lease.Lease(run.run_id, uuid.uuid4())
    assert lease.heartbeat(conn, forged) == "lost"
    assert not lease.finish(conn, forged, "COMPLETED")
    assert not lease.finish(conn, lease.Lease(run.run_id + 1000, run.token), "COMPLETED")
    row = runs_of(conn, job)[0]
    assert (row["status"], row["heartbeat_at"]) == ("RUNNING", None)


def test_zombie_finish_after_reaping_is_rejected_and_the_terminal_status_stays(conn):
    job = define(conn, now=T0)
    run = start(conn, job)
    reap.run_once(conn, now=T0 + timedelta(minutes=10))
    settle.run_once(conn, now=T0 + timedelta(minutes=10))
    assert lease.heartbeat(conn, run) == "lost"
    assert not lease.finish(conn, run, "COMPLETED", now=T0 + timedelta(minutes=11))
    first = runs_of(conn, job)[0]
    assert (first["status"], first["reason"]) == ("FAILED", "Orphaned")


def test_a_terminal_status_is_final(conn):
    job = define(conn, now=T0)
    run = start(conn, job)
    assert lease.finish(conn, run, "COMPLETED", now=T0 + timedelta(seconds=3))
    assert not lease.finish(conn, run, "FAILED", reason="NonZeroExit")
    assert runs_of(conn, job)[0]["status"] == "COMPLETED"


def test_cancelling_a_queued_run_cancels_it_at_once(conn):
    job = define(conn, now=T0)
    queued = runs.run_now(conn, job.id, token="q", scheduled_for=T0 + timedelta(hours=1)).run
    outcome = runs.cancel_run(conn, queued.id, by=runs.BY_CLI)
    assert [run.id for run in outcome.cancelled] == [queued.id] and outcome.asked_to_stop == []
    row = runs_of(conn, job)[0]
    assert (row["status"], row["reason"]) == ("CANCELLED", "Cancelled")


def test_cooperative_cancel_ends_cancelled_and_is_not_retried(conn):
    job = define(conn, retryPolicy={"retryOn": ["*"]}, now=T0)
    run = start(conn, job)
    runs.cancel_run(conn, run.run_id, by=runs.BY_CLI)
    assert lease.heartbeat(conn, run) == "cancel_requested"
    assert lease.finish(conn, run, "CANCELLED", reason="Cancelled", error="stopped at checkpoint 3")
    assert settle.run_once(conn).retried == []
    assert [row["status"] for row in runs_of(conn, job)] == ["CANCELLED"]


def test_deleting_a_definition_cancels_queued_runs_and_asks_running_ones_to_stop(conn):
    job = define(conn, maxConcurrentRuns=1, now=T0)
    run = start(conn, job, token="running")
    runs.run_now(conn, job.id, token="queued", scheduled_for=T0)
    asked = definitions.delete(conn, job.id)
    assert [item.id for item in asked] == [run.run_id]
    assert {row["status"] for row in runs_of(conn, job)} == {"RUNNING", "CANCELLED"}
    assert lease.heartbeat(conn, run) == "cancel_requested"
    assert definitions.get(conn, job.id).next_run_at is None


def test_finish_rejects_a_non_terminal_status(conn):
    import psycopg
    import pytest

    job = define(conn, now=T0)
    run = start(conn, job)
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="not terminal"):
        lease.finish(conn, run, "QUEUED")  # type: ignore[arg-type]
