"""A stampede of due runs: its first runs are launched after one materialization batch,
the rest oldest due first, and a run that falls due while the backlog is materialized or
drains is launched on time, ahead of it (engine/materialize.py, engine/dispatch.py, "On
time first")."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from factories import RecordingLauncher, define
from pgsched.db import connection
from pgsched.engine import dispatch, pools, runs
from pgsched.engine.tick import Ticker, TickSettings

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
ON_TIME = 2.0  # the tick's window at its default 1 s interval
HOURLY = 2000  # ScheduledJobs on 0 * * * *, due at T0


def queue(conn, job, at, count=1):
    for index in range(count):
        runs.run_now(conn, job.id, token=f"{job.name}-{at.isoformat()}-{index}", scheduled_for=at)


def drain(conn, launcher, *, now, batch):
    while dispatch.run_once(
        conn, launcher, batch_size=batch, now=now, on_time_seconds=ON_TIME
    ).claimed:
        pass


def test_a_backlog_is_launched_oldest_due_first_whatever_order_its_rows_were_made_in(conn):
    jobs = [define(conn, f"job-{i}", maxConcurrentRuns=100, now=T0) for i in range(5)]
    # Rows made newest due first (ids run against due order, as retries' rows do).
    for minute in reversed(range(6)):
        for job in jobs:
            queue(conn, job, T0 + timedelta(minutes=minute), count=2)
    launcher = RecordingLauncher()
    drain(conn, launcher, now=T0 + timedelta(hours=1), batch=7)
    due = [run.scheduled_for for run in launcher.launched]
    assert len(due) == 60 and due == sorted(due)


def test_a_run_due_during_a_stampede_is_launched_on_the_next_tick_ahead_of_the_backlog(conn):
    stampede = [define(conn, f"hourly-{i}", maxConcurrentRuns=5, now=T0) for i in range(40)]
    for job in stampede:
        queue(conn, job, T0)
    other = define(conn, "other", now=T0)
    launcher = RecordingLauncher()
    # The first tick after the due second launches the first batch of the stampede.
    dispatch.run_once(conn, launcher, batch_size=10, now=T0, on_time_seconds=ON_TIME)
    # Five seconds later 30 are still waiting, and the other job's run falls due.
    later = T0 + timedelta(seconds=5)
    queue(conn, other, later)
    tick = dispatch.run_once(conn, launcher, batch_size=10, now=later, on_time_seconds=ON_TIME)
    assert tick.claimed[0].definition_id == other.id  # launched first, too
    assert len(tick.claimed) == 10  # and the rest of the batch still goes to the backlog
    # Without "on time first" it would have waited behind the whole backlog.
    drain(conn, launcher, now=later, batch=10)
    backlog = [run for run in launcher.launched if run.definition_id != other.id]
    assert len(backlog) == 40 and all(run.scheduled_for == T0 for run in backlog)


def test_a_run_due_a_moment_after_a_stampede_is_on_time_at_the_stampedes_first_tick(conn):
    """A tick that starts late (the first tick used to materialize all 5,000 definitions,
    about a second, before claiming) sees the stampede and a run of another job due a
    second later in the same window. The window holds more than a batch; the other run's
    one chance at being on time must not go to the stampede (the benchmark: it waited
    50.9 s behind all 5,000)."""
    stampede = [define(conn, f"hourly-{i}", now=T0) for i in range(40)]
    for job in stampede:
        queue(conn, job, T0)
    other = define(conn, "other", now=T0)
    queue(conn, other, T0 + timedelta(seconds=1))
    launcher = RecordingLauncher()

    tick = dispatch.run_once(
        conn, launcher, batch_size=10, now=T0 + timedelta(seconds=1.2), on_time_seconds=ON_TIME
    )

    assert tick.claimed[0].definition_id == other.id  # claimed, and launched first
    assert len(tick.claimed) == 10
    # The stampede drains oldest first after it, in id order.
    drain(conn, launcher, now=T0 + timedelta(seconds=2), batch=10)
    backlog = [run for run in launcher.launched if run.definition_id != other.id]
    assert len(backlog) == 40 and [run.id for run in backlog] == sorted(run.id for run in backlog)


def test_a_run_late_beyond_the_window_joins_the_backlog_in_due_order(conn):
    old = define(conn, "old", maxConcurrentRuns=10, now=T0)
    newer = define(conn, "newer", now=T0)
    queue(conn, old, T0, count=10)
    queue(conn, newer, T0 + timedelta(seconds=30))
    launcher = RecordingLauncher()
    # A minute on, both are late: the older runs go first, the window does not reorder them.
    drain(conn, launcher, now=T0 + timedelta(seconds=90), batch=4)
    assert [run.definition_id for run in launcher.launched] == [old.id] * 10 + [newer.id]


def test_a_pool_keeps_its_oldest_first_order_even_for_a_run_that_is_on_time(conn):
    pools.upsert(conn, "default", "warehouse", 1)
    waiting = define(conn, "waiting", pool="warehouse", now=T0)
    punctual = define(conn, "punctual", pool="warehouse", now=T0)
    queue(conn, waiting, T0 - timedelta(minutes=10))
    queue(conn, punctual, T0)
    tick = dispatch.run_once(
        conn, RecordingLauncher(), batch_size=10, now=T0, on_time_seconds=ON_TIME
    )
    assert [run.definition_id for run in tick.claimed] == [waiting.id]


def test_a_run_due_during_a_long_tick_is_still_on_time_at_the_next(dsn, conn):
    """During a stampede a tick lasts as long as its batch takes at the API budget's pace:
    a run that fell due meanwhile is late by more than two intervals at the next tick, and
    still goes before the backlog."""

    class SlowLauncher(RecordingLauncher):
        def launch(self, run, definition):
            time.sleep(0.25)  # a Job creation at a few per second
            return super().launch(run, definition)

    stampede = [define(conn, f"hourly-{i}", now=T0) for i in range(20)]
    for job in stampede:
        queue(conn, job, T0)
    other = define(conn, "other", now=T0)
    now = [T0]
    tick = ticker(dsn, SlowLauncher(), now, dispatch_batch=10)
    try:
        assert len(tick.run_once().dispatched.claimed) == 10  # 2.5 s at this pace
        queue(conn, other, T0 + timedelta(seconds=1))
        now[0] = T0 + timedelta(seconds=4)  # 3 s late: more than two 1 s intervals
        assert tick.run_once().dispatched.claimed[0].definition_id == other.id
    finally:
        tick.close()


def ticker(dsn, launcher, now, **settings):
    """A tick leader on its own session, its clock pinned to ``now[0]``."""
    return Ticker(
        lambda: connection.connect(dsn, application_name="pgsched-tick-test"),
        launcher,
        TickSettings(**settings),
        clock=lambda: now[0],
    )


def hourly_stampede(conn):
    for index in range(HOURLY):
        define(conn, f"hourly-{index}", schedule="0 * * * *", now=T0 - timedelta(minutes=30))


class CountingLauncher(RecordingLauncher):
    """Records, at each launch, how many runs had been materialized."""

    def __init__(self, dsn):
        super().__init__()
        self.materialized_at_launch: list[int] = []
        self._db = connection.connect(dsn, application_name="pgsched-test-launcher")

    def launch(self, run, definition):
        [row] = self._db.execute("SELECT count(*) AS runs FROM pgsched.job_runs").fetchall()
        self.materialized_at_launch.append(row["runs"])
        return super().launch(run, definition)

    def close(self):
        self._db.close()


def test_a_stampedes_first_jobs_are_launched_after_one_materialization_batch(dsn, conn):
    """With thousands due at one second, the first tick used to materialize all of them
    (5,000 took 1.1 s in the stampede benchmark) before it claimed anything. Now it
    materializes one batch, dispatches, and the ticks that follow at once go on: every
    occurrence materialized exactly once, its next_run_at advanced with it."""
    hourly_stampede(conn)
    launcher = CountingLauncher(dsn)
    now = [T0 + timedelta(seconds=0.02)]
    tick = ticker(dsn, launcher, now, materialize_batch=500, dispatch_batch=50)
    try:
        first = tick.run_once()
        assert len(first.dispatched.claimed) == 50
        assert launcher.materialized_at_launch[0] == 500  # not 2,000
        assert first.materialized.more  # so the loop ticks again at once

        ticks = [first]
        while ticks[-1].materialized.more:
            now[0] += timedelta(seconds=0.3)  # a dispatch batch at the API budget's pace
            ticks.append(tick.run_once())
    finally:
        tick.close()
        launcher.close()
    assert len(ticks) == HOURLY // 500 + 1  # the last finds nothing more
    assert sum(each.materialized.queued for each in ticks) == HOURLY
    per_definition = conn.execute(
        "SELECT count(r.id) AS runs, d.next_run_at FROM pgsched.job_definitions AS d"
        " LEFT JOIN pgsched.job_runs AS r ON r.definition_id = d.id"
        " GROUP BY d.id, d.next_run_at"
    ).fetchall()
    assert {(row["runs"], row["next_run_at"]) for row in per_definition} == {
        (1, T0 + timedelta(hours=1))
    }
    # Due at one instant, they are launched in the order they were materialized (run id).
    launched = [run.id for run in launcher.launched]
    assert launched == sorted(launched)


def test_a_job_due_a_second_after_a_stampede_is_not_queued_behind_its_materialization(dsn, conn):
    """The stampede is materialized a batch per tick, oldest due first; a definition of
    the same kind that falls due meanwhile is materialized first at the next tick, and its
    run is on time, so it is launched before the stampede's backlog."""
    hourly_stampede(conn)
    other = define(
        conn, "other", rrule="FREQ=HOURLY;BYMINUTE=0;BYSECOND=1", now=T0 - timedelta(minutes=30)
    )
    launcher = RecordingLauncher()
    now = [T0 + timedelta(seconds=0.02)]
    tick = ticker(dsn, launcher, now, materialize_batch=500, dispatch_batch=50)
    try:
        tick.run_once()
        now[0] = T0 + timedelta(seconds=1.1)  # the first batch's launches took a second
        second = tick.run_once()
    finally:
        tick.close()
    assert second.materialized.definitions == 500  # the other job and 499 of the stampede
    assert second.dispatched.claimed[0].definition_id == other.id
    assert [run.definition_id for run in launcher.launched].index(other.id) == 50


