"""Runs whose workload cannot start, on the real node (issue 26, I13).

A run is RUNNING for users only once its workload container started. Until then it is
LAUNCHING, with its pod's own reason, for at most ``startTimeoutSeconds``; then it ends
with that reason (not retried by default), its Job goes and its slot is free. A Job an
admission queue keeps suspended waits (``admissionTimeoutSeconds``), and runs once
admitted: shown with the real Kueue (built from its Go module by ``make kueue``), whose
webhook suspends the Jobs pgsched creates and whose scheduler admits them by quota. A run
whose Job Kueue suspends again after the workload started ends ``Evicted`` and is retried
as a new run.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from devenv.kueue import QUEUE_LABEL
from devenv.waiting import wait_for
from plugins.operator import busybox

pytestmark = pytest.mark.cluster

# Heartbeat bounds well below the start timeout: a launching run must not be called silent
# (Orphaned, HeartbeatLost) by them. Before runs had a start, an unschedulable pod (no
# sidecar, no beat) ended Orphaned after 5 s, and an unpullable image (the sidecar beats)
# stayed RUNNING for ever.
FAST = {"intervalSeconds": 1, "timeoutSeconds": 3, "orphanTimeoutSeconds": 5}
START_TIMEOUT = 20
OPERATOR = Path(__file__).parents[2] / "operator"  # this checkout's CLI


def condition(resource: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(c for c in resource["status"]["conditions"] if c["type"] == kind)


def get_sj_line(cluster: Any, namespace: str, name: str) -> str:
    return str(
        cluster.kubectl("get", "sj", name, "-n", namespace, "-o", "wide", "--no-headers").stdout
    )


def describe(dsn: str, run_id: int) -> str:
    return subprocess.run(
        [sys.executable, "-m", "pgsched.cli.main", "describe", str(run_id)],
        capture_output=True,
        text=True,
        env={"PGSCHED_DSN": dsn, "PATH": "/usr/bin:/bin", "PYTHONPATH": str(OPERATOR)},
        check=True,
    ).stdout


def with_main(template: dict[str, Any], **fields: Any) -> dict[str, Any]:
    template["spec"]["template"]["spec"]["containers"][0].update(fields)
    return template


CASES = {
    "unpullable image": (
        with_main(busybox("true"), image="busybox:does-not-exist", imagePullPolicy="Always"),
        {"ErrImagePull", "ImagePullBackOff"},
        "ImagePullFailed",
    ),
    "missing Secret": (
        with_main(
            busybox("true"),
            env=[
                {
                    "name": "PASSWORD",
                    "valueFrom": {"secretKeyRef": {"name": "no-such-secret", "key": "password"}},
                }
            ],
        ),
        {"CreateContainerConfigError"},
        "ContainerConfigError",
    ),
    "unschedulable pod": (
        busybox("true", nodeSelector={"pgsched.dev/no-such-node": "true"}),
        {"Unschedulable"},
        "Unschedulable",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_run_that_cannot_start_says_why_then_ends_with_its_reason_unretried_and_frees_its_slot(
    operators, sj, cluster, namespace, dsn, case
):
    template, waiting, reason = CASES[case]
    operators.start()
    sj.apply(
        "stuck",
        {
            "schedule": "0 0 1 1 *",
            "heartbeat": FAST,
            "startTimeoutSeconds": START_TIMEOUT,
            "concurrencyPolicy": "Queue",
            "retryPolicy": {"backoff": {"initialSeconds": 1, "jitter": 0}},  # maxAttempts 3
            "jobTemplate": template,
        },
    )
    sj.annotate("stuck", "pgsched.dev/run-now", "first")
    [first] = sj.wait_runs("stuck", lambda runs: runs and runs[0]["status"] == "RUNNING", 60)
    sj.annotate("stuck", "pgsched.dev/run-now", "second")  # waits for the slot (Queue)

    # While it cannot start: LAUNCHING with the pod's own reason, on every screen.
    shown = wait_for(
        lambda: (
            (last := sj.get("stuck")["status"].get("lastRun") or {}).get("status") == "LAUNCHING"
            and (last.get("launching") or {}).get("reason") in waiting
            and last
        ),
        60,
        describe=lambda: f"LAUNCHING with one of {waiting}: {sj.get('stuck')['status']}",
    )
    assert shown["id"] == first["id"]
    assert f"LAUNCHING {shown['launching']['reason']}" in " ".join(
        get_sj_line(cluster, namespace, "stuck").split()
    )
    described = describe(dsn, first["id"])
    assert "LAUNCHING" in described and shown["launching"]["reason"] in described, described
    wait_for(
        lambda: any(e["reason"] == "RunNotStarting" for e in sj.events("stuck")),
        30,
        describe="a RunNotStarting Event",
    )

    # At its start timeout: ended with its own reason, not retried, its Job gone.
    runs = sj.wait_runs(
        "stuck",
        lambda runs: runs[0]["status"] == "FAILED",
        START_TIMEOUT + 30,
        "the launching run to end",
    )
    failed = runs[0]
    assert failed["reason"] == reason, failed
    assert f"did not start within startTimeoutSeconds ({START_TIMEOUT})" in failed["error"]
    took = (failed["finished_at"] - failed["started_at"]).total_seconds()
    assert START_TIMEOUT <= took <= START_TIMEOUT + 10, took
    wait_for(
        lambda: "not retried" in (sj.runs("stuck")[0]["retry_decision"] or ""),
        30,
        describe="the retry decision",
    )
    assert [run["attempt"] for run in sj.runs("stuck")] == [1, 1]  # two manual runs, no retry
    wait_for(
        lambda: first["k8s_job_name"] not in [j["metadata"]["name"] for j in sj.jobs("stuck")],
        30,
        describe="the stuck run's Job deleted",
    )

    # The slot is free: the queued run is claimed; the ScheduledJob says it cannot launch.
    sj.wait_runs("stuck", lambda runs: runs[1]["status"] == "RUNNING", 30, "the next run")
    launchable = wait_for(
        lambda: (c := condition(sj.get("stuck"), "Launchable"))["status"] == "False" and c,
        30,
        describe=lambda: f"Launchable=False: {sj.get('stuck')['status']}",
    )
    assert launchable["reason"] == reason, launchable


def test_a_pod_security_refusal_ends_pod_security_rejected_at_once_and_is_not_retried(
    operators, sj, cluster, namespace
):
    cluster.kubectl(
        "label",
        "namespace",
        namespace,
        "pod-security.kubernetes.io/enforce=restricted",
        "pod-security.kubernetes.io/warn=restricted",
    )
    operators.start()
    privileged = with_main(busybox("true"), securityContext={"privileged": True})
    sj.apply("refused", {"schedule": "0 0 1 1 *", "jobTemplate": privileged})  # maxAttempts 3
    sj.annotate("refused", "pgsched.dev/run-now", "go")
    [failed] = sj.wait_runs(
        "refused", lambda runs: runs and runs[0]["status"] == "FAILED", 60, "the refusal"
    )
    assert failed["reason"] == "PodSecurityRejected", failed
    assert "violates Pod Security restricted:latest" in failed["error"], failed["error"]
    wait_for(
        lambda: "not retried" in (sj.runs("refused")[0]["retry_decision"] or ""),
        30,
        describe="the retry decision",
    )
    assert len(sj.runs("refused")) == 1
    launchable = wait_for(
        lambda: (c := condition(sj.get("refused"), "Launchable"))["status"] == "False" and c,
        30,
        describe=lambda: f"Launchable=False: {sj.get('refused')['status']}",
    )
    assert launchable["reason"] == "PodSecurityRejected"
    assert "FAILED PodSecurityRejected" in " ".join(
        get_sj_line(cluster, namespace, "refused").split()
    )
    # It was never announced as started.
    assert not any(e["reason"] == "RunStarted" for e in sj.events("refused"))


def queued_on(queue: str, command: str, cpu: str) -> dict[str, Any]:
    """A jobTemplate whose Jobs go to Kueue's LocalQueue ``queue``, requesting ``cpu``."""
    template = with_main(busybox(command), resources={"requests": {"cpu": cpu}})
    template["metadata"] = {"labels": {QUEUE_LABEL: queue}}
    return template


