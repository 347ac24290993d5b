"""The operator's connection pool through a database restart."""

from __future__ import annotations

import time
from contextlib import ExitStack

import psycopg
import pytest

from pgsched.db import connection


def test_pooled_connections_broken_by_a_database_restart_are_replaced_not_handed_out(
    private_postgres,
):
    """Found by the chaos suite: after a Postgres crash every idle pooled connection was
    dead, each Job-outcome handler got one and failed, and since the framework of the time
    (kopf) did not retry event handlers, outcomes of Jobs that had succeeded were lost (their
    runs were later reaped HeartbeatLost and run again)."""
    with connection.pool(private_postgres.dsn(), name="pgsched-test-pool", max_size=3) as pool:
        with ExitStack() as stack:  # three live connections, all idle in the pool afterwards
            for _ in range(3):
                stack.enter_context(pool.connection()).execute("SELECT 1")

        private_postgres.restart()

        for _ in range(3):
            with pool.connection() as conn:
                assert conn.execute("SELECT 1 AS one").fetchone() == {"one": 1}


def test_pooled_connections_of_a_crashed_database_are_replaced_not_handed_out(private_postgres):
    """A crash (the postmaster killed, then crash recovery) says nothing on the idle
    connections, but closes them: the check still finds them dead and replaces them."""
    with connection.pool(private_postgres.dsn(), name="pgsched-test-pool", max_size=2) as pool:
        with ExitStack() as stack:
            for _ in range(2):
                stack.enter_context(pool.connection()).execute("SELECT 1")

        private_postgres.kill()
        private_postgres.start()

        for _ in range(2):
            with pool.connection() as conn:
                assert conn.execute("SELECT 1 AS one").fetchone() == {"one": 1}


def test_a_healthy_idle_connection_is_handed_out_without_a_round_trip(private_postgres):
    """The check asks the server only when it said something: a call of one statement
    stays one round trip (the run API's heartbeats)."""
    with (
        connection.pool(private_postgres.dsn(), name="pgsched-test-pool", max_size=1) as pool,
        psycopg.connect(private_postgres.dsn(), autocommit=True) as observer,
    ):
        with pool.connection() as conn:
            pid = conn.execute("SELECT pg_backend_pid() AS pid").fetchone()["pid"]
            conn.execute("SELECT 'the last statement' AS marker")
        with pool.connection() as conn:
            [last] = observer.execute(
                "SELECT query FROM pg_catalog.pg_stat_activity WHERE pid = %s", (pid,)
            ).fetchone()
            assert last == "SELECT 'the last statement' AS marker"
            assert conn.execute("SELECT pg_backend_pid() AS pid").fetchone()["pid"] == pid


def test_statements_on_a_bounded_pool_give_up_at_its_timeout(private_postgres):
    """The run API's pool: a call that waits on a lock gives its connection back."""
    dsn = private_postgres.dsn()
    with (
        connection.pool(
            dsn, name="pgsched-test-pool", max_size=1, statement_timeout_ms=300
        ) as pool,
        psycopg.connect(dsn) as holder,
    ):
        holder.execute("SELECT pg_advisory_xact_lock(42)")
        started = time.monotonic()
        with pytest.raises(psycopg.errors.QueryCanceled), pool.connection() as conn:
            conn.execute("SELECT pg_advisory_xact_lock(42)")
        assert time.monotonic() - started < 5
        holder.rollback()
        with pool.connection() as conn:
            assert conn.execute("SELECT 1 AS one").fetchone() == {"one": 1}
