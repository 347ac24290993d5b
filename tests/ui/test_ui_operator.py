"""The operator serves the UI on PGSCHED_UI_BIND: a real operator, a real run, a real token."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest

from devenv.controlplane import ControlPlane
from devenv.processes import free_port
from devenv.waiting import wait_for
from plugins.operator import Operators, ScheduledJobs, busybox, now_plus

pytestmark = pytest.mark.cluster


def _get(url: str, token: str | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_the_operator_serves_the_ui_to_token_holders_and_measures_it(
    operators: Operators, sj: ScheduledJobs, cluster: ControlPlane, namespace: str
) -> None:
    port = free_port()
    operator = operators.start(PGSCHED_UI_BIND=f"127.0.0.1:{port}")
    sj.apply("hello", {"runAt": now_plus(2), "jobTemplate": busybox("echo hello; sleep 1")})
    [run] = sj.wait_runs("hello", lambda runs: runs and runs[-1]["status"] == "COMPLETED", 60)
    cluster.kubectl("create", "serviceaccount", "reader", "-n", namespace)
    cluster.kubectl(
        "create",
        "role",
        "reader",
        "-n",
        namespace,
        "--verb=get,list",
        "--resource=scheduledjobs.pgsched.dev",
    )
    cluster.kubectl(
        "create",
        "rolebinding",
        "reader",
        "-n",
        namespace,
        "--role=reader",
        f"--serviceaccount={namespace}:reader",
    )
    token = cluster.kubectl(
        "create", "token", "reader", "-n", namespace, "--audience", "pgsched-ui"
    ).stdout.strip()
    base = f"http://127.0.0.1:{port}"

    assert _get(base + "/")[0] == 401
    status, page = _get(base + "/", token)
    assert status == 200 and f"/ns/{namespace}/hello" in page
    status, page = _get(f"{base}/runs/{run['id']}", token)
    assert status == 200 and "COMPLETED" in page and f"hello-{run['id']}" in page
    assert wait_for(
        lambda: 'pgsched_ui_request_seconds_count{code="200",page="run"} 1.0' in operator.metrics(),
        15,
        describe="the UI latency metric on the operator's metrics port",
    )
