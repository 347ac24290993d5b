"""Faults injected into real processes and sessions: nothing is lost, nothing doubles.

Dispatchers killed or terminated in the middle of a claim, workers that die or freeze,
and a database restart under a running tick loop.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time

import psycopg
import pytest

import invariants
from factories import RecordingLauncher, define, runs_of, wait_for
from pgsched.db import connection
from pgsched.engine import dispatch, lease, reap, runs, settle
from pgsched.engine.tick import Ticker, TickSettings
from pgsched.runner import sidecar
from plugins.postgres import terminate_backends

pytestmark = pytest.mark.timeout(120)


def _block_dispatch(dsn: str) -> None:
    """Child process: dispatch while another session holds the definition's advisory lock."""
    with connection.connect(dsn, application_name="pgsched-victim") as conn:
        dispatch.run_once(conn, RecordingLauncher())


def hold_dispatch_lock(conn, definition_id):
    conn.execute("BEGIN")
    conn.execute("SELECT pgsched.lock_definitions_for_dispatch(%s::uuid[])", [[definition_id]])


def victim_waiting(conn):
    row = conn.execute(
        "SELECT count(*) AS n FROM pg_stat_activity WHERE application_name = 'pgsched-victim'"
        " AND wait_event_type = 'Lock'"
    ).fetchone()
    return row["n"] == 1


def queue_five(conn):
    job = define(conn, maxConcurrentRuns=10)
    for index in range(5):
        runs.run_now(conn, job.id, token=f"r{index}")
    return job


def start_blocked_claimer(dsn, conn):
    """A dispatcher process stuck inside its claim transaction: it holds its candidates'
    row locks and waits for the advisory lock the caller's blocker session holds."""
    context = multiprocessing.get_context("spawn")
    victim = context.Process(target=_block_dispatch, args=(dsn,))
    victim.start()
    wait_for(lambda: victim_waiting(conn), what="the victim to wait inside its claim")
    return victim


def test_dispatcher_backend_terminated_mid_claim_loses_nothing(dsn, conn):
    job = queue_five(conn)
    with connection.connect(dsn) as blocker:
        hold_dispatch_lock(blocker, job.id)
        victim = start_blocked_claimer(dsn, conn)
        # Its candidates are row-locked: another claimer skips them, it does not wait.
        assert dispatch.claim(conn).claimed == []

        assert terminate_backends(dsn, application_name="pgsched-victim") == 1
        victim.join(timeout=15)
        blocker.execute("ROLLBACK")

    assert {row["status"] for row in runs_of(conn, job)} == {"QUEUED"}
    launcher = RecordingLauncher()
    assert len(dispatch.run_once(conn, launcher).claimed) == 5
    assert invariants.no_double_launch(run.id for run in launcher.launched) == []


def test_dispatcher_process_killed_mid_claim_releases_its_rows(dsn, conn):
    job = queue_five(conn)
    with connection.connect(dsn) as blocker:
        hold_dispatch_lock(blocker, job.id)
        victim = start_blocked_claimer(dsn, conn)
        os.kill(victim.pid, signal.SIGKILL)
        victim.join(timeout=5)
        # The orphaned backend notices its dead client (client_connection_check_interval)
        # and rolls back even while it still waits for the lock.
        wait_for(lambda: not victim_waiting(conn), what="the dead client's backend to go away")
        blocker.execute("ROLLBACK")
    assert {row["status"] for row in runs_of(conn, job)} == {"QUEUED"}
    assert len(dispatch.claim(conn).claimed) == 5


def _worker(dsn: str, run_id: int, token: str, interval: float) -> None:
    """Child process: a job that heartbeats forever (until killed or stopped)."""
    run_lease = lease.Lease(run_id, __import__("uuid").UUID(token))
    with connection.connect(dsn, application_name="pgsched-worker") as conn:
        while True:
            lease.heartbeat(conn, run_lease)
            time.sleep(interval)


def start_worker(dsn, run):
    context = multiprocessing.get_context("spawn")
    process = context.Process(target=_worker, args=(dsn, run.id, str(run.lease_token), 0.2))
    process.start()
    return process


def test_killed_worker_is_reaped_heartbeat_lost_and_retried_and_its_zombie_finish_is_rejected(
    dsn, conn
):
    job = define(
        conn,
        heartbeat={"intervalSeconds": 1, "timeoutSeconds": 2},
        retryPolicy={"backoff": {"initialSeconds": 1}},
    )
    runs.run_now(conn, job.id, token="once")
    [run] = dispatch.run_once(conn, RecordingLauncher()).claimed
    worker = start_worker(dsn, run)
    wait_for(lambda: runs_of(conn, job)[0]["heartbeat_at"] is not None, what="a first heartbeat")
    time.sleep(2.5)
    assert reap.run_once(conn).total == 0, "a heartbeating worker must not be reaped"

    os.kill(worker.pid, signal.SIGKILL)
    worker.join()
    wait_for(
        lambda: reap.run_once(conn).count("heartbeat_lost") == 1, timeout=10, what="the reaper"
    )
    settle.run_once(conn)

    failed, retry = runs_of(conn, job)
    assert (failed["status"], failed["reason"]) == ("FAILED", "HeartbeatLost")
    assert (retry["status"], retry["attempt"], retry["retry_of"]) == ("QUEUED", 2, failed["id"])
    # The dead worker's late finish (a zombie) changes nothing.
    assert not lease.finish(conn, lease.Lease(run.id, run.lease_token), "COMPLETED")
    assert runs_of(conn, job)[0]["status"] == "FAILED"


