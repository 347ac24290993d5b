"""The heartbeat loop and the checkpoint's view of it, in-process, through the run API
against the real database. (The loop's own logic, with a stand-in for the run API:
tests/unit/test_heartbeat_long_poll.py.)"""

from __future__ import annotations

import statistics
import threading
import time

import pytest
from pods import claim, run_row, sdk_job, wait_for

from pgsched.engine import runs
from pgsched.engine.lease import Lease
from pgsched.runner.checkpoint import CancellationWatch
from pgsched.runner.heartbeat import HeartbeatLoop
from pgsched.sdk import Cancelled


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


def test_loop_reports_cancellation_once_and_keeps_beating_while_the_job_stops(
    run_api, conn, running
):
    run, run_lease = running
    observed = Observed()
    loop = HeartbeatLoop(
        run_api.client(run_lease), interval_seconds=0.05, on_change=observed
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


def test_checkpoint_asks_the_run_api_itself_when_heartbeats_are_stale(run_api, conn, running):
    run, run_lease = running
    # A loop that never beats (not started): its answer is always stale.
    client = run_api.client(run_lease)
    loop = HeartbeatLoop(client, interval_seconds=0.05)
    watch = CancellationWatch(loop, client)
    watch.checkpoint()  # active: returns

    runs.cancel_run(conn, run.id, by=runs.BY_CLI)
    wait_for(lambda: watch.cause() == "cancelled", timeout=2, what="the checkpoint to notice")

    with pytest.raises(Cancelled) as raised:
        watch.checkpoint()
    assert raised.value.cause == "cancelled"
    assert run_row(conn, run)["heartbeat_at"] is None  # the check only read


def test_a_cancel_reaches_the_loop_in_well_under_a_second_not_at_the_next_beat(run_api, conn):
    """Cancel request → the loop's observer sees it, over 20 runs (goal: at most 1 s).

    The beat interval is 60 s, so without the long poll each would take a minute."""
    job = sdk_job(conn, maxConcurrentRuns=20)
    latencies = []
    for number in range(20):
        run = claim(conn, job, token=f"run-{number}")
        observed = Observed()
        loop = HeartbeatLoop(
            run_api.client(Lease(run.id, run.lease_token)),
            interval_seconds=60,
            on_change=observed,
        ).start()
        try:
            wait_for(lambda run=run: run_row(conn, run)["heartbeat_at"], what="a first beat")
            time.sleep(0.05)  # the long poll is open (were it not, it would answer at once)
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
