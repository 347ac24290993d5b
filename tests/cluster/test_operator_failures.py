"""Failures on the cluster: dead pods, failing jobs, retries, cancellation, deletion."""

from __future__ import annotations

import contextlib
import json
import os
import signal
from typing import Any

import pytest

from chaos.faults import processes_by_run
from devenv.controlplane import ControlPlane
from devenv.waiting import wait_for
from plugins.operator import busybox

pytestmark = pytest.mark.cluster

FAST_HEARTBEAT = {"intervalSeconds": 1, "timeoutSeconds": 3, "orphanTimeoutSeconds": 30}


def processes_of_run(cluster: ControlPlane, namespace: str, run: dict[str, Any]) -> list[int]:
    """PIDs of the processes of the containers of a run's pod (host PIDs of real
    containers), found by the pod's cgroup: the run id alone would also match other tests'
    pods on the shared node (each test's database numbers its runs from 1), and a process of
    this host that merely carries the variable."""
    listed = cluster.kubectl(
        "get", "pods", "-n", namespace, "-l", f"batch.kubernetes.io/job-name={run['k8s_job_name']}",
        "-o", "json",
    ).stdout  # fmt: skip
    uids = [pod["metadata"]["uid"] for pod in json.loads(listed)["items"]]
    return processes_by_run(uids).get(run["id"], [])


def signal_all(pids: list[int], signum: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)


def test_a_frozen_pod_is_reaped_heartbeat_lost_and_retried_as_a_new_job(operators, sj, cluster):
    """A pod that stops heartbeating without its node noticing (frozen, or its node gone):
    the reaper fails the run HeartbeatLost, a new attempt row gets a new Job, and the old
    Job is deleted."""
    operators.start()
    sj.apply(
        "frozen",
        {
            "schedule": "0 0 1 1 *",
            "heartbeat": FAST_HEARTBEAT,
            "retryPolicy": {"backoff": {"initialSeconds": 1, "jitter": 0}},
            "jobTemplate": busybox("sleep 30"),
        },
    )
    sj.annotate("frozen", "pgsched.dev/run-now", "go")
    [first] = sj.wait_runs(
        "frozen", lambda runs: runs and runs[0]["heartbeat_at"], 60, "a heartbeat"
    )
    pids = wait_for(
        lambda: processes_of_run(cluster, sj.namespace, first), 10, describe="the pod's processes"
    )
    signal_all(pids, signal.SIGSTOP)
    try:
        runs = sj.wait_runs(
            "frozen",
            lambda runs: (
                len(runs) >= 2 and runs[1]["status"] == "RUNNING" and runs[1]["k8s_job_name"]
            ),
            60,
            "the reaped attempt to be retried as a running Job",
        )
    finally:
        signal_all(pids, signal.SIGKILL)
    failed, retry = runs[0], runs[1]
    assert (failed["status"], failed["reason"]) == ("FAILED", "HeartbeatLost")
    assert (retry["attempt"], retry["retry_of"], retry["trigger"]) == (2, failed["id"], "retry")
    assert retry["k8s_job_name"] == f"frozen-{retry['id']}"
    wait_for(
        lambda: [job["metadata"]["name"] for job in sj.jobs("frozen")] == [retry["k8s_job_name"]],
        30,
        describe=lambda: (
            f"the frozen attempt's Job to be deleted: {[j['metadata']['name'] for j in sj.jobs('frozen')]}"
        ),
    )


