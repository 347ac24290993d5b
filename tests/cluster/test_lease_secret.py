"""A run's lease token is its pod's credential: it reaches the pod through a per-run
Secret, never through anything `kubectl get job,pod -o yaml` shows; and the launcher
adopts an existing Job only when it carries the current claim's lease."""

from __future__ import annotations

import base64
import time
import uuid

import pytest

from devenv.waiting import wait_for
from factories import RecordingLauncher, define
from pgsched.engine import dispatch, runs
from pgsched.k8s import api, jobs, launcher, names
from plugins.operator import busybox

pytestmark = pytest.mark.cluster


def test_the_lease_token_appears_nowhere_in_kubectl_get_job_pod_yaml(operators, sj, cluster):
    operators.start()
    sj.apply(
        "secretive",
        {
            "schedule": "0 0 1 1 *",
            "heartbeat": {"intervalSeconds": 1, "timeoutSeconds": 10},
            "jobTemplate": busybox("sleep 8"),
        },
        annotations={names.ANNOTATION_RUN_NOW: "go"},
    )
    # heartbeat_at is written by the sidecar with the token it read from the Secret.
    [run] = sj.wait_runs(
        "secretive",
        lambda found: found and found[0]["heartbeat_at"] is not None,
        60,
        "the first heartbeat",
    )
    token = str(run["lease_token"])

    shown = cluster.kubectl("get", "job,pod", "-n", sj.namespace, "-o", "yaml").stdout

    assert run["k8s_job_name"] in shown
    assert token not in shown
    assert names.lease_fingerprint(token) in shown
    secret = cluster.kubectl(
        "get",
        "secret",
        names.lease_secret_name(run["k8s_job_name"]),
        "-n",
        sj.namespace,
        "-o",
        "yaml",
    ).stdout
    assert f"kind: Job\n    name: {run['k8s_job_name']}" in secret  # owned by (GC'd with) the Job


def claimed(conn, sj, name):
    """A real ScheduledJob (no operator: nothing else launches) and a claimed run of it."""
    sj.apply(name, {"schedule": "0 0 1 1 *", "jobTemplate": busybox("sleep 30")})
    uid = uuid.UUID(sj.get(name)["metadata"]["uid"])
    definition = define(
        conn,
        name,
        namespace=sj.namespace,
        uid=uid,
        schedule="0 0 1 1 *",
        jobTemplate=busybox("sleep 30"),
    )
    runs.run_now(conn, definition.id, token="t")
    [run] = dispatch.run_once(conn, RecordingLauncher(), definition_ids=[definition.id]).claimed
    return definition, run


def test_a_job_of_the_current_claim_is_adopted_one_of_a_lost_claim_is_replaced(
    conn, crd, sj, cluster
):
    kube = api.KubeApi.from_environment(kubeconfig=str(cluster.kubeconfig))
    k8s = launcher.KubernetesLauncher(kube, jobs.JobSettings(image="ghcr.io/pgsched/pgsched:dev"))
    definition, run = claimed(conn, sj, "adopter")
    job_path = api.path_of(
        group="batch", namespace=sj.namespace, plural="jobs", name=f"adopter-{run.id}"
    )

    name = k8s.launch(run, definition)
    first_uid = kube.get(job_path)["metadata"]["uid"]
    assert k8s.launch(run, definition) == name  # a relaunch of the same claim: adopted
    assert kube.get(job_path)["metadata"]["uid"] == first_uid

    # The claim is lost and the run claimed again: a new lease; the old Job is a leftover.
    new_token = uuid.uuid4()
    conn.execute("UPDATE pgsched.job_runs SET lease_token = %s WHERE id = %s", [new_token, run.id])
    reclaimed = runs.get(conn, run.id)
    assert k8s.launch(reclaimed, definition) == name
    replaced = kube.get(job_path)
    assert replaced["metadata"]["uid"] != first_uid
    assert replaced["metadata"]["annotations"][names.ANNOTATION_LEASE_SHA256] == (
        names.lease_fingerprint(new_token)
    )
    secret_path = api.path_of(
        namespace=sj.namespace, plural="secrets", name=names.lease_secret_name(name)
    )
    secret = cluster.api.get(secret_path)
    assert base64.b64decode(secret["data"][names.LEASE_SECRET_KEY]).decode() == str(new_token)

    def owners() -> list[str]:
        secret = cluster.api.get(secret_path)
        return [ref["uid"] for ref in secret["metadata"]["ownerReferences"]]

    # The hand-over to the Job is a background request, after the launch; the earlier
    # launches' hand-overs (to the replaced Job) are refused, not applied after it.
    wait_for(lambda: owners() == [replaced["metadata"]["uid"]], 10, describe=lambda: str(owners()))
    time.sleep(0.5)
    assert owners() == [replaced["metadata"]["uid"]]
