"""CLI commands that talk to Kubernetes, on the local control plane with a real operator."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cli_runner import pgsched
from devenv.waiting import wait_for
from plugins.operator import busybox

pytestmark = pytest.mark.cluster

NEVER = "0 0 1 1 *"


def suspended_condition(sj, name):
    conditions = sj.get(name).get("status", {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "Suspended"), {})


def definition_row(sj, name):
    return sj.conn.execute(
        "SELECT * FROM pgsched.job_definitions WHERE namespace = %s AND name = %s",
        [sj.namespace, name],
    ).fetchone()


def test_resume_clears_an_automatic_suspension_without_touching_the_spec(
    operators, sj, cluster, namespace
):
    operators.start()
    sj.apply(
        "fragile",
        {"schedule": NEVER, "failureSuspendThreshold": 1, "retryPolicy": {"maxAttempts": 1},
         "jobTemplate": busybox("exit 1")},
    )  # fmt: skip
    queued = pgsched("run-now", "fragile", "-n", namespace, "--database", dsn=operators.dsn)
    assert queued.code == 0, queued.err
    wait_for(
        lambda: suspended_condition(sj, "fragile").get("reason") == "TooManyFailures",
        90,
        describe=lambda: (
            f"auto-suspension; runs {[(r['status'], r['reason']) for r in sj.runs('fragile')]}"
        ),
    )
    generation = sj.get("fragile")["metadata"]["generation"]

    resumed = pgsched(
        "resume",
        "fragile",
        "-n",
        namespace,
        "--database",
        dsn=operators.dsn,
        kubeconfig=cluster.kubeconfig,
    )

    assert resumed.code == 0, resumed.err
    assert "cleared the automatic suspension: 1 consecutive run failed" in resumed.out
    row = definition_row(sj, "fragile")
    assert row["auto_suspended_at"] is None and row["consecutive_failures"] == 0
    after = sj.get("fragile")
    assert after["metadata"]["generation"] == generation  # spec untouched
    assert suspended_condition(sj, "fragile")["status"] == "False"  # status re-rendered at once


def test_suspend_and_resume_patch_spec_suspend_and_the_definition(
    operators, sj, cluster, namespace
):
    operators.start()
    sj.apply("paused", {"schedule": "*/5 * * * *", "jobTemplate": busybox("true")})
    wait_for(lambda: definition_row(sj, "paused"), 30, describe="the definition")
    kube = {"dsn": operators.dsn, "kubeconfig": cluster.kubeconfig}

    suspended = pgsched("suspend", "paused", "-n", namespace, "--database", "-o", "json", **kube)
    assert suspended.code == 0, suspended.err
    assert suspended.json()["specPatched"] and suspended.json()["suspended"]
    assert sj.get("paused")["spec"]["suspend"] is True
    assert definition_row(sj, "paused")["suspended"] is True
    wait_for(
        lambda: suspended_condition(sj, "paused").get("reason") == "SuspendedBySpec",
        20,
        describe="the Suspended condition",
    )

    resumed = pgsched("resume", "paused", "-n", namespace, "--database", **kube)
    assert resumed.code == 0 and "spec.suspend set to false" in resumed.out
    assert sj.get("paused")["spec"]["suspend"] is False
    assert definition_row(sj, "paused")["suspended"] is False


def test_suspend_of_an_unknown_job_or_without_credentials_changes_nothing(
    operators, sj, cluster, namespace, tmp_path
):
    operators.start()
    sj.apply("kept", {"schedule": NEVER, "jobTemplate": busybox("true")})
    wait_for(lambda: definition_row(sj, "kept"), 30, describe="the definition")
    unknown = pgsched(
        "suspend", "nope", "-n", namespace, dsn=operators.dsn, kubeconfig=cluster.kubeconfig
    )
    assert unknown.code == 1 and f"no ScheduledJob {namespace}/nope" in unknown.err
    missing = pgsched(
        "suspend", "kept", "-n", namespace, "--kubeconfig", str(tmp_path / "none"),
        dsn=operators.dsn,
    )  # fmt: skip
    assert missing.code == 1 and "cannot load Kubernetes credentials" in missing.err
    assert definition_row(sj, "kept")["suspended"] is False
    assert not sj.get("kept")["spec"].get("suspend")


def test_doctor_checks_the_api_server_and_the_crd(operators, cluster):
    operators.start()

    def healthy():
        # A replica that has just connected may not have led a tick yet; doctor rightly warns
        # about that (exit 0), so wait for the leader to be confirmed, not just for exit 0.
        result = pgsched("doctor", "-o", "json", dsn=operators.dsn, kubeconfig=cluster.kubeconfig)
        if result.code != 0:
            return False
        leader = next(item for item in result.json()["checks"] if item["check"] == "leader")
        return leader["status"] == "ok" and result

    result = wait_for(healthy, 30, describe="a healthy doctor")
    checks = {item["check"]: item for item in result.json()["checks"]}
    assert (
        checks["kubernetes"]["status"] == "ok" and "API server v" in checks["kubernetes"]["detail"]
    )
    assert checks["crd"]["status"] == "ok"
    assert checks["leader"]["status"] == "ok"


def test_kubectl_runs_pgsched_as_a_plugin(operators, sj, cluster, namespace):
    operators.start()
    sj.apply("plugged", {"schedule": NEVER, "jobTemplate": busybox("true")})
    sj.annotate("plugged", "pgsched.dev/run-now", "go")
    [run] = sj.wait_runs("plugged", lambda runs: runs and runs[0]["status"] == "COMPLETED", 60)
    plugin_dir = Path(sys.executable).parent
    assert (plugin_dir / "kubectl-pgsched").exists(), "pip install -e . installs the plugin"
    result = subprocess.run(
        [str(cluster.binaries.kubectl), "pgsched", "runs", "plugged", "-n", namespace],
        env={
            **os.environ,
            "PATH": f"{plugin_dir}{os.pathsep}{os.environ['PATH']}",
            "KUBECONFIG": str(cluster.kubeconfig),
            "PGSCHED_DSN": operators.dsn,
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[1].split()[:2] == [str(run["id"]), "COMPLETED"]