def test_a_failing_job_is_retried_with_backoff_when_nonzeroexit_is_allowed(operators, sj):
    operators.start()
    sj.apply(
        "flaky",
        {
            "schedule": "0 0 1 1 *",
            "retryPolicy": {
                "maxAttempts": 2,
                "retryOn": ["NonZeroExit"],
                "backoff": {"initialSeconds": 3, "jitter": 0},
            },
            "jobTemplate": busybox("echo failing; exit 1"),
        },
    )
    sj.annotate("flaky", "pgsched.dev/run-now", "go")
    runs = sj.wait_runs(
        "flaky",
        lambda runs: len(runs) == 2 and runs[1]["status"] == "FAILED",
        90,
        "both attempts to fail",
    )
    first, second = runs
    assert (first["reason"], first["exit_code"]) == ("NonZeroExit", 1)
    assert "container main exited with code 1" in first["error"]
    assert second["attempt"] == 2 and second["retry_of"] == first["id"]
    assert (second["scheduled_for"] - first["finished_at"]).total_seconds() >= 3
    assert second["started_at"] >= second["scheduled_for"]
    reasons = [event["reason"] for event in sj.events("flaky")]
    assert "RunRetrying" in reasons and reasons.count("RunFailed") >= 1


def test_never_retry_on_wins_over_retry_on(operators, sj):
    operators.start()
    sj.apply(
        "denied",
        {
            "schedule": "0 0 1 1 *",
            "retryPolicy": {
                "retryOn": ["*", "NonZeroExit"],
                "neverRetryOn": ["NonZeroExit"],
                "backoff": {"initialSeconds": 0},
            },
            "jobTemplate": busybox("exit 3"),
        },
    )
    sj.annotate("denied", "pgsched.dev/run-now", "go")
    sj.wait_runs("denied", lambda runs: runs and runs[0]["status"] == "FAILED", 60, "the failure")
    wait_for(lambda: sj.runs("denied")[0]["settled_at"], 10, describe="the failure to be settled")
    [run] = sj.runs("denied")
    assert (run["reason"], run["exit_code"]) == ("NonZeroExit", 3)


def test_cancelling_a_running_run_ends_it_cancelled_within_the_grace(operators, sj):
    operators.start()
    # The workload polls the cancel file the heartbeat sidecar writes.
    workload = 'while [ ! -f "$PGSCHED_CANCEL_FILE" ]; do sleep 0.2; done; echo "stopping: $(cat $PGSCHED_CANCEL_FILE)"'
    sj.apply(
        "polite",
        {
            "schedule": "0 0 1 1 *",
            "cancelGraceSeconds": 20,
            "heartbeat": FAST_HEARTBEAT,
            "jobTemplate": busybox(workload),
        },
    )
    sj.annotate("polite", "pgsched.dev/run-now", "go")
    [run] = sj.wait_runs("polite", lambda runs: runs and runs[0]["heartbeat_at"], 60, "a heartbeat")
    sj.annotate("polite", "pgsched.dev/cancel", str(run["id"]))
    [done] = sj.wait_runs(
        "polite", lambda runs: runs[0]["status"] == "CANCELLED", 20, "the cancellation"
    )
    assert done["reason"] == "Cancelled"
    assert (done["finished_at"] - done["cancel_requested_at"]).total_seconds() < 20
    # the workload stopped by itself, noted by its sidecar (migration 0029; a workload
    # that ignored the request would end "did not stop within cancelGraceSeconds")
    assert done["error"] == "stopped after cancellation was requested (its workload ended)"
    assert "pgsched.dev/cancel" not in sj.get("polite")["metadata"].get("annotations", {})


def test_a_run_that_ignores_cancellation_is_stopped_after_the_grace(operators, sj):
    operators.start()
    sj.apply(
        "stubborn",
        {
            "schedule": "0 0 1 1 *",
            "cancelGraceSeconds": 2,
            "heartbeat": FAST_HEARTBEAT,
            "jobTemplate": busybox("trap '' TERM; sleep 300"),
        },
    )
    sj.annotate("stubborn", "pgsched.dev/run-now", "go")
    sj.wait_runs("stubborn", lambda runs: runs and runs[0]["heartbeat_at"], 60, "a heartbeat")
    sj.annotate("stubborn", "pgsched.dev/cancel", "all")
    [done] = sj.wait_runs(
        "stubborn", lambda runs: runs[0]["status"] == "CANCELLED", 30, "the forced stop"
    )
    assert "did not stop within cancelGraceSeconds (2)" in done["error"]
    wait_for(lambda: sj.jobs("stubborn") == [], 60, describe="the Job to be deleted")


