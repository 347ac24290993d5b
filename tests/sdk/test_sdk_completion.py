"""A job that returns is recorded COMPLETED by its own runner, which exits 0."""

from __future__ import annotations

from pods import claim, run_row, sdk_job, start_job


def batches_of(conn, run):
    return conn.execute(
        "SELECT batch, entries, status FROM pgsched_examples.import_batches"
        " WHERE run_id = %s ORDER BY batch",
        [run.id],
    ).fetchall()


def test_mutating_example_imports_every_batch_and_completes(run_api, conn, pods):
    run = claim(conn, sdk_job(conn))
    pod = start_job(
        pods, run_api, run, "ledger-import", {"source": "nov", "total": 250, "batch_size": 100}
    )

    assert pod.wait() == 0, pod.output
    row = run_row(conn, run)
    assert (row["status"], row["reason"], row["error"], row["exit_code"]) == (
        "COMPLETED",
        None,
        None,
        0,
    )
    assert row["heartbeat_at"] is not None
    assert [tuple(batch.values()) for batch in batches_of(conn, run)] == [
        (0, 100, "imported"),
        (1, 100, "imported"),
        (2, 50, "imported"),
    ]


def test_read_only_example_reports_every_account_with_the_run_in_each_log_line(run_api, conn, pods):
    importer = claim(conn, sdk_job(conn, "importer"))
    args = {"source": "dec", "total": 30, "accounts": 3}
    assert start_job(pods, run_api, importer, "ledger-import", args).wait() == 0
    run = claim(conn, sdk_job(conn, "report"))

    pod = start_job(pods, run_api, run, "ledger-report", {"source": "dec"})

    assert pod.wait() == 0, pod.output
    assert run_row(conn, run)["status"] == "COMPLETED"
    report = [line for line in pod.lines if "pgsched.job.ledger-report" in line]
    assert len(report) == 4, pod.output  # three accounts and the total
    assert all(f"[run {run.id} attempt 1]" in line for line in report)
    assert "acct-000: 10 entries" in report[0]
