"""The operator end to end: ScheduledJobs in, Jobs and run history out."""

from __future__ import annotations

import pytest

from devenv.waiting import wait_for
from plugins.operator import busybox, now_plus

pytestmark = pytest.mark.cluster


def test_a_one_shot_runs_as_a_job_and_its_history_and_status_show_it(operators, sj):
    operators.start()
    sj.apply(
        "hello", {"runAt": now_plus(2), "jobTemplate": busybox("echo hello from pgsched; sleep 1")}
    )

    runs = sj.wait_runs(
        "hello", lambda runs: runs and runs[-1]["status"] == "COMPLETED", 60, "completion"
    )

    [run] = runs
    assert run["k8s_job_name"] == f"hello-{run['id']}"
    [job] = sj.jobs("hello")
    assert job["metadata"]["labels"]["pgsched.dev/run-id"] == str(run["id"])
    wait_for(
        lambda: sj.get("hello")["status"]["lastRun"]["status"] == "COMPLETED",
        15,
        describe=lambda: f"status.lastRun to show the completion: {sj.get('hello').get('status')}",
    )
    reasons = wait_for(
        lambda: (
            {"Scheduled", "RunStarted", "RunSucceeded"} <= {e["reason"] for e in sj.events("hello")}
        ),
        15,
        describe=lambda: f"Events; got {[e['reason'] for e in sj.events('hello')]}",
    )
    assert reasons


def test_an_every_minute_job_runs_real_pods_that_heartbeat_and_kubectl_shows_it(
    operators, sj, cluster, namespace
):
    operators.start()
    sj.apply(
        "minutely",
        {
            "schedule": "* * * * *",
            "heartbeat": {"intervalSeconds": 1, "timeoutSeconds": 10},
            "jobTemplate": busybox("echo tick; sleep 3"),
        },
    )
    runs = sj.wait_runs(
        "minutely",
        lambda runs: runs and runs[0]["status"] == "COMPLETED",
        80,
        "the first minute's run",
    )
    first = runs[0]
    assert first["trigger"] == "schedule" and first["scheduled_for"].second == 0
    assert first["heartbeat_at"] is not None, "the heartbeat sidecar must have reported"
    assert (first["started_at"] - first["scheduled_for"]).total_seconds() < 2
    wait_for(
        lambda: sj.get("minutely")["status"]["lastRun"]["status"] == "COMPLETED",
        15,
        describe="the status",
    )
    table = cluster.kubectl("get", "sj", "-n", namespace).stdout
    header, row = table.strip().splitlines()[:2]
    assert header.split() == [
        "NAME",
        "SCHEDULE",
        "TIMEZONE",
        "SUSPEND",
        "READY",
        "ACTIVE",
        "QUEUED",
        "LAST",
        "STATUS",
        "LAST",
        "RUN",
        "LAST",
        "SCHEDULE",
        "NEXT",
        "RUN",
        "AGE",
    ]
    assert row.split()[:6] == ["minutely", "*", "*", "*", "*", "*"]
    assert row.split()[6:12] == ["UTC", "false", "True", "0", "0", "COMPLETED"]
    wide = cluster.kubectl("get", "scheduledjobs.pgsched.dev", "-n", namespace, "-o", "name").stdout
    assert "scheduledjob.pgsched.dev/minutely" in wide
    category = cluster.kubectl("get", "pgsched", "-n", namespace, "-o", "name").stdout
    assert "minutely" in category
