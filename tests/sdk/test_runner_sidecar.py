"""``pgsched heartbeat``: the sidecar keeps the run alive, writes the cancel file when the
run must stop, never records an outcome, notes on SIGTERM that the workload ended, and
exits 0."""

from __future__ import annotations

import re
import signal
import statistics
import time

from pods import PACKAGE_ROOT, claim, contract, run_row, sdk_job, wait_for

from factories import reap_an_hour_later
from pgsched.engine import runs

STAMP = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"


def start_sidecar(pods, run_api, run, cancel_file):
    return pods("heartbeat", contract(run_api, run, PGSCHED_CANCEL_FILE=str(cancel_file)))


def heartbeats(conn, run):
    return run_row(conn, run)["heartbeat_at"]


def test_sidecar_writes_the_cancel_file_on_cancel_and_exits_0_on_sigterm(
    run_api, conn, pods, tmp_path
):
    run = claim(conn, sdk_job(conn))
    cancel_file = tmp_path / "pgsched" / "cancel"  # its directory does not exist yet
    pod = start_sidecar(pods, run_api, run, cancel_file)
    first = wait_for(lambda: heartbeats(conn, run), what="a first heartbeat")
    wait_for(lambda: heartbeats(conn, run) > first, what="a second heartbeat")
    assert not cancel_file.exists()

    runs.cancel_run(conn, run.id, by=runs.BY_CLI)

    wait_for(cancel_file.exists, what="the cancel file")
    assert re.fullmatch(f"cancelled {STAMP}\n", cancel_file.read_text())
    cancelled_at = heartbeats(conn, run)
    wait_for(lambda: heartbeats(conn, run) > cancelled_at, what="heartbeats while stopping")

    pod.process.send_signal(signal.SIGTERM)

    assert pod.wait(10) == 0, pod.output
    # No outcome of its own: its note that the workload ended decides only because the
    # cancellation came first (migration 0029), and says nothing about an exit code.
    row = run_row(conn, run)
    assert (row["status"], row["reason"], row["exit_code"]) == ("CANCELLED", "Cancelled", None)
    assert row["finished_at"] == row["workload_ended_at"]


def test_sidecar_notes_on_sigterm_that_the_workload_ended_so_silence_is_not_vanishing(
    run_api, conn, pods, tmp_path
):
    run = claim(conn, sdk_job(conn))
    pod = start_sidecar(pods, run_api, run, tmp_path / "cancel")
    wait_for(lambda: heartbeats(conn, run), what="a first heartbeat")
    assert run_row(conn, run)["workload_ended_at"] is None

    pod.process.send_signal(signal.SIGTERM)

    assert pod.wait(15) == 0, pod.output
    row = run_row(conn, run)
    assert row["status"] == "RUNNING" and row["workload_ended_at"] is not None
    assert "noted that the workload ended" in pod.output


def test_a_normal_cancellation_is_logged_at_info_not_warning(run_api, conn, pods, tmp_path):
    """``pgsched cancel``, Replace and deadlines cancel runs every day: nothing to warn about
    (issue 26 saw the sidecar warn twice per cancelled run)."""
    run = claim(conn, sdk_job(conn))
    cancel_file = tmp_path / "cancel"
    pod = start_sidecar(pods, run_api, run, cancel_file)
    wait_for(lambda: heartbeats(conn, run), what="a first heartbeat")

    runs.cancel_run(conn, run.id, by=runs.BY_CLI)
    wait_for(cancel_file.exists, what="the cancel file")
    pod.process.send_signal(signal.SIGTERM)

    assert pod.wait(15) == 0, pod.output
    assert re.search(r" INFO \S+: run \d+: cancellation requested$", pod.output, re.M), pod.output
    assert re.search(r" INFO \S+: wrote 'cancelled' to ", pod.output), pod.output
    assert " WARNING " not in pod.output and " ERROR " not in pod.output, pod.output


def test_sidecar_announces_it_listens_and_a_sigterm_right_after_ends_it(
    run_api, conn, pods, tmp_path
):
    """The listening file is what the Job's postStart hook waits for before kubelet starts
    the workload: from the moment it exists, SIGTERM must end the sidecar (as PID 1 of a
    container a signal without a handler would be dropped)."""
    run = claim(conn, sdk_job(conn))
    cancel_file = tmp_path / "shared" / "cancel"
    listening_file = cancel_file.with_name("heartbeat-listening")
    pod = start_sidecar(pods, run_api, run, cancel_file)
    wait_for(listening_file.exists, what="the listening file")

    pod.process.send_signal(signal.SIGTERM)

    assert pod.wait(15) == 0, pod.output
    assert not cancel_file.exists()


