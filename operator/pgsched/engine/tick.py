"""The tick loop: every replica runs it, one replica leads each tick.

One tick is: try the leader row (``leader``); materialize due definitions (recurring, then
one-shots; at most a batch of each); reap orphans; settle terminal runs (retries); dispatch
due runs; release the row. Each phase is its own transaction on the tick's dedicated
session, which holds the leader row across all of them. A tick that left more to do (a full
materialization or dispatch batch) is followed by the next at once, so a stampede's first
runs are launched after one materialization batch, and the rest is materialized between
its dispatch batches. Between ticks the session listens: a run's end that a waiting run of
its job needs (``Replace``, ``Queue``) wakes the tick at once (``Ticker._wait``).

The loop fails open. A database error, a bug in one phase, a launcher exception: the tick
logs it, drops its session (which frees the leader row if the explicit release could not run)
and the loop sleeps until the next tick. The worst case is always "this tick didn't
happen", never a scheduler that died silently (I7).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import psycopg

from pgsched.db import clock, connection, notices, queries
from pgsched.db.connection import Connection
from pgsched.db.session import Session
from pgsched.engine import dispatch, leader, loop, materialize, reap, settle
from pgsched.engine.launcher import Launcher
from pgsched.failures import FailureLog
from pgsched.validation import Problems, SettingsError

log = logging.getLogger(__name__)

# How long after a whole interval on the database clock a tick starts: enough for the
# clock measurement's error (half a round trip), so runs due at the boundary are due.
TICK_MARGIN_SECONDS = 0.02
# A tick woken by a run's end (sql/functions/wake_dispatchers.sql) comes at least this long
# after the previous one ended: a burst of ends is then one tick, and the wakeups cannot
# keep the tick busy.
WAKE_GAP_SECONDS = 0.05
# A claim still unlaunched this long after it was made is launched again (reap.unlaunched):
# the tick that claims a run launches it and records the launch before the next tick can
# start, so only a claimant that stopped in between (killed, its session or leadership lost)
# leaves one. Well inside any orphan timeout a pod's start leaves room for.
RELAUNCH_AFTER = timedelta(seconds=10)


class StalePrimaryError(RuntimeError):
    """The server is a former primary: its WAL timeline is older than one seen before."""


@dataclass(frozen=True)
class TickSettings:
    """How often and how much one tick does. Validated on construction."""

    interval_seconds: float = 1.0
    dispatch_batch: int = 50
    overshoot: int = dispatch.DEFAULT_OVERSHOOT
    materialize_batch: int = 500
    late_after_seconds: float = materialize.DEFAULT_LATE_AFTER.total_seconds()
    lock_name: str = leader.DEFAULT_LOCK_NAME
    # How long the tick session may sit idle before the server ends it (see Ticker._bounded);
    # None: max(30 s, 10 x the tick interval).
    leader_stall_seconds: float | None = None
    # After a failover (a new WAL timeline), how long dispatch waits for the timeline's
    # failover pass (pgsched.timeline_revalidations, k8s/failover/revalidation.py) before claiming:
    # the pass restores runs whose rows were lost, and skips the duplicates the new primary
    # queued for them, which a claim before it would run. None: no wait (engine-only
    # deployments have no pass); the Kubernetes operator sets it.
    failover_pass_wait_seconds: float | None = None

    @property
    def stall_seconds(self) -> float:
        if self.leader_stall_seconds is not None:
            return self.leader_stall_seconds
        return max(30.0, 10 * self.interval_seconds)

    def __post_init__(self) -> None:
        problems = Problems()
        if not 0.05 <= self.interval_seconds <= 3600:
            problems.add(
                "interval_seconds", f"{self.interval_seconds} is out of range 0.05..3600", "1"
            )
        if not 1 <= self.dispatch_batch <= 10_000:
            problems.add("dispatch_batch", f"{self.dispatch_batch} is out of range 1..10000", "50")
        if not 1 <= self.overshoot <= 100:
            problems.add("overshoot", f"{self.overshoot} is out of range 1..100", "4")
        if not 1 <= self.materialize_batch <= 100_000:
            problems.add(
                "materialize_batch", f"{self.materialize_batch} is out of range 1..100000", "500"
            )
        if self.late_after_seconds <= 0:
            problems.add("late_after_seconds", f"{self.late_after_seconds} must be positive", "60")
        if (
            self.leader_stall_seconds is not None
            and self.leader_stall_seconds < 2 * self.interval_seconds
        ):
            problems.add(
                "leader_stall_seconds",
                f"{self.leader_stall_seconds} must be at least twice the tick interval"
                f" {self.interval_seconds}",
                "30",
            )
        if self.failover_pass_wait_seconds is not None and self.failover_pass_wait_seconds < 0:
            problems.add(
                "failover_pass_wait_seconds",
                f"{self.failover_pass_wait_seconds} must not be negative",
                "300",
            )
        if not self.lock_name:
            problems.add("lock_name", "must not be empty", "pgsched:tick-leader")
        problems.raise_if_any(SettingsError)


@dataclass
class TickResult:
    leader: bool = False
    materialized: materialize.MaterializeResult | None = None
    reaped: reap.ReapResult | None = None
    settled: settle.SettleResult | None = None
    dispatched: dispatch.DispatchResult | None = None
    # Dispatch claimed nothing: the new WAL timeline's failover pass has not finished.
    dispatch_held: bool = False
    durations: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    database_error: bool = False


class Ticker:
    """Runs ticks on its own dedicated database session.

    ``connect`` opens a new session (called again after any failure); ``clock`` returns
    the pinned "now" for tests, or None to use the database clock.
    """

    def __init__(
        self,
        connect: Callable[[], Connection],
        launcher: Launcher,
        settings: TickSettings | None = None,
        *,
        clock: Callable[[], datetime | None] = lambda: None,
    ) -> None:
        self._launcher = launcher
        self.settings = settings or TickSettings()
        self._clock = clock
        self._session = Session(lambda: self._bounded(connect()))
        self._failures = FailureLog(log, "tick")
        self._database_offset = 0.0  # database clock - local clock, seconds (see _pause)
        self._timeline = 0  # the newest WAL timeline this replica ticked on (_check_timeline)
        self._owners = dispatch.Owners()  # launched definitions, kept between ticks
        self._materialized_at: datetime | None = None  # the previous round's "now"
        self._passed_timeline = 0  # the newest timeline whose failover pass ended (_held)
        self._held_since: tuple[int, float] | None = None  # timeline, monotonic start
        self._broken: psycopg.Error | None = None  # how the session broke while it waited

    def _bounded(self, conn: Connection) -> Connection:
        """Let the server end this session if its process stops responding.

        A leader frozen between two phases (SIGSTOP, a stalled node) would otherwise keep
        its session, and with it the leader row (until the row's own expiry, the same
        bound), for as long as it is frozen: no replica could tick. The session is idle between phases and between ticks for at most a tick
        interval, so a generous multiple of it is never reached by a live leader.
        """
        # And the other way round: a server frozen mid-statement keeps the TCP connection
        # alive (its kernel acknowledges everything), so the client gives up after the same
        # bound and reconnects (``connection.BoundedConnection``).
        connection.bound_answers(conn, self.settings.stall_seconds)
        limit = f"{int(self.settings.stall_seconds * 1000)}ms"
        before = clock.local().timestamp()
        row = conn.execute(
            "SELECT set_config('idle_session_timeout', %(limit)s, false),"
            " set_config('idle_in_transaction_session_timeout', %(limit)s, false),"
            " extract(epoch FROM clock_timestamp())::float8 AS database_time,"
            " pgsched.current_timeline() AS timeline",
            {"limit": limit},
        ).fetchone()
        if row is not None:
            self._database_offset = row["database_time"] - (before + clock.local().timestamp()) / 2
            self._check_timeline(conn, int(row["timeline"]))
        conn.execute(queries.get("listen_for_dispatch"))  # every session listens (_wait)
        return conn

    def _check_timeline(self, conn: Connection, timeline: int) -> None:
        """Refuse a server on an older WAL timeline than one this replica ticked on.

        After a failover the promoted standby writes on a new timeline. A former primary
        that comes back writable (restarted before its HA manager demoted it) is still on
        the old one — and a multi-host DSN would connect to it if it is listed first.
        Leading ticks there would claim runs beside the real primary, and everything it
        records is lost when it is rebuilt. Timelines only grow, so an older one means a
        stale primary: this replica does not tick on it (the tick fails open and retries).
        """
        where = f"{conn.info.host}:{conn.info.port}"
        if timeline < self._timeline:
            conn.close()
            raise StalePrimaryError(
                f"the database at {where} is on WAL timeline {timeline}, older than timeline"
                f" {self._timeline} this replica already worked on: a former primary that"
                " came back writable after a failover; not ticking on it (point the DSN at"
                " your HA manager's read-write endpoint, see docs/operations.md)"
            )
        if self._timeline and timeline > self._timeline:
            log.warning(
                "the database at %s moved from WAL timeline %s to %s: a failover happened;"
                " with asynchronous replication its last commits may be lost"
                " (see docs/operations.md, What a failover can lose)",
                where,
                self._timeline,
                timeline,
            )
        self._timeline = timeline

    def run_once(self) -> TickResult:
        result = TickResult()
        started = time.perf_counter()
        try:
            if self._broken is not None:
                # The session broke between ticks, while it listened: this tick fails as it
                # would have on its first statement (counted, logged; the next reconnects).
                broken, self._broken = self._broken, None
                raise broken
            conn = self._session.connection()
            if not self._lead(conn):
                return result
            result.leader = True
            try:
                self._phases(conn, result)
            finally:
                self._step_down(conn)
        except Exception as error:
            result.error = f"{type(error).__name__}: {error}"
            result.database_error = isinstance(error, psycopg.Error)
            self._failures.failed(result.error)
            log.debug("tick failure", exc_info=True)
            self.close()  # a dead session's leader row is free for the others at once
        else:
            self._failures.succeeded()
        finally:
            result.durations["tick"] = time.perf_counter() - started
        return result

    def _lead(self, conn: Connection) -> bool:
        """Try the leader row for this tick (never blocks)."""
        return leader.try_lead(
            conn, lock_name=self.settings.lock_name, hold_seconds=self.settings.stall_seconds
        )

    def _step_down(self, conn: Connection) -> None:
        leader.stop_leading(conn, lock_name=self.settings.lock_name)

    def _phases(self, conn: Connection, result: TickResult) -> None:
        settings = self.settings
        now = self._clock()
        # Dispatch's "on time" window starts where the previous materialization looked:
        # a run is on time at the tick that materialized it (engine/dispatch.py).
        on_time_since = self._materialized_at
        with _timed(result, "materialize"):
            result.materialized = materialize.run_once(
                conn,
                now=now,
                batch_size=settings.materialize_batch,
                late_after=timedelta(seconds=settings.late_after_seconds),
                on_time_since=self._materialized_at,
            )
            self._materialized_at = result.materialized.at
        with _timed(result, "reap"):
            result.reaped = reap.run_once(
                conn,
                now=now,
                await_verdicts=bool(getattr(self._launcher, "keeps_outcomes", False)),
                relaunch_after=(
                    RELAUNCH_AFTER
                    if getattr(self._launcher, "records_every_launch", False)
                    else None
                ),
            )
        with _timed(result, "settle"):
            result.settled = settle.run_once(conn, now=now)
        if self._held(conn):
            result.dispatch_held = True
            return
        with _timed(result, "dispatch"):
            result.dispatched = dispatch.run_once(
                conn,
                self._launcher,
                batch_size=settings.dispatch_batch,
                overshoot=settings.overshoot,
                now=now,
                owners=self._owners,
                on_time_since=on_time_since,
                # The first tick's window, before any materialization: two intervals.
                on_time_seconds=2 * self.settings.interval_seconds,
                relaunch=result.reaped.unlaunched,
            )

    def _held(self, conn: Connection) -> bool:
        """Whether dispatch waits for the current timeline's failover pass.

        A run created, claimed and launched in the WAL a failover lost has no row on the
        new primary, which queues the same occurrence (or run-now request) again; the pass
        restores the lost run from its Job and skips that duplicate, if it was not claimed
        yet. So on a timeline whose pass has not finished, dispatch claims nothing, for at
        most ``failover_pass_wait_seconds`` from when this replica first saw it waiting.
        One query per tick only then: a finished pass is remembered by timeline.
        """
        wait = self.settings.failover_pass_wait_seconds
        if wait is None or self._timeline <= self._passed_timeline:
            return False
        row = conn.execute(queries.get("failover_pass_finished")).fetchone()
        assert row is not None  # a SELECT without FROM: always one row
        timeline = int(row["timeline"])
        if row["finished"]:
            self._passed_timeline, self._held_since = timeline, None
            return False
        if self._held_since is None or self._held_since[0] != timeline:
            self._held_since = (timeline, time.monotonic())
            log.warning(
                "WAL timeline %s: not claiming runs until its failover pass has compared the"
                " runs from before it with their Jobs (at most %.0f s; see docs/operations.md,"
                " What a failover can lose)",
                timeline,
                wait,
            )
        if time.monotonic() - self._held_since[1] < wait:
            return True
        log.error(
            "WAL timeline %s: its failover pass has not finished after %.0f s (is the API"
            " server reachable?); claiming runs again: a run whose row the failover lost may"
            " now run twice",
            timeline,
            wait,
        )
        self._passed_timeline, self._held_since = timeline, None
        return False

    def _engine_time(self) -> float:
        """The engine's "now" as a UNIX time: the pinned clock, or the database's (measured
        when the session opened)."""
        pinned = self._clock()
        if pinned is not None:
            return pinned.timestamp()
        return clock.local().timestamp() + self._database_offset

    def run_forever(
        self, stop: threading.Event, *, on_tick: Callable[[TickResult], None] | None = None
    ) -> None:
        """Tick every ``interval_seconds`` until ``stop`` is set; never raises."""

        def tick() -> TickResult:
            result = self.run_once()
            if on_tick is not None:
                on_tick(result)
            return result

        def busy(result: TickResult) -> bool:
            # A full batch means more is due right now: go again without sleeping.
            return (result.materialized is not None and result.materialized.more) or (
                result.dispatched is not None
                and len(result.dispatched.claimed) >= self.settings.dispatch_batch
            )

        try:
            loop.run(
                [loop.Service("tick", tick, self._pause, again=busy)],
                stop,
                wait=lambda seconds: self._wait(seconds, stop),
            )
        finally:
            self.close()

    def _wait(self, seconds: float, stop: threading.Event) -> bool:
        """Until the next tick, or until a run's end that a waiting run of its job needs
        (``concurrencyPolicy: Replace``, or ``Queue`` at ``maxConcurrentRuns``) wakes the
        dispatchers: the database notifies every tick session (``wake_dispatchers.sql``),
        so the waiting run is claimed at once rather than up to an interval later. True if
        woken."""
        began = time.monotonic()
        conn = self._session.connected()
        woken = False
        if conn is not None:  # opened by _bounded, so listening
            try:
                woken = notices.wait(conn, seconds, stop)
            except psycopg.Error as error:
                self._broken = error  # the next tick, at once, reports it
                return True
        left = (WAKE_GAP_SECONDS if woken else seconds) - (time.monotonic() - began)
        stop.wait(max(0.0, left))
        return woken

    def _pause(self) -> float:
        """Seconds to the next tick: the next whole multiple of the interval on the engine's
        clock (the database's, measured when the session opened), plus a small margin.

        Occurrences fall on whole seconds (cron minutes, RRULE times, runAt), so a tick
        that starts just after one materializes and dispatches its runs within milliseconds,
        instead of up to a whole interval later, as free-running ticks would.
        """
        interval = self.settings.interval_seconds
        return interval - self._engine_time() % interval + TICK_MARGIN_SECONDS

    def close(self) -> None:
        self._session.close()


class _timed:
    def __init__(self, result: TickResult, phase: str) -> None:
        self.result = result
        self.phase = phase

    def __enter__(self) -> None:
        self.started = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        self.result.durations[self.phase] = time.perf_counter() - self.started