def test_frozen_worker_loses_its_lease_and_learns_it_on_waking(dsn, conn):
    job = define(conn, heartbeat={"intervalSeconds": 1, "timeoutSeconds": 2})
    runs.run_now(conn, job.id, token="once")
    [run] = dispatch.run_once(conn, RecordingLauncher()).claimed
    worker = start_worker(dsn, run)
    wait_for(lambda: runs_of(conn, job)[0]["heartbeat_at"] is not None, what="a first heartbeat")
    os.kill(worker.pid, signal.SIGSTOP)
    try:
        wait_for(
            lambda: reap.run_once(conn).count("heartbeat_lost") == 1, timeout=10, what="the reaper"
        )
    finally:
        os.kill(worker.pid, signal.SIGCONT)
    time.sleep(0.5)  # it wakes and heartbeats again: zero rows, the lease is gone
    assert lease.heartbeat(conn, lease.Lease(run.id, run.lease_token)) == "lost"
    assert runs_of(conn, job)[0]["status"] == "FAILED"
    worker.kill()
    worker.join()


def test_never_heartbeating_worker_is_reaped_orphaned(dsn, conn):
    job = define(
        conn, heartbeat={"intervalSeconds": 1, "timeoutSeconds": 2, "orphanTimeoutSeconds": 2}
    )
    runs.run_now(conn, job.id, token="once")
    dispatch.run_once(conn, RecordingLauncher())
    wait_for(lambda: reap.run_once(conn).count("orphaned") == 1, timeout=10, what="the reaper")
    settle.run_once(conn)
    failed, retry = runs_of(conn, job)
    assert (failed["status"], failed["reason"]) == ("FAILED", "Orphaned")
    assert retry["attempt"] == 2


def test_a_database_restart_under_a_running_tick_loop_delays_runs_and_loses_none(private_postgres):
    dsn = private_postgres.dsn()
    with connection.connect(dsn) as conn:
        job = define(conn, maxConcurrentRuns=100, schedule="0 0 1 1 *")
    launcher = RecordingLauncher()
    replica = Ticker(
        lambda: connection.connect(dsn, connect_timeout=2),
        launcher,
        TickSettings(interval_seconds=0.1),
    )
    stop = threading.Event()
    errors: list[str] = []
    loop = threading.Thread(
        target=replica.run_forever,
        args=(stop,),
        kwargs={"on_tick": lambda r: r.error and errors.append(r.error)},
    )
    loop.start()
    try:
        with connection.connect(dsn) as conn:
            for index in range(5):
                runs.run_now(conn, job.id, token=f"before-{index}")
        wait_for(lambda: len(launcher.launched) == 5, what="runs before the restart")

        private_postgres.restart()

        for _attempt in range(50):
            try:
                with connection.connect(dsn) as conn:
                    for index in range(5):
                        runs.run_now(conn, job.id, token=f"after-{index}")
                break
            except psycopg.OperationalError:
                time.sleep(0.1)
        wait_for(lambda: len(launcher.launched) == 10, what="runs after the restart")
    finally:
        stop.set()
        loop.join(timeout=10)
    assert not loop.is_alive()
    assert errors, "the restart should have cost at least one tick"
    assert invariants.no_double_launch(run.id for run in launcher.launched) == []
    with connection.connect(dsn) as conn:
        assert len({row["id"] for row in runs_of(conn, job)}) == 10


def test_heartbeats_fail_during_a_database_outage_and_the_work_continues(private_postgres):
    """I6 at the library level: a failing heartbeat write raises to its caller, who must log
    and continue (the SDK runner and sidecar do); the lease survives a short outage."""
    dsn = private_postgres.dsn()
    with connection.connect(dsn) as conn:
        job = define(conn, heartbeat={"intervalSeconds": 5, "timeoutSeconds": 60})
        runs.run_now(conn, job.id, token="once")
        [run] = dispatch.run_once(conn, RecordingLauncher()).claimed
    run_lease = lease.Lease(run.id, run.lease_token)
    private_postgres.stop()
    try:
        connection.connect(dsn, connect_timeout=1)
    except psycopg.OperationalError:
        pass
    else:
        raise AssertionError("the database should be down")
    private_postgres.start()
    with connection.connect(dsn) as conn:
        assert lease.heartbeat(conn, run_lease) == "active"
        assert lease.finish(conn, run_lease, "COMPLETED")
        assert reap.run_once(conn, now=None).total == 0
        assert runs_of(conn, job)[0]["status"] == "COMPLETED"


def test_the_sidecar_notes_the_workloads_end_through_a_database_restart(
    private_postgres, start_run_api
):
    """Kubelet's SIGTERM (the workload ended) comes while the database restarts: the
    sidecar keeps trying within the pod's termination grace, so the note lands once the
    server is back. Without it a cancellation that came after the end could be told from
    one that stopped the work only by the end the pod reports, to the second (seed
    331244074 of the cluster chaos ended such a run CANCELLED)."""
    dsn = private_postgres.dsn()
    with connection.connect(dsn) as conn:
        job = define(conn, heartbeat={"intervalSeconds": 5, "timeoutSeconds": 60})
        runs.run_now(conn, job.id, token="once")
        [run] = dispatch.run_once(conn, RecordingLauncher()).claimed
    client = start_run_api(dsn).client(lease.Lease(run.id, run.lease_token))
    private_postgres.stop()
    noting = threading.Thread(target=sidecar.mark_ended, args=(client,))
    noting.start()
    time.sleep(2.0)
    assert noting.is_alive(), "the sidecar gave up while the database was away"
    private_postgres.start()
    noting.join(timeout=sidecar.END_NOTE_TIMEOUT_SECONDS)
    assert not noting.is_alive()
    with connection.connect(dsn) as conn:
        assert runs_of(conn, job)[0]["workload_ended_at"] is not None
