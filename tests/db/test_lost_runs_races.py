"""A lost run restored while the new primary creates its duplicate: one of them, never both.

After an asynchronous failover the new primary does a lost run's work again: the
occurrence is queued again (its next_run_at was lost too), a run-now request kept on its
ScheduledJob is carried out again, a failed run whose settling was lost is settled again
(its retry), an upstream run likewise (its chained run). Meanwhile the failover pass
restores the lost run from its Job (``pgsched.restore_lost_run``). Only the occurrence has
a unique key (none on the token, the failed or the upstream run can span job_runs'
partitions): each other creation looks for an existing run under a lock, which the restore
takes too. Here one of the two holds its transaction open while the other is called: the
second waits, or steps aside, and sees the first's run. Without that lock both committed
and the work ran twice: the cluster chaos saw one run-now request executed by two runs
(tests/chaos/test_chaos_cluster_failover.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import psycopg
import pytest
from test_lost_runs import DUE, T0, restore, rows

from factories import RecordingLauncher, define, wait_for
from pgsched.db import connection
from pgsched.db.connection import Connection
from pgsched.engine import dispatch, lease, materialize, runs, settle
from pgsched.engine.models import Definition, Run
from plugins.postgres import migrated_server
from standby import promote, standby_of, wait_caught_up

NO_SCHEDULE = "0 0 1 1 *"  # everything here runs by hand
RETRIED = {"retryOn": ["NonZeroExit"], "backoff": {"initialSeconds": 0, "jitter": 0}}


@pytest.fixture
def primary() -> Iterator:
    yield from migrated_server()


@dataclass(frozen=True)
class Work:
    """One kind of work a failover can lose and the new primary redo."""

    trigger: str
    # On the primary while the standby still follows: the definitions, and what must
    # survive the failover (the failed or upstream run), by definition name.
    before: Callable[[Connection], dict[str, Definition]]
    # On the primary after the standby stopped: the run that will be lost, claimed.
    lost: Callable[[Connection, dict[str, Definition]], Run]
    # On the new primary: the product's own way of doing that work again.
    redo: Callable[[Connection, dict[str, Definition]], object]


def _claim(conn: Connection, definition: Definition) -> Run:
    [run] = dispatch.run_once(conn, RecordingLauncher(), definition_ids=[definition.id]).claimed
    return run


def _finished(conn: Connection, definition: Definition, status: str, reason: str | None):
    runs.run_now(conn, definition.id, token="first")
    run = _claim(conn, definition)
    assert lease.finish(conn, lease.Lease(run.id, run.lease_token), status, reason=reason)


def _occurrence_before(conn: Connection) -> dict[str, Definition]:
    return {"job": define(conn, "job", schedule="* * * * *", now=T0)}


def _occurrence_lost(conn: Connection, defined: dict[str, Definition]) -> Run:
    assert materialize.run_once(conn, now=DUE).queued == 1
    return _claim(conn, defined["job"])


def _request_before(conn: Connection) -> dict[str, Definition]:
    return {"job": define(conn, "job", schedule=NO_SCHEDULE, now=T0)}


def _request_lost(conn: Connection, defined: dict[str, Definition]) -> Run:
    runs.run_now(conn, defined["job"].id, token="annotation:deploy-1")
    return _claim(conn, defined["job"])


def _retry_before(conn: Connection) -> dict[str, Definition]:
    job = define(conn, "job", schedule=NO_SCHEDULE, now=T0, retryPolicy=RETRIED)
    _finished(conn, job, "FAILED", "NonZeroExit")  # its settling (the retry) is lost
    return {"job": job}


def _chain_before(conn: Connection) -> dict[str, Definition]:
    extract = define(conn, "extract", schedule=NO_SCHEDULE, now=T0)
    load = define(conn, "load", after=[{"scheduledJob": "extract"}], now=T0)
    _finished(conn, extract, "COMPLETED", None)  # its settling (the chained run) is lost
    return {"job": load, "upstream": extract}


def _settled_and_claimed(conn: Connection, defined: dict[str, Definition]) -> Run:
    settle.run_once(conn)
    return _claim(conn, defined["job"])


WORK = {
    # Its next_run_at was lost with the run: the materializer queues the occurrence again.
    "occurrence": Work(
        "schedule",
        _occurrence_before,
        _occurrence_lost,
        lambda conn, _: materialize.run_once(conn, now=DUE),
    ),
    "run-now request": Work(
        "manual",
        _request_before,
        _request_lost,
        lambda conn, defined: runs.run_now(conn, defined["job"].id, token="annotation:deploy-1"),
    ),
    "retry": Work(
        "retry", _retry_before, _settled_and_claimed, lambda conn, _: settle.run_once(conn)
    ),
    "chained run": Work(
        "upstream", _chain_before, _settled_and_claimed, lambda conn, _: settle.run_once(conn)
    ),
}


def _waiting_on_a_lock(conn: Connection, pid: int) -> bool:
    row = conn.execute(
        "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [pid]
    ).fetchone()
    return row is not None and row["wait_event_type"] == "Lock"


def _live_runs_of_the_work(conn: Connection, lost: Run) -> list[dict]:
    """The runs of the lost run's definition and trigger that may execute (not skipped)."""
    return [
        row
        for row in rows(conn).values()
        if row["definition_id"] == lost.definition_id
        and row["trigger"] == lost.trigger
        and row["status"] != "SKIPPED"
    ]


