"""The tick: one leader per tick, all phases in order, and failing open (I7)."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

import pytest

from factories import RecordingLauncher, define, runs_of, wait_for
from pgsched.db import connection
from pgsched.engine import dispatch, leader, lease, pools, runs
from pgsched.engine.tick import Ticker, TickSettings
from pgsched.validation import SettingsError
from plugins.postgres import terminate_backends

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def ticker(dsn, launcher=None, *, at=None, **settings):
    return Ticker(
        lambda: connection.connect(dsn, application_name="pgsched-tick-test"),
        launcher or RecordingLauncher(),
        TickSettings(**settings),
        clock=lambda: at,
    )


def test_a_tick_materializes_reaps_settles_and_dispatches(dsn, conn):
    job = define(conn, schedule="*/5 * * * *", now=T0)
    launcher = RecordingLauncher()
    result = ticker(dsn, launcher, at=T0 + timedelta(minutes=5, seconds=1)).run_once()
    assert result.leader and result.error is None
    assert result.materialized.queued == 1 and len(result.dispatched.claimed) == 1
    assert [run.definition_id for run in launcher.launched] == [job.id]
    assert set(result.durations) == {"materialize", "reap", "settle", "dispatch", "tick"}


def test_only_one_replica_leads_while_another_holds_the_lock(dsn, conn):
    define(conn, schedule="* * * * *", now=T0)
    with connection.connect(dsn) as other:
        assert leader.try_lead(other)
        result = ticker(dsn, at=T0 + timedelta(minutes=1)).run_once()
        assert not result.leader and result.materialized is None
        assert runs_of(conn, define(conn, schedule="* * * * *", now=T0)) == []
        leader.stop_leading(other)
    assert ticker(dsn, at=T0 + timedelta(minutes=1)).run_once().leader


def test_the_leader_lock_is_released_explicitly_after_each_tick(dsn):
    first = ticker(dsn, at=T0)
    assert first.run_once().leader
    # The first ticker keeps its session open, yet another replica can lead the next tick.
    assert ticker(dsn, at=T0).run_once().leader
    first.close()


def test_a_tick_against_a_dead_database_fails_open_and_recovers(private_postgres):
    dsn = private_postgres.dsn()
    with connection.connect(dsn) as conn:
        job = define(conn, maxConcurrentRuns=10, now=T0)
        runs.run_now(conn, job.id, token="before", scheduled_for=T0)
    launcher = RecordingLauncher()
    replica = ticker(dsn, launcher, at=T0 + timedelta(seconds=1))
    assert len(replica.run_once().dispatched.claimed) == 1

    private_postgres.stop()
    on_dead_session = replica.run_once()  # the open session learns the server went away
    on_reconnect = replica.run_once()  # and a new one is refused
    assert not on_dead_session.leader and "AdminShutdown" in on_dead_session.error
    assert not on_reconnect.leader and "connection" in on_reconnect.error

    private_postgres.start()
    with connection.connect(dsn) as conn:
        runs.run_now(conn, job.id, token="after", scheduled_for=T0)
    recovered = replica.run_once()
    assert recovered.error is None and len(recovered.dispatched.claimed) == 1
    assert len(launcher.launched) == 2


def test_the_loop_keeps_ticking_through_errors_and_stops_cleanly(dsn, conn):
    class ExplodingLauncher:
        calls = 0

        def launch(self, run, definition):
            ExplodingLauncher.calls += 1
            raise RuntimeError("API server on fire")

    job = define(conn, schedule="0 0 1 1 *", maxConcurrentRuns=50, retryPolicy={"maxAttempts": 1})
    for index in range(3):
        runs.run_now(conn, job.id, token=f"r{index}")
    replica = Ticker(
        lambda: connection.connect(dsn), ExplodingLauncher(), TickSettings(interval_seconds=0.05)
    )
    stop = threading.Event()
    ticks: list[object] = []
    thread = threading.Thread(
        target=replica.run_forever, args=(stop,), kwargs={"on_tick": ticks.append}
    )
    thread.start()
    time.sleep(0.5)
    stop.set()
    thread.join(timeout=5)
    assert not thread.is_alive() and len(ticks) > 3
    assert ExplodingLauncher.calls == 3
    assert {(row["status"], row["reason"]) for row in runs_of(conn, job)} == {
        ("FAILED", "LaunchFailed")
    }


def test_settings_are_validated_with_actionable_messages():
    with pytest.raises(
        SettingsError, match=r"dispatch_batch: 0 is out of range 1..10000 \(example: 50\)"
    ):
        TickSettings(dispatch_batch=0)


def test_a_frozen_leaders_session_is_ended_by_the_server_and_another_replica_leads(dsn):
    """A leader stuck between two phases holds the session lock; the server ends its idle
    session after the stall timeout, which releases the lock for the other replicas."""
    frozen = Ticker(
        lambda: connection.connect(dsn),
        RecordingLauncher(),
        TickSettings(interval_seconds=0.1, leader_stall_seconds=1.0),
    )
    session = frozen._session.connection()
    assert leader.try_lead(session)  # ... and then it stops responding
    with connection.connect(dsn) as other:
        assert not leader.try_lead(other)
        time.sleep(2.5)
        assert leader.try_lead(other)
        leader.stop_leading(other)
    assert frozen.run_once().error is not None  # on waking, its session is gone
    assert frozen.run_once().leader  # and it reconnects
    frozen.close()


def test_ticks_start_just_after_whole_seconds_so_runs_start_on_time(dsn, conn):
    """Real time, database clock: runs due at whole seconds are dispatched within a small
    fraction of the tick interval, not up to a whole interval late.

    Four runs, due one second apart: a ticker out of phase with whole seconds starts every
    one of them equally late, while a machine loaded by other suites may stall a tick or
    two (a stalled tick starts its run a whole interval late), so three of four on time
    is the verdict."""
    database_now = conn.execute("SELECT clock_timestamp() AS now").fetchone()["now"]
    first = database_now.replace(microsecond=0) + timedelta(seconds=3)
    dues = [first + timedelta(seconds=n) for n in range(4)]
    jobs = [
        define(conn, f"on-time-{n}", runAt=due.isoformat(), now=database_now)
        for n, due in enumerate(dues)
    ]
    replica = Ticker(lambda: connection.connect(dsn), RecordingLauncher(), TickSettings())
    stop = threading.Event()
    thread = threading.Thread(target=replica.run_forever, args=(stop,))
    thread.start()
    try:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and not all(
            any(row["started_at"] for row in runs_of(conn, job)) for job in jobs
        ):
            time.sleep(0.1)
    finally:
        stop.set()
        thread.join(timeout=5)
    late = []
    for job, due in zip(jobs, dues, strict=True):
        (run,) = runs_of(conn, job)
        assert run["scheduled_for"] == due
        late.append((run["started_at"] - due).total_seconds())
    assert all(seconds >= 0 for seconds in late), late
    on_time = [seconds for seconds in late if seconds < 0.2]
    assert len(on_time) >= 3, f"started {late} s after they were due (ticks every 1 s)"


def claimed_ids(launcher):
    return [run.id for run in launcher.launched]


def test_a_runs_end_wakes_the_tick_to_claim_the_run_waiting_for_it(dsn, conn):
    """``Replace`` and ``Queue`` keep the next run QUEUED until the running one ended; the
    end comes between ticks, and the next tick used to come up to an interval later (issue
    26: Replace started over a second late). With a 30 s interval, the waiting run is
    claimed within a second of the end: the database woke the tick (migration 0035)."""
    job = define(conn, "queued", schedule="0 0 1 1 *", maxConcurrentRuns=1)
    for token in ("first", "second"):
        runs.run_now(conn, job.id, token=token)
    launcher = RecordingLauncher()
    replica = ticker(dsn, launcher, interval_seconds=30)
    stop = threading.Event()
    thread = threading.Thread(target=replica.run_forever, args=(stop,))
    thread.start()
    try:
        wait_for(lambda: len(launcher.launched) == 1, 10, "the first run's claim")
        time.sleep(0.5)  # the tick is waiting now: its next is up to 30 s away
        [first] = launcher.launched
        ended = time.monotonic()
        assert lease.finish(conn, lease.Lease(first.id, first.lease_token), "COMPLETED")
        wait_for(lambda: len(launcher.launched) == 2, 5, "the waiting run's claim")
        woken_after = time.monotonic() - ended
    finally:
        stop.set()
        thread.join(timeout=5)
    assert not thread.is_alive()
    assert woken_after < 1.0, woken_after


def notified(listener):
    return [n.channel for n in listener.notifies(timeout=0.5, stop_after=1)]


def test_only_an_end_that_a_waiting_run_needs_wakes_the_dispatchers(dsn, conn):
    """The wakeup goes to an unguessable channel (job logins cannot name it), and only
    when the ended run's job has a QUEUED run: ends of jobs with nothing waiting (nearly
    every end) wake nobody."""
    alone = define(conn, "alone", schedule="0 0 1 1 *", maxConcurrentRuns=1)
    waited = define(conn, "waited", schedule="0 0 1 1 *", maxConcurrentRuns=1)
    runs.run_now(conn, alone.id, token="only")
    for token in ("first", "second"):
        runs.run_now(conn, waited.id, token=token)
    [lonely, first] = [
        dispatch.run_once(conn, RecordingLauncher(), definition_ids=[job.id]).claimed[0]
        for job in (alone, waited)
    ]
    with connection.connect(dsn) as listener:
        listener.execute("SELECT pgsched.listen_for_dispatch()")
        assert lease.finish(conn, lease.Lease(lonely.id, lonely.lease_token), "COMPLETED")
        assert notified(listener) == []
        assert lease.finish(conn, lease.Lease(first.id, first.lease_token), "COMPLETED")
        [channel] = notified(listener)
    assert channel.startswith("pgsched_dispatch_") and len(channel) == 57


def test_an_end_that_frees_a_pool_slot_another_job_waits_for_wakes_the_dispatchers(dsn, conn):
    """A ConcurrencyPool's freed slot is often another job's to take (migration 0037): the
    end of a run in a pool wakes the dispatchers when any member has a QUEUED run, and
    only then."""
    pools.upsert(conn, "default", "warehouse", 2)
    loader = define(conn, "loader", pool="warehouse", maxConcurrentRuns=5)
    report = define(conn, "report", pool="warehouse", maxConcurrentRuns=5)
    outsider = define(conn, "outsider", maxConcurrentRuns=5)
    for job, token in ((loader, "first"), (loader, "again"), (outsider, "own")):
        runs.run_now(conn, job.id, token=token)
    [first, again] = dispatch.run_once(
        conn, RecordingLauncher(), definition_ids=[loader.id]
    ).claimed
    [own] = dispatch.run_once(conn, RecordingLauncher(), definition_ids=[outsider.id]).claimed
    runs.run_now(conn, report.id, token="waits")  # the pool is full: it stays QUEUED
    assert not dispatch.run_once(conn, RecordingLauncher(), definition_ids=[report.id]).claimed
    with connection.connect(dsn) as listener:
        listener.execute("SELECT pgsched.listen_for_dispatch()")
        # Not in the pool: nothing waits for its end.
        assert lease.finish(conn, lease.Lease(own.id, own.lease_token), "COMPLETED")
        assert notified(listener) == []
        # The loader's end frees the slot the report's run waits for.
        assert lease.finish(conn, lease.Lease(first.id, first.lease_token), "COMPLETED")
        assert len(notified(listener)) == 1
        [claimed] = dispatch.run_once(conn, RecordingLauncher(), definition_ids=[report.id]).claimed
        # Nothing queued in the pool any more: the next end wakes nobody.
        assert lease.finish(conn, lease.Lease(again.id, again.lease_token), "COMPLETED")
        assert notified(listener) == []
    assert claimed.definition_id == report.id


def test_a_session_killed_while_the_tick_waits_is_a_failed_tick_then_a_new_session(dsn, conn):
    """Between ticks the session listens for runs' ends; killed then, it breaks in the
    wait. That is still a database error of the tick, reported by the next tick as it was
    before the tick listened (the operator counts ``pgsched_database_errors_total``), and
    the tick after it leads on a new session."""
    ticks: list = []
    replica = ticker(dsn, interval_seconds=1)
    stop = threading.Event()
    thread = threading.Thread(
        target=replica.run_forever, args=(stop,), kwargs={"on_tick": ticks.append}
    )
    thread.start()
    try:
        wait_for(lambda: ticks, 10, "a first tick")
        assert terminate_backends(dsn, application_name="pgsched-tick-test") == 1
        wait_for(lambda: any(tick.database_error for tick in ticks), 5, "the failed tick")
        failed = next(index for index, tick in enumerate(ticks) if tick.database_error)
        wait_for(lambda: any(tick.leader for tick in ticks[failed:]), 5, "a tick after it")
    finally:
        stop.set()
        thread.join(timeout=5)
    assert not thread.is_alive()
