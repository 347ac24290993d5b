"""The real Job controller and garbage collector act on pods the real node runs."""

from __future__ import annotations

from typing import Any

import pytest

from devenv.adminclient import namespaced
from devenv.controlplane import ControlPlane
from devenv.waiting import wait_for
from plugins.cluster import container, job_manifest

pytestmark = pytest.mark.cluster

Obj = dict[str, Any]


def create_job(cluster: ControlPlane, namespace: str, manifest: Obj) -> None:
    cluster.api.create(namespaced("jobs", namespace, api_version="batch/v1"), manifest)


def job_condition(cluster: ControlPlane, namespace: str, name: str) -> str | None:
    job = cluster.api.get(namespaced("jobs", namespace, name, api_version="batch/v1"))
    for condition in job.get("status", {}).get("conditions") or []:
        if condition["type"] in ("Complete", "Failed") and condition["status"] == "True":
            return str(condition["type"])
    return None


def job_pods(cluster: ControlPlane, namespace: str, name: str) -> list[Obj]:
    listing = cluster.api.get(namespaced("pods", namespace), labelSelector=f"job-name={name}")
    return list(listing["items"])


def test_job_whose_pod_exits_zero_becomes_complete(cluster: ControlPlane, namespace: str) -> None:
    create_job(cluster, namespace, job_manifest("ok", container("main", "busybox:1.36", "true")))

    wait_for(
        lambda: job_condition(cluster, namespace, "ok") == "Complete",
        60,
        describe=lambda: cluster.kubectl("get", "job,pods", "-n", namespace, "-o", "wide").stdout,
    )
    (pod,) = job_pods(cluster, namespace, "ok")
    assert pod["status"]["phase"] == "Succeeded"


def test_job_whose_pod_exits_three_fails_with_the_exit_code_in_pod_status(
    cluster: ControlPlane, namespace: str
) -> None:
    create_job(
        cluster,
        namespace,
        job_manifest("bad", container("main", "busybox:1.36", "sh", "-c", "exit 3")),
    )

    wait_for(
        lambda: job_condition(cluster, namespace, "bad") == "Failed",
        60,
        describe=lambda: cluster.kubectl("get", "job,pods", "-n", namespace, "-o", "yaml").stdout,
    )
    (pod,) = job_pods(cluster, namespace, "bad")
    assert pod["status"]["phase"] == "Failed"
    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (3, "Error")


def test_deleting_a_job_garbage_collects_its_pod(cluster: ControlPlane, namespace: str) -> None:
    create_job(
        cluster, namespace, job_manifest("long", container("main", "busybox:1.36", "sleep", "300"))
    )
    wait_for(
        lambda: [
            p for p in job_pods(cluster, namespace, "long") if p["status"].get("phase") == "Running"
        ],
        60,
        describe="the Job's pod Running",
    )

    cluster.kubectl("delete", "job", "long", "-n", namespace, "--wait=false")

    wait_for(
        lambda: not job_pods(cluster, namespace, "long"),
        60,
        describe=lambda: f"pods of deleted Job: {job_pods(cluster, namespace, 'long')}",
    )


@pytest.mark.exclusive  # restarts the API server under every test
def test_jobs_keep_completing_across_an_api_server_restart(
    cluster: ControlPlane, namespace: str
) -> None:
    create_job(
        cluster,
        namespace,
        job_manifest("survivor", container("main", "busybox:1.36", "sleep", "3")),
    )
    wait_for(lambda: job_pods(cluster, namespace, "survivor"), 30, describe="the Job's pod")

    cluster.restart_apiserver(downtime=1.0)

    wait_for(
        lambda: job_condition(cluster, namespace, "survivor") == "Complete",
        90,
        describe=lambda: cluster.kubectl("get", "job,pods", "-n", namespace, "-o", "yaml").stdout,
    )
    create_job(cluster, namespace, job_manifest("after", container("main", "busybox:1.36", "true")))
    wait_for(
        lambda: job_condition(cluster, namespace, "after") == "Complete",
        60,
        describe="a Job created after the restart to complete",
    )
