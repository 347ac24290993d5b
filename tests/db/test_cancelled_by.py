"""Who cancelled a run is recorded, and `pgsched describe`/`runs` and the Event show it."""

from __future__ import annotations

import getpass
import socket
from datetime import UTC, datetime, timedelta

from cli_runner import pgsched
from factories import RecordingLauncher, define
from pgsched.engine import definitions, dispatch, materialize, runs
from pgsched.k8s.reporting import publisher

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def test_replace_records_that_the_concurrency_policy_cancelled_the_oldest_run(conn):
    define(conn, "report", schedule="* * * * *", concurrencyPolicy="Replace", now=T0)
    claimed = []
    for minute in (1, 2):
        at = T0 + timedelta(minutes=minute, seconds=1)
        materialize.run_once(conn, now=at)
        claimed += dispatch.run_once(conn, RecordingLauncher(), now=at).claimed
    replaced = runs.get(conn, claimed[0].id)
    assert (replaced.cancel_requested, replaced.cancelled_by) == (True, runs.BY_REPLACE)


def test_deleting_the_scheduled_job_records_deletion_for_queued_and_running_runs(conn):
    job = define(conn, "report", now=T0)
    runs.run_now(conn, job.id, token="a", scheduled_for=T0)
    [running] = dispatch.run_once(conn, RecordingLauncher(), now=T0).claimed
    queued = runs.run_now(conn, job.id, token="b", scheduled_for=T0).run
    definitions.delete(conn, job.id)
    assert runs.get(conn, running.id).cancelled_by == runs.BY_DELETION
    assert runs.get(conn, queued.id).cancelled_by == runs.BY_DELETION


def test_pgsched_cancel_records_who_ran_it_and_describe_runs_and_the_event_show_it(dsn, conn):
    job = define(conn, "report", now=T0)
    queued = runs.run_now(conn, job.id, token="a").run
    assert pgsched("cancel", "--database", str(queued.id), dsn=dsn).code == 0
    who = f"CLI ({getpass.getuser()}@{socket.gethostname()})"
    assert runs.get(conn, queued.id).cancelled_by == who

    described = pgsched("describe", str(queued.id), dsn=dsn).out
    listed = pgsched("runs", "report", dsn=dsn).out
    data = pgsched("describe", str(queued.id), "-o", "json", dsn=dsn).json()

    assert f" by {who}" in described
    assert "Cancelled by CLI" in listed.splitlines()[1]
    assert data["run"]["cancelledBy"] == who
    [event] = [
        row
        for row in conn.execute(
            "SELECT e.*, r.error, r.cancelled_by, r.scheduled_for, e.run_id"
            " FROM pgsched.run_events e JOIN pgsched.job_runs r ON r.id = e.run_id"
            " WHERE e.status = 'CANCELLED'"
        )
    ]
    assert f"was cancelled by {who}: Cancelled" in publisher.event_message(event)