@pytest.mark.parametrize("first", ["the new primary's duplicate", "the restore"])
@pytest.mark.parametrize("kind", list(WORK))
def test_a_lost_run_restored_while_the_new_primary_redoes_its_work_runs_once(primary, kind, first):
    work = WORK[kind]
    standby = standby_of(primary)
    try:
        with connection.connect(primary.dsn()) as conn:
            defined = work.before(conn)
        wait_caught_up(primary, standby)
        standby.stop()  # from here on the standby misses everything
        with connection.connect(primary.dsn()) as conn:
            lost = work.lost(conn, defined)
        assert lost.trigger == work.trigger
        primary.stop(mode="immediate")
        standby.start()
        promote(standby)

        with (
            connection.connect(standby.dsn()) as holder,
            connection.connect(standby.dsn()) as other,
            connection.connect(standby.dsn()) as observer,
            ThreadPoolExecutor(1) as thread,
        ):
            assert lost.id not in rows(observer)

            def restoring(conn: Connection) -> object:
                return restore(conn, lost, lost.lease_token)

            def redoing(conn: Connection) -> object:
                return work.redo(conn, defined)

            hold, then = (restoring, redoing) if first == "the restore" else (redoing, restoring)
            with holder.transaction():
                hold(holder)
                second: Future = thread.submit(then, other)
                pid = other.info.backend_pid
                wait_for(
                    lambda: second.done() or _waiting_on_a_lock(observer, pid),
                    what="the second transaction to end or wait",
                )
                if first == "the new primary's duplicate":
                    # The restore must wait to see the duplicate; a settle that finds the
                    # failed or upstream run locked by the restore may skip it instead.
                    assert not second.done(), second.result()
            try:
                second.result(timeout=30)
            except psycopg.errors.UniqueViolation:
                # An occurrence's duplicate holds job_runs_occurrence_key: its restore
                # fails, and the pass's next round restores it and skips the duplicate.
                assert (kind, first) == ("occurrence", "the new primary's duplicate")
                restoring(other)
            work.redo(other, defined)  # once more: nothing changes any more

            live = _live_runs_of_the_work(observer, lost)
            assert [row["id"] for row in live] == [lost.id], live
            assert live[0]["status"] == "RUNNING" and live[0]["lease_token"] == lost.lease_token
            for row in rows(observer).values():
                if row["status"] == "SKIPPED" and row["trigger"] == work.trigger:
                    assert row["reason"] == "DuplicateOfRestoredRun"
                    assert row["started_at"] is None
    finally:
        standby.cleanup()
