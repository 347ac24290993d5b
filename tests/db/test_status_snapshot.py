"""One status, one moment: ACTIVE, QUEUED and LAST STATUS of ``kubectl get sj`` are read in
one snapshot. Read one after the other, a claim committed between the reads showed its run
both as queued and as the last run (QUEUED 1, ACTIVE 0, LAST STATUS RUNNING: CI, stop 32).

A job runs one run at a time while another connection renders: every reading must agree
with itself. The checker is shown to catch the tear on the two-read form, planted here."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from uuid import UUID

from factories import RecordingLauncher, define
from pgsched.db import connection
from pgsched.db.connection import Connection
from pgsched.engine import dispatch, runs
from pgsched.engine.models import Run

Reader = Callable[[Connection, UUID], tuple[runs.Counts, Run | None]]
RACE_SECONDS = 4.0


def cycle_runs(dsn: str, definition_id: UUID, stop: threading.Event) -> None:
    """Queue, claim and finish one run after another, each step its own commit."""
    with connection.connect(dsn) as conn:
        token = 0
        while not stop.is_set():
            token += 1
            run = runs.run_now(conn, definition_id, token=str(token)).run
            dispatch.run_once(conn, RecordingLauncher(), definition_ids=[definition_id])
            conn.execute(
                "UPDATE pgsched.job_runs SET status = 'COMPLETED', finished_at = clock_timestamp()"
                " WHERE id = %s AND status = 'RUNNING'",
                [run.id],
            )


def torn_readings(dsn: str, definition_id: UUID, read: Reader) -> list[str]:
    """Readings taken while runs cycle whose counts disagree with their last run."""
    stop = threading.Event()
    cycler = threading.Thread(target=cycle_runs, args=(dsn, definition_id, stop))
    cycler.start()
    torn: list[str] = []
    try:
        with connection.connect(dsn) as conn:
            deadline = time.monotonic() + RACE_SECONDS
            while time.monotonic() < deadline and len(torn) < 3:
                counts, last = read(conn, definition_id)
                last_running = last is not None and last.status == "RUNNING"
                if counts.running != int(last_running) or (last_running and counts.queued):
                    torn.append(f"{counts} with last run {last and (last.id, last.status)}")
    finally:
        stop.set()
        cycler.join()
    return torn


def two_reads(conn: Connection, definition_id: UUID) -> tuple[runs.Counts, Run | None]:
    """The planted bug: the counts, a pause as a busy server would make, then the last run."""
    counts, _ = runs.for_status(conn, definition_id)
    conn.execute("SELECT pg_sleep(0.002)")
    row = conn.execute(
        "SELECT * FROM pgsched.job_runs WHERE definition_id = %s AND started_at IS NOT NULL"
        " ORDER BY id DESC LIMIT 1",
        [definition_id],
    ).fetchone()
    return counts, Run.from_row(row) if row else None


def test_the_counts_and_the_last_run_of_a_status_are_one_moment(dsn, conn):
    job = define(conn, "one-at-a-time", schedule="0 0 1 1 *", maxConcurrentRuns=1)
    assert torn_readings(dsn, job.id, runs.for_status) == []


def test_the_checker_catches_counts_and_a_last_run_read_apart(dsn, conn):
    job = define(conn, "one-at-a-time", schedule="0 0 1 1 *", maxConcurrentRuns=1)
    assert torn_readings(dsn, job.id, two_reads), "the planted tear went unseen"