def test_deleting_a_scheduled_job_cancels_its_runs_and_removes_its_jobs(
    operators, sj, cluster, namespace
):
    operators.start()
    sj.apply(
        "doomed",
        {
            "schedule": "0 0 1 1 *",
            "maxConcurrentRuns": 1,
            "heartbeat": FAST_HEARTBEAT,
            "jobTemplate": busybox("sleep 300"),
        },
    )
    sj.annotate("doomed", "pgsched.dev/run-now", "a")
    sj.wait_runs(
        "doomed", lambda runs: runs and runs[0]["status"] == "RUNNING", 60, "the first run"
    )
    sj.annotate("doomed", "pgsched.dev/run-now", "b")
    sj.wait_runs("doomed", lambda runs: len(runs) == 2, 30, "the queued run")
    runs_before = sj.runs("doomed")
    cluster.kubectl("delete", "sj", "doomed", "-n", namespace, "--wait=true", "--timeout=60s")
    runs = wait_for(
        lambda: (
            (
                rows := sj.conn.execute(
                    "SELECT status FROM pgsched.job_runs WHERE id = ANY(%s) ORDER BY id",
                    [[r["id"] for r in runs_before]],
                ).fetchall()
            )
            and all(row["status"] == "CANCELLED" for row in rows)
            and rows
        ),
        60,
        describe="both runs to end CANCELLED",
    )
    assert len(runs) == 2
    wait_for(
        lambda: cluster.kubectl("get", "jobs", "-n", namespace, "-o", "name").stdout.strip() == "",
        60,
        describe="the Jobs to be garbage-collected",
    )
    deleted = sj.conn.execute(
        "SELECT deleted_at FROM pgsched.job_definitions WHERE name = 'doomed'"
    ).fetchone()
    assert deleted["deleted_at"] is not None


def test_a_run_past_its_active_deadline_fails_deadline_exceeded(operators, sj):
    operators.start()
    sj.apply(
        "slowpoke",
        {
            "schedule": "0 0 1 1 *",
            "activeDeadlineSeconds": 3,
            "retryPolicy": {"maxAttempts": 1},
            "heartbeat": FAST_HEARTBEAT,
            "jobTemplate": busybox("sleep 60"),
        },
    )
    sj.annotate("slowpoke", "pgsched.dev/run-now", "go")
    [run] = sj.wait_runs(
        "slowpoke", lambda runs: runs and runs[0]["status"] == "FAILED", 60, "the deadline"
    )
    assert run["reason"] == "DeadlineExceeded"


def test_finished_jobs_beyond_the_history_limits_are_deleted(operators, sj):
    operators.start()
    sj.apply(
        "tidy",
        {
            "schedule": "0 0 1 1 *",
            "successfulRunsHistoryLimit": 1,
            "failedRunsHistoryLimit": 1,
            "maxConcurrentRuns": 1,
            "retryPolicy": {"maxAttempts": 1},
            "jobTemplate": busybox('test "$PGSCHED_RUN_ID" != 3'),
        },  # run 3 fails, the others succeed
    )
    for token in ("1", "2", "3", "4"):
        sj.annotate("tidy", "pgsched.dev/run-now", token)
        sj.wait_runs(
            "tidy",
            lambda runs, n=int(token): len(runs) == n and runs[-1]["finished_at"],
            60,
            f"run {token}",
        )
    runs = sj.runs("tidy")
    assert [run["status"] for run in runs] == ["COMPLETED", "COMPLETED", "FAILED", "COMPLETED"]
    kept = {runs[2]["k8s_job_name"], runs[3]["k8s_job_name"]}  # the newest of each kind
    wait_for(
        lambda: {job["metadata"]["name"] for job in sj.jobs("tidy")} == kept,
        30,
        describe=lambda: (
            f"only {kept} to remain: {[j['metadata']['name'] for j in sj.jobs('tidy')]}"
        ),
    )
    assert len(sj.runs("tidy")) == 4, "run rows are never deleted with their Jobs"