def test_sidecar_writes_lease_lost_when_its_run_is_reaped_and_waits_for_sigterm(
    run_api, conn, pods, tmp_path
):
    run = claim(conn, sdk_job(conn))
    cancel_file = tmp_path / "cancel"
    pod = start_sidecar(pods, run_api, run, cancel_file)
    wait_for(lambda: heartbeats(conn, run), what="a first heartbeat")

    reap_an_hour_later(conn)

    wait_for(cancel_file.exists, what="the cancel file")
    assert re.fullmatch(f"lease-lost {STAMP}\n", cancel_file.read_text())
    pod.wait_for_line("lease lost")
    assert pod.process.poll() is None  # a native sidecar that exits is restarted
    pod.process.send_signal(signal.SIGTERM)
    assert pod.wait(10) == 0, pod.output
    assert run_row(conn, run)["reason"] == "HeartbeatLost"


def test_sidecar_without_a_lease_exits_2_naming_what_is_missing(pods):
    # The pgsched under test, nothing else: not the one a virtualenv may have installed.
    pod = pods("heartbeat", {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(PACKAGE_ROOT)})
    assert pod.wait(10) == 2, pod.output
    assert "PGSCHED_RUN_ID: is not set" in pod.output
    assert "PGSCHED_LEASE_TOKEN: is not set" in pod.output
    assert "PGSCHED_RUN_API_URL: is not set" in pod.output
    assert "PGSCHED_RUN_API_CA: is not set" in pod.output
    assert "PGSCHED_JOB_KIND" not in pod.output  # the sidecar runs no job


def test_a_cancel_reaches_the_workloads_cancel_file_well_within_a_second(
    run_api, conn, pods, tmp_path
):
    """Request → the pod sees it: 20 real sidecar processes, heartbeat every 60 s, each
    run cancelled in turn and its cancel file watched (goal: at most 1 s, median and max)."""
    job = sdk_job(conn, maxConcurrentRuns=20)
    sidecars = []
    for number in range(20):
        run = claim(conn, job, token=f"run-{number}")
        cancel_file = tmp_path / str(run.id) / "cancel"
        env = contract(
            run_api,
            run,
            PGSCHED_CANCEL_FILE=str(cancel_file),
            PGSCHED_HEARTBEAT_INTERVAL_SECONDS="60",
        )
        sidecars.append((run, cancel_file, pods("heartbeat", env)))
    for run, _, _ in sidecars:
        wait_for(lambda run=run: heartbeats(conn, run), timeout=60, what=f"run {run.id}'s beat")

    latencies = []
    for run, cancel_file, _ in sidecars:
        asked = time.monotonic()
        runs.cancel_run(conn, run.id, by=runs.BY_CLI)
        while not cancel_file.exists():
            assert time.monotonic() - asked < 10, f"run {run.id}: no cancel file after 10 s"
            time.sleep(0.002)
        latencies.append(time.monotonic() - asked)

    median, worst = statistics.median(latencies), max(latencies)
    print(f"\ncancel → cancel file: median {median * 1000:.0f} ms, max {worst * 1000:.0f} ms")
    assert median < 0.5 and worst < 1.0, sorted(latencies)


def test_a_cancelled_runs_end_is_recorded_at_once_on_sigterm(run_api, conn, pods, tmp_path):
    """The kubelet sends SIGTERM once the workload exited; a run asked to stop then ends
        CANCELLED at the sidecar's note (migration 0029), and Replace's next run waits for
        that. The sidecar notes the end without waiting for its heartbeat loop's long poll, open
    for up to 30 s."""
    job = sdk_job(conn, maxConcurrentRuns=10)
    sidecars = []
    for number in range(10):
        run = claim(conn, job, token=f"run-{number}")
        cancel_file = tmp_path / str(run.id) / "cancel"
        # A pod's interval, so SIGTERM finds the loop in a long poll (0.1 s has none).
        env = contract(
            run_api,
            run,
            PGSCHED_CANCEL_FILE=str(cancel_file),
            PGSCHED_HEARTBEAT_INTERVAL_SECONDS="30",
        )
        sidecars.append((run, cancel_file, pods("heartbeat", env)))
    for run, _, _ in sidecars:
        wait_for(lambda run=run: heartbeats(conn, run), timeout=60, what=f"run {run.id}'s beat")
    for run, cancel_file, _ in sidecars:
        runs.cancel_run(conn, run.id, by=runs.BY_REPLACE)
        wait_for(cancel_file.exists, timeout=30, what=f"run {run.id}'s cancel file")

    latencies = []
    for run, _, pod in sidecars:
        asked = time.monotonic()
        pod.process.send_signal(signal.SIGTERM)
        while run_row(conn, run)["status"] == "RUNNING":
            assert time.monotonic() - asked < 10, f"run {run.id} still RUNNING 10 s after SIGTERM"
            time.sleep(0.005)
        latencies.append(time.monotonic() - asked)
        assert pod.wait(15) == 0, pod.output
        assert (run_row(conn, run)["status"], run_row(conn, run)["reason"]) == (
            "CANCELLED",
            "Cancelled",
        )

    median, worst = statistics.median(latencies), max(latencies)
    print(f"\nSIGTERM -> CANCELLED: median {median * 1000:.0f} ms, max {worst * 1000:.0f} ms")
    assert median < 0.2 and worst < 0.5, sorted(latencies)
