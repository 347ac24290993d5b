"""Faults around a running job: the database goes away, the runner freezes and is reaped.

A failed heartbeat never stops the work (I6), and the outcome is written once the database
is back. A runner whose lease was taken away (reaped while frozen) is a zombie: it stops at
its next checkpoint if it has one, and its final write changes nothing (I4).
"""

from __future__ import annotations

import os
import signal

import pytest
from pods import TEST_MODULES, claim, run_row, sdk_job, start_job, wait_for

from factories import reap_an_hour_later, runs_of
from pgsched.db import connection
from pgsched.engine import settle

pytestmark = pytest.mark.timeout(120)


def reap_as_if_much_later(conn):
    return reap_an_hour_later(conn)


def step(progress):
    text = progress.read_text() if progress.exists() else ""
    return int(text) if text.isdigit() else -1


def test_database_blip_does_not_stop_the_job_and_its_outcome_is_recorded_once_back(
    private_postgres, start_run_api, pods, tmp_path
):
    dsn = private_postgres.dsn()
    with connection.connect(dsn) as conn:
        run = claim(conn, sdk_job(conn))
    progress = tmp_path / "progress"
    pod = start_job(
        pods,
        start_run_api(dsn),
        run,
        "steps",
        {"count": 40, "seconds": 0.05, "progress": str(progress)},
        modules=TEST_MODULES,
    )
    wait_for(lambda: step(progress) >= 3, what="step 3")

    private_postgres.stop()
    try:
        # The job runs to its end while the database is down...
        wait_for(lambda: progress.read_text() == "done", what="the job to finish its steps")
        pod.wait_for_line(r"heartbeat failed \(\d+ in a row\), the work goes on")
        pod.wait_for_line(r"could not check the lease .*carrying on")
        pod.wait_for_line(r"recording COMPLETED failed .*retrying")
        assert pod.process.poll() is None  # ...and waits to record its outcome
    finally:
        private_postgres.start()

    assert pod.wait() == 0, pod.output
    with connection.connect(dsn) as conn:
        row = run_row(conn, run)
    assert (row["status"], row["exit_code"]) == ("COMPLETED", 0)


def test_reaped_zombie_runner_records_nothing_and_exits_lease_lost(run_api, conn, pods, tmp_path):
    job = sdk_job(conn)
    run = claim(conn, job)
    go = tmp_path / "go"
    pod = start_job(pods, run_api, run, "wait-for-file", {"path": str(go)}, modules=TEST_MODULES)
    pod.wait_for_line("waiting for")
    wait_for(lambda: run_row(conn, run)["heartbeat_at"] is not None, what="a first heartbeat")

    os.kill(pod.process.pid, signal.SIGSTOP)  # a frozen pod
    try:
        assert reap_as_if_much_later(conn).run_ids["heartbeat_lost"] == [run.id]
        settle.run_once(conn)
        reaped = run_row(conn, run)
        go.touch()  # the job will complete its work when it wakes up
    finally:
        os.kill(pod.process.pid, signal.SIGCONT)

    assert pod.wait() == 4, pod.output
    assert "done waiting" in pod.output
    assert run_row(conn, run) == reaped  # the zombie's finish changed nothing
    assert (reaped["status"], reaped["reason"]) == ("FAILED", "HeartbeatLost")
    _, retry = runs_of(conn, job)
    assert (retry["status"], retry["attempt"], retry["retry_of"]) == ("QUEUED", 2, run.id)


def test_lease_lost_mid_run_stops_the_job_at_its_next_checkpoint_and_compensates(
    run_api, conn, pods
):
    run = claim(conn, sdk_job(conn))
    args = {"source": "zombie", "total": 2000, "batch_size": 50, "pause_seconds": 0.2}
    pod = start_job(pods, run_api, run, "ledger-import", args)
    pod.wait_for_line("batch 1: ")

    reap_as_if_much_later(conn)

    assert pod.wait() == 4, pod.output
    assert "lease lost" in pod.output and "compensated (lease-lost)" in pod.output
    row = run_row(conn, run)
    assert (row["status"], row["reason"]) == ("FAILED", "HeartbeatLost")
    left = conn.execute(
        "SELECT count(*) AS n FROM pgsched_examples.ledger_entries WHERE run_id = %s", [run.id]
    ).fetchone()
    assert left["n"] == 0
