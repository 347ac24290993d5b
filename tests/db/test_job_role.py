"""The job pods' database role: the lease functions for its own run, nothing else."""

from __future__ import annotations

import re
import uuid

import psycopg
import pytest

from factories import RecordingLauncher, define, runs_of
from pgsched.db import connection
from pgsched.engine import dispatch, lease, runs


def start(conn, job, token):
    runs.run_now(conn, job.id, token=token)
    [run] = dispatch.run_once(conn, RecordingLauncher(), definition_ids=[job.id]).claimed
    return lease.Lease(run.id, run.lease_token)


def test_job_role_heartbeats_and_finishes_its_own_run(conn, job_dsn):
    job = define(conn, maxConcurrentRuns=5)
    mine = start(conn, job, "mine")
    with connection.connect(job_dsn) as pod:
        assert lease.heartbeat(pod, mine) == "active"
        assert lease.state(pod, mine) == "active"
        assert lease.finish(pod, mine, "COMPLETED")
    assert runs_of(conn, job)[0]["status"] == "COMPLETED"


def test_job_role_cannot_touch_another_run_or_use_a_wrong_token(conn, job_dsn):
    job = define(conn, maxConcurrentRuns=5)
    mine = start(conn, job, "mine")
    other = start(conn, job, "other")
    with connection.connect(job_dsn) as pod:
        assert lease.heartbeat(pod, lease.Lease(other.run_id, mine.token)) == "lost"
        assert lease.heartbeat(pod, lease.Lease(mine.run_id, uuid.uuid4())) == "lost"
        assert not lease.finish(pod, lease.Lease(other.run_id, mine.token), "FAILED")
    rows = {row["id"]: row for row in runs_of(conn, job)}
    assert rows[other.run_id]["status"] == "RUNNING" and rows[other.run_id]["heartbeat_at"] is None
    assert rows[mine.run_id]["heartbeat_at"] is None


@pytest.mark.parametrize(
    "statement",
    [
        "SELECT * FROM pgsched.job_runs",
        "SELECT * FROM pgsched.job_definitions",
        "UPDATE pgsched.job_runs SET status = 'COMPLETED'",
        "DELETE FROM pgsched.run_events",
        "INSERT INTO pgsched.job_runs (definition_id, status, trigger, scheduled_for) VALUES (gen_random_uuid(), 'QUEUED', 'manual', now())",
        "SELECT pgsched.lock_definitions_for_dispatch(ARRAY[gen_random_uuid()])",
    ],
)
def test_job_role_is_refused_direct_access(conn, job_dsn, statement):
    with connection.connect(job_dsn) as pod, pytest.raises(psycopg.errors.InsufficientPrivilege):
        pod.execute(statement)


def test_other_roles_cannot_call_the_lease_functions(conn, dsn):
    stranger = f"stranger_{uuid.uuid4().hex[:8]}"
    conn.execute(f"CREATE ROLE {stranger} LOGIN")
    try:
        outsider_dsn = dsn.replace("user=postgres", f"user={stranger}")
        with (
            connection.connect(outsider_dsn) as outsider,
            pytest.raises(psycopg.errors.InsufficientPrivilege),
        ):
            lease.heartbeat(outsider, lease.Lease(1, uuid.uuid4()))
    finally:
        conn.execute(f"DROP ROLE {stranger}")


def listening(pod):
    return [row["c"] for row in pod.execute("SELECT pg_listening_channels() AS c")]


def test_job_role_listens_only_on_its_own_runs_channel_and_hears_nothing_else(conn, job_dsn):
    job = define(conn, maxConcurrentRuns=5)
    mine = start(conn, job, "mine")
    other = start(conn, job, "other")
    with connection.connect(job_dsn) as pod:
        assert lease.listen(pod, lease.Lease(other.run_id, mine.token)) == "lost"
        assert lease.listen(pod, lease.Lease(mine.run_id, uuid.uuid4())) == "lost"
        assert listening(pod) == []
        assert lease.listen(pod, mine) == "active"
        [channel] = listening(pod)
        assert re.fullmatch(r"pgsched_lease_[0-9a-f]{40}", channel)  # a hash, not the token

        runs.cancel_run(conn, other.run_id, by=runs.BY_CLI)  # another run's cancel: nothing arrives
        assert list(pod.notifies(timeout=0.3)) == []
        runs.cancel_run(conn, mine.run_id, by=runs.BY_CLI)
        [notification] = list(pod.notifies(timeout=5, stop_after=1))
    assert (notification.channel, notification.payload) == (channel, "")