def quota(cluster_queue: str, cpu: str) -> dict[str, Any]:
    """A ClusterQueue for every namespace with ``cpu`` of the one flavor (memory plenty)."""
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": cluster_queue},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory"],
                    "flavors": [
                        {
                            "name": "default-flavor",
                            "resources": [
                                {"name": "cpu", "nominalQuota": cpu},
                                {"name": "memory", "nominalQuota": "4Gi"},
                            ],
                        }
                    ],
                }
            ],
        },
    }


def apply(cluster: Any, *manifests: dict[str, Any]) -> None:
    for manifest in manifests:
        cluster.kubectl("apply", "-f", "-", input=json.dumps(manifest))


def queues(cluster: Any, namespace: str, *, cpu: str) -> str:
    """A ResourceFlavor, a ClusterQueue with ``cpu`` and the LocalQueue ``team-a`` in
    ``namespace`` that feeds it; the ClusterQueue's name."""
    cluster_queue = f"cq-{namespace}"
    apply(
        cluster,
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": {"name": "default-flavor"},
        },
        quota(cluster_queue, cpu),
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": "team-a", "namespace": namespace},
            "spec": {"clusterQueue": cluster_queue},
        },
    )
    return cluster_queue


def workload_of(cluster: Any, namespace: str, job_name: str) -> dict[str, Any]:
    """The Workload Kueue made for the Job (it owns none other)."""
    output = cluster.kubectl("get", "workloads", "-n", namespace, "-o", "json").stdout
    return next(
        item
        for item in json.loads(output)["items"]
        if any(ref["name"] == job_name for ref in item["metadata"].get("ownerReferences") or [])
    )


