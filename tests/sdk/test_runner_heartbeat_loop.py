"""The heartbeat loop and the checkpoint's view of it, in-process against the real database."""

from __future__ import annotations

import statistics
import threading
import time

import pytest
from pods import claim, run_row, sdk_job, wait_for

from pgsched.db.session import Session
from pgsched.engine import runs
from pgsched.engine.lease import Lease
from pgsched.runner.checkpoint import CancellationWatch
from pgsched.runner.heartbeat import HeartbeatLoop
from pgsched.sdk import Cancelled
from plugins.postgres import terminate_backends


class Observed:
    def __init__(self):
        self.states = []
        self.changed = threading.Event()

    def __call__(self, state):
        self.states.append(state)
        self.changed.set()


@pytest.fixture
def running(conn):
    """A claimed run and its lease."""
    run = claim(conn, sdk_job(conn))
    return run, Lease(run.id, run.lease_token)


def test_loop_reports_cancellation_once_and_keeps_beating_while_the_job_stops(dsn, conn, running):
    run, run_lease = running
    observed = Observed()
    loop = HeartbeatLoop(
        Session.for_dsn(dsn, application_name="hb-test"),
        run_lease,
        interval_seconds=0.05,
        on_change=observed,
    ).start()
    try:
        first = wait_for(lambda: run_row(conn, run)["heartbeat_at"], what="a heartbeat")
        assert loop.state == "active"

        runs.cancel_run(conn, run.id, by=runs.BY_CLI)

        assert observed.changed.wait(5)
        assert loop.state == "cancel_requested"
        wait_for(lambda: run_row(conn, run)["heartbeat_at"] > first, what="later heartbeats")
        later = run_row(conn, run)["heartbeat_at"]
        wait_for(lambda: run_row(conn, run)["heartbeat_at"] > later, what="still beating")
        assert observed.states == ["cancel_requested"]
    finally:
        loop.stop(5)


def test_loop_reconnects_after_its_session_is_killed_and_the_work_is_not_told(dsn, conn, running):
    run, run_lease = running
    observed = Observed()
    loop = HeartbeatLoop(
        Session.for_dsn(dsn, application_name="hb-victim"),
        run_lease,
        interval_seconds=0.05,
        on_change=observed,
    ).start()
    try:
        wait_for(lambda: run_row(conn, run)["heartbeat_at"], what="a heartbeat")
        assert terminate_backends(dsn, application_name="hb-victim") == 1
        before = run_row(conn, run)["heartbeat_at"]
        wait_for(
            lambda: run_row(conn, run)["heartbeat_at"] > before, what="a beat on a new session"
        )
        assert loop.state == "active" and observed.states == []
    finally:
        loop.stop(5)


def test_checkpoint_asks_the_database_itself_when_heartbeats_are_stale(dsn, conn, running):
    run, run_lease = running
    # A loop that never beats (not started): its answer is always stale.
    loop = HeartbeatLoop(
        Session.for_dsn(dsn, application_name="hb-idle"), run_lease, interval_seconds=0.05
    )
    watch = CancellationWatch(loop, Session.for_dsn(dsn, application_name="checkpoint"), run_lease)
    watch.checkpoint()  # active: returns

    runs.cancel_run(conn, run.id, by=runs.BY_CLI)
    wait_for(lambda: watch.cause() == "cancelled", timeout=2, what="the checkpoint to notice")

    with pytest.raises(Cancelled) as raised:
        watch.checkpoint()
    assert raised.value.cause == "cancelled"
    assert run_row(conn, run)["heartbeat_at"] is None  # the check only read


def test_checkpoint_carries_on_when_the_database_cannot_be_asked(running):
    _, run_lease = running
    nowhere = "host=127.0.0.1 port=1 user=nobody dbname=nothing"
    loop = HeartbeatLoop(
        Session.for_dsn(nowhere, application_name="x"), run_lease, interval_seconds=0.05
    )
    watch = CancellationWatch(loop, Session.for_dsn(nowhere, application_name="y"), run_lease)
    assert loop.beat_once().error is not None
    watch.checkpoint()  # no answer is not a reason to stop
    watch.terminate()
    with pytest.raises(Cancelled) as raised:
        watch.checkpoint()
    assert raised.value.cause == "terminated"


def test_a_cancel_reaches_the_loop_in_well_under_a_second_not_at_the_next_beat(dsn, conn):
    """Cancel request → the loop's observer sees it, over 20 runs (goal: at most 1 s).

    The beat interval is 60 s, so without the notification each would take a minute."""
    job = sdk_job(conn, maxConcurrentRuns=20)
    latencies = []
    for number in range(20):
        run = claim(conn, job, token=f"run-{number}")
        observed = Observed()
        loop = HeartbeatLoop(
            Session.for_dsn(dsn, application_name="hb-latency"),
            Lease(run.id, run.lease_token),
            interval_seconds=60,
            on_change=observed,
        ).start()
        try:
            wait_for(lambda: listeners(conn) > 0, timeout=10, what="the loop to listen")
            asked = time.monotonic()
            runs.cancel_run(conn, run.id, by=runs.BY_CLI)
            assert observed.changed.wait(10), "the cancel never reached the loop"
            latencies.append(time.monotonic() - asked)
        finally:
            loop.stop(timeout=5)
        conn.execute("UPDATE pgsched.job_runs SET status = 'CANCELLED' WHERE id = %s", [run.id])
    latencies.sort()
    median, worst = statistics.median(latencies), latencies[-1]
    print(f"\ncancel → loop: median {median * 1000:.1f} ms, max {worst * 1000:.1f} ms (20 runs)")
    assert observed.states == ["cancel_requested"]
    assert median < 0.5 and worst < 1.0, latencies


def listeners(conn):
    row = conn.execute(
        "SELECT count(*) AS n FROM pg_stat_activity WHERE application_name = 'hb-latency'"
        " AND query LIKE '%listen_for_cancel%'"
    ).fetchone()
    return row["n"]
