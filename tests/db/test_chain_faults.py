"""Chained runs under faults: a settler killed while it holds the upstream runs, and a
database restart under a running tick loop. Nothing lost, nothing doubled (I10)."""

from __future__ import annotations

import multiprocessing
import threading
import time

import psycopg
import pytest

from devenv.waiting import wait_for
from factories import define, runs_of
from pgsched.db import connection
from pgsched.engine import dispatch, lease, runs, settle
from pgsched.engine.models import Definition, Run
from pgsched.engine.tick import Ticker, TickSettings
from plugins.postgres import terminate_backends

pytestmark = pytest.mark.timeout(120)
NEVER = "0 0 1 1 *"


def _settle(dsn: str) -> None:
    """Child process: settle while the test's blocker holds the downstream's chain lock."""
    with connection.connect(dsn, application_name="pgsched-victim") as conn:
        settle.run_once(conn)


def chained_per_upstream(conn, downstream):
    rows = conn.execute(
        "SELECT upstream_run_id, count(*) AS n FROM pgsched.job_runs"
        " WHERE definition_id = %s AND trigger = 'upstream' GROUP BY upstream_run_id",
        [downstream.id],
    ).fetchall()
    return {row["upstream_run_id"]: row["n"] for row in rows}


def test_a_settler_killed_inside_its_transaction_leaves_the_run_unsettled_and_a_later_settle_chains_it_once(
    dsn, conn
):
    extract = define(conn, "extract", schedule=NEVER)
    load = define(conn, "load", after=[{"scheduledJob": "extract"}])
    runs.run_now(conn, extract.id, token="a")
    [run] = dispatch.claim(conn).claimed
    assert lease.finish(conn, lease.Lease(run.id, run.lease_token), "COMPLETED")

    with connection.connect(dsn) as blocker:
        blocker.execute("BEGIN")
        blocker.execute("SELECT pgsched.lock_chains(%s::uuid[])", [[load.id]])
        victim = multiprocessing.get_context("spawn").Process(target=_settle, args=(dsn,))
        victim.start()
        wait_for(
            lambda: (
                conn.execute(
                    "SELECT count(*) AS n FROM pg_stat_activity"
                    " WHERE application_name = 'pgsched-victim' AND wait_event_type = 'Lock'"
                ).fetchone()["n"]
                == 1
            ),
            describe="the settler to wait for the chain lock",
        )
        # It holds the upstream run (SKIP LOCKED): another settler passes it over.
        assert settle.run_once(conn).settled == 0
        assert terminate_backends(dsn, application_name="pgsched-victim") == 1
        victim.join(timeout=15)
        blocker.execute("ROLLBACK")

    assert runs_of(conn, load) == []
    assert (
        conn.execute("SELECT settled_at FROM pgsched.job_runs WHERE id = %s", [run.id]).fetchone()[
            "settled_at"
        ]
        is None
    )
    result = settle.run_once(conn)
    assert [item.upstream_run_id for item in result.chained] == [run.id]
    assert chained_per_upstream(conn, load) == {run.id: 1}


class CompletingLauncher:
    """'Launches' by finishing the run COMPLETED at once, retrying through an outage."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.finished: list[int] = []

    def launch(self, run: Run, definition: Definition) -> str | None:
        for _attempt in range(200):
            try:
                with connection.connect(self.dsn, connect_timeout=2) as own:
                    lease.finish(own, lease.Lease(run.id, run.lease_token), "COMPLETED")
                self.finished.append(run.id)
                break
            except psycopg.OperationalError:
                time.sleep(0.1)
        return f"{definition.name}-{run.id}"


def test_a_database_restart_under_a_running_tick_loop_loses_and_doubles_no_chained_run(
    private_postgres,
):
    dsn = private_postgres.dsn()
    with connection.connect(dsn) as conn:
        extract = define(conn, "extract", schedule=NEVER, maxConcurrentRuns=100)
        load = define(conn, "load", after=[{"scheduledJob": "extract"}], maxConcurrentRuns=100)
    launcher = CompletingLauncher(dsn)
    replica = Ticker(
        lambda: connection.connect(dsn, connect_timeout=2),
        launcher,
        TickSettings(interval_seconds=0.1),
    )
    stop = threading.Event()
    loop = threading.Thread(target=replica.run_forever, args=(stop,))
    loop.start()

    def queue(prefix):
        for _attempt in range(100):
            try:
                with connection.connect(dsn, connect_timeout=2) as conn:
                    for index in range(5):
                        runs.run_now(conn, extract.id, token=f"{prefix}-{index}")
                return
            except psycopg.OperationalError:
                time.sleep(0.1)

    def settled_chain():
        with connection.connect(dsn) as conn:
            return chained_per_upstream(conn, load)

    try:
        queue("before")
        wait_for(lambda: len(settled_chain()) >= 2, describe="chained runs before the restart")
        private_postgres.restart()
        queue("after")
        wait_for(lambda: len(settled_chain()) == 10, describe="every upstream run chained")
        wait_for(lambda: len(launcher.finished) == 20, describe="every chained run done")
    finally:
        stop.set()
        loop.join(timeout=10)
    assert not loop.is_alive()
    with connection.connect(dsn) as conn:
        upstream = [row["id"] for row in runs_of(conn, extract) if row["status"] == "COMPLETED"]
        assert len(upstream) == 10
        assert settled_chain() == {run_id: 1 for run_id in upstream}
