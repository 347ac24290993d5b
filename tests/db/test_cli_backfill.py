"""``pgsched backfill``: past occurrences queued once each, oldest first, with a feed limit."""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import UTC, datetime

from cli_runner import pgsched
from factories import RecordingLauncher, define, runs_of
from pgsched.engine import dispatch, lease, settle

T0 = datetime(2026, 5, 1, tzinfo=UTC)


def backfill_rows(conn, job):
    return [row for row in runs_of(conn, job) if row["trigger"] == "backfill"]


def test_backfill_queues_each_occurrence_once_oldest_first(dsn, conn):
    job = define(
        conn, "daily", namespace="jobs", schedule="0 6 * * *", timeZone="Europe/Sofia", now=T0
    )

    first = pgsched(
        "backfill",
        "--database",
        "daily",
        "-n",
        "jobs",
        "--from",
        "2026-05-02",
        "--to",
        "2026-05-04",
        dsn=dsn,
    )
    again = pgsched(
        "backfill",
        "--database",
        "daily",
        "-n",
        "jobs",
        "--from",
        "2026-05-01",
        "--to",
        "2026-05-04",
        "-o",
        "json",
        dsn=dsn,
    )

    assert first.code == 0, first.err
    assert "3 occurrences, 3 queued" in first.out
    assert again.json()["queued"] == 1 and again.json()["alreadyQueued"] == 3
    rows = backfill_rows(conn, job)
    assert [row["scheduled_for"].astimezone(UTC).isoformat() for row in rows] == [
        "2026-05-01T03:00:00+00:00",  # 06:00 EEST
        "2026-05-02T03:00:00+00:00",
        "2026-05-03T03:00:00+00:00",
        "2026-05-04T03:00:00+00:00",
    ]
    assert {(row["status"], row["deadline_at"]) for row in rows} == {("QUEUED", None)}
    # Oldest first: dispatch claims them in scheduled order.
    claimed = dispatch.run_once(conn, RecordingLauncher(), batch_size=10).claimed
    assert [run.scheduled_for for run in claimed] == [rows[0]["scheduled_for"]]


def test_backfill_dry_run_lists_the_occurrences_and_queues_nothing(dsn, conn):
    job = define(conn, "hourly", schedule="0 * * * *", now=T0)
    result = pgsched(
        "backfill",
        "--database",
        "hourly",
        "--from",
        "2026-05-01T10:00Z",
        "--to",
        "2026-05-01T12:00Z",
        "--dry-run",
        dsn=dsn,
    )
    assert result.code == 0, result.err
    assert result.out.splitlines()[0] == "dry run: 3 occurrences of default/hourly would be queued"
    assert result.out.splitlines()[-1].split()[-1] == "2026-05-01T12:00:00Z"  # --to is inclusive
    assert runs_of(conn, job) == []


def test_backfill_refuses_bad_ranges_and_changes_nothing(dsn, conn):
    job = define(conn, "hourly", schedule="0 * * * *", now=T0)
    for argv, message in (
        (["--from", "2026-05-03", "--to", "2026-05-01"], "is after --to"),
        (["--from", "2026-05-01", "--to", "2999-01-01"], "is in the future"),
        (["--from", "May 1st", "--to", "2026-05-02"], "--from 'May 1st' is not an ISO 8601"),
        (
            ["--from", "2026-05-01", "--to", "2026-05-02", "--parallelism", "0"],
            "must be at least 1",
        ),
        (["--from", "2000-01-01", "--to", "2026-05-01"], "more than 100000 occurrences"),
        (["--to", "2026-05-01"], "the following arguments are required: --from"),
    ):
        result = pgsched("backfill", "--database", "hourly", *argv, dsn=dsn)
        assert result.code == 2 and message in result.err, (argv, result)
    assert runs_of(conn, job) == []


def test_backfill_with_parallelism_feeds_runs_as_earlier_ones_finish(dsn, conn):
    job = define(conn, "daily", schedule="0 6 * * *", maxConcurrentRuns=5, now=T0)
    process = subprocess.Popen(
        [sys.executable, "-m", "pgsched.cli.main", "backfill", "daily", "--database", "--dsn", dsn,
         "--from", "2026-05-01", "--to", "2026-05-05", "--parallelism", "2"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    peak, finished = 0, []
    deadline = time.monotonic() + 90
    while process.poll() is None and time.monotonic() < deadline:
        active = [row for row in backfill_rows(conn, job) if row["status"] in ("QUEUED", "RUNNING")]
        peak = max(peak, len(active))
        for run in dispatch.run_once(conn, RecordingLauncher(), batch_size=1).claimed:
            # The second occurrence fails (not retried: NonZeroExit is not on retryOn).
            failed = len(finished) == 1
            lease.finish(
                conn,
                lease.Lease(run.id, run.lease_token),
                "FAILED" if failed else "COMPLETED",
                reason="NonZeroExit" if failed else None,
            )
            finished.append(run.scheduled_for)
        settle.run_once(conn)
        time.sleep(0.3)
    out, err = process.communicate(timeout=30)

    assert process.returncode == 1, err  # one occurrence did not complete
    assert "5 occurrences, 4 COMPLETED, 1 FAILED" in out
    assert peak <= 2
    assert finished == sorted(finished) and len(finished) == 5
    assert "5/5 finished" in err  # progress on stderr
