"""A run claimed by a tick that never launched it (its replica stopped between the claim's
commit and the record of the launch) is launched by a later tick, under the same lease, once
its claim is ``RELAUNCH_AFTER`` old, instead of waiting to be failed ``Orphaned``."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from factories import RecordingLauncher, define
from pgsched.db import connection
from pgsched.engine import dispatch, runs
from pgsched.engine.tick import RELAUNCH_AFTER, Ticker, TickSettings

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


@dataclass
class RecordsEveryLaunch(RecordingLauncher):
    """Like the Kubernetes launcher: a handle for every launch, idempotent per lease."""

    records_every_launch = True


def tick(dsn, launcher, at):
    ticker = Ticker(
        lambda: connection.connect(dsn, application_name="pgsched-tick-test"),
        launcher,
        TickSettings(),
        clock=lambda: at,
    )
    try:
        result = ticker.run_once()
    finally:
        ticker.close()
    assert result.leader and result.error is None, result.error
    return result


def claimed_and_abandoned(conn, job):
    """A run claimed as a tick does, by a replica that died before launching it."""
    runs.run_now(conn, job.id, token="abandoned", scheduled_for=T0)
    [run] = dispatch.claim(conn, definition_ids=[job.id], now=T0).claimed
    return run


def row(conn, run_id):
    return conn.execute(
        "SELECT status, reason, lease_token, k8s_job_name FROM pgsched.job_runs WHERE id = %s",
        [run_id],
    ).fetchone()


def test_a_claim_never_launched_is_launched_by_a_later_tick_under_its_lease(dsn, conn):
    job = define(conn, "abandoned", now=T0, schedule="@yearly")
    run = claimed_and_abandoned(conn, job)
    launcher = RecordsEveryLaunch()

    early = tick(dsn, launcher, T0 + RELAUNCH_AFTER - timedelta(seconds=1))
    assert launcher.launched == [] and early.dispatched.relaunched == []

    later = tick(dsn, launcher, T0 + RELAUNCH_AFTER + timedelta(seconds=1))
    assert [(again.id, again.lease_token) for again in launcher.launched] == [
        (run.id, run.lease_token)
    ], "launched once, under the lease of its claim"
    assert later.dispatched.relaunched == [run.id] and later.dispatched.claimed == []
    stored = row(conn, run.id)
    assert (stored["status"], stored["lease_token"]) == ("RUNNING", run.lease_token)
    assert stored["k8s_job_name"] == f"abandoned-{run.id}", "the launch is recorded"

    tick(dsn, launcher, T0 + RELAUNCH_AFTER + timedelta(seconds=2))
    assert len(launcher.launched) == 1, "a recorded launch is not repeated"


def test_a_relaunch_the_launcher_refuses_ends_the_run_like_a_first_launch(dsn, conn):
    job = define(conn, "refused", now=T0, schedule="@yearly")
    run = claimed_and_abandoned(conn, job)
    launcher = RecordsEveryLaunch(fail_ids={run.id})
    result = tick(dsn, launcher, T0 + RELAUNCH_AFTER + timedelta(seconds=1))
    assert result.dispatched.launch_failed == [run.id]
    assert (row(conn, run.id)["status"], row(conn, run.id)["reason"]) == (
        "FAILED",
        "LaunchFailed",
    )


def test_without_a_launcher_that_records_every_launch_the_claim_waits_for_its_orphan_timeout(
    dsn, conn
):
    # An engine-only launcher may launch without a handle (a worker that claims its own
    # runs): a run without one is not "never launched" there.
    job = define(conn, "engine-only", now=T0, schedule="@yearly")
    run = claimed_and_abandoned(conn, job)
    launcher = RecordingLauncher()
    tick(dsn, launcher, T0 + RELAUNCH_AFTER + timedelta(seconds=1))
    assert launcher.launched == [] and row(conn, run.id)["status"] == "RUNNING"
    tick(dsn, launcher, T0 + timedelta(seconds=301))
    assert (row(conn, run.id)["status"], row(conn, run.id)["reason"]) == ("FAILED", "Orphaned")


def test_a_claim_whose_cancellation_was_asked_is_not_launched_again(dsn, conn):
    job = define(conn, "cancelled", now=T0, schedule="@yearly")
    run = claimed_and_abandoned(conn, job)
    runs.cancel_run(conn, run.id, by=runs.BY_CLI, now=T0 + timedelta(seconds=1))
    launcher = RecordsEveryLaunch()
    tick(dsn, launcher, T0 + RELAUNCH_AFTER + timedelta(seconds=1))
    assert launcher.launched == []
