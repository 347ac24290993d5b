"""The chaos checker across failovers: an end recorded again is not an overwrite, and it
still catches one.

An asynchronous failover loses an end the sampler may already have seen; the failover
pass records it again from the run's Job, with the same status and reason and a new
``finished_at``. That, and only that, is allowed — and only across a change of the
database's WAL timeline (the pass's doing). The test plants the rows and the timelines.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from chaos import sampler as sampler_module
from chaos.sampler import Sampler
from factories import define
from pgsched.engine import runs


@pytest.fixture
def timeline(monkeypatch):
    current = {"timeline": 1}
    monkeypatch.setattr(sampler_module, "_timeline", lambda conn: current["timeline"])
    return current


def ended(conn, run_id: int, status: str, reason: str | None, seconds_ago: float) -> None:
    conn.execute(
        "UPDATE pgsched.job_runs SET status = %s, reason = %s, finished_at = %s WHERE id = %s",
        [status, reason, datetime.now(UTC) - timedelta(seconds=seconds_ago), run_id],
    )


def test_an_end_recorded_again_across_a_failover_passes_and_any_other_change_is_caught(
    conn, timeline
):
    job = define(conn, "again")
    run_id = runs.run_now(conn, job.id, token="a").run.id
    sampler = Sampler(conn.info.dsn, stall_slack_seconds=5, queue_bound_seconds=600)
    violations = sampler.result.violations["I4"]

    ended(conn, run_id, "COMPLETED", None, seconds_ago=10)
    sampler.sample(conn)
    timeline["timeline"] = 2  # the end was lost, and recorded again from the Job
    ended(conn, run_id, "COMPLETED", None, seconds_ago=5)
    sampler.sample(conn)

    assert violations == []
    assert sampler.result.recorded_again == [run_id]

    ended(conn, run_id, "COMPLETED", None, seconds_ago=1)  # the same timeline: rewritten
    sampler.sample(conn)

    assert len(violations) == 1 and violations[0].startswith(f"run {run_id} was COMPLETED")

    timeline["timeline"] = 3  # across a failover, but another outcome
    ended(conn, run_id, "FAILED", "OutcomeUnknown", seconds_ago=1)
    sampler.sample(conn)

    assert len(violations) == 2 and "is FAILED/OutcomeUnknown" in violations[1]