def test_a_run_due_while_the_previous_tick_materialized_is_on_time_at_the_next(dsn, conn):
    """The "on time" window of a tick starts where the previous tick's materialization
    looked. It used to start where the previous dispatch began, on a clock that runs on
    during a tick: a long tick (materializing a stampede's batch) followed by a short one
    left a gap the length of the difference, and a run due in it was on time at no tick —
    in the stampede benchmark one of the 20 other jobs waited 50 s behind all 5,000."""
    for index in range(400):  # one materialization batch: the first tick is the long one
        define(conn, f"hourly-{index}", schedule="0 * * * *", now=T0 - timedelta(minutes=30))
    other = define(conn, "other", now=T0)
    started = time.monotonic()
    launcher = RecordingLauncher()
    tick = Ticker(
        lambda: connection.connect(dsn, application_name="pgsched-tick-test"),
        launcher,
        TickSettings(materialize_batch=500, dispatch_batch=10),
        clock=lambda: T0 + timedelta(seconds=time.monotonic() - started),  # a running clock
    )
    try:
        first = tick.run_once()
        assert first.materialized.queued == 400 and len(first.dispatched.claimed) == 10
        # Due just after the first tick's materialization looked, before its dispatch did.
        assert first.materialized.at is not None
        queue(conn, other, first.materialized.at + timedelta(milliseconds=1))
        second = tick.run_once()
    finally:
        tick.close()
    assert second.dispatched.claimed[0].definition_id == other.id
