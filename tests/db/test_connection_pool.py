"""The operator's connection pool through a database restart."""

from __future__ import annotations

from contextlib import ExitStack

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
