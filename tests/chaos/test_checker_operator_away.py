"""The cluster chaos's check that the operator's absence is never a pod's silence can fail.

``clusterchaos.reaps_without_job_fault`` (``REAPED_ONLY_IF_HURT``) lists every run that
ended HeartbeatLost or Orphaned although the chaos never killed or paused its job's
processes, with the times no replica was there in its silence. Here it is given the rows
the real reaper leaves — once with ``pgsched.silent_since`` as shipped, once with the
planted copy of the cluster self-test (``presence-blind-reaper``: the silence counted from
the last beat, as before migration 0039) — at pinned times: the runs' pods beat, every
replica goes away past the heartbeat timeout, comes back. And the bounds on silent runs
(the sampler's live I3, ``deadlines_kept``) allow for that absence and no more. A short
database test, not a chaos run; the chaos run with every replica killed is
``test_chaos_cluster.py``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from chaos.clusterchaos import _PRESENCE_BLIND_SILENCE, reaps_without_job_fault
from chaos.sampler import Sampler
from factories import RecordingLauncher, define
from invariants import deadlines_kept
from pgsched.engine import dispatch, lease, reap, runs
from pgsched.runapi import presence

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
TIMEOUT = 10
SLACK = 5.0
# Every replica gone from 5 s to 25 s after T0 (killed at 5, the run API back at 25).
GONE, BACK = 5, 25
ABSENCES = [
    ((T0 + timedelta(seconds=GONE)).timestamp(), (T0 + timedelta(seconds=BACK)).timestamp())
]


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def served(conn, start: float, end: float) -> None:
    """Replicas serving the run API from ``start`` to ``end`` (seconds after T0)."""
    second = float(start)
    while second <= end:
        presence.run_once(conn, now=at(second))
        second += presence.INTERVAL_SECONDS


def beating_run(conn, name: str = "beating") -> int:
    """A run whose pod last beat 1 s after T0."""
    job = define(conn, name, heartbeat={"intervalSeconds": 1, "timeoutSeconds": TIMEOUT}, now=T0)
    runs.run_now(conn, job.id, token="r", scheduled_for=T0)
    [run] = dispatch.run_once(conn, RecordingLauncher(), definition_ids=[job.id], now=T0).claimed
    assert lease.heartbeat(conn, lease.Lease(run.id, run.lease_token), now=at(1)) == "active"
    return run.id


def absence_and_return(conn, *, reap_at: float) -> reap.ReapResult:
    """The replicas serve until ``GONE``, are back at ``BACK``; the reaper runs at
    ``reap_at`` (the pods have not beaten again yet)."""
    served(conn, 0, GONE)
    served(conn, BACK, reap_at)
    return reap.run_once(conn, now=at(reap_at))


def test_with_silent_since_as_shipped_no_run_is_reaped_for_the_absence(conn):
    beating_run(conn)

    assert absence_and_return(conn, reap_at=BACK + TIMEOUT - 1).total == 0
    assert reaps_without_job_fault(conn, {}, ABSENCES) == []


def test_a_reaper_blind_to_the_absence_is_reported_with_the_gap_and_the_last_beat(conn):
    conn.execute(_PRESENCE_BLIND_SILENCE)
    run_id = beating_run(conn)

    assert absence_and_return(conn, reap_at=BACK + 5).run_ids["heartbeat_lost"] == [run_id]

    [found] = reaps_without_job_fault(conn, {}, ABSENCES)
    assert found.startswith(f"run {run_id} ended FAILED/HeartbeatLost at 2026-06-01 12:00:30")
    assert "the chaos never killed or paused its job's processes" in found
    assert "last heartbeat 2026-06-01 12:00:01+00:00" in found
    assert "silent 29.0s when judged (timeout 10s)" in found
    assert (
        "no replica was there 2026-06-01T12:00:05.000+00:00 to 2026-06-01T12:00:25.000+00:00"
        " (20.0s) in its silence, which when judged had lasted 5.0s since the run API's"
        " return" in found
    )


def test_a_run_whose_job_the_chaos_killed_or_paused_is_not_reported(conn):
    conn.execute(_PRESENCE_BLIND_SILENCE)
    run_id = beating_run(conn)
    absence_and_return(conn, reap_at=BACK + 5)

    hurt = {run_id: ["job_kill at 2026-06-01T12:00:02.000+00:00"]}
    assert reaps_without_job_fault(conn, hurt, ABSENCES) == []


def test_a_run_reaped_with_no_absence_in_its_silence_is_reported_too(conn):
    """The pods were never touched and every replica stayed: nothing explains it."""
    run_id = beating_run(conn)
    served(conn, 0, 20)
    assert reap.run_once(conn, now=at(20)).run_ids["heartbeat_lost"] == [run_id]

    [found] = reaps_without_job_fault(conn, {}, ABSENCES[:0])
    assert f"run {run_id} ended FAILED/HeartbeatLost" in found
    assert "every replica was gone at no time of its silence" in found


def test_an_orphaned_run_the_chaos_never_touched_is_reported(conn):
    job = define(
        conn,
        "orphan",
        heartbeat={"intervalSeconds": 1, "timeoutSeconds": TIMEOUT, "orphanTimeoutSeconds": 12},
        now=T0,
    )
    runs.run_now(conn, job.id, token="o", scheduled_for=T0)
    [run] = dispatch.run_once(conn, RecordingLauncher(), definition_ids=[job.id], now=T0).claimed
    conn.execute(_PRESENCE_BLIND_SILENCE)
    assert absence_and_return(conn, reap_at=BACK + 1).run_ids["orphaned"] == [run.id]

    [found] = reaps_without_job_fault(conn, {}, ABSENCES)
    assert f"run {run.id} ended FAILED/Orphaned" in found
    assert "last heartbeat never" in found
    assert "had lasted 1.0s since the run API's return" in found


# -- the bounds on silent runs allow for the absence ------------------------------------------


@pytest.fixture
def silent_run(conn) -> int:
    """A RUNNING run whose last beat was 40 s ago (timeout 10 s + slack 5 s: 25 s over)."""
    run_id = beating_run(conn, "silent")
    conn.execute(
        "UPDATE pgsched.job_runs SET heartbeat_at = now() - interval '40 seconds' WHERE id = %s",
        [run_id],
    )
    return run_id


def sample(conn, *, away: float) -> list[str]:
    sampler = Sampler(
        conn.info.dsn,
        stall_slack_seconds=SLACK,
        queue_bound_seconds=600,
        operator_away=lambda since, until: min(away, until - since),
    )
    sampler.sample(conn)
    return sampler.result.violations["I3"]


def test_the_sampler_allows_the_time_no_replica_was_there_and_no_more(conn, silent_run):
    [found] = sample(conn, away=0)
    assert f"run {silent_run} RUNNING and silent for 40s" in found

    [found] = sample(conn, away=20)  # 40 > 10 + 5 + 20
    assert "+ no replica there 20s): not reaped, and no verdict asked" in found

    assert sample(conn, away=26) == []


def test_a_reaping_delayed_by_the_absence_keeps_its_deadline(conn, silent_run):
    """After the run: HeartbeatLost 40 s after the last beat (timeout 10 s, slack 5 s) is
    late unless no replica was there for the difference; early is early whatever it is."""
    conn.execute(
        "UPDATE pgsched.job_runs SET status = 'FAILED', reason = 'HeartbeatLost',"
        " error = 'planted', finished_at = now() WHERE id = %s",
        [silent_run],
    )
    [late] = deadlines_kept(conn, slack_seconds=SLACK)
    assert f"run {silent_run} reaped HeartbeatLost 40.0s after its last heartbeat" in late

    assert deadlines_kept(conn, slack_seconds=SLACK, silence_allowance=lambda a, b: 26.0) == []
    [still] = deadlines_kept(conn, slack_seconds=SLACK, silence_allowance=lambda a, b: 20.0)
    assert "no replica there 20.0s meanwhile" in still

    conn.execute(
        "UPDATE pgsched.job_runs SET finished_at = heartbeat_at + interval '5 seconds'"
        " WHERE id = %s",
        [silent_run],
    )
    [early] = deadlines_kept(conn, slack_seconds=SLACK, silence_allowance=lambda a, b: 60.0)
    assert "reaped HeartbeatLost 5.0s after its last heartbeat" in early