def test_a_job_kueue_holds_waits_explained_then_runs_once_admitted(
    kueue, operators, sj, cluster, namespace, dsn
):
    """The real Kueue (``make kueue``): its webhook suspends the Jobs pgsched creates,
    its scheduler admits them once its ClusterQueue's quota fits them."""
    cluster_queue = queues(cluster, namespace, cpu="100m")  # fits neither run's pod
    operators.start()
    sj.apply(
        "queued",
        {
            "schedule": "0 0 1 1 *",
            "heartbeat": FAST,
            "startTimeoutSeconds": START_TIMEOUT,
            "jobTemplate": queued_on("team-a", "echo admitted", cpu="500m"),
        },
    )
    sj.apply(
        "never-admitted",
        {
            "schedule": "0 0 1 1 *",
            "heartbeat": FAST,
            "admissionTimeoutSeconds": 8,
            "jobTemplate": queued_on("team-a", "true", cpu="50"),  # more than any quota here
        },
    )
    sj.annotate("queued", "pgsched.dev/run-now", "go")
    sj.annotate("never-admitted", "pgsched.dev/run-now", "go")
    [run] = sj.wait_runs("queued", lambda runs: runs and runs[0]["k8s_job_name"], 60, "launch")

    # Kueue's webhook suspended the Job pgsched created (its template says nothing of it),
    # and its Workload waits for quota.
    [job] = sj.jobs("queued")
    assert job["spec"]["suspend"] is True, job["spec"]
    workload = wait_for(
        lambda: workload_of(cluster, namespace, run["k8s_job_name"]),
        30,
        describe="Kueue's Workload for the Job",
    )
    assert workload["spec"]["queueName"] == "team-a", workload["spec"]

    # Longer than the orphan timeout, the start timeout and the verdicts' 30 s of caution
    # after the operator started: it has no pod, yet it is waiting for admission, not
    # silent (Orphaned) and not failing to start.
    time.sleep(START_TIMEOUT + 20)
    [run] = sj.runs("queued")
    assert (run["status"], run["reason"]) == ("RUNNING", None), run
    last = sj.get("queued")["status"]["lastRun"]
    assert last["status"] == "LAUNCHING", last
    assert last["launching"]["reason"] == "AwaitingAdmission", last
    assert "admission queue team-a" in last["launching"]["message"], last
    assert "admission queue team-a" in describe(dsn, run["id"])
    assert "LAUNCHING AwaitingAdmission" in " ".join(
        get_sj_line(cluster, namespace, "queued").split()
    )
    pods = cluster.kubectl(
        "get", "pods", "-n", namespace, "-l", f"job-name={run['k8s_job_name']}", "-o", "name"
    ).stdout
    assert pods.strip() == "", pods
    assert not workload_of(cluster, namespace, run["k8s_job_name"])["status"].get("admission")

    # Its own bound: a Job never admitted ends AdmissionTimeout, and its Job goes.
    [never] = sj.wait_runs(
        "never-admitted", lambda runs: runs and runs[0]["status"] == "FAILED", 30, "the bound"
    )
    assert never["reason"] == "AdmissionTimeout", never
    assert "admissionTimeoutSeconds (8)" in never["error"], never
    assert "admission queue team-a" in never["error"], never
    wait_for(lambda: not sj.jobs("never-admitted"), 30, describe="the unadmitted Job deleted")

    # The quota raised: Kueue admits the Workload and un-suspends the Job; it runs once.
    apply(cluster, quota(cluster_queue, "2"))
    [done] = sj.wait_runs(
        "queued", lambda runs: runs[0]["status"] in ("COMPLETED", "FAILED"), 90, "the run"
    )
    assert done["status"] == "COMPLETED", done
    assert len(sj.runs("queued")) == 1
    started = sj.conn.execute(
        "SELECT * FROM pgsched.run_starts WHERE run_id = %s", [run["id"]]
    ).fetchone()
    assert started["workload_started_at"] is not None and started["admitted_at"] is not None
    admitted = workload_of(cluster, namespace, run["k8s_job_name"])
    assert admitted["status"]["admission"]["clusterQueue"] == cluster_queue, admitted["status"]


