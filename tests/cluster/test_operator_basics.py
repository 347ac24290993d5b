"""The operator end to end: ScheduledJobs in, Jobs and run history out."""

from __future__ import annotations

import pytest

from pgsched.devenv.waiting import wait_for
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
