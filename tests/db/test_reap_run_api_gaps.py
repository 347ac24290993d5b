"""The reaper allows for the run API's own gaps: pods beat through it, so a time when no
operator replica served it is nobody's silence (docs/run-api.md, "When the operator is
away"). The stamps are the replicas' (``runapi.presence``), at pinned times."""

from __future__ import annotations

from datetime import timedelta

from test_reap import T0, start_run, status

from factories import define
from pgsched.engine import lease, reap
from pgsched.runapi import presence

TIMEOUT = 30


def stamp_every_interval(conn, start, end):
    """A replica serving the API from ``start`` to ``end`` (seconds after T0)."""
    second = float(start)
    while second <= end:
        presence.run_once(conn, now=T0 + timedelta(seconds=second))
        second += presence.INTERVAL_SECONDS


def beating_run(conn):
    job = define(conn, heartbeat={"intervalSeconds": 5, "timeoutSeconds": TIMEOUT}, now=T0)
    run = start_run(conn, job)
    assert lease.heartbeat(conn, run, now=T0 + timedelta(seconds=10)) == "active"
    return run


def test_with_the_api_served_throughout_silence_is_reaped_as_before(conn):
    run = beating_run(conn)
    stamp_every_interval(conn, 0, 45)
    assert reap.run_once(conn, now=T0 + timedelta(seconds=39)).total == 0
    assert reap.run_once(conn, now=T0 + timedelta(seconds=45)).count("heartbeat_lost") == 1
    assert status(conn, run) == ("FAILED", "HeartbeatLost")


def test_no_run_is_reaped_while_no_replica_serves_the_api(conn):
    run = beating_run(conn)
    stamp_every_interval(conn, 0, 12)  # then every replica is gone (a rolling upgrade)
    for second in (45, 120, 600):
        assert reap.run_once(conn, now=T0 + timedelta(seconds=second)).total == 0
    assert status(conn, run) == ("RUNNING", None)


def test_silence_counts_from_when_the_api_came_back(conn):
    run = beating_run(conn)
    stamp_every_interval(conn, 0, 12)
    stamp_every_interval(conn, 300, 400)  # back at 300 s: the pod gets TIMEOUT from then
    assert reap.run_once(conn, now=T0 + timedelta(seconds=300 + TIMEOUT - 1)).total == 0
    assert lease.heartbeat(conn, run, now=T0 + timedelta(seconds=305)) == "active"
    assert reap.run_once(conn, now=T0 + timedelta(seconds=330)).total == 0
    # A pod that does not beat once the API is back is silent like any other.
    assert (
        reap.run_once(conn, now=T0 + timedelta(seconds=305 + TIMEOUT + 1)).count("heartbeat_lost")
        == 1
    )


def test_a_run_that_started_while_the_api_was_away_is_not_orphaned_for_it(conn):
    job = define(conn, heartbeat={"orphanTimeoutSeconds": 60}, now=T0)
    run = start_run(conn, job)
    stamp_every_interval(conn, 100, 200)  # the API was away until 100 s
    assert reap.run_once(conn, now=T0 + timedelta(seconds=150)).total == 0
    assert reap.run_once(conn, now=T0 + timedelta(seconds=161)).count("orphaned") == 1
    assert status(conn, run) == ("FAILED", "Orphaned")
