"""``pgsched run-now`` and ``pgsched cancel`` against the real database."""

from __future__ import annotations

from datetime import UTC, datetime

from cli_runner import pgsched
from factories import RecordingLauncher, define, runs_of
from pgsched.engine import dispatch, runs

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def test_run_now_queues_one_manual_run_per_token(dsn, conn):
    job = define(conn, "report", namespace="jobs", now=T0)

    first = pgsched("run-now", "--database", "report", "-n", "jobs", "--token", "deploy-7", dsn=dsn)
    again = pgsched("run-now", "--database", "report", "-n", "jobs", "--token", "deploy-7", dsn=dsn)

    [row] = runs_of(conn, job)
    assert (
        first.code == 0
        and first.out.strip() == f"run {row['id']} of jobs/report queued (token deploy-7)"
    )
    assert again.code == 0 and "token deploy-7 was used before" in again.out
    assert (row["status"], row["trigger"], row["request_token"]) == (
        "QUEUED",
        "manual",
        "cli:deploy-7",
    )


def test_run_now_without_a_token_queues_a_new_run_each_time(dsn, conn):
    job = define(conn, "report", now=T0)
    made = [
        pgsched("run-now", "--database", "report", "-o", "json", dsn=dsn).json() for _ in range(2)
    ]
    assert all(item["created"] for item in made)
    assert made[0]["token"] != made[1]["token"]
    assert len(runs_of(conn, job)) == 2


def test_run_now_tokens_never_collide_with_annotation_tokens(dsn, conn):
    job = define(conn, "report", maxConcurrentRuns=2, now=T0)
    runs.run_now(conn, job.id, token="annotation:go")  # what the run-now annotation queued
    made = pgsched("run-now", "--database", "report", "--token", "go", "-o", "json", dsn=dsn).json()
    assert made["created"] and len(runs_of(conn, job)) == 2


def test_run_now_of_an_unknown_job_or_a_bad_token_changes_nothing(dsn, conn):
    job = define(conn, "report", now=T0)
    unknown = pgsched("run-now", "--database", "other", dsn=dsn)
    empty = pgsched("run-now", "--database", "report", "--token", " ", dsn=dsn)
    assert unknown.code == 1 and "no ScheduledJob default/other" in unknown.err
    assert empty.code == 2 and "a token must be 1 to 200 characters" in empty.err
    assert runs_of(conn, job) == []


def test_cancel_a_queued_run_cancels_it_at_once(dsn, conn):
    job = define(conn, "report", now=T0)
    queued = runs.run_now(conn, job.id, token="a").run
    result = pgsched("cancel", "--database", str(queued.id), dsn=dsn)
    assert result.code == 0 and result.out.strip() == f"run {queued.id}: was queued, now CANCELLED"
    row = runs.get(conn, queued.id)
    assert (row.status, row.reason, row.error) == (
        "CANCELLED",
        "Cancelled",
        "cancelled with `pgsched cancel`",
    )


def test_cancel_a_running_run_asks_it_to_stop(dsn, conn):
    job = define(conn, "report", now=T0)
    runs.run_now(conn, job.id, token="a", scheduled_for=T0)
    [running] = dispatch.run_once(conn, RecordingLauncher(), now=T0).claimed
    result = pgsched("cancel", "--database", str(running.id), "-o", "json", dsn=dsn)
    assert result.code == 0
    assert [item["id"] for item in result.json()["askedToStop"]] == [running.id]
    row = runs.get(conn, running.id)
    assert row.status == "RUNNING" and row.cancel_requested
    again = pgsched("cancel", "--database", str(running.id), dsn=dsn)
    assert again.code == 0 and "cancellation was already requested" in again.out


def test_cancel_all_needs_the_flag_and_cancels_every_queued_and_running_run(dsn, conn):
    job = define(conn, "report", maxConcurrentRuns=1, now=T0)
    for token in "ab":
        runs.run_now(conn, job.id, token=token, scheduled_for=T0)
    [running] = dispatch.run_once(conn, RecordingLauncher(), now=T0).claimed

    refused = pgsched("cancel", "--database", "report", dsn=dsn)
    assert refused.code == 2 and "add --all (example: pgsched cancel report --all)" in refused.err
    assert {row["status"] for row in runs_of(conn, job)} == {"QUEUED", "RUNNING"}

    result = pgsched("cancel", "--database", "report", "--all", dsn=dsn)
    assert result.code == 0, result.err
    statuses = {row["id"]: (row["status"], row["cancel_requested"]) for row in runs_of(conn, job)}
    assert statuses[running.id] == ("RUNNING", True)
    assert [status for run_id, status in statuses.items() if run_id != running.id] == [
        ("CANCELLED", True)
    ]


def test_cancel_of_a_finished_or_unknown_run_changes_nothing(dsn, conn):
    job = define(conn, "report", now=T0)
    queued = runs.run_now(conn, job.id, token="a").run
    runs.cancel_run(conn, queued.id, by=runs.BY_CLI, why="earlier")
    done = pgsched("cancel", "--database", str(queued.id), dsn=dsn)
    assert done.code == 0 and "already CANCELLED; nothing to cancel" in done.out
    assert runs.get(conn, queued.id).error == "earlier"
    missing = pgsched("cancel", "--database", "424242", dsn=dsn)
    assert missing.code == 1 and "no run with id 424242" in missing.err
