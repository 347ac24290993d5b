"""A run's lease token is its pod's credential: it reaches the pod through a per-run
Secret, never through anything `kubectl get job,pod -o yaml` shows; and the launcher
keeps an existing Job only when it carries the current claim's lease, or a genuine lease
of an earlier claim of the run that the database lost (migration 0032)."""

from __future__ import annotations

import base64
import time
import uuid

import pytest

from devenv.waiting import wait_for
from factories import RecordingLauncher, define, lose_claim
from k8sfixtures import job_settings
from pgsched.db import connection
from pgsched.engine import dispatch, runs
from pgsched.engine.launcher import Adopted
from pgsched.k8s import names
from pgsched.k8s.client import api
from pgsched.k8s.jobside import launcher
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


def lose_and_claim_again(conn, run):
    """The claim lost, and the run claimed again by the dispatcher: a new, genuine lease."""
    lose_claim(conn, run.id)
    [again] = dispatch.run_once(
        conn, RecordingLauncher(), definition_ids=[run.definition_id]
    ).claimed
    assert again.id == run.id and again.lease_token != run.lease_token
    return again


def launcher_of(cluster, dsn):
    kube = api.KubeApi.from_environment(kubeconfig=str(cluster.kubeconfig))
    settings = job_settings("ghcr.io/pgsched/pgsched:dev")
    return kube, launcher.KubernetesLauncher(
        kube, settings, connect=lambda: connection.connect(dsn)
    )


def secret_token(cluster, namespace, name):
    path = api.path_of(namespace=namespace, plural="secrets", name=names.lease_secret_name(name))
    return base64.b64decode(cluster.api.get(path)["data"][names.LEASE_SECRET_KEY]).decode()


def test_the_job_of_a_lost_claim_is_adopted_when_its_lease_is_genuine(conn, dsn, crd, sj, cluster):
    """A failover lost the claim; the run, claimed again, finds its Job (and the pod in it)
    under the earlier claim's lease: the run takes that lease back, and the Job is kept."""
    kube, k8s = launcher_of(cluster, dsn)
    definition, run = claimed(conn, sj, "adopter")
    job_path = api.path_of(
        group="batch", namespace=sj.namespace, plural="jobs", name=f"adopter-{run.id}"
    )

    name = k8s.launch(run, definition)
    first_uid = kube.get(job_path)["metadata"]["uid"]
    assert k8s.launch(run, definition) == name  # a relaunch of the same claim: kept
    assert kube.get(job_path)["metadata"]["uid"] == first_uid

    reclaimed = lose_and_claim_again(conn, run)
    assert k8s.launch(reclaimed, definition) == Adopted(name, run.lease_token)
    kept = kube.get(job_path)
    assert kept["metadata"]["uid"] == first_uid
    assert kept["metadata"]["annotations"][names.ANNOTATION_LEASE_SHA256] == (
        names.lease_fingerprint(run.lease_token)
    )
    assert secret_token(cluster, sj.namespace, name) == str(run.lease_token)
    assert runs.get(conn, run.id).lease_token == run.lease_token


def test_a_job_whose_lease_is_not_genuine_is_replaced(conn, dsn, crd, sj, cluster):
    """A Job launched under a lease the database cannot vouch for (a forged one, or one
    issued before migration 0032) is the leftover of a lost claim, deleted and created
    anew under the current lease, as before."""
    kube, k8s = launcher_of(cluster, dsn)
    definition, run = claimed(conn, sj, "replacer")
    forged = uuid.uuid4()
    conn.execute("UPDATE pgsched.job_runs SET lease_token = %s WHERE id = %s", [forged, run.id])
    unvouched = runs.get(conn, run.id)
    job_path = api.path_of(
        group="batch", namespace=sj.namespace, plural="jobs", name=f"replacer-{run.id}"
    )
    name = k8s.launch(unvouched, definition)
    first_uid = kube.get(job_path)["metadata"]["uid"]

    reclaimed = lose_and_claim_again(conn, unvouched)
    assert k8s.launch(reclaimed, definition) == name
    replaced = kube.get(job_path)
    assert replaced["metadata"]["uid"] != first_uid
    assert replaced["metadata"]["annotations"][names.ANNOTATION_LEASE_SHA256] == (
        names.lease_fingerprint(reclaimed.lease_token)
    )
    assert secret_token(cluster, sj.namespace, name) == str(reclaimed.lease_token)
    assert runs.get(conn, run.id).lease_token == reclaimed.lease_token
    secret_path = api.path_of(
        namespace=sj.namespace, plural="secrets", name=names.lease_secret_name(name)
    )

    def owners() -> list[str]:
        secret = cluster.api.get(secret_path)
        return [ref["uid"] for ref in secret["metadata"]["ownerReferences"]]

    # The hand-over to the Job is a background request, after the launch; the earlier
    # launch's hand-over (to the replaced Job) is refused, not applied after it.
    wait_for(lambda: owners() == [replaced["metadata"]["uid"]], 10, describe=lambda: str(owners()))
    time.sleep(0.5)
    assert owners() == [replaced["metadata"]["uid"]]


def test_a_running_job_whose_claim_was_lost_runs_once_and_its_outcome_is_recorded(
    operators, sj, conn, cluster
):
    """End to end with the operator and a real pod (its sidecar from main's image): the
    claim is lost while the pod runs. The pod's next heartbeat re-establishes the claim,
    or the operator claims the run again and adopts the Job, whichever comes first; either
    way the one pod runs to its end and the run is COMPLETED under the first lease."""
    operators.start()
    sj.apply(
        "survivor",
        {
            "schedule": "0 0 1 1 *",
            "heartbeat": {"intervalSeconds": 1, "timeoutSeconds": 30},
            "jobTemplate": busybox("sleep 10"),
        },
        annotations={names.ANNOTATION_RUN_NOW: "go"},
    )
    [run] = sj.wait_runs(
        "survivor",
        lambda found: found and found[0]["heartbeat_at"] is not None,
        60,
        "the first heartbeat",
    )
    [job] = sj.jobs("survivor")
    lose_claim(conn, run["id"])

    [done] = sj.wait_runs(
        "survivor",
        lambda found: found and found[0]["status"] not in ("QUEUED", "RUNNING"),
        90,
        "the run to end",
    )
    assert (done["id"], done["status"], done["attempt"]) == (run["id"], "COMPLETED", 1)
    assert done["lease_token"] == run["lease_token"]

    # The run ends on the Job's SuccessCriteriaMet; the Job controller counts the pod in
    # status.succeeded a moment later (it first removes the pod's tracking finalizer).
    def counted() -> dict:  # type: ignore[type-arg]
        [after] = sj.jobs("survivor")
        return after

    wait_for(
        lambda: counted()["status"].get("succeeded") == 1,
        30,
        describe=lambda: f"the Job's pod counted as succeeded: {counted()['status']}",
    )
    after = counted()
    assert after["metadata"]["uid"] == job["metadata"]["uid"]  # never deleted and recreated
    assert after["status"]["succeeded"] == 1 and not after["status"].get("failed")
