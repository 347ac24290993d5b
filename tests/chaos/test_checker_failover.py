"""The chaos checker across failovers: an end recorded again is not an overwrite, and it
still catches one; the job side finds every kind of duplicate execution.

An asynchronous failover loses an end the sampler may already have seen; the failover
pass records it again from the run's Job, with the same status and reason and a new
``finished_at``. That, and only that, is allowed — and only across a change of the
database's WAL timeline (the pass's doing). The test plants the rows and the timelines.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from chaos import sampler as sampler_module
from chaos.jobside import Launched, duplicate_executions
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


def test_the_job_side_finds_each_kind_of_duplicate_execution_and_nothing_else():
    def job(run_id, name, when="2026-12-05T00:00:00+00:00", token="", attempt="1"):
        return Launched(run_id, name, "sj", when, attempt, f"lease-{run_id}", token)

    jobs = {
        "a": job(1, "sj-1"),  # a lost claim's Job, replaced: the same run twice
        "b": job(1, "sj-1"),
        "c": job(2, "sj-2", when="T1"),  # a lost run's occurrence queued again
        "d": job(3, "sj-3", when="T1"),
        "e": job(4, "sj-4", when="T2", token="annotation:r1"),  # a request re-done
        "f": job(5, "sj-5", when="T3", token="annotation:r1"),
        "g": job(6, "sj-6", when="T1", attempt="2"),  # a retry: another attempt
        "h": job(7, "sj-7", when="T4", token="annotation:r2"),
    }
    started = dict.fromkeys(jobs, 0.0)

    found = duplicate_executions(jobs, started)

    assert found == [
        "run 1: its workload was started by 2 Jobs (sj-1, sj-1)",
        "sj at T1 (attempt 1) was executed by 2 runs: [2, 3]",
        "sj's run-now request annotation:r1 (attempt 1) was executed by 2 runs: [4, 5]",
    ]
    del started["d"], started["f"], started["b"]  # never started: nothing ran twice
    assert duplicate_executions(jobs, started) == []
