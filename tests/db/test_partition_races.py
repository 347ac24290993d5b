"""Months created while runs are queued into them (migration 0027): the runs a new month
takes out of the default partition are never out of sight of an enqueue that keeps a key
unique by reading first (one run per run-now token, I1).

Requester processes repeat run-now requests, one token per month, while this process
creates those months one after the other: each month's first request lands in the default
partition, and the later ones with the same token are in flight while its rows move."""

from __future__ import annotations

import multiprocessing
import threading
import time
from datetime import UTC, datetime

import invariants
import racers
from factories import define
from pgsched.db import connection
from pgsched.engine import history, lease, runs

FIRST_MONTH = datetime(2031, 1, 1, tzinfo=UTC)  # far ahead: no month of it exists yet
MONTHS = 20
REQUESTERS = 6


def _requests_of(conn, index: int) -> int:
    row = conn.execute(
        "SELECT count(*) AS n FROM pgsched.job_runs WHERE request_token = %s", [f"month-{index}"]
    ).fetchone()
    return int(row["n"])


def test_a_run_now_token_queues_one_run_while_its_month_is_created(dsn):
    months = [history.add_months(FIRST_MONTH, index) for index in range(MONTHS)]
    with connection.connect(dsn) as conn:
        definitions = [define(conn, f"job-{n}").id for n in range(3)]
    context = multiprocessing.get_context("spawn")
    progress, stop, results = context.Value("i", 0), context.Event(), context.Queue()
    requesters = [
        context.Process(
            target=racers.run_now_requester,
            args=(dsn, seed, definitions, months, progress, stop, results),
        )
        for seed in range(REQUESTERS)
    ]
    for requester in requesters:
        requester.start()
    try:
        with connection.connect(dsn) as conn:
            for index, month in enumerate(months):
                deadline = time.monotonic() + 30
                while _requests_of(conn, index) == 0:  # the first request is queued
                    assert time.monotonic() < deadline, "the requesters never got going"
                    time.sleep(0.005)
                time.sleep(0.02)  # the same token, requested again and again
                with conn.transaction():
                    conn.execute("SELECT pgsched.create_run_partition(%s)", [month])
                progress.value = index + 1
    finally:
        stop.set()
        outcomes = [results.get(timeout=60) for _ in requesters]
        for requester in requesters:
            requester.join(timeout=10)

    requests = sum(count for count, _ in outcomes)
    errors = [error for _, failed in outcomes for error in failed]
    assert requests > MONTHS * REQUESTERS
    assert errors == []
    with connection.connect(dsn) as conn:
        assert invariants.one_run_per_request(conn) == []
        moved = conn.execute(
            "SELECT count(*) AS n FROM pgsched.job_runs WHERE scheduled_for >= %s",
            [FIRST_MONTH],
        ).fetchone()
        assert moved["n"] > 0  # some tokens were queued in their month, and moved with it
        # Every run of a created month is in that month's partition, where a claim pruned
        # to the month looks for it: none left behind in the default partition.
        stranded = conn.execute(
            "SELECT id, scheduled_for FROM pgsched.job_runs_default"
            " WHERE scheduled_for >= %s AND scheduled_for < %s",
            [FIRST_MONTH, history.add_months(FIRST_MONTH, MONTHS)],
        ).fetchall()
        assert stranded == []


def _waiting_for_a_lock(conn, application_name: str) -> bool:
    row = conn.execute(
        "SELECT count(*) AS n FROM pg_stat_activity"
        " WHERE application_name = %s AND wait_event_type = 'Lock'",
        [application_name],
    ).fetchone()
    return bool(row["n"])


def test_a_running_run_keeps_its_lease_while_its_month_is_created(dsn, conn):
    """A heartbeat that comes while the run moves out of the default partition waits for
    the move and stamps the run where it now is: the job goes on (I6)."""
    job = define(conn, "job")
    row = conn.execute(
        "INSERT INTO pgsched.job_runs (definition_id, status, trigger, scheduled_for,"
        " lease_token, started_at) VALUES (%s, 'RUNNING', 'manual', %s, gen_random_uuid(),"
        " now()) RETURNING id, lease_token",
        [job.id, FIRST_MONTH],
    ).fetchone()
    held = lease.Lease(row["id"], row["lease_token"])
    states: list[str] = []

    def beat() -> None:
        with connection.connect(dsn, application_name="pgsched-heartbeat") as pod:
            states.append(lease.heartbeat(pod, held))

    with conn.transaction():
        conn.execute("SELECT pgsched.create_run_partition(%s)", [FIRST_MONTH])
        beating = threading.Thread(target=beat)
        beating.start()
        with connection.connect(dsn) as watcher:
            deadline = time.monotonic() + 10
            while not _waiting_for_a_lock(watcher, "pgsched-heartbeat"):
                assert time.monotonic() < deadline, "the heartbeat never reached the move's lock"
                time.sleep(0.01)
    beating.join(timeout=10)

    assert states == ["active"]
    beat_at = conn.execute(
        "SELECT heartbeat_at FROM pgsched.job_runs_y2031m01 WHERE id = %s", [held.run_id]
    ).fetchone()
    assert beat_at["heartbeat_at"] is not None


def test_the_checker_sees_a_token_that_queued_two_runs(conn):
    """Self-test: a duplicate planted from the test side is reported."""
    job = define(conn, "job")
    runs.run_now(conn, job.id, token="twice")
    assert invariants.one_run_per_request(conn) == []
    conn.execute(
        "INSERT INTO pgsched.job_runs (definition_id, status, trigger, scheduled_for,"
        " request_token) VALUES (%s, 'QUEUED', 'manual', %s, 'twice')",
        [job.id, FIRST_MONTH],
    )
    found = invariants.one_run_per_request(conn)
    assert len(found) == 1 and "'twice'" in found[0] and "queued 2 runs" in found[0], found
