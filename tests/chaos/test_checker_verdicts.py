"""The chaos checker's bounds on silent runs (I3) can fail, and know runs awaiting a verdict.

Silent container runs are not reaped at once: the reaper marks them ``outcome_pending_at``
and the verdicts wait for the Job's outcome (I8). The checker must not call that waiting
a failure while the Job has no outcome (a CI run did: seed 1892917499, twelve runs waited
a minute for the Job controller after an API server restart), and must still catch a
reaper that does not reap and a verdict that ignores an outcome on record. Each case
plants, from the test side, the rows a broken reaper or verdict service would leave; a
short database test, not a chaos run.
"""

from __future__ import annotations

import time

import pytest

from chaos.sampler import Sampler
from factories import RecordingLauncher, define
from invariants import deadlines_kept
from pgsched.engine import dispatch, runs

TIMEOUT = 10
SLACK = 5.0


@pytest.fixture
def run_id(conn):
    job = define(conn, "silent", heartbeat={"intervalSeconds": 1, "timeoutSeconds": TIMEOUT})
    runs.run_now(conn, job.id, token="a")
    [run] = dispatch.run_once(conn, RecordingLauncher(), definition_ids=[job.id]).claimed
    return run.id


def plant(conn, run_id, *, silent_for: float, pending_for: float | None = None) -> None:
    """The run's last heartbeat ``silent_for`` seconds ago; its verdict asked
    ``pending_for`` seconds ago (None: never asked)."""
    conn.execute(
        "UPDATE pgsched.job_runs SET heartbeat_at = now() - make_interval(secs => %s),"
        " k8s_job_name = 'silent-job', outcome_pending_at = now() - make_interval(secs => %s)"
        " WHERE id = %s",
        [silent_for, pending_for, run_id],
    )


def sample(
    conn,
    run_id,
    *,
    recorded_ago: float | None = None,
    api_down: float = 0.0,
    queue_bound: float = 600,
) -> list[str]:
    """One live sample; the Job's outcome on record ``recorded_ago`` seconds ago (None:
    the Job has none yet), the API server down ``api_down`` seconds of any interval."""
    now = time.time()
    sampler = Sampler(
        conn.info.dsn,
        stall_slack_seconds=SLACK,
        queue_bound_seconds=queue_bound,
        evidence=lambda: {} if recorded_ago is None else {run_id: now - recorded_ago},
        api_down=lambda since, until: min(api_down, until - since),
        verdict_interval=2.0,
    )
    sampler.sample(conn)
    return sampler.result.violations["I3"]


def test_a_silent_run_nobody_reaped_nor_asked_about_is_reported(conn, run_id):
    plant(conn, run_id, silent_for=TIMEOUT + SLACK + 5)

    [found] = sample(conn, run_id)

    assert f"run {run_id} RUNNING and silent for 20s" in found
    assert "not reaped, and no verdict asked" in found


def test_a_run_awaiting_the_verdict_of_a_job_without_outcome_is_not_a_violation(conn, run_id):
    """The CI false alarm: silent a minute, asked 50 s ago, the Job has no outcome yet."""
    plant(conn, run_id, silent_for=60, pending_for=50)

    assert sample(conn, run_id) == []


def test_a_verdict_still_pending_long_after_the_job_recorded_its_outcome_is_reported(conn, run_id):
    plant(conn, run_id, silent_for=60, pending_for=50)

    [found] = sample(conn, run_id, recorded_ago=40)

    assert f"run {run_id} still RUNNING awaiting its verdict 40s after its Job recorded" in found


def test_the_api_servers_downtime_extends_the_verdicts_bound(conn, run_id):
    plant(conn, run_id, silent_for=60, pending_for=50)

    assert sample(conn, run_id, recorded_ago=40, api_down=35) == []


def test_a_silent_verdict_is_bounded_by_the_api_outages_it_waited_behind(conn, run_id):
    """After the run: a HeartbeatLost verdict 100 s after it was asked is late unless the
    API server was down for most of that time."""
    plant(conn, run_id, silent_for=112, pending_for=100)
    conn.execute(
        "UPDATE pgsched.job_runs SET status = 'FAILED', reason = 'HeartbeatLost',"
        " error = 'planted', finished_at = now() WHERE id = %s",
        [run_id],
    )

    [late] = deadlines_kept(conn, slack_seconds=SLACK)
    assert f"run {run_id}: its verdict (HeartbeatLost) took 100.0s after it was asked" in late
    # the verdict interval (2 s) and 95 s of API server downtime in between
    assert deadlines_kept(conn, slack_seconds=SLACK, verdict_allowance=lambda a, b: 97.0) == []


def queued_since(conn, seconds: float, job_id=None) -> int:
    """A run-now request (of another job, unless ``job_id``), due ``seconds`` ago and still
    QUEUED."""
    job_id = job_id or define(conn, "waiting").id
    request = runs.run_now(conn, job_id, token="w")
    conn.execute(
        "UPDATE pgsched.job_runs SET scheduled_for = now() - make_interval(secs => %s)"
        " WHERE id = %s",
        [seconds, request.run.id],
    )
    return request.run.id


def test_a_due_run_queued_past_the_bound_is_reported(conn, run_id):
    waiting = queued_since(conn, 200)

    [found] = sample(conn, run_id, queue_bound=180)

    assert f"run {waiting} due and QUEUED for 200s (bound 180s + API server down 0s" in found
    assert "cap held by runs awaiting verdicts or launching 0s" in found


def test_the_api_servers_downtime_extends_the_queue_bound(conn, run_id):
    """A 10-minute run (seed 654409647): runs due during a 217 s outage waited behind their
    definitions' caps, held by runs awaiting verdicts until the API came back."""
    queued_since(conn, 200)

    assert sample(conn, run_id, queue_bound=180, api_down=30) == []


def job_of(conn, run_id):
    return conn.execute(
        "SELECT definition_id FROM pgsched.job_runs WHERE id = %s", [run_id]
    ).fetchone()["definition_id"]


def test_a_wait_behind_a_run_awaiting_its_verdict_extends_the_queue_bound(conn, run_id):
    """A 10-minute run (seed 1323391029): two capped runs waited 272 s, 1 s past the bound
    plus the 91 s outage, behind runs whose verdicts settled a minute after the API came
    back. The time its own job's cap was held by a silent, then pending, run is allowed."""
    plant(conn, run_id, silent_for=250, pending_for=200)
    same_job = queued_since(conn, 260, job_id=job_of(conn, run_id))

    assert sample(conn, run_id, queue_bound=180, api_down=30) == [], same_job


def test_a_run_awaiting_its_verdict_excuses_no_wait_of_another_job(conn, run_id):
    plant(conn, run_id, silent_for=250, pending_for=200)
    other_job = queued_since(conn, 260)

    [found] = sample(conn, run_id, queue_bound=180, api_down=30)

    assert f"run {other_job} due and QUEUED for 260s" in found
    assert "cap held by runs awaiting verdicts or launching 0s" in found


def test_only_the_time_the_cap_was_held_is_allowed(conn, run_id):
    """Held for the last 60 s of a 260 s wait: 180 + 60 < 260, still a violation."""
    plant(conn, run_id, silent_for=60, pending_for=20)
    same_job = queued_since(conn, 260, job_id=job_of(conn, run_id))

    [found] = sample(conn, run_id, queue_bound=180)

    assert f"run {same_job} due and QUEUED for 260s" in found
    assert "cap held by runs awaiting verdicts or launching 60s" in found