def test_a_run_kueue_evicts_after_it_started_ends_evicted_and_its_retry_queues_anew(
    kueue, operators, sj, cluster, namespace
):
    """Kueue takes an admitted workload back (preemption; here its Workload deactivated, as
    an administrator may): it suspends the Job again and its pod goes. The run ends
    ``Evicted`` and its Job is deleted (re-admitted, it would start the workload over under
    the same run); the retry is a new run that Kueue queues and admits anew. Before, the
    run stayed RUNNING, its verdict pending for ever."""
    queues(cluster, namespace, cpu="2")
    operators.start()
    sj.apply(
        "evicted",
        {
            "schedule": "0 0 1 1 *",
            "heartbeat": FAST,
            "retryPolicy": {"backoff": {"initialSeconds": 1, "jitter": 0}},  # maxAttempts 3
            "jobTemplate": queued_on("team-a", "sleep 300", cpu="100m"),
        },
    )
    sj.annotate("evicted", "pgsched.dev/run-now", "go")
    wait_for(
        lambda: (sj.get("evicted")["status"].get("lastRun") or {}).get("workloadStartedAt"),
        90,
        describe=lambda: f"the workload started: {sj.get('evicted')['status']}",
    )
    [run] = sj.runs("evicted")
    workload = workload_of(cluster, namespace, run["k8s_job_name"])
    cluster.kubectl(
        "patch",
        "workload",
        workload["metadata"]["name"],
        "-n",
        namespace,
        "--type=merge",
        "-p",
        '{"spec":{"active":false}}',
    )

    runs = sj.wait_runs("evicted", lambda runs: runs[0]["status"] == "FAILED", 60, "eviction")
    assert runs[0]["reason"] == "Evicted", runs[0]
    assert "was suspended again after its workload started" in runs[0]["error"], runs[0]
    assert "admission queue team-a" in runs[0]["error"], runs[0]
    wait_for(
        lambda: run["k8s_job_name"] not in [j["metadata"]["name"] for j in sj.jobs("evicted")],
        30,
        describe="the evicted run's Job deleted",
    )
    retry = sj.wait_runs(
        "evicted",
        lambda runs: len(runs) == 2 and runs[1]["status"] == "RUNNING" and runs[1]["k8s_job_name"],
        60,
        "the retry launched",
    )[1]
    assert (retry["attempt"], retry["retry_of"]) == (2, run["id"]), retry
    wait_for(
        lambda: workload_of(cluster, namespace, retry["k8s_job_name"])["status"].get("admission"),
        60,
        describe="Kueue admitting the retry's Workload",
    )
