"""The runner's final write: an answer lost after the commit does not turn into "lease lost".

If it did, the runner would exit LEASE_LOST (4), its Job would read "failed", and should
the committed COMPLETED itself be lost later (an asynchronous failover), the operator —
which then reads the Job — would record a failure for work that succeeded (I8).
"""

from __future__ import annotations

import psycopg
from pods import claim, run_row, sdk_job

from pgsched.db import connection
from pgsched.db.session import Session
from pgsched.engine.lease import Lease
from pgsched.runner import outcome
from pgsched.runner.exit_codes import ExitCode

SUCCESS = outcome.Outcome("COMPLETED", ExitCode.COMPLETED)


class AnswerLostOnce(Session):
    """The first operation commits on the real database, then its answer is 'lost'."""

    def __init__(self, dsn: str) -> None:
        super().__init__(lambda: connection.connect(dsn))
        self.lost = False

    def run(self, operation):
        result = super().run(operation)
        if not self.lost:
            self.lost = True
            self.close()
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        return result


def test_a_finish_whose_answer_was_lost_is_still_reported_recorded(dsn, conn):
    run = claim(conn, sdk_job(conn))
    recorded = outcome.record(
        AnswerLostOnce(dsn),
        Lease(run.id, run.lease_token),
        SUCCESS,
        timeout_seconds=10,
        sleep=lambda _: None,
    )
    assert recorded == "recorded"
    assert run_row(conn, run)["status"] == "COMPLETED"


def test_a_finish_of_a_run_ended_elsewhere_is_lease_lost(dsn, conn):
    run = claim(conn, sdk_job(conn))
    conn.execute(
        "UPDATE pgsched.job_runs SET status = 'FAILED', reason = 'HeartbeatLost' WHERE id = %s",
        [run.id],
    )
    session = Session(lambda: connection.connect(dsn))
    assert outcome.record(session, Lease(run.id, run.lease_token), SUCCESS, timeout_seconds=1) == (
        "lease-lost"
    )
    session.close()
