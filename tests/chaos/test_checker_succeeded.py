"""The chaos checker's I8 from the Jobs' side: a run whose Job succeeded ends COMPLETED,
except when a cancel reached it while its workload ran (CANCELLED by design: exit 0 after
reading the cancel file is how a cooperative container stops). Each case plants, from the
test side, the row a broken Job watch or verdict would leave; a short database test.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from chaos.clusterchaos import succeeded_work_violations
from factories import RecordingLauncher, define
from pgsched.engine import dispatch, runs


@pytest.fixture
def run_id(conn):
    job = define(conn, "replaced", concurrencyPolicy="Replace")
    runs.run_now(conn, job.id, token="a")
    [run] = dispatch.run_once(conn, RecordingLauncher(), definition_ids=[job.id]).claimed
    return run.id


def end(conn, run_id, *, status, reason, workload_ended_ago, cancel_asked_ago=None):
    """The run's workload ended ``workload_ended_ago`` seconds ago; its cancel (if any) was
    asked ``cancel_asked_ago`` seconds ago; it ended ``status/reason`` just now."""
    conn.execute(
        "UPDATE pgsched.job_runs SET status = %(status)s, reason = %(reason)s,"
        " finished_at = now(),"
        " workload_ended_at = now() - make_interval(secs => %(ended)s),"
        " cancel_requested = %(asked)s::float8 IS NOT NULL,"
        " cancel_requested_at = now() - make_interval(secs => %(asked)s)"
        " WHERE id = %(id)s",
        {
            "status": status,
            "reason": reason,
            "ended": workload_ended_ago,
            "asked": cancel_asked_ago,
            "id": run_id,
        },
    )


def cancelled(conn, run_id, *, cancel_asked_ago):
    """The run ended CANCELLED just now; its workload ended a minute ago."""
    end(
        conn,
        run_id,
        status="CANCELLED",
        reason="Cancelled",
        workload_ended_ago=60,
        cancel_asked_ago=cancel_asked_ago,
    )


def test_a_cancel_that_reached_the_running_workload_makes_cancelled_no_violation(conn, run_id):
    # Replace's next occurrence at :00, the workload (not polling) exited 0 at :04.
    cancelled(conn, run_id, cancel_asked_ago=64)
    assert succeeded_work_violations(conn, [run_id], {}) == []


def test_cancelled_for_a_cancel_asked_after_the_workload_ended_is_reported(conn, run_id):
    cancelled(conn, run_id, cancel_asked_ago=30)
    [problem] = succeeded_work_violations(conn, [run_id], {})
    assert f"run {run_id}: its sidecar reported the workload ended" in problem
    assert "CANCELLED/Cancelled" in problem


def test_a_succeeded_run_failed_after_its_workload_ended_is_reported(conn, run_id):
    end(conn, run_id, status="FAILED", reason="HeartbeatLost", workload_ended_ago=60)
    [problem] = succeeded_work_violations(conn, [run_id], {})
    assert "FAILED/HeartbeatLost" in problem


def cancelled_without_a_note(conn, run_id, *, cancel_asked_ago, pod_ended_ago):
    """The run ended CANCELLED just now without its sidecar's note of the workload's end;
    the checker's pod recorder has the end its pod reported (kubelet's ``finishedAt``, to
    the second) ``pod_ended_ago`` seconds ago. Its violations."""
    end(
        conn,
        run_id,
        status="CANCELLED",
        reason="Cancelled",
        workload_ended_ago=None,
        cancel_asked_ago=cancel_asked_ago,
    )
    now = conn.execute("SELECT now() AS now").fetchone()["now"]
    reported = (now - timedelta(seconds=pod_ended_ago)).replace(microsecond=0)
    return succeeded_work_violations(conn, [run_id], {}, {run_id: reported})


def test_without_the_sidecars_note_a_cancel_after_the_pods_reported_end_is_reported(conn, run_id):
    # seed 331244074: the note missing, Replace's cancel 8 s after the pod's end.
    [problem] = cancelled_without_a_note(conn, run_id, cancel_asked_ago=22, pod_ended_ago=30)
    assert f"run {run_id}: its pod reported the workload ended at" in problem
    assert "CANCELLED/Cancelled" in problem


def test_without_the_sidecars_note_a_cancel_close_to_the_pods_reported_end_may_cancel(conn, run_id):
    assert cancelled_without_a_note(conn, run_id, cancel_asked_ago=29, pod_ended_ago=30) == []
