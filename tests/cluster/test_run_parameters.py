"""Issue 29 on the real API server and node: run-now with a parameter reaches the pod's
environment as given (a value that names one of the pod's variables, ``$(PGSCHED_RUN_ID)``,
is not expanded by kubelet), an undeclared one is refused with the operator's own message,
and a suspension's reason shows in the status and goes on resume."""

from __future__ import annotations

import pytest

from cli_runner import pgsched
from devenv.waiting import wait_for
from plugins.operator import busybox

pytestmark = pytest.mark.cluster

DECLARED = [
    {"name": "region", "default": "eu-west-1", "pattern": "[a-z]{2}-[a-z]+-[0-9]"},
    {"name": "day"},
]


def test_run_now_with_a_parameter_reaches_the_pods_environment_and_an_undeclared_one_is_refused(
    operators, sj, cluster, namespace
):
    operators.start()
    sj.apply(
        "report",
        {
            "schedule": "0 0 1 1 *",
            "parameters": DECLARED,
            "jobTemplate": busybox('echo "region=$PGSCHED_PARAM_REGION day=$PGSCHED_PARAM_DAY"'),
        },
    )
    wait_for(lambda: sj.get("report").get("status"), 30, describe="the status")

    refused = pgsched(
        "run-now",
        "report",
        "-n",
        namespace,
        "--param",
        "regoin=us-east-1",
        kubeconfig=cluster.kubeconfig,
    )
    assert refused.code != 0
    assert "the operator refused the request: pgsched.dev/run-now-parameters:" in refused.err
    assert '"regoin" is not a declared parameter; declared: region, day' in refused.err
    assert sj.runs("report") == []

    sent = pgsched(
        "run-now",
        "report",
        "-n",
        namespace,
        "--param",
        "region=us-east-1",
        "--param",
        # The main container defines PGSCHED_RUN_ID before the parameters: unescaped,
        # kubelet would hand the workload the run's id instead.
        "day=$(PGSCHED_RUN_ID)",
        kubeconfig=cluster.kubeconfig,
    )
    assert sent.code == 0, sent.err
    [run] = sj.wait_runs(
        "report", lambda runs: runs and runs[0]["status"] == "COMPLETED", 120, "completion"
    )
    job = run["k8s_job_name"]
    output = cluster.kubectl("logs", "-n", namespace, f"job/{job}", "-c", "main").stdout
    assert "region=us-east-1 day=$(PGSCHED_RUN_ID)" in output.splitlines()
    # Nothing of the request is left on the object.
    annotations = sj.get("report")["metadata"].get("annotations") or {}
    assert not [key for key in annotations if key.startswith("pgsched.dev/run-now")]


def test_suspend_with_a_reason_shows_it_in_the_status_until_resume(
    operators, sj, cluster, namespace
):
    operators.start()
    sj.apply("etl", {"schedule": "*/5 * * * *", "jobTemplate": busybox("true")})
    wait_for(lambda: sj.get("etl").get("status"), 30, describe="the status")

    suspended = pgsched(
        "suspend",
        "etl",
        "-n",
        namespace,
        "--reason",
        "warehouse migration",
        kubeconfig=cluster.kubeconfig,
    )
    assert suspended.code == 0, suspended.err

    def condition() -> dict:
        conditions = (sj.get("etl").get("status") or {}).get("conditions") or []
        return next((c for c in conditions if c["type"] == "Suspended"), {})

    wait_for(
        lambda: condition().get("message") == "spec.suspend is true: warehouse migration",
        30,
        describe="the Suspended condition with the reason",
    )
    resumed = pgsched("resume", "etl", "-n", namespace, kubeconfig=cluster.kubeconfig)
    assert resumed.code == 0, resumed.err
    wait_for(lambda: condition().get("status") == "False", 30, describe="resumed")
    got = sj.get("etl")
    assert "pgsched.dev/suspend-reason" not in (got["metadata"].get("annotations") or {})
    assert (got.get("status") or {}).get("suspendReason") is None
