"""The operator says what it decided and what it cannot do: a failed run that is not
retried gets an Event saying why, a finished one-shot reaches Completed, and `pgsched
doctor` lists ScheduledJobs that are not Ready or that no operator serves."""

from __future__ import annotations

import secrets
import time

import pytest
import yaml

from cli_runner import pgsched
from devenv.waiting import wait_for
from plugins.operator import busybox, now_plus

pytestmark = pytest.mark.cluster


def condition(sj, name, kind):
    found = (sj.get(name).get("status") or {}).get("conditions") or []
    return next((item for item in found if item["type"] == kind), None)


def test_a_failed_one_shot_that_is_not_retried_says_why_and_completes(operators, sj):
    operators.start()
    sj.apply(
        "once",
        {
            "runAt": now_plus(2),
            "retryPolicy": {"maxAttempts": 1},
            "jobTemplate": busybox("exit 3"),
        },
    )
    [run] = sj.wait_runs("once", lambda found: found and found[0]["settled_at"], 60, "settling")
    assert run["retry_decision"] == "not retried: attempts used up (attempt 1 of maxAttempts 1)"

    event = wait_for(
        lambda: next((e for e in sj.events("once") if e["reason"] == "RunNotRetried"), None),
        30,
        describe=lambda: f"a RunNotRetried Event; got {[e['reason'] for e in sj.events('once')]}",
    )
    completed = wait_for(
        lambda: (
            (found := condition(sj, "once", "Completed")) and found["status"] == "True" and found
        ),
        30,
        describe=lambda: f"Completed=True: {sj.get('once').get('status')}",
    )

    assert event["type"] == "Warning"
    assert "failed with NonZeroExit and is not retried: attempts used up" in event["message"]
    assert completed["reason"] == "Failed" and f"run {run['id']}" in completed["message"]


def test_doctor_lists_a_rejected_scheduled_job_and_one_in_a_namespace_no_operator_watches(
    operators, sj, cluster, namespace
):
    operators.start()
    sj.apply("typo", {"schedule": "61 * * * *", "jobTemplate": busybox("true")})
    elsewhere = f"unwatched-{secrets.token_hex(3)}"
    cluster.kubectl("create", "namespace", elsewhere)
    try:
        manifest = {
            "apiVersion": "pgsched.dev/v1alpha1",
            "kind": "ScheduledJob",
            "metadata": {"name": "ignored", "namespace": elsewhere},
            "spec": {"schedule": "0 8 * * *", "jobTemplate": busybox("true")},
        }
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(manifest))
        wait_for(lambda: condition(sj, "typo", "Ready"), 30, describe="typo's Ready condition")
        time.sleep(2)

        result = pgsched(
            "doctor", "-o", "json", "--unserved-after", "1",
            dsn=operators.dsn, kubeconfig=cluster.kubeconfig,
        )  # fmt: skip
    finally:
        cluster.kubectl("delete", "namespace", elsewhere, "--wait=false")
    found = {item["check"]: item for item in result.json()["checks"]}

    assert found["not ready"]["status"] == "warn"
    assert f"{namespace}/typo: " in found["not ready"]["detail"]
    assert found["unserved"]["status"] == "warn"
    assert f"{elsewhere}/ignored" in found["unserved"]["detail"]
    assert "no operator watches" in found["unserved"]["detail"]
    assert f"{namespace}/typo" not in found["unserved"]["detail"]
