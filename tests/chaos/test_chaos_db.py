"""Chaos, database variant: three engine replicas keep I1-I5 while faults rain on them.

Three real tick loops (leader election on) over a few hundred definitions, a job process
per run, run-now requests and cancels, for ``PGSCHED_CHAOS_MINUTES`` (CI: 75 s) while the
driver kills the tick leader mid-tick, pauses it, kills and freezes jobs, terminates
sessions and restarts or crashes Postgres. Then everything drains and every invariant is
checked; the report goes to ``.cache/chaos/``. See docs/chaos.md.
"""

from __future__ import annotations

import pytest

from chaos.config import ChaosConfig, chaos_seconds
from chaos.dbchaos import DatabaseChaos

CI_SECONDS = 75.0

pytestmark = [pytest.mark.slow, pytest.mark.timeout(chaos_seconds(CI_SECONDS) + 600)]

FAULT_KINDS = {
    "leader_kill",
    "leader_pause",
    "session_kill",
    "pg_restart",
    "pg_crash",
    "job_kill",
    "job_pause",
}


def test_three_replicas_keep_every_invariant_while_faults_are_injected(chaos_postgres, tmp_path):
    config = ChaosConfig("db", seconds=chaos_seconds(CI_SECONDS))

    report = DatabaseChaos(config, chaos_postgres, tmp_path).run()

    assert report.drained, report.summary()
    assert report.ok, report.summary()
    assert set(report.faults) == FAULT_KINDS, "every kind of fault must have been injected"
    # The run did real work through the faults, and the faults had consequences.
    assert report.runs["completed"] >= report.chaos_seconds * 2, report.summary()
    assert report.runs["retries"] > 0 and report.replica_restarts > 0, report.summary()
