"""Every retry decision is recorded with its reason, shown by `pgsched describe` and posted
as an Event: retried (why), or not (attempts used up, neverRetryOn, not on retryOn)."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from cli_runner import pgsched
from factories import RecordingLauncher, define
from pgsched.db import queries
from pgsched.engine import dispatch, lease, runs, settle
from pgsched.k8s.reporting import publisher

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def failed_and_settled(conn, reason, **policy):
    job = define(conn, "report", retryPolicy={"backoff": {"jitter": 0}, **policy}, now=T0)
    runs.run_now(conn, job.id, token="t", scheduled_for=T0)
    [run] = dispatch.run_once(conn, RecordingLauncher(), now=T0).claimed
    lease.finish(conn, lease.Lease(run.id, run.lease_token), "FAILED", reason=reason, now=T0)
    settle.run_once(conn, now=T0 + timedelta(seconds=1), rng=random.Random(1))
    return runs.get(conn, run.id)


def outbox(conn, status):
    rows = conn.execute(queries.get("claim_run_events"), {"limit": 100}).fetchall()
    return [row for row in rows if row["status"] == status]


@pytest.mark.parametrize(
    ("reason", "policy", "why"),
    [
        ("NonZeroExit", {"maxAttempts": 1, "retryOn": ["*"]},
         "attempts used up (attempt 1 of maxAttempts 1)"),
        ("OOMKilled", {"retryOn": ["*"], "neverRetryOn": ["OOMKilled"]},
         "reason OOMKilled is on neverRetryOn"),
        ("NonZeroExit", {"retryOn": ["HeartbeatLost"]},
         "reason NonZeroExit is not on retryOn (HeartbeatLost)"),
    ],
)  # fmt: skip
def test_a_failure_that_is_not_retried_says_why_in_describe_and_an_event(
    dsn, conn, reason, policy, why
):
    run = failed_and_settled(conn, reason, **policy)

    assert run.retry_decision == f"not retried: {why}"
    described = pgsched("describe", str(run.id), dsn=dsn).out
    assert f"not retried: {why}" in described
    [note] = outbox(conn, publisher.NOT_RETRIED)
    message = publisher.event_message(note)
    assert message.endswith(f"failed with {reason} and is not retried: {why}")


def test_a_retry_says_why_on_the_failed_run_and_in_the_retrying_event(dsn, conn):
    run = failed_and_settled(
        conn, "NonZeroExit", retryOn=["NonZeroExit"], backoff={"initialSeconds": 10, "jitter": 0}
    )
    [retry] = [item for item in runs.history(conn, run.definition_id) if item.retry_of == run.id]

    assert run.retry_decision == (
        f"retried as run {retry.id} (attempt 2) in 10s: reason NonZeroExit is on retryOn"
    )
    assert run.retry_decision in pgsched("describe", str(run.id), dsn=dsn).out
    [queued] = [row for row in outbox(conn, "QUEUED") if row["trigger"] == "retry"]
    assert publisher.event_message(queued).endswith(
        f"run {run.id} failed with NonZeroExit (reason NonZeroExit is on retryOn)"
    )
    assert outbox(conn, publisher.NOT_RETRIED) == []
