"""Settling: failed attempts become new rows per the retry policy; streaks auto-suspend."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

from factories import RecordingLauncher, define, reload, runs_of
from pgsched.engine import dispatch, lease, materialize, runs, settle

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
RNG = random.Random(3)


def fail_next(conn, job, reason, *, at, hint=None, error="boom"):
    [run] = dispatch.run_once(conn, RecordingLauncher(), definition_ids=[job.id], now=at).claimed
    assert lease.finish(
        conn,
        lease.Lease(run.id, run.lease_token),
        "FAILED",
        reason=reason,
        error=error,
        retry_hint=hint,
        now=at + timedelta(seconds=1),
    )
    return run


def test_allowed_failure_is_retried_as_a_new_row_with_backoff_and_the_old_row_kept(conn):
    job = define(
        conn,
        retryPolicy={"retryOn": ["NonZeroExit"], "backoff": {"initialSeconds": 10, "jitter": 0}},
        now=T0,
    )
    runs.run_now(conn, job.id, token="t", scheduled_for=T0)
    failed = fail_next(conn, job, "NonZeroExit", at=T0)

    result = settle.run_once(conn, now=T0 + timedelta(seconds=2), rng=RNG)

    first, second = runs_of(conn, job)
    assert (first["id"], first["status"], first["reason"], first["error"]) == (
        failed.id,
        "FAILED",
        "NonZeroExit",
        "boom",
    )
    assert (
        second["attempt"] == 2 and second["retry_of"] == failed.id and second["trigger"] == "retry"
    )
    assert second["scheduled_for"] == T0 + timedelta(seconds=12)
    assert len(result.retried) == 1 and result.final_failures == []
    # The retry waits for its backoff: nothing to claim before it, then it is claimable.
    assert (
        dispatch.run_once(conn, RecordingLauncher(), now=T0 + timedelta(seconds=11)).claimed == []
    )
    assert (
        len(dispatch.run_once(conn, RecordingLauncher(), now=T0 + timedelta(seconds=12)).claimed)
        == 1
    )


def test_every_attempt_keeps_its_own_row_until_max_attempts(conn):
    job = define(
        conn,
        retryPolicy={
            "maxAttempts": 3,
            "retryOn": ["NonZeroExit"],
            "backoff": {"initialSeconds": 1, "jitter": 0},
        },
        now=T0,
    )
    runs.run_now(conn, job.id, token="t", scheduled_for=T0)
    at = T0
    for attempt in (1, 2, 3):
        fail_next(conn, job, "NonZeroExit", at=at, error=f"failure {attempt}")
        settle.run_once(conn, now=at + timedelta(seconds=2), rng=RNG)
        at += timedelta(minutes=1)
    rows = runs_of(conn, job)
    assert [(row["attempt"], row["status"], row["error"]) for row in rows] == [
        (1, "FAILED", "failure 1"),
        (2, "FAILED", "failure 2"),
        (3, "FAILED", "failure 3"),
    ]


def test_denied_reason_is_not_retried_even_when_allowed_too(conn):
    job = define(
        conn, retryPolicy={"retryOn": ["*", "OOMKilled"], "neverRetryOn": ["OOMKilled"]}, now=T0
    )
    runs.run_now(conn, job.id, token="t", scheduled_for=T0)
    fail_next(conn, job, "OOMKilled", at=T0)
    result = settle.run_once(conn, now=T0 + timedelta(seconds=2), rng=RNG)
    assert result.retried == [] and len(result.final_failures) == 1
    assert len(runs_of(conn, job)) == 1


def test_sdk_veto_is_honoured_even_with_a_wildcard_allow_list(conn):
    job = define(conn, retryPolicy={"retryOn": ["*"]}, now=T0)
    runs.run_now(conn, job.id, token="t", scheduled_for=T0)
    fail_next(conn, job, "BudgetExhausted", at=T0, hint="never")
    assert settle.run_once(conn, now=T0 + timedelta(seconds=2), rng=RNG).retried == []


def test_reaped_orphan_is_retried_per_policy(conn):
    from pgsched.engine import reap

    job = define(conn, now=T0)
    runs.run_now(conn, job.id, token="t", scheduled_for=T0)
    dispatch.run_once(conn, RecordingLauncher(), now=T0)
    reap.run_once(conn, now=T0 + timedelta(minutes=6))
    settle.run_once(conn, now=T0 + timedelta(minutes=6), rng=RNG)
    first, second = runs_of(conn, job)
    assert (first["status"], first["reason"]) == ("FAILED", "Orphaned")
    assert (second["status"], second["attempt"], second["retry_of"]) == ("QUEUED", 2, first["id"])


def test_consecutive_final_failures_auto_suspend_and_say_why(conn):
    job = define(
        conn,
        schedule="* * * * *",
        failureSuspendThreshold=2,
        retryPolicy={"maxAttempts": 1},
        now=T0,
    )
    for minute in (1, 2):
        at = T0 + timedelta(minutes=minute, seconds=1)
        materialize.run_once(conn, now=at)
        last = fail_next(conn, job, "NonZeroExit", at=at)
        result = settle.run_once(conn, now=at + timedelta(seconds=2), rng=RNG)
    suspended = reload(conn, job)
    assert [definition_id for definition_id, _ in result.auto_suspended] == [job.id]
    # The suspension goes on the outbox too, so the publisher refreshes the ScheduledJob's
    # status (its Suspended condition) even if it published the failure before settle ran.
    announced = conn.execute(
        "SELECT run_id, reason FROM pgsched.run_events WHERE status = 'AUTO_SUSPENDED'"
    ).fetchall()
    assert [(row["run_id"], row["reason"]) for row in announced] == [(last.id, "TooManyFailures")]
    assert suspended.is_suspended and suspended.consecutive_failures == 2
    assert (
        suspended.auto_suspend_reason == "2 consecutive runs failed (failureSuspendThreshold is 2)"
    )
    materialize.run_once(conn, now=T0 + timedelta(minutes=3, seconds=1))
    assert (runs_of(conn, job)[-1]["status"], runs_of(conn, job)[-1]["reason"]) == (
        "SKIPPED",
        "Suspended",
    )


def test_a_success_resets_the_failure_streak(conn):
    job = define(
        conn, failureSuspendThreshold=2, retryPolicy={"maxAttempts": 1}, maxConcurrentRuns=1, now=T0
    )
    runs.run_now(conn, job.id, token="a", scheduled_for=T0)
    fail_next(conn, job, "NonZeroExit", at=T0)
    runs.run_now(conn, job.id, token="b", scheduled_for=T0)
    [run] = dispatch.run_once(conn, RecordingLauncher(), now=T0 + timedelta(seconds=5)).claimed
    lease.finish(
        conn, lease.Lease(run.id, run.lease_token), "COMPLETED", now=T0 + timedelta(seconds=6)
    )
    settle.run_once(conn, now=T0 + timedelta(seconds=7), rng=RNG)
    assert reload(conn, job).consecutive_failures == 0


def test_settling_is_done_once(conn):
    job = define(conn, retryPolicy={"retryOn": ["NonZeroExit"]}, now=T0)
    runs.run_now(conn, job.id, token="t", scheduled_for=T0)
    fail_next(conn, job, "NonZeroExit", at=T0)
    assert settle.run_once(conn, now=T0 + timedelta(seconds=2), rng=RNG).settled == 1
    assert settle.run_once(conn, now=T0 + timedelta(seconds=3), rng=RNG).settled == 0
    assert len(runs_of(conn, job)) == 2


def test_failed_run_of_a_deleted_definition_is_not_retried(conn):
    from pgsched.engine import definitions

    job = define(conn, retryPolicy={"retryOn": ["*"]}, now=T0)
    runs.run_now(conn, job.id, token="t", scheduled_for=T0)
    fail_next(conn, job, "NonZeroExit", at=T0)
    definitions.delete(conn, job.id, now=T0 + timedelta(seconds=2))
    assert settle.run_once(conn, now=T0 + timedelta(seconds=3), rng=RNG).retried == []
