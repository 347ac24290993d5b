"""A Queue backlog can be drained and bounded: a changed startingDeadlineSeconds applies to
runs already queued, and maxQueuedRuns skips new occurrences while the queue is full."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from factories import RecordingLauncher, define, runs_of
from pgsched.engine import dispatch, materialize, reap

T0 = datetime(2026, 6, 1, 12, 0, 30, tzinfo=UTC)


def backlog(conn, minutes, **spec):
    """An every-minute job whose first run is still running: later minutes queue up."""
    job = define(conn, "backlog", schedule="* * * * *", now=T0, **spec)
    for minute in range(1, minutes + 1):
        at = T0 + timedelta(minutes=minute)
        materialize.run_once(conn, now=at)
        dispatch.run_once(conn, RecordingLauncher(), now=at)
    return job


def statuses(conn, job):
    return [
        (row["scheduled_for"].minute, row["status"], row["reason"]) for row in runs_of(conn, job)
    ]


def test_adding_a_starting_deadline_applies_to_runs_already_queued(conn):
    job = backlog(conn, 5)
    assert [row["deadline_at"] for row in runs_of(conn, job)[1:]] == [None] * 4
    now = T0 + timedelta(minutes=5, seconds=10)

    define(conn, "backlog", schedule="* * * * *", now=now, generation=2, startingDeadlineSeconds=90)
    reap.run_once(conn, now=now)

    # At 12:05:40, the runs of 12:02-12:04 are more than 90 s late; 12:05's may still start.
    assert statuses(conn, job) == [
        (1, "RUNNING", None),
        (2, "SKIPPED", "DeadlineMissed"),
        (3, "SKIPPED", "DeadlineMissed"),
        (4, "SKIPPED", "DeadlineMissed"),
        (5, "QUEUED", None),
    ]
    assert runs_of(conn, job)[4]["deadline_at"] == datetime(2026, 6, 1, 12, 6, 30, tzinfo=UTC)


def test_removing_the_starting_deadline_clears_it_on_queued_runs(conn):
    job = backlog(conn, 3, startingDeadlineSeconds=3600)
    define(conn, "backlog", schedule="* * * * *", now=T0, generation=2)
    assert [row["deadline_at"] for row in runs_of(conn, job)[1:]] == [None, None]


def test_max_queued_runs_skips_new_occurrences_while_the_queue_is_full(conn):
    job = backlog(conn, 6, maxQueuedRuns=2)
    assert statuses(conn, job) == [
        (1, "RUNNING", None),
        (2, "QUEUED", None),
        (3, "QUEUED", None),
        (4, "SKIPPED", "QueueFull"),
        (5, "SKIPPED", "QueueFull"),
        (6, "SKIPPED", "QueueFull"),
    ]
    assert runs_of(conn, job)[3]["error"] == (
        "2 runs were already queued, the most maxQueuedRuns (2) allows"
    )
