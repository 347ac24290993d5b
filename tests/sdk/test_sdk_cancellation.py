"""Cooperative cancellation: a cancelled run stops at its next checkpoint, a mutating kind
compensates, a read-only one just stops, and the run ends CANCELLED (exit 3)."""

from __future__ import annotations

import signal

from pods import TEST_MODULES, claim, run_row, sdk_job, start_job, wait_for

from pgsched.engine import runs, settle

SLOW_IMPORT = {"source": "slow", "total": 2000, "batch_size": 50, "pause_seconds": 0.3}
ALL_BATCHES = 2000 // 50


def batches(conn, run, status="imported"):
    row = conn.execute(
        "SELECT count(*) AS n FROM pgsched_examples.import_batches"
        " WHERE run_id = %s AND status = %s",
        [run.id, status],
    ).fetchone()
    return row["n"]


def batch_table_exists(conn):
    row = conn.execute("SELECT to_regclass('pgsched_examples.import_batches') AS t").fetchone()
    return row["t"] is not None


def entries_of(conn, run):
    row = conn.execute(
        "SELECT count(*) AS n FROM pgsched_examples.ledger_entries WHERE run_id = %s", [run.id]
    ).fetchone()
    return row["n"]


def started_import(conn, pods, run_api, run, *, at_least=2, **extra):
    pod = start_job(pods, run_api, run, "ledger-import", SLOW_IMPORT, **extra)
    wait_for(
        lambda: batch_table_exists(conn) and batches(conn, run) >= at_least,
        what=f"{at_least} batches",
    )
    return pod


def test_cancel_mid_import_stops_at_the_next_checkpoint_compensates_and_ends_cancelled(
    run_api, conn, pods
):
    run = claim(conn, sdk_job(conn, retryPolicy={"retryOn": ["*"]}))
    pod = started_import(conn, pods, run_api, run)

    written_before_cancel = batches(conn, run)
    runs.cancel_run(conn, run.id, by=runs.BY_CLI)

    assert pod.wait() == 3, pod.output
    row = run_row(conn, run)
    assert (row["status"], row["reason"], row["exit_code"]) == ("CANCELLED", "Cancelled", 3)
    assert "cancellation was requested" in row["error"]
    assert "compensation completed" in row["error"]
    compensated = batches(conn, run, "compensated")
    # It stopped at a batch boundary soon after the request, far from the end.
    assert written_before_cancel <= compensated <= written_before_cancel + 2 < ALL_BATCHES
    assert batches(conn, run) == 0 and entries_of(conn, run) == 0
    assert settle.run_once(conn).retried == []


def test_cancelled_read_only_report_stops_and_ends_cancelled_without_compensation(
    run_api, conn, pods
):
    importer = claim(conn, sdk_job(conn, "importer"))
    args = {"source": "big", "total": 400, "batch_size": 200, "accounts": 40}
    assert start_job(pods, run_api, importer, "ledger-import", args).wait() == 0
    run = claim(conn, sdk_job(conn, "report"))
    pod = start_job(pods, run_api, run, "ledger-report", {"source": "big", "pause_seconds": 0.2})
    pod.wait_for_line(r"acct-001: ")

    runs.cancel_run(conn, run.id, by=runs.BY_CLI)

    assert pod.wait() == 3, pod.output
    row = run_row(conn, run)
    assert (row["status"], row["reason"]) == ("CANCELLED", "Cancelled")
    assert "read-only kind, nothing to compensate" in row["error"]
    assert "compensating" not in pod.output
    reported = [line for line in pod.lines if "entries, balance" in line]
    assert 2 <= len(reported) < 40
    assert entries_of(conn, importer) == 400  # the report changed nothing


def test_failed_compensation_is_recorded_and_never_masks_the_cancellation(run_api, conn, pods):
    run = claim(conn, sdk_job(conn))
    pod = start_job(pods, run_api, run, "fragile-undo", {"seconds": 30}, modules=TEST_MODULES)
    pod.wait_for_line("starting job kind 'fragile-undo'")

    runs.cancel_run(conn, run.id, by=runs.BY_CLI)

    assert pod.wait() == 3, pod.output
    row = run_row(conn, run)
    assert (row["status"], row["reason"]) == ("CANCELLED", "Cancelled")
    assert "compensation failed: RuntimeError: the undo log is gone" in row["error"]
    assert "Traceback" in pod.output  # the full story is in the pod log


def test_sigterm_without_a_cancel_request_stops_compensates_and_ends_failed_terminated(
    run_api, conn, pods
):
    run = claim(conn, sdk_job(conn))
    pod = started_import(conn, pods, run_api, run)

    pod.process.send_signal(signal.SIGTERM)

    assert pod.wait() == 143, pod.output
    row = run_row(conn, run)
    assert (row["status"], row["reason"], row["exit_code"]) == ("FAILED", "Terminated", 143)
    assert "SIGTERM" in row["error"] and "compensation completed" in row["error"]
    assert entries_of(conn, run) == 0
    assert batches(conn, run, "compensated") < ALL_BATCHES


def test_sigterm_for_a_run_cancelled_in_the_database_ends_cancelled(run_api, conn, pods):
    # The operator deletes the Job of a cancelled run after the grace period. With a slow
    # heartbeat, and no notification (a pod whose listening connection is gone: planted
    # by switching the trigger off), the runner hears SIGTERM first and must ask the
    # database who wanted it.
    run = claim(conn, sdk_job(conn))
    pod = started_import(conn, pods, run_api, run, PGSCHED_HEARTBEAT_INTERVAL_SECONDS="60")
    conn.execute("ALTER TABLE pgsched.job_runs DISABLE TRIGGER job_runs_notify_lease_holder")
    runs.cancel_run(conn, run.id, by=runs.BY_CLI)

    pod.process.send_signal(signal.SIGTERM)

    assert pod.wait() == 3, pod.output
    row = run_row(conn, run)
    assert (row["status"], row["reason"]) == ("CANCELLED", "Cancelled")
    assert "received SIGTERM" in row["error"] and "compensation completed" in row["error"]
