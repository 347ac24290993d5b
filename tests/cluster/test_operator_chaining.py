"""Chaining on the cluster: ScheduledJobs that run after others (spec.after)."""

from __future__ import annotations

import time

import pytest

from devenv.waiting import wait_for
from plugins.operator import busybox

pytestmark = pytest.mark.cluster

NEVER = "0 0 1 1 *"
RUN_NOW = "pgsched.dev/run-now"


def done(runs, count=1):
    finished = [r for r in runs if r["status"] in ("COMPLETED", "FAILED")]
    return len(finished) >= count


def condition(sj, name, kind):
    conditions = sj.get(name).get("status", {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == kind), {})


def test_b_runs_after_a_and_its_job_starts_after_as_job_completed(operators, sj):
    operators.start()
    sj.apply("load", {"after": [{"scheduledJob": "extract"}], "jobTemplate": busybox("true")})
    wait_for(
        lambda: condition(sj, "load", "UpstreamsFound").get("reason") == "UpstreamMissing",
        30,
        describe=lambda: f"the missing upstream condition: {sj.get('load').get('status')}",
    )
    sj.apply("extract", {"schedule": NEVER, "jobTemplate": busybox("sleep 1")})
    sj.annotate("extract", RUN_NOW, "go")

    [down] = sj.wait_runs("load", done, 90, "the chained run")
    [up] = sj.runs("extract")
    assert (down["trigger"], down["upstream_run_id"], down["status"]) == (
        "upstream",
        up["id"],
        "COMPLETED",
    )
    assert down["started_at"] > up["finished_at"]
    # From the API: B's Job was created only after A's Job had completed.
    [a_job] = sj.jobs("extract")
    [b_job] = sj.jobs("load")
    assert b_job["metadata"]["creationTimestamp"] >= a_job["status"]["completionTime"]
    assert condition(sj, "load", "UpstreamsFound")["status"] == "True"
    wait_for(
        lambda: sj.get("load")["status"].get("lastRun", {}).get("upstreamRunId") == up["id"],
        20,
        describe=lambda: f"load's status: {sj.get('load').get('status')}",
    )
    wait_for(
        lambda: (
            sj.get("extract")["status"].get("lastRun", {}).get("triggeredRuns")
            == [{"scheduledJob": "load", "runId": down["id"], "status": "COMPLETED"}]
        ),
        20,
        describe=lambda: f"extract's status: {sj.get('extract').get('status')}",
    )


def test_a_failing_upstream_with_retries_triggers_b_once_after_its_final_attempt(operators, sj):
    operators.start()
    sj.apply(
        "flaky",
        {
            "schedule": NEVER,
            "retryPolicy": {
                "maxAttempts": 2,
                "retryOn": ["NonZeroExit"],
                "backoff": {"initialSeconds": 1, "jitter": 0},
            },
            "jobTemplate": busybox("exit 3"),
        },
    )
    sj.apply(
        "alert",
        {"after": [{"scheduledJob": "flaky", "outcome": "Failed"}], "jobTemplate": busybox("true")},
    )
    sj.annotate("flaky", RUN_NOW, "go")

    [down] = sj.wait_runs("alert", done, 120, "the chained run")
    attempts = sj.runs("flaky")
    assert [(r["attempt"], r["status"]) for r in attempts] == [(1, "FAILED"), (2, "FAILED")]
    assert down["upstream_run_id"] == attempts[1]["id"]
    assert down["created_at"] > attempts[1]["finished_at"]
    time.sleep(2)  # several more ticks: still exactly one
    assert len(sj.runs("alert")) == 1


def test_a_fan_in_of_two_runs_once_both_upstreams_finished(operators, sj):
    operators.start()
    for name in ("left", "right"):
        sj.apply(name, {"schedule": NEVER, "jobTemplate": busybox("true")})
    sj.apply(
        "join",
        {
            "after": [{"scheduledJob": "left"}, {"scheduledJob": "right"}],
            "afterMode": "All",
            "jobTemplate": busybox("true"),
        },
    )
    sj.annotate("left", RUN_NOW, "go")
    sj.wait_runs("left", done, 60, "left's run")
    time.sleep(1)
    assert sj.runs("join") == []  # right has not run yet
    sj.annotate("right", RUN_NOW, "go")

    [down] = sj.wait_runs("join", done, 60, "the fan-in run")
    [right] = sj.runs("right")
    assert down["upstream_run_id"] == right["id"] and down["status"] == "COMPLETED"


def test_a_cycle_is_rejected_with_a_message_naming_it(operators, sj):
    operators.start()
    sj.apply("ping", {"after": [{"scheduledJob": "pong"}], "jobTemplate": busybox("true")})
    sj.apply("pong", {"after": [{"scheduledJob": "ping"}], "jobTemplate": busybox("true")})

    ready = wait_for(
        lambda: (c := condition(sj, "pong", "Ready")).get("reason") == "InvalidSpec" and c,
        30,
        describe=lambda: f"pong's status: {sj.get('pong').get('status')}",
    )
    assert "spec.after: pong → ping → pong is a cycle" in ready["message"]
    # ping is valid, but runs only after pong, which was never stored: it can never start,
    # and says so (not Ready and idle for ever).
    stranded = wait_for(
        lambda: (c := condition(sj, "ping", "Ready")).get("reason") == "UpstreamMissing" and c,
        30,
        describe=lambda: f"ping's status: {sj.get('ping').get('status')}",
    )
    assert stranded["status"] == "False"
    assert "spec.after names pong, which does not exist" in stranded["message"]
    assert "or its spec was refused: see its status" in stranded["message"]
    # and the refused member's SCHEDULE column shows what it would run after
    assert sj.get("pong")["status"]["schedule"] == "after ping"


def test_deleting_an_upstream_gives_its_downstream_a_condition_not_an_error_loop(
    operators, sj, cluster
):
    operators.start()
    sj.apply("source", {"schedule": NEVER, "jobTemplate": busybox("true")})
    sj.apply("sink", {"after": [{"scheduledJob": "source"}], "jobTemplate": busybox("true")})
    wait_for(
        lambda: condition(sj, "sink", "UpstreamsFound").get("status") == "True",
        30,
        describe=lambda: f"sink's status: {sj.get('sink').get('status')}",
    )
    cluster.kubectl("delete", "sj", "source", "-n", sj.namespace, "--wait=true")

    missing = wait_for(
        lambda: (
            (c := condition(sj, "sink", "UpstreamsFound")).get("reason") == "UpstreamMissing" and c
        ),
        30,
        describe=lambda: f"sink's status: {sj.get('sink').get('status')}",
    )
    assert "spec.after names source, which does not exist" in missing["message"]
    # sink runs only after source: as with a missing pool, it is not Ready until it exists.
    assert condition(sj, "sink", "Ready")["reason"] == "UpstreamMissing"
    sj.apply("source", {"schedule": NEVER, "jobTemplate": busybox("true")})
    wait_for(
        lambda: condition(sj, "sink", "Ready").get("status") == "True",
        30,
        describe=lambda: f"sink's status once source is back: {sj.get('sink').get('status')}",
    )
