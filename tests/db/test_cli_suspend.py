"""The resume semantics ``pgsched resume`` documents, as the engine applies them.

(The commands themselves patch the ScheduledJob and are tested on the cluster, in
``tests/cluster/test_cli_kubernetes.py``.)
"""

from __future__ import annotations

from datetime import UTC, datetime

from factories import define, reload
from pgsched.engine import definitions

T0 = datetime(2026, 6, 1, tzinfo=UTC)


def auto_suspend(conn, job):
    conn.execute(
        "UPDATE pgsched.job_definitions SET auto_suspended_at = %s, consecutive_failures = 3,"
        " auto_suspend_reason = '3 consecutive runs failed' WHERE id = %s",
        [T0, job.id],
    )


def test_resuming_clears_an_automatic_suspension_and_its_streak(conn):
    job = define(conn, "flaky", schedule="0 8 * * *", now=T0)
    auto_suspend(conn, job)
    resumed = definitions.set_suspended(conn, job.id, False, now=T0)
    assert not resumed.is_suspended and resumed.consecutive_failures == 0


def test_toggling_spec_suspend_off_again_also_clears_an_automatic_suspension(conn):
    job = define(conn, "flaky", schedule="0 8 * * *", now=T0)
    auto_suspend(conn, job)
    define(conn, "flaky", schedule="0 8 * * *", suspend=True, generation=2, now=T0)
    assert reload(conn, job).auto_suspended_at is not None  # suspending keeps the reason
    define(conn, "flaky", schedule="0 8 * * *", suspend=False, generation=3, now=T0)
    after = reload(conn, job)
    assert not after.is_suspended and after.auto_suspend_reason is None
    assert after.consecutive_failures == 0


def test_an_unrelated_update_keeps_an_automatic_suspension(conn):
    job = define(conn, "flaky", schedule="0 8 * * *", now=T0)
    auto_suspend(conn, job)
    define(conn, "flaky", schedule="0 9 * * *", generation=2, now=T0)
    assert reload(conn, job).is_suspended
