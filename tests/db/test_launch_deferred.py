"""The API server's absence is not the run's fault (issue 26 #7).

A launch deferred (``LaunchDeferred``: the API server unreachable, 5xx or 429 after the
client's retries) leaves the run QUEUED, unclaimed and its attempt unspent, until a later
tick launches it, or its starting deadline skips it. Before, every such run ended
``FAILED/LaunchFailed`` and was retried into the same wall until its attempts ran out.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from factories import RecordingLauncher, define, no_database, runs_of
from k8sfixtures import job_settings
from pgsched.engine import dispatch, reap, runs, settle
from pgsched.engine.launcher import LaunchDeferred
from pgsched.k8s.client import api
from pgsched.k8s.jobside.launcher import KubernetesLauncher, _failure

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


class Away:
    """A launcher whose API server is away."""

    def launch(self, run, definition):
        raise LaunchDeferred("creating Job x: the API server is unavailable (connection refused)")


def test_a_launch_the_api_server_could_not_take_leaves_the_run_queued_with_its_attempt_unspent(
    conn,
):
    job = define(conn, schedule="0 0 1 1 *", now=T0)
    runs.run_now(conn, job.id, token="go", scheduled_for=T0)
    for second in range(0, 60, 10):  # an outage of a minute: every tick's launch deferred
        result = dispatch.run_once(conn, Away(), now=T0 + timedelta(seconds=second))
        settle.run_once(conn, now=T0 + timedelta(seconds=second + 1))
        assert len(result.deferred) == 1 and result.launch_failed == []
        [run] = runs_of(conn, job)
        assert (run["status"], run["attempt"], run["reason"]) == ("QUEUED", 1, None)
        assert run["started_at"] is None
        assert run["error"].startswith("launch deferred: creating Job x: the API server")

    launched = dispatch.run_once(conn, RecordingLauncher(), now=T0 + timedelta(seconds=61))
    [run] = runs_of(conn, job)
    assert launched.launched == 1 and (run["status"], run["attempt"]) == ("RUNNING", 1)


class UnreachableApi:
    """An API server that cannot be reached (what the client raises after its retries)."""

    def _away(self, path, *args, **kwargs):
        raise api.ApiError("POST", path, 0, {"reason": "ConnectionError", "message": "EOF"})

    create = create_with_warnings = delete = get = merge_patch = _away


def test_the_kubernetes_launcher_defers_a_launch_the_api_server_cannot_take(conn):
    """Through the real Kubernetes launcher: before, this run ended FAILED/LaunchFailed."""
    job = define(conn, schedule="0 0 1 1 *", now=T0)
    runs.run_now(conn, job.id, token="go", scheduled_for=T0)
    launcher = KubernetesLauncher(
        UnreachableApi(), job_settings("pgsched:test"), connect=no_database
    )
    dispatch.run_once(conn, launcher, now=T0)
    settle.run_once(conn, now=T0 + timedelta(seconds=1))
    [run] = runs_of(conn, job)
    assert (run["status"], run["reason"], run["attempt"]) == ("QUEUED", None, 1), run
    assert "the API server is unavailable" in run["error"]


def test_a_deferred_run_is_still_bounded_by_its_starting_deadline(conn):
    job = define(conn, schedule="0 * * * *", startingDeadlineSeconds=30, now=T0)
    conn.execute(  # the occurrence at T0, as materialize queues it
        "INSERT INTO pgsched.job_runs (definition_id, status, trigger, scheduled_for, deadline_at)"
        " VALUES (%s, 'QUEUED', 'schedule', %s, %s)",
        [job.id, T0, T0 + timedelta(seconds=30)],
    )
    assert len(dispatch.run_once(conn, Away(), now=T0).deferred) == 1
    reap.run_once(conn, now=T0 + timedelta(seconds=31))
    [run] = runs_of(conn, job)
    assert (run["status"], run["reason"]) == ("SKIPPED", "DeadlineMissed")


def test_only_answers_that_are_the_requests_fault_fail_the_launch():
    def error(status):
        return api.ApiError("POST", "/jobs", status, {"reason": "x", "message": "m"})

    for status in (0, 429, 500, 503):
        assert isinstance(_failure(error(status), "creating Job x"), LaunchDeferred), status
    for status in (400, 403, 422):
        assert not isinstance(_failure(error(status), "creating Job x"), LaunchDeferred), status
